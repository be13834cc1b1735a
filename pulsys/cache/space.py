"""Space: how many blob bytes the cache holds, the quota, and LRU eviction
(docs/decisions/0008). Lives in the process that runs fills; pool threads only.

Accounting counts the apparent size of every blob under blobs/ plus a reservation of
the announced size of every fill in progress. The blobs and their last-served times are
kept in the index's `blobs` records (cache/indexdb.py): read back in the background at
start (a fill that must reserve waits for that), written on every commit and eviction,
and recency written every FLUSH seconds and at shutdown (a crash loses only that much
of the eviction order); records are written under the accounts' lock, so they change in
the order the accounts do. A blob file the records lack (a crash between the rename into
blobs/ and the record) is adopted when an entry is published for it (`pin`). A new fill reserves before it writes:

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

FLUSH = 60.0          # seconds between writes of last-served times to the index


class Space:
    def __init__(self, max_bytes=0, policy="lru", counters=None, clock=time.monotonic, evict_fn=None,
                 running=None, size_of=None, served=None):
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
        self.served = served              # callable -> [(blob id, monotonic time)] (in-process reactors)
        self.evict_fn = evict_fn          # callable([(blob id, size)]) -> None
        self.running = running            # callable(blob id) -> is a fill for it running?
        self.table = None                 # cache.index.Index: where the accounts persist
        self.size_of = size_of            # callable(blob id) -> size of the file, or None
        self.loaded = threading.Event()
        self.loaded.set()                 # until load_from() starts a load
        self._dirty = set()               # blobs whose last-served time is not written yet
        self._flushed = clock()

    # -- persistence -------------------------------------------------------------------

    def load_from(self, table, background=True):
        """Read the accounts from `table` (cache.index.Index), in a thread by default."""
        self.table = table
        self.loaded.clear()
        if not background:
            return self._load()
        threading.Thread(target=self._load, name="pulsys-space-load", daemon=True).start()

    def _load(self):
        try:
            off = time.time() - self.clock()
            items = [(b, size, served - off) for b, size, served in self.table.blob_records()]
            with self.lock:
                for blob_id, size, served in items:
                    if blob_id not in self.blobs:       # committed meanwhile: that one is newer
                        self.blobs[blob_id] = [size, served]
                        self.used += size
        finally:
            self.loaded.set()

    def _wall(self, t):
        return t + (time.time() - self.clock())

    def flush(self):
        """Write last-served times touched since the last flush."""
        if self.table is None:
            return
        with self.lock:
            dirty, self._dirty = self._dirty, set()
            items = [(b, self.blobs[b][0], self._wall(self.blobs[b][1])) for b in dirty if b in self.blobs]
            self._flushed = self.clock()
            self.table.put_blobs(items)

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
            dirty = self._dirty
            for blob_id, t in items:
                rec = blobs.get(blob_id)
                if rec is not None and t > rec[1]:
                    rec[1] = t
                    dirty.add(blob_id)

    def collect(self):
        """Pull what in-process reactors recorded since the last pull."""
        if self.served is not None:
            items = self.served()
            if items:
                self.touch_many(items)
        if self._dirty and self.clock() - self._flushed >= FLUSH:
            self.flush()

    # -- fills --------------------------------------------------------------------------

    def reserve(self, blob_id, size):
        """Reserve room for a fill of `size` bytes. False: no room (answer 507)."""
        self.loaded.wait()
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
            if self.table is not None:
                self.table.drop_blobs([b for b, _ in victims])
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
            now = self.clock()
            self.blobs[blob_id] = [size, now]
            self.used += size
            if self.table is not None:
                self.table.put_blobs([(blob_id, size, self._wall(now))])

    # -- publishing an entry that points at a blob -------------------------------------

    def pin(self, blob_id):
        """True (and the blob cannot be evicted until unpin) when the blob is on disk."""
        self.loaded.wait()            # before the accounts are read back, no blob is known
        rec = self.blobs.get(blob_id)
        if rec is None and self.size_of is not None:
            size = self.size_of(blob_id)      # on disk but not in the accounts: adopt it
            if size is None:
                return False
            self.committed(blob_id, size)
        with self.lock:
            rec = self.blobs.get(blob_id)
            if rec is None:
                return False
            rec[1] = self.clock()
            self._dirty.add(blob_id)
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
            if self.table is not None:
                self.table.drop_blobs([blob_id])

    def stats(self):
        with self.lock:
            self._prune_locked()
        return {"cache_bytes": self.used, "cache_reserved_bytes": self.reserved_total,
                "cache_max_bytes": self.max_bytes, "cache_blobs": len(self.blobs),
                "evict_policy": self.policy, "cache_accounts_loaded": self.loaded.is_set()}


def evictor(index, store, drop_fds, log):
    """Space.evict_fn for `index` and `store`: entries that point at a victim are
    republished as metadata only (a GET misses and refetches; HEAD still answers), then
    the files are unlinked, then `drop_fds(paths)` asks every reactor to close the
    descriptors it keeps open for them (so their disk space is freed once no
    connection is sending from them)."""
    def evict(victims):
        gone = []
        for blob_id, _ in victims:
            gone.extend(e.with_blob(None) for e in index.entries_of_blob(blob_id) if e.blob_path)
        index.publish_many(gone)
        paths = []
        for blob_id, size in victims:
            store.remove_blob(blob_id, size)
            paths.append(store.blob_path(blob_id))
        drop_fds(paths)
        log.info("evicted least recently served blobs", blobs=len(victims),
                 bytes=sum(s for _, s in victims), entries=len(gone))
    return evict


def for_store(store, index, inflight, max_bytes, policy, counters, drop_fds, log,
              clock=time.monotonic, background=True, served=None):
    """The Space of a store whose index is open: accounts read back from the index (in
    the background by default), wired to commits, running fills and eviction; `served`
    gives what the reactors of this process served (Space.collect)."""
    space = Space(max_bytes, policy, counters, clock, evict_fn=evictor(index, store, drop_fds, log),
                  running=lambda blob_id: inflight.get(blob_id) is not None, size_of=store.blob_size,
                  served=served)
    space.load_from(index, background)

    def check():
        space.loaded.wait()
        if max_bytes and space.used > max_bytes:
            log.warning("the cache holds more than --cache-max-bytes; new fills will evict"
                        if policy == "lru" else
                        "the cache holds more than --cache-max-bytes; new fills get 507 (--evict none)",
                        cache_bytes=space.used, cache_max_bytes=max_bytes)
    threading.Thread(target=check, name="pulsys-space-check", daemon=True).start()
    return space
