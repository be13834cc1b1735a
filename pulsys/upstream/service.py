"""Answers every Job a reactor could not answer from the index (runs on pool threads).

Resolve requests: ask upstream without following redirects. A relative 3xx (renamed
repo, /api/resolve-cache/...) is passed on verbatim and cached; a redirect to a CDN or
a 200 carries the file's metadata, which becomes an Entry answered directly at
/resolve (never a same-origin redirect, hf-protocol.md §7.7); the body is filled once
per blob and streamed to every waiting client from the part file.
API requests: cached as whole responses with Xet fields removed; pagination links are
rewritten when served. Symbolic revisions are fresh for --revision-ttl; when upstream
is unreachable, answers 5xx or 429, stale copies are served; --offline never asks.
"""

import functools
import hashlib
import os
import re
import threading
import time
import urllib.parse

import requests

from pulsys import metrics as M
from pulsys.cache.filesets import FileSets
from pulsys.cache.negatives import Negatives, is_negative
from pulsys.errors import UpstreamError, UpstreamRefused
from pulsys.http1.heads import error_response, prepare
from pulsys.log import get_logger
from pulsys.model import target as T
from pulsys.model.entry import CANNED, FILE, Entry
from pulsys.model.job import Reply
from pulsys.model.key import cache_key, rev_key, target_key
from pulsys.upstream import headers as UH
from pulsys.upstream import negative as NEG
from pulsys.upstream.guard import host_allowed
from pulsys.upstream.fill import Budget, Committer, Fetchers, FillRun, Origin
from pulsys.upstream.flights import Flights
from pulsys.upstream.client_access import ANSWERED, ClientAccess
from pulsys.upstream.ratelimit import RateLimit, retry_after
from pulsys.upstream.xet import XetFacade

MAX_API_BODY = 256 << 20
MAX_ERROR_BODY = 64 << 10
XET_LINK_BASE = "https://huggingface.co"   # the token link on /resolve without --public-base-url
_HEX64 = re.compile(r"^[0-9a-f]{64}$")
_HEX40 = re.compile(r"^[0-9a-f]{40}$")
_HOST_RE = re.compile(r"^[A-Za-z0-9.\-]+(:[0-9]{1,5})?$|^\[[0-9A-Fa-f:.]+\](:[0-9]{1,5})?$")


def _canned_error(status, message, code=None):
    headers = (("Content-Type", "application/json"), ("X-Error-Message", message))
    if code:
        headers += (("X-Error-Code", code),)
    return Entry(CANNED, "", status=status, headers=headers, body=b'{"error": %s}' % _json_str(message))


def _json_str(s):
    import json
    return json.dumps(s).encode()


def blob_id_for(etag):
    if _HEX64.match(etag):
        return "sha256/" + etag
    if _HEX40.match(etag):
        return "sha1/" + etag
    return "other/" + hashlib.sha256(etag.encode()).hexdigest()


class Upstream:
    def __init__(self, config, session, index, store, inflight, counters, guard=None, space=None,
                 shared=None, spawn=None, key_tokens=None, xet_tokens=None, clock=time.monotonic,
                 wall=time.time):
        """guard: the UpstreamGuard redirect targets are checked against; space: the Space
        (quota, eviction, pins); shared: the fleet's SharedTier with --shared-store;
        spawn(fn): runs fn on a thread of its own (extra fetchers of a fill; a plain
        daemon thread when None); key_tokens: upstream/key_tokens.py's KeyTokens with
        --upstream-auth client --auth required (what the Hub is sent for a client's key).
        xet_tokens: upstream/xet_tokens.py's XetTokens with --xet facade (else strip).
        Each is None where a test does without it."""
        self.base = config.upstream
        self.netloc = config.upstream_netloc
        self.allowed = config.allowed_redirect_hosts()
        self.token = config.hf_token
        self.ttl = config.revision_ttl
        self.offline = config.offline
        self.timeout = (config.upstream_timeout, config.upstream_timeout)
        self.fill_retries = config.fill_retries
        self.guard = guard
        self.space = space
        self.shared = shared
        self.public_base = config.public_base_url
        self.session = session
        self.index = index
        self.store = store
        self.inflight = inflight
        self.flights = Flights()
        self.rate = RateLimit(clock, wall)    # after a 429: until when the Hub is not asked
        # --upstream-auth client: the Hub decides per client (upstream/client_access.py)
        self.access = (ClientAccess(config.access_ttl, clock, wall, counters, get_logger("access"))
                       if config.upstream_auth == "client" else None)
        self.key_tokens = key_tokens
        # --xet facade: pulsys is its clients' Xet CAS (upstream/xet.py); None: strip
        self.xet = XetFacade(self, xet_tokens, wall) if xet_tokens is not None else None
        self.xet_link = (config.public_base_url or XET_LINK_BASE).rstrip("/")
        self._leading = threading.local()   # the flight this pool thread leads, if any
        self.c = counters
        self.clock = clock
        self.wall = wall
        self.log = get_logger("upstream")
        # what the cache knows is absent: commits' complete file lists (rebuilt from the
        # cached API documents), and the LRU bound on negative entries; both learn what
        # the index holds in learn_index(), which the app runs in the background
        self.files = FileSets()
        self.negatives = Negatives(config.max_negative_entries)
        # what a FillRun may use of this service (upstream/fill.py): the Hub as the origin of
        # bodies, the cache its commit changes, the pool threads extra fetchers run on
        self.origin = Origin(self.ranged_request, self._host_allowed)
        self.committer = Committer(store, self._publish, inflight, self.mark_suspect,
                                   self.prepare_refetch, self.refetch,
                                   [fn for fn in (space and space.committed, shared and shared.blob_committed)
                                    if fn])
        self.fetchers = Fetchers(Budget(config.extra_fetchers()),   # extra fetchers, all fills
                                 spawn or _spawn_thread, config.fill_fetchers_per_file,
                                 config.fill_read_ahead)

    def access_stats(self):
        """Gauges of who the Hub decides for and limits (metrics.GAUGES)."""
        access = self.access
        limited = int(self.rate.left() > 0)
        if access is None:
            return {"rate_limited_identities": limited}
        return {"access_verdicts": len(access.verdicts), "rate_limited_identities": limited + access.limited()}

    def learn_index(self):
        """Read the index once: complete file lists (the API documents: two prefix scans)
        and the negative entries (their own list in the index; oldest first by key
        order, which is as good as any: the index keeps no use times) within
        --max-negative-entries. Pool-thread safe; runs while the server serves."""
        self.files.learn_all(self.index)
        victims = []
        for key in self.index.negative_keys():
            victims.extend(self.negatives.note_key(key))
        self._drop_negatives(victims)

    # -- plumbing ---------------------------------------------------------------

    def _host_allowed(self, url):
        if host_allowed(url, self.allowed):
            return True
        self.c[M.UPSTREAM_REFUSED] += 1
        return False

    def _request(self, method, url, data=None, content_type=None, extra=None, auth=None):
        """One request, no redirects followed. To the Hub's own host it carries `auth` (a
        client's Authorization with --upstream-auth client; "" for none) or, when auth is
        None, pulsys's --hf-token; never to another host (hf-protocol.md §7.5)."""
        headers = dict(extra) if extra else {}
        if urllib.parse.urlsplit(url).netloc.lower() == self.netloc:
            if auth is None:
                if self.token:
                    headers["Authorization"] = "Bearer " + self.token
            elif auth:
                headers["Authorization"] = auth
        if content_type:
            headers["Content-Type"] = content_type
        self.c[M.UPSTREAM_REQUESTS] += 1
        return self.session.request(method, url, data=data, headers=headers, stream=True,
                                    allow_redirects=False, timeout=self.timeout)

    def ranged_request(self, method, url, headers):
        return self._request(method, url, extra=headers)

    def _origin_for(self, job):
        """The Origin a fill started by `job` fetches with: the client's own token with
        --upstream-auth client (a regular file's body comes from the Hub's host)."""
        if job.auth is None or self.access is None:
            return self.origin
        auth = job.auth
        return Origin(lambda method, url, headers: self._request(method, url, extra=headers, auth=auth),
                      self._host_allowed)

    def _rate(self, job):
        """The RateLimit of the identity `job` asks the Hub as."""
        if job.auth is None or self.access is None:
            return self.rate
        return self.access.rate(job.auth)

    def _expires(self, immutable):
        return 0.0 if immutable else self.clock() + self.ttl

    def _publish(self, entry):
        revs, self._leading.revs = getattr(self._leading, "revs", ()), ()
        try:
            self._publish_entry(entry, revs)
        finally:
            flight = getattr(self._leading, "flight", None)
            if flight is not None:
                flight.set()     # waiting duplicates can answer from the index now

    def _publish_entry(self, entry, revs=()):
        """Publish `entry` (and `revs`, branch -> commit records _set_rev put off, in the
        same index transaction)."""
        if not self.negatives.cap and is_negative(entry):
            self._write_revs(revs)
            return                  # --max-negative-entries 0: negative answers are not kept
        self.store.flag_suspect(entry)
        space = self.space
        pinned = entry.blob_path is not None and space is not None
        evicted = pinned and not space.pin(entry.blob_id)
        if evicted:
            entry, pinned = entry.with_blob(None), False   # evicted meanwhile: metadata only
        try:
            self.index.publish(entry, revs)
        finally:
            if pinned:
                space.unpin(entry.blob_id)   # the index has it now; eviction will find it there
        if (not evicted and entry.kind == FILE and entry.blob_path is None and entry.blob_id
                and self.store.has_blob(entry.blob_id, entry.size)):
            # a fill committed this blob, and published it, while this metadata was on its
            # way (a HEAD's answer racing a GET's fill): this publish replaced that entry,
            # so put the blob back. The commit renames before it publishes, so checking
            # after our publish cannot miss it.
            return self._publish_entry(entry.with_blob(self.store.blob_path(entry.blob_id)))
        wall, immutable = self.wall(), entry.expires == 0
        if self.shared is not None:
            self.shared.entry_saved(entry, wall, immutable)
        self.bound_negatives(entry)

    def bound_negatives(self, entry):
        """`entry` is in the index now: keep the negative ones within --max-negative-entries."""
        victims = self.negatives.note(entry)
        if victims:
            self._drop_negatives(victims)

    def _drop_negatives(self, keys):
        """Remove evicted negative entries from the index (every process reads it)."""
        gone = []
        for key in keys:
            e = self.index.get(key)
            if e is None or not is_negative(e):
                continue          # purged meanwhile, or a positive answer took the key
            gone.append(key)
        if gone:
            self.index.remove_many(gone)
            self.c[M.NEGATIVE_EVICTIONS] += len(gone)

    def _set_rev(self, rtype, repo, rev, commit):
        """Record branch/tag -> commit. In a /resolve this thread leads, the record waits
        for the entry's publish (one index transaction, after the client's reply: on disk
        each transaction is an fsync, which the client's first byte should not wait for);
        the flight ends only after both are written, so its waiters find them."""
        if not rev or T.is_commit(rev) or not T.is_commit(commit):
            return
        now_wall = self.wall()
        rec = (rev_key(rtype, repo, rev), commit, self.clock() + self.ttl, now_wall)
        if getattr(self._leading, "flight", None) is not None:
            self._leading.revs = getattr(self._leading, "revs", ()) + (rec,)
        else:
            self._write_revs((rec,))
        if self.shared is not None:
            self.shared.rev_saved(rec[0], rtype, repo, rev, commit, now_wall)

    def _write_revs(self, revs):
        for key, commit, expires, fetched_at in revs:
            self.index.set_rev_key(key, commit, expires, fetched_at)

    def _read_limited(self, resp, limit):
        data = resp.raw.read(limit + 1, decode_content=True)
        resp.close()
        if len(data) > limit:
            raise UpstreamError("upstream response larger than %d bytes" % limit)
        return data

    def _unavailable(self, job, why):
        """Upstream failed (`why`: how) or is not asked (--offline, why None): answer what
        the cache can answer truthfully (a stale copy, a file a commit's list lacks), else
        at once with a status clients do not retry (upstream/negative.py DOWN_STATUS)."""
        t = job.target
        if t.kind == T.RESOLVE:
            r = self._stale_reply(job)
            if r is not None:
                self.c[M.STALE_SERVED] += 1
                return job.reply(r)
            missing = self._missing_from_list(t, stale=True) if _may_use_cache(job, True) else None
            if missing is not None:
                return job.reply(Reply(missing, None, "file-list"))
        if why is None:
            self.c[M.OFFLINE_REFUSALS] += 1
            return job.reply(Reply(NEG.offline(job.target.upstream_path), None, "offline"))
        self.c[M.UPSTREAM_ERRORS] += 1
        return job.reply(Reply(NEG.upstream_down(self.netloc, why), None, "error"))

    def _limited_by(self, job, headers):
        """Upstream answered 429: ask it nothing more for metadata (as this identity) until
        the time it named."""
        self.c[M.UPSTREAM_RATE_LIMITED] += 1
        wait = self._rate(job).note(headers)
        self.log.warning("the Hub rate-limits this cache; not asking it again for a while",
                         seconds=round(wait, 1))

    def _rate_limited(self, job, left):
        """Upstream may not be asked for `left` more seconds: a cached copy of a /resolve
        target however old, else pulsys's own 429 with Retry-After (upstream/ratelimit.py)."""
        if job.target.kind == T.RESOLVE:
            r = self._stale_reply(job)
            if r is not None:
                self.c[M.STALE_SERVED] += 1
                return job.reply(r)
        self.c[M.RATE_LIMITED_ANSWERS] += 1
        return job.reply(Reply(NEG.rate_limited(left, retry_after(left)), None, "rate-limited"))

    def _stale_reply(self, job):
        """A Reply from a cached copy of a /resolve target, however old, that can answer
        `job`; None when there is none (a HEAD's 4xx has no body for a GET; a file's
        metadata without its blob has none either, unless a fill is running; a client the
        Hub has not said yes to, with --upstream-auth client)."""
        if not _may_use_cache(job, True):
            return None
        e = self.index.lookup_stale(job.target)
        if e is None:
            return None
        if job.method != "HEAD":
            if e.kind == CANNED and e.head_only:
                return None
            if e.kind == FILE and e.blob_path is None:
                fill = self.inflight.get(e.blob_id) if e.blob_id else None
                return Reply(e, fill, "stale") if fill is not None else None
        return Reply(e, None, "stale")

    def _missing_from_list(self, t, stale):
        """The Hub's 404 EntryNotFound for `t` when the complete file list of its commit
        (a commit, or the commit its branch or tag maps to: fresh, or any age when
        `stale`) lacks t.path; published at that commit, forever. Else None."""
        commit = t.rev
        if not T.is_commit(commit):
            r = self.index.rev(t.rtype, t.repo, commit)
            if r is None or not (stale or r.expires > self.clock()):
                return None
            commit = r.commit
        if not self.files.missing(t.rtype, t.repo, commit, t.path):
            return None
        self.c[M.MISSING_FROM_FILE_LIST] += 1
        entry = NEG.entry_not_found(target_key(t, commit), commit)
        self._publish(entry)
        return entry

    # -- entry point --------------------------------------------------------------

    def handle(self, job):
        kind = job.target.kind
        try:
            if kind >= T.XET_RECON:
                return self._cas(job, kind)
            if self.key_tokens is not None and job.auth is not None:
                job.auth = self.key_tokens.upstream_auth(job.auth)   # the key's Hub token
            if self.access is not None and job.auth is not None and self.access.begin(job) is ANSWERED:
                return
            if kind == T.RESOLVE:
                self._resolve_once(job)
            elif kind in (T.API_INFO, T.API_TREE, T.API_PATHS_INFO):
                self._api_once(job)
            elif kind == T.XET_TOKEN and self.xet is not None:
                self.xet.token(job)
            else:
                self._passthrough(job)
        except UpstreamRefused as e:     # the SSRF guard said no (counted where it refused)
            job.reply(Reply(_canned_error(502, str(e)), None, "error"))
        except (requests.RequestException, UpstreamError, OSError) as e:
            self._unavailable(job, type(e).__name__)

    def _cas(self, job, kind):
        """pulsys's own Xet CAS routes (--xet facade): a CAS token or a signed URL is
        their proof, so neither API keys nor client-mode verdicts apply here."""
        if self.xet is None:
            return job.reply(Reply(_canned_error(404, "this pulsys serves no Xet CAS (--xet strip)"),
                                   None, "error"))
        if kind == T.XET_RECON:
            return self.xet.reconstruction(job)
        if kind == T.XET_XORB:
            return self.xet.xorb(job)
        return self.xet.telemetry(job)

    # -- /resolve -----------------------------------------------------------------

    def _resolve_once(self, job):
        """Concurrent misses of one target ask upstream once. The first asks; the others
        wait until it has published what it learned (or gave up), then answer as a later
        request would: a hit, or joining the fill it started. Without this, N clients
        asking for a cold regular file at once each got its body from the Hub, which
        sends it with the metadata."""
        t = job.target
        # not the query: the cache key ignores it, and the Hub's resolve-cache Locations
        # differ in it per revision asked (0.36.2 drops it): one question, one body
        key = (t.upstream_path, job.method == "HEAD")
        flight, leader = self.flights.join(key)
        if not leader:
            flight.wait(self.timeout[1])
            return self._resolve(job)       # asks upstream itself if the leader failed
        self._leading.flight = flight
        try:
            return self._resolve(job)
        finally:
            revs, self._leading.revs = getattr(self._leading, "revs", ()), ()
            self._leading.flight = None
            try:
                self._write_revs(revs)     # nothing published them (an error, a redirect)
            finally:
                self.flights.end(key, flight)

    def _resolve(self, job):
        t = job.target
        cache = _may_use_cache(job)
        e = self.index.lookup(t, self.clock()) if cache else None
        if e is not None and e.blob_path is not None and not self.store.has_blob(e.blob_id, e.size):
            e = self._blob_gone(e)
        if e is not None and (job.method == "HEAD" or e.blob_path or e.kind == CANNED and not e.head_only):
            if e.kind == CANNED:
                self.bound_negatives(e)     # used: the newest of the negative entries again
            return job.reply(Reply(e, None, "hit"))
        if e is not None and e.blob_id:
            fill = self.inflight.get(e.blob_id)
            if fill is not None:   # fresh metadata and a running fill: no need to ask upstream
                return job.reply(Reply(e, fill, "fill-join"))
            if e.kind == FILE and self.store.has_blob(e.blob_id, e.size):
                return self._blob_found(job, e)
        if cache and (e is None or e.kind == CANNED):  # nothing fresh, or a HEAD's 4xx and this is a GET
            missing = self._missing_from_list(t, stale=False)
            if missing is not None:
                return job.reply(Reply(missing, None, "file-list"))
        if cache and self.shared is not None and self._answer_from_bucket(job, t, e):
            return None      # the fleet's bucket had it: metadata, blob, or both
        if self.offline:
            return self._unavailable(job, None)
        left = self._rate(job).left()
        if left:
            return self._rate_limited(job, left)
        url = self.base + t.upstream_path
        if t.query and t.upstream_path.startswith("/api/resolve-cache/"):
            url += "?" + t.query
        try:
            resp = self._request(self._method_for(job, t), url, auth=job.auth)
        except requests.RequestException as exc:
            return self._unavailable(job, type(exc).__name__)
        st, h = resp.status_code, resp.headers
        if job.method == "GET" and resp.request.method == "HEAD" and not self._known_blob(st, h):
            resp.close()           # the content changed: its body is needed after all
            try:
                resp = self._request("GET", url, auth=job.auth)
            except requests.RequestException as exc:
                return self._unavailable(job, type(exc).__name__)
            st, h = resp.status_code, resp.headers
        if st == 429:
            self._limited_by(job, h)
        said = self.access.heard(job, st, h) if job.ask is not None else None
        commit = h.get("X-Repo-Commit", "")
        if T.is_commit(commit):
            self._set_rev(t.rtype, t.repo, t.rev, commit)
        if 300 <= st < 400 and h.get("Location"):
            loc = h["Location"]
            resp.close()
            if loc.startswith("/") and loc[1:2] not in ("/", "\\") or loc.startswith(self.base + "/"):
                entry = Entry(CANNED, target_key(t), status=st,
                              headers=UH.client_headers(h, self.base),
                              expires=self._expires(T.is_commit(t.rev)))
                self._publish(entry)
                return job.reply(Reply(entry, None, "miss"))
            body_url = urllib.parse.urljoin(url, loc)
            if not self._host_allowed(body_url):
                return job.reply(Reply(_canned_error(
                    502, "upstream redirected to %s, which is not an allowed upstream host "
                    "(see --allow-upstream-host)" % urllib.parse.urlsplit(body_url).netloc), None, "error"))
            if self.guard is not None:
                self.guard.check_url(body_url)   # UpstreamRefused -> 502 in handle()
            return self._file(job, t, h, st, None, body_url, url)
        if st == 200:
            return self._file(job, t, h, st, resp, url)
        if job.method == "HEAD":
            resp.close()
            body = b""
        else:
            body = self._read_limited(resp, MAX_ERROR_BODY)
        if st >= 500 or st == 429:
            r = self._stale_reply(job)
            if r is not None:
                self.c[M.STALE_SERVED] += 1
                return job.reply(r)
            if st >= 500:     # passed on, it would be retried by every client for ~23 s
                return self._unavailable(job, "it answered %d" % st)
        entry = Entry(CANNED, target_key(t), status=st, headers=UH.client_headers(h, self.base),
                      body=body, expires=self._expires(T.is_commit(t.rev)))
        if 400 <= st < 500 and st != 429:
            # negative answers are cached like any other (TTL or commit). A HEAD's has no
            # body: it answers HEADs only, and a GET asks upstream once and replaces it
            # with the Hub's whole answer. Making up a body instead would put words in the
            # Hub's mouth (its error bodies are not derived from the headers by contract).
            entry.head_only = job.method == "HEAD"
            if said is False:          # this token's refusal, not the repo's: never published
                self.access.refused(job, entry)
                return job.reply(Reply(entry, None, "refused"))
            self._publish(entry)
        return job.reply(Reply(entry, None, "passthrough"))

    def _blob_found(self, job, e):
        """e's blob is on disk: publish e with it and answer from it. From _resolve: e said
        the blob was not there and no fill of it runs, because e was read before the fill's
        commit published the blob and the fill left the registry after; asking upstream
        would download a body the cache holds."""
        entry = e.with_blob(self.store.blob_path(e.blob_id))
        self._publish(entry)
        return job.reply(Reply(entry, None, "hit-blob"))

    def _blob_gone(self, e):
        """The index says e's blob is on disk and it is not (removed by hand, or moved to
        quarantine by `pulsys verify` while an older index was in use): metadata only."""
        self.log.warning("blob missing from blobs/ or of the wrong size; entries of it become metadata only",
                         blob=e.blob_id, key=e.key)
        self.index.publish_many([x.with_blob(None) for x in self.index.entries_of_blob(e.blob_id)
                                 if x.blob_path is not None])
        if self.space is not None:
            self.space.forget(e.blob_id)
        return e.with_blob(None)

    def _method_for(self, job, t):
        """HEAD for a GET that revalidates a regular file whose blob is on disk: the Hub
        answers a GET of a regular file with its body, so a GET after --revision-ttl
        would download bytes the cache holds. The HEAD's ETag tells; GET only if the
        content changed."""
        if job.method == "HEAD":
            return "HEAD"
        old = self.index.lookup_stale(t)
        if old is not None and old.kind == FILE and not old.lfs and old.blob_path is not None:
            return "HEAD"
        return "GET"

    def _known_blob(self, st, h):
        """A HEAD's answer needs no GET after it: a redirect (no body), a 5xx or 429 (the
        stale copy answers), or a 200 for a blob on disk. A 4xx needs the Hub's body."""
        if st != 200:
            return 300 <= st < 400 or st >= 500 or st == 429
        etag = UH.bare_etag(h.get("X-Linked-Etag") or h.get("ETag") or "")
        return bool(etag) and self.store.has_blob(blob_id_for(etag))

    def _file(self, job, t, h, st, resp, body_url, resolve_url=None):
        etag = UH.bare_etag(h.get("X-Linked-Etag") or h.get("ETag") or "")
        size_s = h.get("X-Linked-Size") or (
            h.get("Content-Length") if st == 200 and not h.get("Content-Encoding") else None)
        commit = h.get("X-Repo-Commit", "")
        if not T.is_commit(commit):
            commit = t.rev if T.is_commit(t.rev) else ""
        if not etag or not size_s or not size_s.isdigit():
            if resp is not None:
                resp.close()
            return job.reply(Reply(_canned_error(
                502, "upstream answer for %s has no ETag/X-Linked-Etag or size" % t.path), None, "error"))
        size = int(size_s)
        lfs = "X-Linked-Etag" in h or bool(_HEX64.match(etag))
        blob_id = blob_id_for(etag)
        ctype = "application/octet-stream" if lfs else (h.get("Content-Type") if st == 200 else "") or ""
        entry = Entry(FILE, target_key(t, commit) if commit else target_key(t), size, etag, commit,
                      lfs, blob_id, None, ctype, h.get("Content-Disposition", "") if st == 200 else "",
                      headers=self._xet_headers(t, h, commit), expires=self._expires(bool(commit)))
        self.store.flag_suspect(entry)     # a reply that joins a fill is not published
        prepare(entry)
        if self.store.has_blob(blob_id, size):
            if resp is not None:
                resp.close()
            return self._blob_found(job, entry)
        if job.method == "HEAD":
            if resp is not None:
                resp.close()
            self._publish(entry)
            return job.reply(Reply(entry, None, "miss"))
        # asked before the fill is registered: between join_or_create and the first
        # fetcher, every moment is one in which readers may join it
        in_bucket = (self.shared is not None and self.inflight.get(blob_id) is None
                     and self.shared.has_blob(blob_id, size))
        try:
            fill, created = self.inflight.join_or_create(
                blob_id, size, functools.partial(self.new_part, blob_id, size))
        except OSError as e:      # the part file cannot be created
            if resp is not None:
                resp.close()
            return self._cannot_store(job, blob_id, e)
        if created and self._is_blob(fill.part_path, blob_id):
            # another fill committed this blob between our check and our creation: the
            # part file is a link to it, so a request that joined meanwhile reads the blob
            if resp is not None:
                resp.close()
            entry = entry.with_blob(self.store.blob_path(blob_id))
            self._publish(entry)
            fill.finish(entry)
            self.inflight.done(fill)
            self.store.discard(fill.part_path)
            return job.reply(Reply(entry, None, "hit-blob"))
        if not created:
            if resp is not None:
                resp.close()
            return job.reply(Reply(entry, fill, "fill-join"))
        if self.space is not None and not self.space.reserve(blob_id, size):
            return self._no_room(job, entry, fill, resp)
        if in_bucket:        # another node put this blob in the bucket: no Hub body
            if resp is not None:
                resp.close()
            return self._fill_from_bucket(job, entry, fill)
        origin = self._xet_origin(job, t, entry)
        if origin is not None:       # --xet facade: assembled from xorb ranges (upstream/xet_plain.py)
            if resp is not None:
                resp.close()
            return self._run_fill(job, entry, fill, None, "xet:" + _xet_hash(entry), None, origin=origin)
        renew = functools.partial(self.renew_body_url, resolve_url, entry, job.auth) if resolve_url else None
        self._run_fill(job, entry, fill, resp, body_url, renew, origin=self._origin_for(job))

    def _xet_origin(self, job, t, entry):
        """--xet facade, a Xet file: the Origin that assembles it from xorb ranges, or
        None (strip, a regular file, or no reconstruction to be had)."""
        xh = _xet_hash(entry)
        if self.xet is None or xh is None or not entry.size:
            return None
        return self.xet.plain_origin(job, t, xh, entry.commit, entry.size)

    def _xet_headers(self, t, h, commit):
        """--xet facade: the Xet signals a FILE answer keeps (xet-protocol.md §1), its
        token route on pulsys. Without --public-base-url the link names huggingface.co,
        which huggingface_hub rewrites to its HF_ENDPOINT (utils/_xet.py): one cached
        answer serves clients that reach pulsys under any name."""
        xh = h.get("X-Xet-Hash")
        if self.xet is None or not xh or not _HEX64.match(xh) or not commit:
            return ()
        route = "%s/api/%ss/%s/xet-read-token/%s" % (self.xet_link, t.rtype, t.repo, commit)
        return (("X-Xet-Hash", xh), ("Link", '<%s>; rel="xet-auth"' % route))

    # -- the fleet's bucket (--shared-store; upstream/shared_tier.py) ---------------------

    def _from_bucket(self, key, body_url):
        """The bucket's fresh Entry for `key`, published in the index (not saved back to
        the bucket), or None."""
        e = self.shared.entry(key, body_url, self.wall(), self.clock())
        if e is not None:
            self.index.publish(e)
            self.bound_negatives(e)      # --max-negative-entries counts the bucket's too
        return e

    def _lookup_bucket(self, t):
        """A fresh Entry for a /resolve target from the bucket (published), or None."""
        e = self._from_bucket(target_key(t), t.body_url)
        if e is not None or T.is_commit(t.rev):
            return e
        found = self.shared.commit(t, self.wall())
        if found is None:
            return None
        commit, fetched, left = found
        now = self.clock()
        self.index.set_rev(t.rtype, t.repo, t.rev, commit, now + left, fetched)
        return self.index.lookup(t, now) or self._from_bucket(target_key(t, commit), t.body_url)

    def _answer_from_bucket(self, job, t, e):
        """Answer a /resolve job from the bucket when it can. `e`: the local index's fresh
        entry (metadata only, no fill running) or None. -> True when answered."""
        if e is None:
            e = self._lookup_bucket(t)
            if e is None:
                return False
            if job.method == "HEAD" or e.kind == CANNED and not e.head_only:
                job.reply(Reply(e, None, "shared"))
                return True
        if e.kind != FILE or not e.blob_id:
            return False
        if self.store.has_blob(e.blob_id, e.size):
            done = e.with_blob(self.store.blob_path(e.blob_id))
            self._publish(done)
            job.reply(Reply(done, None, "hit-blob"))
            return True
        fill = self.inflight.get(e.blob_id)
        if fill is not None:
            job.reply(Reply(e, fill, "fill-join"))
            return True
        if not self.shared.has_blob(e.blob_id, e.size):
            return False
        try:
            fill, created = self.inflight.join_or_create(
                e.blob_id, e.size, functools.partial(self.new_part, e.blob_id, link=False))
        except OSError as exc:     # the part file cannot be created
            self._cannot_store(job, e.blob_id, exc)
            return True
        if not created:
            job.reply(Reply(e, fill, "fill-join"))
            return True
        if self.space is not None and not self.space.reserve(e.blob_id, e.size):
            self._no_room(job, e, fill, None)
            return True
        self._fill_from_bucket(job, e, fill)
        return True

    def _fill_from_bucket(self, job, entry, fill):
        """Run a new fill (created, room reserved) from the bucket, which said it holds
        the blob."""
        url, renew = self.shared.start_fill(entry.blob_id)
        self._run_fill(job, entry, fill, None, url, renew, origin=self.shared.origin)

    def mark_suspect(self, entry):
        """A fill of entry's blob failed verification after its bytes were readable, so a
        reader may hold a wrong prefix. From now on every entry of that blob answers an
        open-ended resume (`bytes=N-`) with the whole body (ADR 0012). Runs before the
        fill is failed, so a client cut short finds the flag when it resumes. Returns the
        flagged copy of `entry`."""
        blob_id = entry.blob_id
        self.store.add_suspect(blob_id)
        self.index.publish_many([self.store.flag_suspect(e) for e in self.index.entries_of_blob(blob_id)
                                 if not e.restart_resumes])
        return self.store.flag_suspect(entry.with_expiry(entry.expires))

    def _cannot_store(self, job, blob_id, e):
        self.log.warning("fill not started", blob=blob_id, error=str(e))
        return job.reply(Reply(_canned_error(503, "cache cannot store %s: %s" % (
            blob_id, e.strerror or e)), None, "error"))

    def new_part(self, blob_id=None, size=None, link=True):
        """A new part file for a Fill, created before the Fill is registered: a reader that
        joins the fill at once finds the file and waits there for bytes (it used to find no
        file and answer 503 when the first fetcher had not opened it yet). Empty; or, when
        blob_id names a blob already in blobs/, a hard link to it, which the caller must
        find with _is_blob and never hand to a FillRun (that truncates its part file);
        link=False never links (callers that hand the file to a FillRun at once)."""
        path = self.store.new_part_path(blob_id)
        if link and blob_id is not None and self.store.has_blob(blob_id, size):
            try:
                os.link(self.store.blob_path(blob_id), path)
                return path
            except FileNotFoundError:
                pass              # evicted this moment: an empty part file, a real fill
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644))
        return path

    def _is_blob(self, part_path, blob_id):
        try:
            return os.path.samefile(part_path, self.store.blob_path(blob_id))
        except OSError:
            return False

    def _no_room(self, job, entry, fill, resp):
        """--cache-max-bytes leaves no room for this blob: 507, nothing fetched. Metadata is
        published (HEAD answers); a later GET asks again, when room may have been made."""
        if resp is not None:
            resp.close()
        fill.fail(UpstreamError("no room in the cache"))
        self.store.discard(fill.part_path)
        self.inflight.done(fill)
        self._publish(entry)
        sp = self.space
        return job.reply(Reply(_canned_error(
            507, "pulsys cache is full: %s needs %d bytes; %d of --cache-max-bytes %d are in use "
            "(--evict %s)" % (entry.blob_id, entry.size, sp.used + sp.reserved_total, sp.max_bytes,
                              sp.policy), "CacheFull"), None, "error"))

    def _fill_run(self, fill, entry, url, origin, resp=None, attempt=1, renew=None):
        return FillRun(fill, entry, url, origin, self.committer, self.fetchers, self.fill_retries,
                       self.c, self.log, resp, attempt, renew)

    def _run_fill(self, job, entry, fill, resp, url, renew, origin=None):
        """Answer the job from the new fill at once, then run its first fetcher here.
        origin: where the body comes from when not the Hub (shared_tier's bucket)."""
        self.c[M.FILLS_STARTED] += 1
        try:
            run = self._fill_run(fill, entry, url, origin or self.origin, resp, renew=renew)
        except OSError as e:      # the part file cannot be created
            self.c[M.FILLS_FAILED] += 1
            fill.fail(e)
            self.store.discard(fill.part_path)
            self.inflight.done(fill)
            if resp is not None:
                resp.close()
            return self._cannot_store(job, entry.blob_id, e)
        # the client first: publishing writes the index (an fsync on disk, ms), and
        # until it is done concurrent askers wait on the flight, as before
        job.reply(Reply(entry, fill, "fill"))
        self._publish(entry)   # metadata before the body: HEADs become warm at once
        run.run()

    def prepare_refetch(self, entry):
        """The blob failed verification (FillRun calls this before it fails the fill):
        register the Fill that fetches it once more from scratch, so that the failed
        fill's readers find it (ADR 0012). -> the Fill for refetch(), or None."""
        try:
            fill = self.inflight.replace(
                entry.blob_id, entry.size, functools.partial(self.new_part, entry.blob_id, link=False))
        except OSError as e:
            self.log.warning("refetch not started", blob=entry.blob_id, error=str(e))
            return None
        if self.space is not None and not self.space.reserve(entry.blob_id, entry.size):
            fill.fail(UpstreamError("no room in the cache"))
            self.store.discard(fill.part_path)
            self.inflight.done(fill)
            return None
        return fill

    def refetch(self, entry, url, renew, fill):
        """Run the Fill prepare_refetch registered (on the thread that found the mismatch,
        after the failed fill was discarded)."""
        if fill is None:
            return
        self.c[M.FILLS_STARTED] += 1
        self.c[M.FILL_REFETCHES] += 1
        self.log.warning("refetching after a digest mismatch", blob=entry.blob_id)
        try:
            run = self._fill_run(fill, entry, url, self.origin, attempt=2, renew=renew)
        except OSError as e:
            self.c[M.FILLS_FAILED] += 1
            fill.fail(e)
            self.store.discard(fill.part_path)
            self.inflight.done(fill)
            return
        run.run()

    def renew_body_url(self, resolve_url, entry, auth=None):
        """A new signed CDN URL for `entry`'s blob, from the Hub's redirect (the old URL
        expired), asked as `auth` (_request). The redirect must still be for the same blob."""
        resp = self._request("HEAD", resolve_url, auth=auth)
        resp.close()
        h = resp.headers
        etag = UH.bare_etag(h.get("X-Linked-Etag") or h.get("ETag") or "")
        if not (300 <= resp.status_code < 400 and h.get("Location")) or etag != entry.etag:
            raise UpstreamError("cannot renew the body URL of %s: upstream answered %d for etag %r"
                                % (entry.blob_id, resp.status_code, etag))
        url = urllib.parse.urljoin(resolve_url, h["Location"])
        if not self._host_allowed(url):
            raise UpstreamError("body redirected to a host that is not allowed")
        if self.guard is not None:
            self.guard.check_url(url)
        return url

    # -- /api ----------------------------------------------------------------------

    def _api_key(self, job):
        t = job.target
        extra = t.query
        if t.kind == T.API_PATHS_INFO:
            extra = hashlib.sha256((job.content_type or "").encode() + b"\0" + job.body).hexdigest()
        return cache_key(t.kind, t.rtype, t.repo, t.rev, t.path, extra)

    def _link_base(self, job):
        if self.public_base:
            return self.public_base
        if job.host and _HOST_RE.match(job.host):
            return "http://" + job.host
        return None

    def _serve_api(self, job, entry, outcome):
        base = self._link_base(job)
        body = entry.body
        if self.xet is None and b'"xetHash"' in body:
            body = UH.strip_xet_json(body)      # kept while --xet facade was on
        if base and entry.headers or body is not entry.body:
            entry = Entry(CANNED, entry.key, status=entry.status,
                          headers=UH.rewrite_links(entry.headers, self.base, base), body=body)
        return job.reply(Reply(entry, None, outcome))

    def _api_once(self, job):
        """Concurrent identical API requests ask upstream once: the others wait for the
        first, then answer from what it cached (a 5xx or a 429 is not cached: then each
        asks, or is answered from the rate-limit window, itself)."""
        key = ("api", self._api_key(job))
        flight, leader = self.flights.join(key)
        if not leader:
            flight.wait(self.timeout[1])
            return self._api(job)
        try:
            return self._api(job)
        finally:
            self.flights.end(key, flight)

    def _api(self, job):
        t = job.target
        key = self._api_key(job)
        cached = self.index.get(key)
        now = self.clock()
        if _may_use_cache(job):
            if cached is not None and (cached.expires == 0 or cached.expires > now):
                return self._serve_api(job, cached, "hit")
            if self.shared is not None:
                found = self._from_bucket(key, False)
                if found is not None:
                    return self._serve_api(job, found, "shared")
        elif not _may_use_cache(job, True):
            cached = None          # the Hub must say yes first: not even a stale copy
        if self.offline:
            if cached is not None:
                return self._serve_api(job, cached, "stale")
            return self._unavailable(job, None)
        left = self._rate(job).left()
        if left:
            if cached is not None:
                self.c[M.STALE_SERVED] += 1
                return self._serve_api(job, cached, "stale")
            return self._rate_limited(job, left)
        url = self.base + t.upstream_path + ("?" + t.query if t.query else "")
        try:
            if t.kind == T.API_PATHS_INFO:
                resp = self._request("POST", url, data=job.body, content_type=job.content_type,
                                     auth=job.auth)
            else:
                resp = self._request("GET", url, auth=job.auth)
            st = resp.status_code
            if st == 429:
                self._limited_by(job, resp.headers)
            body = self._read_limited(resp, MAX_API_BODY)
        except (requests.RequestException, UpstreamError) as exc:
            if cached is not None:
                self.c[M.STALE_SERVED] += 1
                return self._serve_api(job, cached, "stale")
            return self._unavailable(job, type(exc).__name__)
        if (st >= 500 or st == 429) and cached is not None:
            self.c[M.STALE_SERVED] += 1
            return self._serve_api(job, cached, "stale")
        if st >= 500:
            return self._unavailable(job, "it answered %d" % st)
        said = self.access.heard(job, st, resp.headers) if job.ask is not None else None
        if 200 <= st < 300:
            if self.xet is None:
                body = UH.strip_xet_json(body)
            if t.kind == T.API_INFO:
                self._learn_sha(t, body)
        entry = Entry(CANNED, key, status=st, headers=UH.client_headers(resp.headers, self.base),
                      body=body, expires=self._expires(T.is_commit(t.rev)))
        if said is False and st != 429:      # this token's refusal: never published
            self.access.refused(job, entry)
            return self._serve_api(job, entry, "refused")
        if st < 500 and st != 429:
            self._publish(entry)
            if st == 200:
                self._learn_absent(job, key, entry)
        return self._serve_api(job, entry, "miss")

    def _learn_absent(self, job, key, entry):
        """What a cached API answer says is not there: a complete file list of a commit
        (cache/filesets.py), or the paths a paths-info at a commit asked for and did not
        get (each becomes the Hub's EntryNotFound for /resolve at that commit)."""
        t = job.target
        if t.kind != T.API_PATHS_INFO:
            self.files.learn(key, entry, self.index.get)
        elif T.is_commit(t.rev):
            for p in NEG.paths_not_found(job.content_type, job.body, entry.body):
                k = cache_key(T.RESOLVE, t.rtype, t.repo, t.rev, p)
                if self.index.get(k) is None:
                    self._publish_entry(NEG.entry_not_found(k, t.rev))

    def _learn_sha(self, t, body):
        import json
        try:
            info = json.loads(body)
            sha = info.get("sha", "")
        except (ValueError, AttributeError):
            return
        if self.access is not None:
            self.access.learn_public(t, info)
        if isinstance(sha, str) and T.is_commit(sha):
            self._set_rev(t.rtype, t.repo, t.rev or "main", sha)

    def _passthrough(self, job):
        t = job.target
        if self.offline:
            return self._unavailable(job, None)
        self.c[M.PASSTHROUGH] += 1
        left = self._rate(job).left()
        if left:
            return self._rate_limited(job, left)
        url = self.base + t.upstream_path + ("?" + t.query if t.query else "")
        resp = self._request(job.method, url, auth=job.auth)
        if resp.status_code == 429:
            self._limited_by(job, resp.headers)
        body = self._read_limited(resp, MAX_API_BODY) if job.method != "HEAD" else b""
        if job.method == "HEAD":
            resp.close()
        if resp.status_code >= 500:
            return self._unavailable(job, "it answered %d" % resp.status_code)
        headers = UH.client_headers(resp.headers, self.base, self._link_base(job))
        entry = Entry(CANNED, "", status=resp.status_code, headers=headers, body=body)
        return job.reply(Reply(entry, None, "passthrough"))


def _xet_hash(entry):
    """The Xet hash a FILE entry carries (Upstream._xet_headers puts it first), or None."""
    for name, value in entry.headers:
        if name == "X-Xet-Hash":
            return value
    return None


def _may_use_cache(job, stale=False):
    """May `job` be answered from the cache without asking the Hub first? Always, but
    with --upstream-auth client for a client the Hub has not said yes to lately
    (client_access.py); `stale`: a copy while the Hub cannot be asked, which an expired
    yes allows too."""
    ask = job.ask
    return ask is None or not ask.decide or (stale and ask.stale_ok)


def _spawn_thread(fn):
    threading.Thread(target=fn, name="pulsys-fetcher", daemon=True).start()


def internal_error_reply():
    return Reply(Entry(CANNED, "", status=500, headers=(("Content-Type", "application/json"),),
                       body=error_response(500, "internal error").split(b"\r\n\r\n", 1)[1]),
                 None, "error")
