"""`--xet facade`: pulsys is its clients' Xet CAS (ADR 0019, xet-protocol.md).

Three routes, answered on pool threads:
  token   /api/{type}s/{repo}/xet-read-token/{rev}: the Hub is asked for its own Xet
          token with the client's credentials (client mode) or pulsys's (service mode),
          which is how the Hub says whether that client may read the repo; its refusal
          reaches the client as the Hub sent it. A yes is answered with a CAS token
          pulsys mints (xet_tokens.py) and `casUrl` = pulsys + /cas. The Hub's token is
          kept in memory per (identity, repo) for the CAS calls made on that client's
          behalf.
  recon   /cas/v{1,2}/reconstructions/{file hash}: asked upstream once per (file, API
          version, byte range) and kept in the index; the answer goes to the client with
          every chunk range at a URL of pulsys's (xet_recon.rewrite). The upstream CAS
          checked, when it answered, that the file belongs to the token's repo: that is
          recorded too, so a warm answer to another repo's token asks again.
  xorb    /cas/xorbs/{xorb}/{first}-{end}?e=..&s=..: a chunk range, checked against
          its signature here, then cached or fetched once, verified and kept by
          xet_xorbs.py, and sent by the reactor from its blob like any cached body.
  telemetry  POST /v1/telemetry (hf_xet drops the CAS path prefix): answered here,
          never forwarded.
"""

import functools
import json
import re
import threading
import time
from urllib.parse import quote

import requests

from pulsys import metrics as M
from pulsys.auth.access import digest
from pulsys.errors import CacheCorrupt, UpstreamError
from pulsys.model import target as T
from pulsys.model.entry import CANNED, FILE, Entry
from pulsys.model.job import Reply
from pulsys.model.key import cache_key
from pulsys.upstream import headers as UH
from pulsys.upstream import xet_plain as XP
from pulsys.upstream import xet_recon as XR
from pulsys.upstream.fill import Origin
from pulsys.upstream.flights import Flights
from pulsys.upstream.xet_tokens import CasToken
from pulsys.upstream.xet_xorbs import XorbRanges, chunks_key, range_key
from pulsys.upstream.xet_xorbs import error as _error

TOKEN_TTL = 3600            # seconds a CAS token pulsys mints is valid (at most the Hub's)
URL_TTL = 3600              # seconds a xorb URL pulsys signs is valid
PREFETCH = 8                # xorb ranges of a plain client's file fetched at once (_prefetch)
RENEW_BEFORE = 60           # a kept Hub token this close to expiry is asked again
MAX_RECON_BODY = 64 << 20
_RANGE = re.compile(r"^bytes=(\d{1,19})-(\d{1,19})$")
_HEX64 = re.compile(r"^[0-9a-f]{64}$")
_JSON = (("Content-Type", "application/json"),)


def _recon_key(file_hash, version, span):
    """The index key of an upstream reconstruction of bytes `span` ("all" or
    "FIRST-LAST") of a file, as API `version` answered it."""
    return cache_key(T.XET_RECON, "xet", file_hash, "v%d" % version, span)


def _member_key(rtype, repo, file_hash):
    """The index key recording that the upstream CAS answered for this file to a token
    of this repo (purged with the repo: admin/cache_view.py)."""
    return cache_key(T.XET_RECON, rtype, repo, "member", file_hash)


def _json(obj, headers=()):
    return Entry(CANNED, "", status=200, headers=_JSON + tuple(headers),
                 body=json.dumps(obj, separators=(",", ":")).encode())


class XetFacade:
    def __init__(self, service, tokens, wall=time.time):
        self.s = service          # upstream/service.py's Upstream: requests, index, store, space
        self.tokens = tokens      # xet_tokens.XetTokens
        self.wall = wall
        self.hub_tokens = {}      # (who, rtype, repo) -> (cas url, token, expires)
        self.xorbs = XorbRanges(service)
        self._prefetching = threading.BoundedSemaphore(PREFETCH)
        self.flights = Flights()
        self._lock = threading.Lock()

    # -- the Hub's Xet tokens ----------------------------------------------------

    def _hub_token(self, job, who, rtype, repo, rev, fresh=False):
        """(status, cas url, token, expires, upstream response headers, body): the Hub's
        answer to its xet-read-token route, kept while valid unless `fresh`."""
        k = (who, rtype, repo)
        kept = self.hub_tokens.get(k)
        if job.auth is _KEPT:
            # client mode, on a CAS call: only what that client's own token got is used
            if kept is not None and kept[2] > self.wall():
                return (200,) + kept + ((), b"")
            return 401, None, None, 0, {}, b""
        if kept is not None and not fresh and kept[2] - RENEW_BEFORE > self.wall():
            return (200,) + kept + ((), b"")
        url = "%s/api/%ss/%s/xet-read-token/%s" % (self.s.base, rtype, repo, quote(rev, safe=""))
        resp = self.s._request("GET", url, auth=job.auth)
        body = self.s._read_limited(resp, 1 << 20)
        st, h = resp.status_code, resp.headers
        if st != 200:
            return st, None, None, 0, h, body
        cas, token, exp = h.get("X-Xet-Cas-Url"), h.get("X-Xet-Access-Token"), h.get("X-Xet-Token-Expiration")
        if not (cas and token and exp):
            try:
                d = json.loads(body)
                cas, token, exp = d["casUrl"], d["accessToken"], d["exp"]
            except (ValueError, KeyError, TypeError):
                raise UpstreamError("the Hub's xet-read-token answer has no token") from None
        try:
            exp = int(exp)
        except (TypeError, ValueError):
            raise UpstreamError("the Hub's xet-read-token answer has no expiry") from None
        cas = cas.rstrip("/")
        with self._lock:
            if len(self.hub_tokens) > 10_000:
                self.hub_tokens.clear()
            self.hub_tokens[k] = (cas, token, exp)
        return 200, cas, token, exp, h, body

    # -- token route ---------------------------------------------------------------

    def token(self, job):
        t = job.target
        who = digest(job.auth) if job.auth is not None else ""
        base = self.s._link_base(job)
        if base is None:
            return job.reply(Reply(_error(400, "no usable Host header: set --public-base-url"), None, "error"))
        expires = int(self.wall() + TOKEN_TTL)
        if self.s.offline:
            hub = None
        else:
            try:
                hub = self._hub_token(job, who, t.rtype, t.repo, t.rev, fresh=True)
            except (requests.RequestException, UpstreamError, OSError):
                hub = None
        if hub is not None and hub[0] != 200:
            st, _, _, _, h, body = hub
            if st >= 500 or st == 429:
                hub = None
            else:
                entry = Entry(CANNED, "", status=st, headers=UH.client_headers(h, self.s.base), body=body)
                if job.ask is not None and self.s.access.heard(job, st, h) is False:
                    self.s.access.refused(job, entry)
                return job.reply(Reply(entry, None, "refused" if st in (401, 403, 404) else "miss"))
        if hub is None:
            # the Hub cannot say: a client it (or pulsys's own key check) said yes to
            # before may still read what the cache holds
            ask = job.ask
            if ask is not None and ask.decide and not ask.stale_ok:
                return self.s._unavailable(job, None if self.s.offline else "the Xet token route failed")
        else:
            if job.ask is not None:
                self.s.access.heard(job, 200, hub[4])
            expires = min(expires, hub[3])
        token = self.tokens.mint(who, t.rtype, t.repo, t.rev, expires)
        cas = base + "/cas"
        self.s.c[M.XET_TOKENS] += 1
        return job.reply(Reply(_json({"casUrl": cas, "accessToken": token, "exp": expires},
                                     (("X-Xet-Cas-Url", cas), ("X-Xet-Access-Token", token),
                                      ("X-Xet-Token-Expiration", str(expires)))), None, "xet-token"))

    # -- reconstructions ---------------------------------------------------------

    def reconstruction(self, job):
        t = job.target
        authorization, rng = job.xet
        tok = self.tokens.check(authorization)
        if isinstance(tok, str):
            return job.reply(Reply(_error(401, tok), None, "refused"))
        file_hash, version = t.path, int(t.rev)
        if not _HEX64.match(file_hash):
            return job.reply(Reply(_error(400, "a file hash is 64 hex digits"), None, "error"))
        if rng is not None and not _RANGE.match(rng.strip()):
            return job.reply(Reply(_error(400, "Range must be bytes=FIRST-LAST"), None, "error"))
        rng = rng.strip() if rng else ""
        key = _recon_key(file_hash, version, rng[len("bytes="):] or "all")
        member = _member_key(tok.rtype, tok.repo, file_hash)
        base = self.s._link_base(job)
        if base is None:
            return job.reply(Reply(_error(400, "no usable Host header: set --public-base-url"), None, "error"))
        renew = functools.partial(self._ask_upstream, tok, file_hash, version, rng, key, True)
        cached = self.s.index.get(key)
        if cached is not None and self.s.index.get(member) is not None:
            self.s.c[M.XET_RECON_HITS] += 1
            return self._answer(job, cached.body, version, key, base, "hit", renew)
        self.s.c[M.XET_RECON_MISSES] += 1
        if self.s.offline:
            return self.s._unavailable(job, None)
        flight, leader = self.flights.join(key)
        if not leader:
            flight.wait(self.s.timeout[1])
        try:
            got = self._ask_upstream(tok, file_hash, version, rng, key)
        finally:
            if leader:
                self.flights.end(key, flight)
        if isinstance(got, Entry):
            return job.reply(Reply(got, None, "refused" if got.status < 500 else "error"))
        self.s._publish_entry(Entry(CANNED, member, status=204))
        return self._answer(job, got, version, key, base, "miss", renew)

    def _ask_upstream(self, tok, file_hash, version, rng, key, fresh=False, auth=None):
        """The upstream answer's bytes (also published under `key`), or an Entry to
        answer with instead (a refusal, 416, or upstream's failure). auth: what the Hub
        is asked with when not the CAS token's holder's kept token (a plain client's)."""
        job = _Asker(auth if auth is not None else self._hub_auth(tok))
        try:
            st, cas, token, _, _, _ = self._hub_token(job, tok.who, tok.rtype, tok.repo, tok.rev, fresh)
            if st == 401 and job.auth is _KEPT:
                return _error(401, "pulsys holds no Hub token for this client (restarted?): "
                                   "ask the xet-read-token route again")
            if st != 200:
                return _error(403 if st in (401, 403, 404) else 502,
                              "the Hub refused a Xet token for %s (%d)" % (tok.repo, st))
            url = "%s/v%d/reconstructions/%s" % (cas, version, file_hash)
            if not self.s._host_allowed(url):
                return _error(502, "the Hub's CAS %s is not an allowed upstream host" % cas)
            headers = {"Authorization": "Bearer " + token}
            if rng:
                headers["Range"] = rng
            self.s.c[M.UPSTREAM_REQUESTS] += 1
            resp = self.s.session.request("GET", url, headers=headers, stream=True,
                                          allow_redirects=False, timeout=self.s.timeout)
            body = self.s._read_limited(resp, MAX_RECON_BODY)
        except (requests.RequestException, UpstreamError, OSError) as e:
            self.s.c[M.UPSTREAM_ERRORS] += 1
            return _error(502, "the upstream CAS failed: %s" % type(e).__name__)
        st = resp.status_code
        if st == 401 and not fresh:
            return self._ask_upstream(tok, file_hash, version, rng, key, True, auth)
        if st == 401:       # with a fresh token: this file is not the token's repo's
            return _error(403, "the upstream CAS refused this file to a token for %s" % tok.repo)
        if st != 200:
            e = _error(st if st in (400, 403, 404, 416, 501) else 502, "the upstream CAS answered %d" % st)
            if st == 416 and resp.headers.get("Content-Range"):
                e.headers += (("Content-Range", resp.headers["Content-Range"]),)
            return e
        try:
            XR.sources(json.loads(body), version)
        except (ValueError, XR.BadAnswer) as e:
            return _error(502, "the upstream CAS's reconstruction is unusable: %s" % e)
        self.s._publish_entry(Entry(CANNED, key, status=200, headers=_JSON, body=body))
        return body

    def _hub_auth(self, tok):
        """What the Hub is asked with on behalf of a CAS token's holder: pulsys's own
        token in service mode; in client mode only the Hub token kept for that client."""
        return None if self.s.access is None else _KEPT

    def _answer(self, job, body, version, key, base, outcome, renew):
        answer = json.loads(body)
        expires = int(self.wall() + URL_TTL)
        self.xorbs.register(answer, version, key, renew)
        cached = {}

        def place(xorb, a, b, size):
            ranges = cached.get(xorb)
            if ranges is None:
                ranges = cached[xorb] = self.xorbs.cached_ranges(xorb)
            for (c, d), (starts, _) in ranges.items():
                if c <= a and b <= d:
                    return base + self.tokens.xorb_path(xorb, c, d, expires), starts[a - c], starts[b - c] - 1
            return base + self.tokens.xorb_path(xorb, a, b, expires), 0, size - 1

        out = XR.rewrite(answer, version, place)
        return job.reply(Reply(_json(out), None, outcome))

    # -- xorb ranges (xet_xorbs.py) --------------------------------------------------

    def xorb(self, job):
        t = job.target
        xorb, (first, end) = t.repo, map(int, t.path.split("-"))
        why = self.tokens.xorb_ok(xorb, first, end, t.query)
        if why is not None:
            return job.reply(Reply(_error(403, why), None, "refused"))
        return job.reply(Reply(*self.xorbs.ensure(xorb, first, end)))

    # -- plain files from xorb ranges (xet_plain.py) ----------------------------

    def plain_origin(self, job, t, xet_hash, commit, size):
        """The Origin a plain client's fill of this Xet file assembles it from, or None
        (the whole reconstruction cannot be had: the Hub's bridge serves it instead)."""
        auth = job.auth if self.s.access is not None else None
        who = digest(auth) if auth else ""
        tok = CasToken(who, t.rtype, t.repo, commit, 0)
        got = None
        for version in (1, 2):
            for span in ("all", "0-%d" % (size - 1)):
                key = _recon_key(xet_hash, version, span)
                e = self.s.index.get(key)
                if e is not None:
                    got = (e.body, version, key)
                    break
            if got is not None:
                break
        if got is None:
            if self.s.offline:
                return None
            key = _recon_key(xet_hash, 1, "all")
            body = self._ask_upstream(tok, xet_hash, 1, "", key, auth=auth)
            if isinstance(body, Entry):
                self.s.log.info("no Xet reconstruction for a plain download: the bridge serves it",
                                repo=t.repo, status=body.status)
                return None
            self.s._publish_entry(Entry(CANNED, _member_key(t.rtype, t.repo, xet_hash), status=204))
            got = (body, 1, key)
        renew = functools.partial(self._ask_upstream, tok, xet_hash, got[1], "", got[2], True, auth)
        try:
            answer = json.loads(got[0])
            self.xorbs.register(answer, got[1], got[2], renew)
            plan = XP.Plan(answer, size) if got[1] == 1 else XP.Plan(_as_v1(answer), size)
        except (ValueError, XR.BadAnswer) as e:
            self.s.log.warning("unusable Xet reconstruction for a plain download", repo=t.repo, why=str(e))
            return None
        used = set()
        self._prefetch(plan)
        return Origin(XP.request_for(plan, functools.partial(self._chunks, used)), lambda url: True,
                      M.XET_ASSEMBLED_BYTES, refetches=False,
                      on_end=functools.partial(self._assembled, used))

    def _prefetch(self, plan):
        """Start fetching, PREFETCH at a time and in file order, every range of the file
        that no cached range holds. The fill's pieces read the ranges one after another:
        without this a plain client is held to one upstream connection's pace (35 MB/s
        from a CAS pacing each connection at 50 MB/s, scripts/bench_xet.py), where hf_xet
        asks for many ranges at once."""
        wanted, cached = [], {}
        for _, xorb, a, b, _ in plan.terms:
            if xorb not in cached:
                cached[xorb] = self.xorbs.cached_ranges(xorb)
            if any(c <= a and b <= d for c, d in cached[xorb]):
                continue
            for c, d in plan.fetch.get(xorb, ()):
                if c <= a and b <= d:
                    if (xorb, c, d) not in wanted:
                        wanted.append((xorb, c, d))
                    break
        for rng in wanted:
            threading.Thread(target=self._prefetch_one, args=rng, name="pulsys-xet-prefetch", daemon=True).start()

    def _prefetch_one(self, xorb, first, end):
        with self._prefetching:
            try:
                self.xorbs.ensure(xorb, first, end)
            except Exception as e:      # the fill's own read of it retries and says why
                self.s.log.info("xorb range prefetch failed", xorb=xorb, why=str(e))

    def _assembled(self, used, fill):
        """A plain file assembled from xorb ranges ended. Its sha256 is the one check that
        covers every byte of those ranges (chunk structure alone cannot catch a changed
        byte inside an uncompressed chunk): when it failed, they are dropped, so the next
        request fetches them again instead of serving them to hf_xet clients."""
        if not isinstance(fill.error, CacheCorrupt):
            return
        self.s.log.warning("a file assembled from xorb ranges failed its sha256: dropping them",
                           blob=fill.blob_id, ranges=len(used))
        for xorb, c, d in list(used):
            key = range_key(xorb, c, d)
            e = self.s.index.get(key)
            self.s.index.remove_many([key, chunks_key(xorb, c, d)])
            if e is not None and e.blob_id and not self.s.index.keys_of_blob(e.blob_id):
                if self.s.space is not None:
                    self.s.space.forget(e.blob_id)
                self.s.store.remove_blob(e.blob_id, e.size)

    def _chunks(self, used, xorb, first, end, fetch):
        """Decoded chunks [first, end) of `xorb`, from a cached range that holds them or
        from the fetch range of the reconstruction that does, fetched now. `used`
        collects the ranges read."""
        for (c, d), (starts, e) in self.xorbs.cached_ranges(xorb).items():
            if c <= first and end <= d:
                used.add((xorb, c, d))
                return XP.read_chunks(e.blob_path, starts, first - c, end - c)
        for c, d in fetch:
            if c <= first and end <= d:
                used.add((xorb, c, d))
                e, _, _ = self.xorbs.ensure(xorb, c, d)
                if e.kind != FILE:
                    raise UpstreamError("xorb range %s %d-%d: %s" % (xorb, c, d, e.body.decode()))
                starts = json.loads(self.s.index.get(chunks_key(xorb, c, d)).body)
                return XP.read_chunks(e.blob_path, starts, first - c, end - c)
        raise UpstreamError("the reconstruction names chunks %d-%d of %s in no fetch range" % (first, end, xorb))

    # -- telemetry -------------------------------------------------------------

    def telemetry(self, job):
        return job.reply(Reply(_json({}), None, "local"))


class _Asker:
    """What _hub_token needs of a job: the Authorization to ask the Hub with."""
    __slots__ = ("auth",)

    def __init__(self, auth):
        self.auth = auth


_KEPT = object()


def _as_v1(answer):
    """A v2 answer's fetch part in v1's shape (what xet_plain.Plan reads)."""
    fetch = {}
    for xorb, a, b, url, s, e in XR.sources(answer, 2):
        fetch.setdefault(xorb, []).append({"range": {"start": a, "end": b}, "url": url,
                                           "url_range": {"start": s, "end": e}})
    return {"offset_into_first_range": answer["offset_into_first_range"], "terms": answer["terms"],
            "fetch_info": fetch}
