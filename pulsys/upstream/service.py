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

import hashlib
import os
import re
import time
import urllib.parse

import requests

from pulsys import metrics as M
from pulsys.errors import CacheCorrupt, UpstreamError
from pulsys.http1.heads import error_response, prepare
from pulsys.log import get_logger
from pulsys.model import target as T
from pulsys.model.entry import CANNED, FILE, Entry
from pulsys.model.job import Reply
from pulsys.model.key import cache_key, rev_key, target_key
from pulsys.upstream import headers as UH
from pulsys.upstream.fill import stream_into

MAX_API_BODY = 256 << 20
MAX_ERROR_BODY = 64 << 10
_HEX64 = re.compile(r"^[0-9a-f]{64}$")
_HEX40 = re.compile(r"^[0-9a-f]{40}$")
_HOST_RE = re.compile(r"^[A-Za-z0-9.\-]+(:[0-9]{1,5})?$|^\[[0-9A-Fa-f:.]+\](:[0-9]{1,5})?$")


def _canned_error(status, message):
    return Entry(CANNED, "", status=status, headers=(("Content-Type", "application/json"),
                                                     ("X-Error-Message", message)),
                 body=b'{"error": %s}' % _json_str(message))


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
    def __init__(self, config, session, index, store, inflight, counters,
                 clock=time.monotonic, wall=time.time):
        self.base = config.upstream
        self.netloc = config.upstream_netloc
        self.allowed = config.allowed_redirect_hosts()
        self.token = config.hf_token
        self.ttl = config.revision_ttl
        self.offline = config.offline
        self.timeout = (config.upstream_timeout, config.upstream_timeout)
        self.public_base = config.public_base_url
        self.session = session
        self.index = index
        self.store = store
        self.inflight = inflight
        self.c = counters
        self.clock = clock
        self.wall = wall
        self.log = get_logger("upstream")

    # -- plumbing ---------------------------------------------------------------

    def _host_allowed(self, url):
        u = urllib.parse.urlsplit(url)
        if u.scheme not in ("http", "https") or not u.hostname:
            return False
        netloc = u.netloc.lower().rpartition("@")[2]
        return netloc in self.allowed or u.hostname.lower() in self.allowed

    def _request(self, method, url, data=None, content_type=None):
        headers = {}
        if self.token and urllib.parse.urlsplit(url).netloc.lower() == self.netloc:
            headers["Authorization"] = "Bearer " + self.token
        if content_type:
            headers["Content-Type"] = content_type
        self.c[M.UPSTREAM_REQUESTS] += 1
        return self.session.request(method, url, data=data, headers=headers, stream=True,
                                    allow_redirects=False, timeout=self.timeout)

    def _expires(self, immutable):
        return 0.0 if immutable else self.clock() + self.ttl

    def _publish(self, entry):
        self.index.publish(entry)
        try:
            self.store.save_entry(entry, self.wall(), entry.expires == 0)
        except OSError as e:
            self.log.warning("metadata not persisted", key=entry.key, error=str(e))

    def _set_rev(self, rtype, repo, rev, commit):
        if not rev or T.is_commit(rev) or not T.is_commit(commit):
            return
        now_wall = self.wall()
        self.index.set_rev(rtype, repo, rev, commit, self.clock() + self.ttl, now_wall)
        try:
            self.store.save_rev(rev_key(rtype, repo, rev), rtype, repo, rev, commit, now_wall)
        except OSError as e:
            self.log.warning("revision not persisted", repo=repo, rev=rev, error=str(e))

    def _read_limited(self, resp, limit):
        data = resp.raw.read(limit + 1, decode_content=True)
        resp.close()
        if len(data) > limit:
            raise UpstreamError("upstream response larger than %d bytes" % limit)
        return data

    def _unavailable(self, job, stale, why):
        """Upstream failed: serve a stale copy if there is one, else an error."""
        if stale is not None:
            self.c[M.STALE_SERVED] += 1
            return job.reply(Reply(stale, None, "stale"))
        if why is None:
            self.c[M.OFFLINE_REFUSALS] += 1
            return job.reply(Reply(_canned_error(
                504, "pulsys is offline and has no cached copy of %s" % job.target.upstream_path),
                None, "offline"))
        self.c[M.UPSTREAM_ERRORS] += 1
        return job.reply(Reply(_canned_error(502, "upstream %s unavailable: %s" % (self.netloc, why)),
                               None, "error"))

    # -- entry point --------------------------------------------------------------

    def handle(self, job):
        kind = job.target.kind
        try:
            if kind == T.RESOLVE:
                self._resolve(job)
            elif kind in (T.API_INFO, T.API_TREE, T.API_PATHS_INFO):
                self._api(job)
            else:
                self._passthrough(job)
        except (requests.RequestException, UpstreamError, OSError) as e:
            stale = self.index.lookup_stale(job.target) if kind == T.RESOLVE else None
            self._unavailable(job, stale, type(e).__name__)

    # -- /resolve -----------------------------------------------------------------

    def _resolve(self, job):
        t = job.target
        e = self.index.lookup(t, self.clock())
        if e is not None and (job.method == "HEAD" or e.kind == CANNED or e.blob_path):
            return job.reply(Reply(e, None, "hit"))
        if self.offline:
            return self._unavailable(job, self.index.lookup_stale(t), None)
        url = self.base + t.upstream_path
        if t.query and t.upstream_path.startswith("/api/resolve-cache/"):
            url += "?" + t.query
        try:
            resp = self._request("HEAD" if job.method == "HEAD" else "GET", url)
        except requests.RequestException as exc:
            return self._unavailable(job, self.index.lookup_stale(t), type(exc).__name__)
        st, h = resp.status_code, resp.headers
        commit = h.get("X-Repo-Commit", "")
        if T.is_commit(commit):
            self._set_rev(t.rtype, t.repo, t.rev, commit)
        if 300 <= st < 400 and h.get("Location"):
            loc = h["Location"]
            resp.close()
            if loc.startswith("/") or loc.startswith(self.base + "/"):
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
            return self._file(job, t, h, st, None, body_url)
        if st == 200:
            return self._file(job, t, h, st, resp, None)
        body = self._read_limited(resp, MAX_ERROR_BODY) if job.method != "HEAD" else b""
        if st >= 500 or st == 429:
            stale = self.index.lookup_stale(t)
            if stale is not None:
                self.c[M.STALE_SERVED] += 1
                return job.reply(Reply(stale, None, "stale"))
        entry = Entry(CANNED, target_key(t), status=st, headers=UH.client_headers(h, self.base),
                      body=body, expires=self._expires(T.is_commit(t.rev)))
        if 400 <= st < 500 and st != 429 and job.method != "HEAD":
            self._publish(entry)   # negative answers are cached like any other (TTL or commit)
        return job.reply(Reply(entry, None, "passthrough"))

    def _file(self, job, t, h, st, resp, body_url):
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
                      expires=self._expires(bool(commit)))
        prepare(entry)
        if self.store.has_blob(blob_id) and os.path.getsize(self.store.blob_path(blob_id)) == size:
            if resp is not None:
                resp.close()
            entry = self.store.attach_small_body(entry.with_blob(self.store.blob_path(blob_id)))
            self._publish(entry)
            return job.reply(Reply(entry, None, "hit-blob"))
        if job.method == "HEAD":
            if resp is not None:
                resp.close()
            self._publish(entry)
            return job.reply(Reply(entry, None, "miss"))
        fill, created = self.inflight.join_or_create(blob_id, size, self.store.new_part_path)
        if created and self.store.has_blob(blob_id):
            # another fill committed this blob between our check and our creation
            self.inflight.done(fill)
            if resp is not None:
                resp.close()
            entry = self.store.attach_small_body(entry.with_blob(self.store.blob_path(blob_id)))
            self._publish(entry)
            return job.reply(Reply(entry, None, "hit-blob"))
        if not created:
            if resp is not None:
                resp.close()
            return job.reply(Reply(entry, fill, "fill-join"))
        self._run_fill(job, entry, fill, resp, body_url)

    def _run_fill(self, job, entry, fill, resp, body_url):
        c = self.c
        c[M.FILLS_STARTED] += 1
        fd = os.open(fill.part_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
        replied = False
        try:
            self._publish(entry)   # metadata first: HEADs become warm at once
            job.reply(Reply(entry, fill, "fill"))
            replied = True
            if resp is None:
                resp = self._get_body(body_url)
            stream_into(fill, fd, resp, entry.blob_id, entry.size, self._count_body)
            os.close(fd)
            fd = -1
            fill.final_path = self.store.blob_path(entry.blob_id)
            path = self.store.commit_blob(fill.part_path, entry.blob_id)
            done = self.store.attach_small_body(entry.with_blob(path))
            self._publish(done)
            fill.finish(done)
            c[M.FILLS_COMPLETED] += 1
        except BaseException as e:
            c[M.FILLS_FAILED] += 1
            if isinstance(e, CacheCorrupt):
                c[M.INTEGRITY_FAILURES] += 1
            self.log.warning("fill failed", blob=entry.blob_id, error=str(e) or type(e).__name__)
            fill.fail(e)
            self.store.discard(fill.part_path)
            if not replied:
                job.reply(Reply(_canned_error(502, "upstream body failed: %s" % type(e).__name__),
                                None, "error"))
            if not isinstance(e, Exception):
                raise
        finally:
            if fd >= 0:
                os.close(fd)
            if resp is not None:
                resp.close()
            self.inflight.done(fill)

    def _count_body(self, n):
        self.c[M.UPSTREAM_BODY_BYTES] += n

    def _get_body(self, url):
        for _ in range(6):
            resp = self._request("GET", url)
            if 300 <= resp.status_code < 400 and resp.headers.get("Location"):
                nxt = urllib.parse.urljoin(url, resp.headers["Location"])
                resp.close()
                if not self._host_allowed(nxt):
                    raise UpstreamError("body redirected to a host that is not allowed")
                url = nxt
                continue
            return resp
        raise UpstreamError("too many redirects for a file body")

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
        if base and entry.headers:
            entry = Entry(CANNED, entry.key, status=entry.status,
                          headers=UH.rewrite_links(entry.headers, self.base, base), body=entry.body)
        return job.reply(Reply(entry, None, outcome))

    def _api(self, job):
        t = job.target
        key = self._api_key(job)
        cached = self.index.get(key)
        now = self.clock()
        if cached is not None and (cached.expires == 0 or cached.expires > now):
            return self._serve_api(job, cached, "hit")
        if self.offline:
            if cached is not None:
                return self._serve_api(job, cached, "stale")
            return self._unavailable(job, None, None)
        url = self.base + t.upstream_path + ("?" + t.query if t.query else "")
        try:
            if t.kind == T.API_PATHS_INFO:
                resp = self._request("POST", url, data=job.body, content_type=job.content_type)
            else:
                resp = self._request("GET", url)
            st = resp.status_code
            body = self._read_limited(resp, MAX_API_BODY)
        except (requests.RequestException, UpstreamError) as exc:
            if cached is not None:
                self.c[M.STALE_SERVED] += 1
                return self._serve_api(job, cached, "stale")
            return self._unavailable(job, None, type(exc).__name__)
        if (st >= 500 or st == 429) and cached is not None:
            self.c[M.STALE_SERVED] += 1
            return self._serve_api(job, cached, "stale")
        if 200 <= st < 300:
            body = UH.strip_xet_json(body)
            if t.kind == T.API_INFO:
                self._learn_sha(t, body)
        entry = Entry(CANNED, key, status=st, headers=UH.client_headers(resp.headers, self.base),
                      body=body, expires=self._expires(T.is_commit(t.rev)))
        if st < 500 and st != 429:
            self._publish(entry)
        return self._serve_api(job, entry, "miss")

    def _learn_sha(self, t, body):
        import json
        try:
            sha = json.loads(body).get("sha", "")
        except (ValueError, AttributeError):
            return
        if isinstance(sha, str) and T.is_commit(sha):
            self._set_rev(t.rtype, t.repo, t.rev or "main", sha)

    def _passthrough(self, job):
        t = job.target
        if self.offline:
            return self._unavailable(job, None, None)
        self.c[M.PASSTHROUGH] += 1
        url = self.base + t.upstream_path + ("?" + t.query if t.query else "")
        resp = self._request(job.method, url)
        body = self._read_limited(resp, MAX_API_BODY) if job.method != "HEAD" else b""
        if job.method == "HEAD":
            resp.close()
        headers = UH.client_headers(resp.headers, self.base, self._link_base(job))
        entry = Entry(CANNED, "", status=resp.status_code, headers=headers, body=body)
        return job.reply(Reply(entry, None, "passthrough"))


def internal_error_reply():
    return Reply(Entry(CANNED, "", status=500, headers=(("Content-Type", "application/json"),),
                       body=error_response(500, "internal error").split(b"\r\n\r\n", 1)[1]),
                 None, "error")
