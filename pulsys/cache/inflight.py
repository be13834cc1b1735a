"""In-flight fills: one upstream download per blob, readable while its pieces land.

A Fill is the shared state of one blob being written into its part file:

  spans   byte ranges on disk, ((start, end), ...) half-open (cache.spans)
  busy    pieces fetchers are downloading now, ([next byte, piece end], ...): the owner's
          are lists its fetchers hold (a piece's end moves when it is cut), a worker's
          copy has the pairs of the last snapshot
  wanted  offsets readers wait for that no fetcher is about to reach

Fetchers (upstream.fill, only in the process that owns the fill) `claim` pieces,
report bytes with `wrote`, and end the fill with `finish` or `fail`. Readers (reactor
connections, in any process) ask `readable(offset)`: bytes contiguous on disk from their
offset. When there are none they `wait(offset, post, fn, arg)`: `post(fn, arg)` is
called once when bytes at that offset become readable or the fill ends. A wait for an
offset nobody is fetching or about to fetch is also a demand: `on_demand(fill, offset)`
is called (outside the lock, non-blocking) so the owner can start a fetcher there.
A reader waiting inside a busy piece more than NEAR bytes ahead of its fetcher is such a
demand too: a CDN paces each connection (the Hub's at ~50 MB/s), so a reader 40 MiB into
another's 64 MiB piece would wait most of a second for bytes a connection of its own
brings at once. The claim that takes its offset cuts the busy piece there (`cut`): the
cut fetcher stops at the new end and drops its connection, the new one fetches from it.

The last byte of the file is never readable before the blob is verified and committed
(ADR 0004), and a reader of a range holds back the last byte of its range the same way
(`wait_end`, ADR 0012): a client never holds a complete-looking body or range whose hash
was wrong. A failed fill has nothing readable, so readers stop short of Content-Length.

Progress listeners (`add_listener(fn)`) are called as `fn(fill)` after every change,
outside the lock, and once more when the fill ends; the multi-process parent uses them to
relay `snapshot()`s to worker processes, whose local copies take them with `apply`.
"""

import threading

from pulsys.cache import spans as S

RUNNING, DONE, FAILED = 0, 1, 2
SPREAD = 8 << 20       # = upstream.fill.FIRST_PIECE: the piece a new fetcher starts with
SPREAD_WAYS = 8        # = upstream.fill.READ_AHEAD: fetchers a fill starts by itself
# A reader this far ahead of the fetcher of the busy piece it waits in asks for a
# connection of its own. At least a fetcher's buffer (upstream/body.py, 1 MiB): bytes the
# cut fetcher has read but not reported end before the cut, so no byte is written twice.
# 4 MiB is 80 ms of a connection paced at 50 MB/s, a few ms unpaced on loopback.
NEAR = 4 << 20


class Fill:
    __slots__ = ("lock", "blob_id", "size", "part_path", "spans", "busy", "wanted", "state",
                 "waiters", "entry", "error", "listeners", "final_path", "on_demand", "cuts")

    def __init__(self, blob_id, size, part_path):
        self.lock = threading.Lock()
        self.blob_id = blob_id
        self.size = size
        self.part_path = part_path
        self.spans = ()
        self.busy = ()
        self.wanted = ()
        self.state = RUNNING
        self.waiters = []          # (offset, need, post, fn, arg); offset -1: the end
        self.entry = None
        self.error = None
        self.listeners = None
        self.final_path = None     # where the verified blob is renamed to (set before the rename)
        self.on_demand = None      # fn(fill, offset): start fetching at offset if possible
        self.cuts = True           # busy pieces may be cut for readers far ahead (ranged origins)

    # -- readers -------------------------------------------------------------------

    def readable(self, offset):
        """Bytes a reader may send from `offset` now (<= 0: none). Lock-free: spans and
        state are replaced whole, never mutated."""
        st = self.state
        if st == DONE:
            return self.size - offset
        if st == FAILED:
            return 0
        end = S.end_at(self.spans, offset)
        if end >= self.size:
            end = self.size - 1
        return end - offset

    def wait(self, offset, post, fn, arg, need=1):
        """False: `need` bytes are readable from `offset` (or the fill ended), go on now.
        True: `post(fn, arg)` will be called once, when they are or the fill ends."""
        with self.lock:
            if self.state != RUNNING or self.readable(offset) >= need:
                return False
            self.waiters.append((offset, need, post, fn, arg))
            ask = self._want(offset)
        if ask and self.on_demand is not None:
            self.on_demand(self, offset)
        return True

    def wait_end(self, post, fn, arg):
        """Like wait, for a reader whose only byte left is the last of its response: that
        byte waits for verification (ADR 0012), so wake it when the fill ends."""
        with self.lock:
            if self.state != RUNNING:
                return False
            self.waiters.append((-1, 0, post, fn, arg))
            asks = self._spread()
        if self.on_demand is not None:
            for offset in asks:
                self.on_demand(self, offset)
        return True

    def _spread(self):
        """Offsets spread over the bytes nobody fetches yet, SPREAD apart at least: a
        reader waiting for the end waits for the whole blob, so more fetchers should
        work on it (the owner caps them, upstream.fill.PER_FILL). hf_transfer's first
        request, `bytes=0-0`, waits like this before it asks for any chunk."""
        size = self.size
        step = max(SPREAD, size // SPREAD_WAYS)
        asks, offset, taken = [], 0, self._taken()
        while offset < size and len(asks) < SPREAD_WAYS:
            gap = S.first_gap(taken, offset, size)
            if gap is None:
                break
            if self._want(gap):
                asks.append(gap)
            offset = gap + step
        return asks

    def demand(self, offset):
        """A reader elsewhere (a worker process) waits at `offset`."""
        with self.lock:
            ask = self.state == RUNNING and self._want(offset)
        if ask and self.on_demand is not None:
            self.on_demand(self, offset)

    def _coming(self, offset):
        """On disk, or in a busy piece (or at its end: its fetcher goes on there) at most
        NEAR bytes ahead of its fetcher (any distance when pieces are not cut)."""
        if S.holds(self.spans, offset):
            return True
        for pos, end in self.busy:
            if pos <= offset <= end and (offset - pos <= NEAR or not self.cuts):
                return True
        return False

    def _want(self, offset):
        if offset >= self.size or offset in self.wanted or self._coming(offset):
            return False
        self.wanted += (offset,)
        return True

    # -- fetchers (owner process only) -------------------------------------------------

    def _cut(self, offset):
        """Cut the busy piece that holds `offset` more than NEAR bytes ahead of its
        fetcher, so that it ends there. -> the end it had, or None (no such piece)."""
        if self.cuts:
            for piece in self.busy:
                pos, end = piece
                if pos + NEAR < offset < end:
                    piece[1] = offset
                    return end
        return None

    def _taken(self):
        t = self.spans
        for pos, end in self.busy:
            if pos < end:
                t = S.add(t, pos, end)
        return t

    def claim(self, release, after, length, jump_length):
        """Drop the busy piece `release` (what claim returned before, or None) and claim
        the next piece: [after, after + length) when that byte is free (a fetcher goes on
        where it ended), else the oldest wanted offset (cutting the busy piece it lies
        far inside), else the first free byte (after `after`, then from 0), for up to
        jump_length bytes. A piece ends early where bytes are on disk or claimed.
        -> [start, end], a list the fill changes: start as bytes are written (`wrote`),
        end when the piece is cut; or None when nothing is left to fetch."""
        size = self.size
        with self.lock:
            if release is not None:
                self._drop(release)
            piece = None
            if self.state == RUNNING:
                taken = self._taken()
                start = end = None
                if after is not None and after < size and not S.holds(taken, after):
                    start = after
                else:
                    length = jump_length
                    for w in self.wanted:
                        if not S.holds(taken, w):
                            start = w
                            break
                        was = self._cut(w)
                        if was is not None:
                            start, end = w, min(w + length, was)
                            break
                    if start is None:
                        start = S.first_gap(taken, after or 0, size)
                    if start is None:
                        start = S.first_gap(taken, 0, size)
                if start is not None:
                    if end is None:
                        end = min(start + length, S.next_start(taken, start, size))
                    piece = [start, end]
                    self.busy += (piece,)
                    self.wanted = tuple(w for w in self.wanted if w != start and not self._coming(w))
        if self.listeners:
            self._tell()
        return piece

    def _drop(self, piece):
        self.busy = tuple(p for p in self.busy if p is not piece)

    def release(self, piece):
        """The fetcher of busy `piece` stopped."""
        with self.lock:
            self._drop(piece)
        if self.listeners:
            self._tell()

    def wrote(self, piece, n):
        """The next `n` bytes of busy `piece` are on disk. -> True when this write
        completed the file (exactly one call sees True)."""
        with self.lock:
            if self.state != RUNNING:
                return False
            pos = piece[0]
            before = self.spans
            self.spans = spans = S.add(before, pos, pos + n)
            piece[0] = pos + n
            complete = spans == ((0, self.size),) and before != spans
            ws = self._wake_readable() if self.waiters else ()
        for _, _, post, fn, arg in ws:
            post(fn, arg)
        if self.listeners:
            self._tell()
        return complete

    def _wake_readable(self):
        ready, keep = [], []
        for w in self.waiters:
            (ready if w[0] >= 0 and self.readable(w[0]) >= w[1] else keep).append(w)
        self.waiters = keep
        return ready

    # -- worker-process copies -------------------------------------------------------

    def snapshot(self):
        with self.lock:
            return self.spans, tuple((p, e) for p, e in self.busy)

    def apply(self, spans, busy):
        """Take the owner's spans and busy pieces (a relayed snapshot)."""
        with self.lock:
            if self.state != RUNNING:
                return
            self.spans, self.busy = spans, busy
            if self.wanted:
                self.wanted = tuple(w for w in self.wanted if not self._coming(w))
            ws = self._wake_readable() if self.waiters else ()
        for _, _, post, fn, arg in ws:
            post(fn, arg)

    # -- end -----------------------------------------------------------------------------

    def add_listener(self, fn):
        """Call fn(self) after each change and when the fill ends. False (and not added)
        when the fill has already ended: the caller reads the final state instead."""
        with self.lock:
            if self.state != RUNNING:
                return False
            self.listeners = (self.listeners or ()) + (fn,)
            return True

    def _tell(self):
        for fn in self.listeners:
            fn(self)

    def _end(self, state, entry, error):
        with self.lock:
            if self.state != RUNNING:
                return
            self.entry, self.error = entry, error
            if state == DONE:
                self.spans = ((0, self.size),) if self.size else ()
            self.state = state
            self.busy = self.wanted = ()
            ws, self.waiters = self.waiters, []
        for _, _, post, fn, arg in ws:
            post(fn, arg)
        if self.listeners:
            self._tell()

    def finish(self, entry):
        self._end(DONE, entry, None)

    def fail(self, error):
        self._end(FAILED, None, error)


class Inflight:
    """blob id -> running Fill, so concurrent misses share one upstream download."""

    def __init__(self):
        self._lock = threading.Lock()
        self._fills = {}

    def join_or_create(self, blob_id, size, part_path_factory):
        """-> (fill, created). When created, the caller must run it and call done()."""
        with self._lock:
            f = self._fills.get(blob_id)
            if f is not None and f.state == RUNNING:
                return f, False
            f = Fill(blob_id, size, part_path_factory())
            self._fills[blob_id] = f
            return f, True

    def replace(self, blob_id, size, part_path_factory):
        """A new Fill for `blob_id` in place of the running one (a refetch, registered
        before the failed fill ends, so that its readers find it). The caller runs it."""
        with self._lock:
            f = Fill(blob_id, size, part_path_factory())
            self._fills[blob_id] = f
            return f

    def get(self, blob_id):
        f = self._fills.get(blob_id)
        return f if f is not None and f.state == RUNNING else None

    def done(self, fill):
        with self._lock:
            if self._fills.get(fill.blob_id) is fill:
                del self._fills[fill.blob_id]

    def count(self):
        return len(self._fills)
