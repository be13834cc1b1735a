"""Run one fill: fetch a blob into its part file piece by piece, verify it, commit it.

Fetchers. The job that creates the fill runs its first fetcher on its own pool thread.
A body from a ranged origin (the CDN, the bucket) larger than one piece starts more at
once, ahead of any reader (read-ahead, `read_ahead` of them, --fill-read-ahead): a CDN
paces each connection (the Hub's at ~50 MB/s), so one connection would hold a
single-stream client (curl, hf_hub_download without hf_transfer) to that rate, while N
of them bring N times it. A reader that waits for bytes nobody is fetching (a cold
Range request, hf_transfer's parallel chunks), or far ahead of the fetcher of the piece
it waits in (cache.inflight.NEAR), makes the Fill call `on_demand`, which starts
another fetcher: a client reading 100 ranges at once gets about as many connections, as
it would going direct. At most `per_fill` per fill (--fill-fetchers-per-file), and at
most `budget` extra ones over all fills (--fill-fetchers); extra fetchers run on threads
of their own, never taking pool threads from metadata jobs. Each fetcher claims a piece,
GETs exactly those bytes with `Range`, pwrites them at their offset in the shared part
file, and claims the next piece: where it ended if that is free (pieces double up to
MAX_PIECE, so a lone sequential fill makes few requests), else a wanted offset (cutting
the busy piece it lies far inside: that fetcher stops there and drops its connection),
else the first free byte. No byte is claimed twice, so upstream sends each byte once
(ADR 0007); a cut costs what was in flight on the dropped connection past the cut.

Resume. A piece whose body breaks (premature EOF, reset, a stall longer than the read
timeout, 5xx/429) is asked for again from the last byte written, after a backoff; more
than `retries` failed attempts in a row (one that brought RESET_AFTER bytes starts the
count again) fail the fill. A 403 from the CDN means the signed URL expired (a fill
makes requests for as long as it runs, and the Hub's URLs last about an hour): the
fill asks the Hub for a new one (`renew`) and goes on.

End. The fetcher whose write completes the file verifies it (digest.Hasher), fsyncs and
renames it into blobs/ and publishes the Entry. Any failure fails the Fill (readers stop
short of Content-Length), removes the part file and commits nothing; a digest mismatch
is counted and the blob fetched once more from scratch, a second mismatch is final.
"""

import os
import threading
import time

import requests
import urllib3

from pulsys import metrics as M
from pulsys.cache.inflight import RUNNING
from pulsys.errors import CacheCorrupt, Refetching, UpstreamError
from pulsys.upstream.ranged import Forbidden, Transient, open_range
from pulsys.upstream.body import more_left, new_buffer, views
from pulsys.upstream.digest import Hasher

PER_FILL = 64                # fetchers of one fill at once, readers' included
READ_AHEAD = 8               # fetchers a ranged fill starts by itself (the first included)
FIRST_PIECE = 8 << 20        # bytes a fetcher asks for when it starts somewhere new
MAX_PIECE = 64 << 20         # a fetcher going on where it ended doubles its piece up to this
RESET_AFTER = 1 << 20        # an attempt that brought this many bytes resets the retry count
RENEWALS = 3                 # new signed URLs one piece may ask for after 403s
BACKOFF, BACKOFF_MAX = 0.1, 2.0
_NETWORK = (requests.RequestException, urllib3.exceptions.HTTPError, Transient)


class _Stopped(Exception):
    """The fill ended (failed elsewhere) while this fetcher was working."""


class Budget:
    """Extra fetchers (beyond the first of each fill) allowed over all fills."""

    def __init__(self, n):
        self.left = n
        self.lock = threading.Lock()

    def take(self):
        with self.lock:
            if self.left <= 0:
                return False
            self.left -= 1
            return True

    def give(self):
        with self.lock:
            self.left += 1


class Origin:
    """Where a fill's body comes from. request(method, url, headers): one request, no
    redirects followed; host_allowed(url): may a redirect be followed there; body_counter:
    the counter the body bytes go to; refetches: a copy that fails verification is
    fetched once more from here; on_end(fill): called once the fill has ended (after the
    in-flight registry let it go), or None."""
    __slots__ = ("request", "host_allowed", "body_counter", "refetches", "on_end")

    def __init__(self, request, host_allowed, body_counter=M.UPSTREAM_BODY_BYTES, refetches=True,
                 on_end=None):
        self.request, self.host_allowed = request, host_allowed
        self.body_counter, self.refetches, self.on_end = body_counter, refetches, on_end


class Committer:
    """What a fill changes in the cache. store: commit_blob, blob_path, discard;
    publish(entry): into the index; inflight: the registry (done(fill));
    mark_suspect(entry) -> the entry flagged (ADR 0012); prepare_refetch(entry) -> the
    Fill of a refetch or None; refetch(entry, url, renew, fill): run it; committed:
    callables(blob_id, size) told, in order, of each blob that lands in blobs/ (the
    Space's accounts, the shared tier's uploads)."""
    __slots__ = ("store", "publish", "inflight", "mark_suspect", "prepare_refetch", "refetch",
                 "committed")

    def __init__(self, store, publish, inflight, mark_suspect, prepare_refetch, refetch, committed=()):
        self.store, self.publish, self.inflight = store, publish, inflight
        self.mark_suspect, self.prepare_refetch, self.refetch = mark_suspect, prepare_refetch, refetch
        self.committed = tuple(committed)


class Fetchers:
    """Extra fetchers: `budget` (a Budget over all fills), spawn(fn), which runs fn on a
    thread of its own (RuntimeError once the server shuts down), per_fill, the most
    fetchers of one fill (the first included), and read_ahead, how many of them a ranged
    fill starts by itself (at most per_fill)."""
    __slots__ = ("budget", "spawn", "per_fill", "read_ahead")

    def __init__(self, budget, spawn, per_fill=PER_FILL, read_ahead=READ_AHEAD):
        self.budget, self.spawn, self.per_fill = budget, spawn, per_fill
        self.read_ahead = min(read_ahead, per_fill)


class FillRun:
    """The owner's side of one Fill: its fetchers, resumes, verification and commit.
    origin, cache (a Committer), fetchers: as above; retries: failed attempts in a row a
    piece may make; counters, log: where it counts and logs."""

    def __init__(self, fill, entry, url, origin, cache, fetchers, retries, counters, log, resp=None,
                 attempt=1, renew=None):
        self.fill, self.entry = fill, entry
        self.origin, self.cache, self.fetchers_of = origin, cache, fetchers
        self.retries, self.c, self.log = retries, counters, log
        self.url = url            # where the body is: the CDN URL, or the URL that answered 200
        self.renew = renew        # () -> a new signed body URL, or None when URLs do not expire
        self.renew_lock = threading.Lock()
        self.write_lock = threading.Lock()
        self.resp = resp          # that 200 answer, read by the first fetcher
        self.attempt = attempt
        self.fd = os.open(fill.part_path, os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
        self.hasher = Hasher(entry.blob_id, entry.size, self.fd)
        self.lock = threading.Lock()
        self.fetchers = 1         # the first one, run() on the creating thread
        self.next_fill = None     # after a digest mismatch: the refetch's Fill
        self.ended = False
        self.ahead = False        # run() sets it: read-ahead is due after the first response
        # the first piece is claimed before any reader hears of the fill, so readers of
        # its first bytes see them coming instead of asking for a fetcher of their own
        self.first = None
        if entry.size:
            self.first = fill.claim(None, 0, entry.size if resp is not None else FIRST_PIECE,
                                    FIRST_PIECE)
        fill.on_demand = self._on_demand
        # a plain 200 to a request without Range (resp) carries the whole body on one
        # connection: its piece is not cut for readers far ahead
        fill.cuts = resp is None

    # -- fetchers --------------------------------------------------------------------

    def run(self):
        """The first fetcher; returns when this thread has nothing left to fetch."""
        resp, self.resp = self.resp, None
        if self.first is None:             # an empty file: nothing to fetch
            if resp is not None:
                resp.close()
            self._end_fetcher(self._commit_or_fail())
            return
        self.ahead = resp is None          # read-ahead, once the first piece's answer is in
        self._end_fetcher(self._fetch(0, self.first[1], resp, self.first))

    def _read_ahead(self):
        """Start the other fetchers of a ranged body: one per FIRST_PIECE of it, up to
        read_ahead and what the budget allows. Called when the first piece's response has
        arrived, not before its request: seven fetchers connecting at once took the GIL
        and the CPU from the request the client's first byte waits for."""
        self.ahead = False
        pieces = -(-self.entry.size // FIRST_PIECE)
        for _ in range(min(self.fetchers_of.read_ahead, pieces) - 1):
            if not self._add_fetcher():
                return

    def _on_demand(self, fill, offset):
        """A reader waits at `offset` and nothing will reach it soon (any thread; never blocks)."""
        self._add_fetcher()

    def _add_fetcher(self):
        """Start one more fetcher on the pool if per_fill and the budget allow. -> started"""
        budget = self.fetchers_of.budget
        with self.lock:
            if self.ended or self.fetchers == 0 or self.fetchers >= self.fetchers_of.per_fill:
                return False
            if not budget.take():
                return False
            self.fetchers += 1
        try:
            self.fetchers_of.spawn(self._extra)
        except RuntimeError:      # the pool is shutting down
            budget.give()
            self._end_fetcher(None)
            return False
        self.c[M.FILL_FETCHERS] += 1
        return True

    def _extra(self):
        try:
            outcome = self._fetch(None, FIRST_PIECE, None, None)
        finally:
            self.fetchers_of.budget.give()
        self._end_fetcher(outcome)

    def _fetch(self, after, length, resp, nxt):
        """Fetch `nxt` (a claimed piece, or None), then claim and fetch pieces until none is
        left. -> the failure that ended the fill here (for a refetch decision), or None."""
        fill, piece = self.fill, None
        buf = new_buffer()           # this fetcher's, for every piece it fetches (upstream/body.py)
        try:
            while True:
                if nxt is None:
                    nxt = fill.claim(piece, after, length, FIRST_PIECE)
                    piece = None
                    if nxt is None:
                        return None
                if nxt[0] != after:
                    length = FIRST_PIECE
                piece, nxt = nxt, None
                if self._resume_until(piece, resp, buf):
                    piece = None           # this fetcher wrote the file's last missing byte
                    return self._commit_or_fail()
                resp = None
                after, length = piece[1], min(length * 2, MAX_PIECE)   # its end, if it was cut
        except _Stopped:
            return None
        except BaseException as e:
            if self._fail(e):
                return e
            return None
        finally:
            if resp is not None:
                resp.close()
            if piece is not None:
                fill.release(piece)

    def _resume_until(self, piece, resp, buf):
        """Fetch the bytes of `piece` ([next byte, end], its end moved by a cut while this
        runs), resuming after breaks. -> True when a write completed the file."""
        origin, fill, size = self.origin, self.fill, self.entry.size
        fails, renewals, complete = 0, 0, False
        pos = piece[0]
        while pos < piece[1]:
            began = pos
            try:
                if resp is None:
                    url, asked = self.url, piece[1]   # a cut may move piece[1] meanwhile
                    try:
                        resp = open_range(origin.request, origin.host_allowed, url, pos, asked, size)
                        if self.ahead:
                            self._read_ahead()
                    except Forbidden:
                        if self.renew is None or renewals >= RENEWALS:
                            raise
                        renewals += 1
                        self._renew(url)
                        continue
                else:
                    asked = size if resp.status_code == 200 else piece[1]
                ranged = resp.status_code == 206 or asked == size
                for chunk in views(resp, lambda: piece[1] - pos, buf):
                    if not chunk:
                        continue
                    if len(chunk) > asked - pos and ranged:  # urllib3's chunks: not cut at the limit
                        raise CacheCorrupt("upstream sent more than the %d bytes announced" % size)
                    if len(chunk) > piece[1] - pos:         # a 200 to a ranged request, or a cut
                        chunk = chunk[:piece[1] - pos]
                    if fill.state != RUNNING:
                        raise _Stopped()
                    complete = self._write(piece, chunk) or complete
                    pos += len(chunk)
                    if pos >= piece[1]:
                        break
                if pos < piece[1]:
                    raise Transient("upstream body ended at byte %d, piece ends at %d" % (pos, piece[1]))
                if ranged and piece[1] == asked and more_left(resp):
                    raise CacheCorrupt("upstream announced more than the %d bytes asked for" % (asked - began))
            except _NETWORK as e:
                fails = 1 if pos - began >= RESET_AFTER else fails + 1
                if fails > self.retries:
                    raise UpstreamError("upstream body failed at byte %d after %d retries: %s"
                                        % (pos, self.retries, _why(e))) from e
                self.c[M.UPSTREAM_RETRIES] += 1
                self.log.info("resuming fill", blob=self.entry.blob_id, at=pos, attempt=fails,
                            error=_why(e))
                if resp is not None:
                    resp.close()
                    resp = None
                if fill.state != RUNNING:
                    raise _Stopped() from e
                time.sleep(min(BACKOFF_MAX, BACKOFF * 2 ** (fails - 1)))
            finally:
                if resp is not None:
                    resp.close()      # a cut piece's body is not read to its end: not reused
                    resp = None
        return complete

    def _renew(self, expired):
        """Replace the body URL that answered 403, once for all fetchers that saw it."""
        with self.renew_lock:
            if self.url == expired:
                self.log.info("renewing the body URL", blob=self.entry.blob_id)
                self.url = self.renew()

    def _write(self, piece, chunk):
        view = memoryview(chunk)
        pos = off = piece[0]
        with self.write_lock:
            while view:
                n = os.pwrite(self.fd, view, off)
                view, off = view[n:], off + n
        complete = self.fill.wrote(piece, len(chunk))
        self.hasher.wrote(pos, chunk, self.fill)
        self.c[self.origin.body_counter] += len(chunk)
        return complete

    def _end_fetcher(self, failure):
        with self.lock:
            self.fetchers -= 1
            last = self.fetchers == 0
        if last:
            os.close(self.fd)
        if isinstance(failure, CacheCorrupt) and self.attempt == 1 and self.origin.refetches:
            self.cache.refetch(self.entry, self.url, self.renew, self.next_fill)

    # -- end -------------------------------------------------------------------------------

    def _commit_or_fail(self):
        try:
            self._commit()
            return None
        except BaseException as e:
            return e if self._fail(e) else None

    def _commit(self):
        cache, fill, entry = self.cache, self.fill, self.entry
        if not self.hasher.matches(entry.size):
            raise CacheCorrupt("content does not match %s" % entry.blob_id)
        fill.final_path = cache.store.blob_path(entry.blob_id)
        path = cache.store.commit_blob(fill.part_path, entry.blob_id)
        for told in cache.committed:
            told(entry.blob_id, entry.size)
        done = entry.with_blob(path)
        cache.publish(done)
        with self.lock:
            self.ended = True
        fill.finish(done)
        self.c[M.FILLS_COMPLETED] += 1
        self._ended()

    def _ended(self):
        self.cache.inflight.done(self.fill)
        if self.origin.on_end is not None:
            self.origin.on_end(self.fill)

    def _fail(self, error):
        """End the fill as failed, once. -> True for the call that did it."""
        with self.lock:
            if self.ended:
                return False
            self.ended = True
        cache, fill = self.cache, self.fill
        self.c[M.FILLS_FAILED] += 1
        if isinstance(error, CacheCorrupt):
            self.c[M.INTEGRITY_FAILURES] += 1
            if fill.spans:
                # bytes were readable, so readers may hold some of the wrong ones: flag
                # the blob before its readers are cut short (ADR 0012)
                self.entry = cache.mark_suspect(self.entry)
            if self.attempt == 1 and self.origin.refetches:
                self.next_fill = cache.prepare_refetch(self.entry)
                if self.next_fill is not None:    # readers go on from it (ADR 0012)
                    error = Refetching(str(error))
        self.log.warning("fill failed", blob=self.entry.blob_id, attempt=self.attempt, error=_why(error))
        fill.fail(error)
        cache.store.discard(fill.part_path)
        self._ended()
        if not isinstance(error, Exception):
            raise error
        return True


def _why(e):
    return str(e) or type(e).__name__
