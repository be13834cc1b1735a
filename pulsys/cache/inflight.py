"""In-flight fills: one upstream body download per blob, readable while it lands.

A Fill is written by exactly one fill thread and read by any number of reactor
connections. Readers ask `wait(offset, post, fn, arg)`: if bytes past `offset` are already
readable it returns False and they send at once; otherwise `post(fn, arg)` is called once
when more bytes land or the fill ends. Progress is published under the fill's lock so
no wake-up is lost.

`available` never reaches `size` before the blob is verified and committed: the last
byte is held back, so a client never holds a complete-looking body whose hash was wrong.

Progress listeners (`add_listener(fn)`) are called as `fn(fill)` on the fill thread after
every change, outside the lock, in order, and once more when the fill ends; the
multi-process parent uses them to relay progress to worker processes.
"""

import threading

RUNNING, DONE, FAILED = 0, 1, 2


class Fill:
    __slots__ = ("lock", "blob_id", "size", "part_path", "available", "state", "waiters",
                 "entry", "error", "listeners", "final_path")

    def __init__(self, blob_id, size, part_path):
        self.lock = threading.Lock()
        self.blob_id = blob_id
        self.size = size
        self.part_path = part_path
        self.available = 0
        self.state = RUNNING
        self.waiters = []
        self.entry = None
        self.error = None
        self.listeners = None
        self.final_path = None    # where the verified blob is renamed to (set before the rename)

    def add_listener(self, fn):
        """Call fn(self) after each progress change and when the fill ends. False (and not
        added) when the fill has already ended: the caller reads the final state instead."""
        with self.lock:
            if self.state != RUNNING:
                return False
            self.listeners = (self.listeners or ()) + (fn,)
            return True

    def _tell(self):
        for fn in self.listeners:
            fn(self)

    def wait(self, offset, post, fn, arg):
        with self.lock:
            if self.available > offset or self.state != RUNNING:
                return False
            self.waiters.append((post, fn, arg))
            return True

    def _wake(self):
        ws = self.waiters
        self.waiters = []
        return ws

    def progress(self, written):
        """Called by the fill thread after `written` bytes are on disk."""
        limit = self.size - 1 if self.size else 0
        with self.lock:
            self.available = written if written < limit else limit
            ws = self._wake() if self.waiters else ()
        for post, fn, arg in ws:
            post(fn, arg)
        if self.listeners:
            self._tell()

    def finish(self, entry):
        with self.lock:
            self.entry = entry
            self.available = self.size
            self.state = DONE
            ws = self._wake()
        for post, fn, arg in ws:
            post(fn, arg)
        if self.listeners:
            self._tell()

    def fail(self, error):
        with self.lock:
            self.error = error
            self.state = FAILED
            ws = self._wake()
        for post, fn, arg in ws:
            post(fn, arg)
        if self.listeners:
            self._tell()


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

    def get(self, blob_id):
        f = self._fills.get(blob_id)
        return f if f is not None and f.state == RUNNING else None

    def done(self, fill):
        with self._lock:
            if self._fills.get(fill.blob_id) is fill:
                del self._fills[fill.blob_id]

    def count(self):
        return len(self._fills)
