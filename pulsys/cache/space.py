"""Space: how many blob bytes the cache holds, the quota, and LRU eviction
(docs/decisions/0008). Lives in the process that runs fills; pool threads only.

Accounting counts the apparent size of every file under blobs/ (found by the start-up
walk, then kept up to date by commits and evictions) plus a reservation of the
announced size of every fill in progress. A new fill reserves before it writes:

    used + reserved + size <= max_bytes   -> go ahead
    otherwise, policy "none"              -> refuse (the caller answers 507)
    otherwise, policy "lru"               -> evict least recently served blobs until it
                                             fits; refuse when even all of them would not do

"Served" times come from the reactors (one dict store per warm hit; see recency.py)
and from the pool (a blob published or committed counts as served now). They are
monotonic seconds, one clock for every process of a boot.

Eviction removes a blob from the accounts under the lock, then (outside it) asks
`evict_fn(victims)` to republish the entries that pointed at it as metadata only and
unlink the file. A blob is never evicted while a pool thread holds a pin on it
(`pin` ... `unpin` around publishing an entry that points at it), so the index never
gains an entry for a blob that was just removed. Readers that already have the file
open keep reading: POSIX keeps an unlinked inode until its last descriptor closes.
"""

import threading
import time

from pulsys import metrics as M


class Space:
    def __init__(self, max_bytes=0, policy="lru", counters=None, clock=time.monotonic):
        self.max_bytes = max_bytes        # 0 = unlimited
        self.policy = policy              # "lru" | "none"
        self.c = counters if counters is not None else M.new()
        self.clock = clock
        self.lock = threading.Lock()
        self.blobs = {}                   # blob id -> [size, last served (monotonic)]
        self.used = 0
        self.reserved = {}                # blob id -> bytes reserved by its running fill
        self.reserved_total = 0
        self.pins = {}                    # blob id -> count of pool threads publishing it
        self.sources = []                 # callables -> [(blob id, monotonic time)] (reactors)
        self.evict_fn = None              # callable([(blob id, size)]) -> None
        self.running = None               # callable(blob id) -> is a fill for it running?

    # -- start-up ------------------------------------------------------------------

    def add_existing(self, blob_id, size, last_served):
        with self.lock:
            old = self.blobs.get(blob_id)
            if old is not None:
                self.used -= old[0]
            self.blobs[blob_id] = [size, last_served]
            self.used += size

    # -- recency ----------------------------------------------------------------------

    def touch_many(self, items):
        """[(blob id, monotonic time)] from a reactor or a worker's report."""
        with self.lock:
            blobs = self.blobs
            for blob_id, t in items:
                rec = blobs.get(blob_id)
                if rec is not None and t > rec[1]:
                    rec[1] = t

    def collect(self):
        """Pull what in-process reactors recorded since the last pull."""
        for source in self.sources:
            items = source()
            if items:
                self.touch_many(items)

    def recency(self):
        """{blob id: last served (monotonic)}, e.g. for the index snapshot."""
        self.collect()
        with self.lock:
            return {b: rec[1] for b, rec in self.blobs.items()}

    # -- fills --------------------------------------------------------------------------

    def reserve(self, blob_id, size):
        """Reserve room for a fill of `size` bytes. False: no room (answer 507)."""
        self.collect()
        with self.lock:
            self._prune_locked()
            if blob_id in self.reserved:
                return True
            if not self.max_bytes or self.used + self.reserved_total + size <= self.max_bytes:
                self._reserve_locked(blob_id, size)
                return True
            victims = self._victims_locked(size) if self.policy == "lru" else None
            if victims is None:
                self.c[M.QUOTA_REJECTS] += 1
                return False
            freed = 0
            for blob_id_v, size_v in victims:
                del self.blobs[blob_id_v]
                freed += size_v
            self.used -= freed
            self.c[M.EVICTIONS] += len(victims)
            self.c[M.EVICTED_BYTES] += freed
            self._reserve_locked(blob_id, size)
        if self.evict_fn is not None:
            self.evict_fn(victims)
        return True

    def _prune_locked(self):
        """Drop reservations of fills that ended without committing. Fills end in code this
        module does not own (upstream.fill, including its refetch after a bad digest), so
        a reservation lives as long as a fill for its blob is registered as running."""
        if self.running is None or not self.reserved:
            return
        for b in [b for b in self.reserved if not self.running(b)]:
            self.reserved_total -= self.reserved.pop(b)

    def _reserve_locked(self, blob_id, size):
        self.reserved[blob_id] = size
        self.reserved_total += size

    def _victims_locked(self, size):
        """Least recently served unpinned blobs whose removal makes `size` fit, or None."""
        need = self.used + self.reserved_total + size - self.max_bytes
        if size > self.max_bytes:
            return None
        pins = self.pins
        order = sorted((rec[1], b) for b, rec in self.blobs.items() if b not in pins)
        out, freed = [], 0
        for _, b in order:
            s = self.blobs[b][0]
            out.append((b, s))
            freed += s
            if freed >= need:
                return out
        return None

    def committed(self, blob_id, size):
        """A fill's blob is in blobs/: its reservation becomes used bytes."""
        with self.lock:
            r = self.reserved.pop(blob_id, None)
            if r is not None:
                self.reserved_total -= r
            old = self.blobs.get(blob_id)
            if old is not None:
                self.used -= old[0]
            self.blobs[blob_id] = [size, self.clock()]
            self.used += size

    # -- publishing an entry that points at a blob -------------------------------------

    def pin(self, blob_id):
        """True (and the blob cannot be evicted until unpin) when the blob is on disk."""
        with self.lock:
            rec = self.blobs.get(blob_id)
            if rec is None:
                return False
            rec[1] = self.clock()
            self.pins[blob_id] = self.pins.get(blob_id, 0) + 1
            return True

    def unpin(self, blob_id):
        with self.lock:
            n = self.pins.get(blob_id, 0) - 1
            if n > 0:
                self.pins[blob_id] = n
            else:
                self.pins.pop(blob_id, None)

    def forget(self, blob_id):
        """The blob left blobs/ by other means (quarantine): stop counting it."""
        with self.lock:
            rec = self.blobs.pop(blob_id, None)
            if rec is not None:
                self.used -= rec[0]

    def stats(self):
        with self.lock:
            self._prune_locked()
        return {"cache_bytes": self.used, "cache_reserved_bytes": self.reserved_total,
                "cache_max_bytes": self.max_bytes, "cache_blobs": len(self.blobs),
                "evict_policy": self.policy}


def evictor(index, store, drop_fds, log):
    """Space.evict_fn for `index` and `store`: entries that point at a victim are
    republished as metadata only (a GET misses and refetches; HEAD still answers), then
    the files are unlinked, then `drop_fds(paths)` asks every reactor to close the
    descriptors it keeps open for them (so their disk space is freed once no
    connection is sending from them)."""
    def evict(victims):
        ids = {b for b, _ in victims}
        n = 0
        for e in list(index.entries.values()):
            if e.blob_path is not None and e.blob_id in ids:
                index.publish(e.with_blob(None))
                n += 1
        paths = []
        for blob_id, size in victims:
            store.remove_blob(blob_id, size)
            paths.append(store.blob_path(blob_id))
        drop_fds(paths)
        log.info("evicted least recently served blobs", blobs=len(victims),
                 bytes=sum(s for _, s in victims), entries=n)
    return evict


def for_store(store, index, inflight, max_bytes, policy, counters, drop_fds, log,
              clock=time.monotonic, wall=time.time):
    """The Space of a loaded store: every blob the load's walk found, last served when
    the index snapshot says (or, without one, when the file was last written), wired to
    commits, running fills and eviction."""
    space = Space(max_bytes, policy, counters, clock)
    now_mono, now_wall = clock(), wall()
    served = store.snapshot_served
    for blob_id, (size, mtime) in store.scan.items():
        t = served.get(blob_id)
        t = t if isinstance(t, (int, float)) else mtime
        space.add_existing(blob_id, size, now_mono - (now_wall - t))
    store.scan = {}
    store.on_commit = space.committed
    space.running = lambda blob_id: inflight.get(blob_id) is not None
    space.evict_fn = evictor(index, store, drop_fds, log)
    if max_bytes and space.used > max_bytes:
        log.warning("the cache holds more than --cache-max-bytes; new fills will evict"
                    if policy == "lru" else
                    "the cache holds more than --cache-max-bytes; new fills get 507 (--evict none)",
                    cache_bytes=space.used, cache_max_bytes=max_bytes)
    return space
