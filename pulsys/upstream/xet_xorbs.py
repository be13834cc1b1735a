"""The xorb ranges of `--xet facade` (ADR 0019): where each can be fetched upstream, and
the cache of them.

A range is chunks [first, end) of one xorb, as a reconstruction names it. It is fetched
once however many ask at a time (Flights), from the fleet's bucket when another node put
it there, else from the upstream URL of the reconstruction that named it (asked again
when that URL has expired); verified before a byte is kept (xet_recon.verify_range: the
chunk structure, and each chunk's keyed BLAKE3 against the xorb's footer, read once per
xorb and authenticated by the xorb hash, xet_hash.py); stored as a blob named by its
sha256, so eviction, quota, `pulsys verify` and the shared tier handle it as any blob;
and recorded with where its chunks start, so a later reconstruction naming chunks inside
it is sent there (a new revision's unchanged chunks are not fetched again).
"""

import hashlib
import json
import os
import threading
import time

import requests

from pulsys import metrics as M
from pulsys.errors import CacheCorrupt, UpstreamError
from pulsys.http1.heads import prepare
from pulsys.model import target as T
from pulsys.model.entry import CANNED, FILE, Entry
from pulsys.model.key import cache_key, repo_prefix
from pulsys.upstream import xet_hash as XH
from pulsys.upstream import xet_recon as XR
from pulsys.upstream.flights import Flights

MAX_XORB_RANGE = 256 << 20  # §5: xorbs are at most 64 MiB; anything far above is refused
FORBIDDEN = "the upstream xorb host answered 403"
_JSON = (("Content-Type", "application/json"),)


def range_key(xorb, first, end):
    """The index key of cached chunks [first, end) of `xorb` (a FILE entry of its blob)."""
    return cache_key(T.XET_XORB, "xet", xorb, "", "%d-%d" % (first, end))


def chunks_key(xorb, first, end):
    """The index key of where the chunks of that range start (a list, as JSON)."""
    return cache_key(T.XET_XORB, "xet", xorb, "chunks", "%d-%d" % (first, end))


def footer_key(xorb):
    """The index key of a xorb's footer (its chunk hashes, xet_hash.py)."""
    return cache_key(T.XET_XORB, "xet", xorb, "footer", "")


def error(status, message):
    """A JSON error to answer with (the Hub's style: X-Error-Message)."""
    return Entry(CANNED, "", status=status, headers=_JSON + (("X-Error-Message", message),),
                 body=json.dumps({"error": message}).encode())


class XorbRanges:
    def __init__(self, service):
        self.s = service          # upstream/service.py's Upstream: requests, index, store, space
        self.sources = {}         # (xorb, first, end) -> (url, start, end, recon key, version, renew)
        self.flights = Flights()
        self._lock = threading.Lock()

    def register(self, answer, version, key, renew):
        """Where each chunk range of an upstream answer can be fetched, and how to ask
        for new URLs when those expire (renew() -> the answer's new bytes, or an Entry)."""
        srcs = self.sources
        for xorb, a, b, url, s, e in XR.sources(answer, version):
            srcs[(xorb, a, b)] = (url, s, e, key, version, renew)
        if len(srcs) > 200_000:
            with self._lock:
                for k in list(srcs)[:100_000]:
                    srcs.pop(k, None)

    def cached_ranges(self, xorb):
        """{(first, end): (where each chunk starts, the range's entry)} of the ranges of
        `xorb` in the cache now: a range a reconstruction names inside one of them is
        served from it, so a second revision's unchanged chunks are not fetched again."""
        out = {}
        prefix = repo_prefix(T.XET_XORB, "xet", xorb) + "chunks|"
        for c in self.s.index.entries(prefix):
            first, end = map(int, c.key[len(prefix):].split("|")[0].split("-"))
            e = self.cached(range_key(xorb, first, end))
            if e is not None:
                try:
                    out[(first, end)] = (json.loads(c.body), e)
                except ValueError:
                    continue
        return out

    def ensure(self, xorb, first, end):
        """(entry, fill, outcome) for chunks [first, end) of `xorb`: cached, or fetched
        once however many ask at a time; entry is an error to answer with when neither."""
        key = range_key(xorb, first, end)
        e = self.cached(key)
        if e is not None:
            self.s.c[M.XET_XORB_HITS] += 1
            return e, None, "hit"
        flight, leader = self.flights.join(key)
        if not leader:
            flight.wait(self.s.timeout[1] * 4)
            e = self.cached(key)
            if e is not None:
                return e, None, "fill-join"
        try:
            return self._fill(xorb, first, end, key)
        finally:
            if leader:
                self.flights.end(key, flight)

    def cached(self, key):
        """The entry of a cached xorb range, its blob on disk (and now most recently
        used: these are served through a Reply, which reactors do not count as warm
        hits for LRU eviction), or None."""
        e = self.s.index.get(key)
        if e is not None and e.blob_path is not None and self.s.store.has_blob(e.blob_id, e.size):
            if self.s.space is not None:
                self.s.space.touch_many(((e.blob_id, time.monotonic()),))
            return e
        return None

    def _fill(self, xorb, first, end, key):
        if self.s.offline:
            return error(503, "--offline: this xorb range is not cached"), None, "offline"
        if self.s.shared is not None:
            got = self._from_bucket(xorb, first, end, key)
            if got is not None:
                return got
        src = self.sources.get((xorb, first, end))
        if src is None:
            # a URL from before a restart: a 403 makes hf_xet ask the reconstruction again
            return error(403, "unknown xorb range: ask the reconstruction again"), None, "refused"
        url, s, e, recon_key, version, renew = src
        if e - s + 1 > MAX_XORB_RANGE:
            return error(502, "the upstream xorb range is larger than a xorb can be"), None, "error"
        path = self.s.store.new_part_path()
        try:
            why, sha = self._download(url, s, e, path)
            if why == FORBIDDEN and renew is not None:
                # the upstream URL expired: ask the reconstruction again for new ones
                self.s.c[M.FILL_REFETCHES] += 1
                body = renew()
                if not isinstance(body, Entry):
                    self.register(json.loads(body), version, recon_key, renew)
                    url, s, e = self.sources.get((xorb, first, end), src)[:3]
                    self.s.store.discard(path)
                    path = self.s.store.new_part_path()
                    why, sha = self._download(url, s, e, path)
            if why is not None:
                return error(502, why), None, "error"
            recon = self.s.index.get(recon_key)
            terms = XR.term_lengths(json.loads(recon.body), xorb, first, end) if recon is not None else {}
            footer, unverified = self._footer(xorb, url)
            expect = footer.span(first, end) if footer is not None else None
            if footer is not None and expect is None:
                return self._bad(xorb, first, end, "the reconstruction names chunks beyond the xorb's %d"
                                 % len(footer.hashes))
            got = self._keep(path, e - s + 1, sha, xorb, first, end, key, terms, expect)
            path = None
        finally:
            if path is not None:
                self.s.store.discard(path)
        if got[0].kind == FILE:
            self.s.c[M.XET_XORB_FILLS] += 1
            self.s.c[M.XET_XORB_BYTES_FETCHED] += got[0].size
            if expect is None:
                # served on the structural checks alone: a changed byte inside an
                # uncompressed chunk would pass (ADR 0019, "What is verified")
                self.s.c[M.XET_UNVERIFIED_RANGES] += 1
                self.s.log.warning("xorb range kept without chunk hashes", xorb=xorb,
                                   chunks="%d-%d" % (first, end), why=unverified)
        return got

    def _bad(self, xorb, first, end, why):
        self.s.c[M.INTEGRITY_FAILURES] += 1
        self.s.log.warning("xorb range failed verification", xorb=xorb, chunks="%d-%d" % (first, end), why=why)
        return error(502, "the xorb range failed verification: " + why), None, "error"

    def _keep(self, path, size, sha, xorb, first, end, key, terms, expect):
        """Verify the xorb range in part file `path` (against `expect`, its chunks'
        (hash, size) from the xorb's footer, when known) and store it (or discard it). ->
        (entry, None, outcome); entry an error when it failed."""
        try:
            with open(path, "rb") as f:
                bad, starts = XR.verify_range(f, size, end - first, terms, expect)
            if bad is not None:
                return self._bad(xorb, first, end, bad)
            blob_id = "sha256/" + sha
            space = self.s.space
            if space is not None and not space.reserve(blob_id, size):
                return error(507, "no room in the cache"), None, "error"
            blob_path = self.s.store.commit_blob(path, blob_id)
            path = None
            for fn in (space and space.committed, self.s.shared and self.s.shared.blob_committed):
                if fn:
                    fn(blob_id, size)
        finally:
            if path is not None:
                self.s.store.discard(path)
        entry = prepare(Entry(FILE, key, size, sha, "", False, blob_id, blob_path, "application/octet-stream"))
        # where its chunks start: later reconstructions may point inside it (_place)
        self.s._publish_entry(Entry(CANNED, chunks_key(xorb, first, end),
                                    status=200, body=json.dumps(starts).encode()))
        self.s._publish_entry(entry)
        return entry, None, "miss"

    def _from_bucket(self, xorb, first, end, key):
        """--shared-store: the range from the fleet's bucket, where another node put it
        (its entry names its blob), verified as from upstream; None when not there."""
        shared = self.s.shared
        e = self.s._from_bucket(key, False)
        if e is None or e.kind != FILE or not e.blob_id.startswith("sha256/") \
                or not shared.has_blob(e.blob_id, e.size):
            return None
        url, _ = shared.start_fill(e.blob_id)
        path = self.s.store.new_part_path()
        ended = _Ended(e.blob_id)
        try:
            why, sha = self._download(url, 0, e.size - 1, path, M.SHARED_BODY_BYTES)
            if why is None and "sha256/" + sha != e.blob_id:
                why = "the bucket's copy has another sha256"
                ended.error = CacheCorrupt(why)
            if why is not None:
                ended.error = ended.error or UpstreamError(why)
                self.s.log.warning("xorb range not taken from the bucket", xorb=xorb, why=why)
                return None            # the Hub's CAS, as if the bucket had nothing
            footer = self._footer_kept(xorb)
            got = self._keep(path, e.size, sha, xorb, first, end, key, {},
                             footer.span(first, end) if footer is not None else None)
            path = None
            return got if got[0].kind == FILE else None
        finally:
            if path is not None:
                self.s.store.discard(path)
            shared.fill_ended(ended)

    # -- xorb footers (xet_hash.py) --------------------------------------------------

    def _footer(self, xorb, url):
        """(Footer, None): the xorb's footer, authenticated by its name; kept in the index,
        so fetched once per xorb (concurrent asks wait for the one fetch). (None, why)
        when it cannot be had: the range is then kept on its structure alone."""
        footer = self._footer_kept(xorb)
        if footer is not None:
            return footer, None
        key = footer_key(xorb)
        flight, leader = self.flights.join(key)
        if not leader:
            flight.wait(self.s.timeout[1] * 2)
            footer = self._footer_kept(xorb)
            if footer is not None:
                return footer, None
        try:
            why, raw = self._fetch_footer(url)
            if why is None:
                try:
                    footer = XH.parse_footer(raw)
                except ValueError as e:
                    why = str(e)
            if why is None and not footer.authentic(xorb):
                why = "the footer's chunk hashes do not hash to the xorb's name" \
                    if footer.sizes is not None else "a version 0 footer (no chunk sizes: no Merkle root)"
            if why is not None:
                return None, why
            self.s._publish_entry(Entry(CANNED, key, status=200, body=raw))
            return footer, None
        finally:
            if leader:
                self.flights.end(key, flight)

    def _footer_kept(self, xorb):
        """The xorb's footer from the index (or the fleet's bucket), checked again against
        the xorb's name (a bucket is not trusted for it), or None."""
        key = footer_key(xorb)
        e = self.s.index.get(key)
        if e is None and self.s.shared is not None:
            e = self.s._from_bucket(key, False)
        if e is None or e.kind != CANNED or e.status != 200:
            return None
        try:
            footer = XH.parse_footer(e.body)
        except ValueError:
            return None
        return footer if footer.authentic(xorb) else None

    def _fetch_footer(self, url):
        """A xorb's footer bytes from the end of the object at `url` (the one a range was
        just fetched from): first its last 4 bytes, the footer's length (xorb_object_format.rs
        `XorbObject`: chunks, footer, u32 length), then that many more, as suffix ranges.
        -> (None, footer bytes) or (why not, None)."""
        why, tail = self._suffix(url, 4)
        if why is not None:
            return why, None
        n = int.from_bytes(tail, "little")
        if not 60 <= n <= XH.MAX_FOOTER:
            return "the xorb ends in a footer length of %d" % n, None
        why, raw = self._suffix(url, n + 4)
        if why is None and raw[-4:] != tail:
            why = "the xorb changed between two reads of its end"
        return (why, None) if why is not None else (None, raw[:-4])

    def _suffix(self, url, n):
        """The last `n` bytes of the object at `url` (Range: bytes=-n) -> (None, bytes) or
        (why not, None)."""
        if not self.s._host_allowed(url):
            return "the xorb host is not an allowed upstream host", None
        try:
            self.s.c[M.UPSTREAM_REQUESTS] += 1
            resp = self.s.session.request("GET", url, headers={"Range": "bytes=-%d" % n}, stream=True,
                                          allow_redirects=False, timeout=self.s.timeout)
            st = resp.status_code
            if st != 206:
                resp.close()
                return "the xorb host answered %d to a suffix range" % st, None
            body = self.s._read_limited(resp, n)
        except (requests.RequestException, UpstreamError, OSError) as x:
            self.s.c[M.UPSTREAM_ERRORS] += 1
            return "the xorb's end could not be read: %s" % type(x).__name__, None
        self.s.c[M.UPSTREAM_BODY_BYTES] += len(body)
        self.s.c[M.XET_XORB_BYTES_FETCHED] += len(body)
        if len(body) != n:
            return "the xorb host sent %d bytes for its last %d" % (len(body), n), None
        return None, body

    def _download(self, url, s, e, path, counter=M.UPSTREAM_BODY_BYTES):
        """The bytes [s, e] at `url` into `path`. -> (None, sha256 hex) or (why, None);
        why is FORBIDDEN for a 403 (an expired signed URL). The bucket's presigned URLs
        (counted as shared bytes) are on its endpoint, trusted by configuration."""
        if counter != M.SHARED_BODY_BYTES and not self.s._host_allowed(url):
            return "the xorb host is not an allowed upstream host", None
        try:
            self.s.c[M.UPSTREAM_REQUESTS] += 1
            resp = self.s.session.request("GET", url, headers={"Range": "bytes=%d-%d" % (s, e)}, stream=True,
                                          allow_redirects=False, timeout=self.s.timeout)
        except requests.RequestException as x:
            self.s.c[M.UPSTREAM_ERRORS] += 1
            return "the upstream xorb host failed: %s" % type(x).__name__, None
        with resp:
            if resp.status_code == 403:
                return FORBIDDEN, None
            if resp.status_code not in (200, 206):
                return "the upstream xorb host answered %d" % resp.status_code, None
            want = e - s + 1
            if resp.status_code == 200 and s != 0:
                return "the upstream xorb host ignored the range", None
            h, n = hashlib.sha256(), 0
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
            try:
                for block in resp.iter_content(1 << 20):
                    if n + len(block) > want:
                        block = block[:want - n]
                    os.write(fd, block)     # a regular file: the whole block is written
                    h.update(block)
                    n += len(block)
                    if n >= want:
                        break
            except requests.RequestException as x:
                return "the upstream xorb body failed: %s" % type(x).__name__, None
            finally:
                os.close(fd)
            self.s.c[counter] += n
            if n != want:
                return "the upstream xorb range ended after %d of %d bytes" % (n, want), None
        return None, h.hexdigest()


class _Ended:
    """What SharedTier.fill_ended reads of a fill from the bucket."""
    __slots__ = ("blob_id", "error")

    def __init__(self, blob_id):
        self.blob_id, self.error = blob_id, None
