"""The LMDB environment that holds the index, shared by every process of a server
(docs/decisions/0006, 0013).

    <cache-dir>/v1/index/data.mdb   the B+tree (memory-mapped by every process)
    <cache-dir>/v1/index/lock.mdb   LMDB's reader table
    <cache-dir>/v1/index/gen        one uint64: bumped after every committed change

Named databases:
    entries   cache key -> Entry record (cache/record.py)
    revs      revision key -> (commit, deadline, fetched_at)
    byblob    blob id NUL cache key -> b""   which entries point at a blob
    blobs     blob id -> (size, last served): the blobs under blobs/ (cache/space.py)
    negative  cache key -> the full key, for every negative entry (cache/negatives.py):
              the bound on them is rebuilt at start from these alone, not a scan
    meta      b"schema" -> b"1"

One process writes (the one that runs fills); every other process opens the same files
read-only. LMDB readers take no lock: a read transaction is a consistent snapshot, and a
reader's slot in lock.mdb is released by reader_check() when its process died.

`gen` is how readers learn that something changed without asking LMDB: reading an
mmap'd word costs ~0.05 us, env.info()["last_txnid"] ~1.9 us (measured here). The
writer bumps it after each commit, so a reader that sees an unchanged gen may keep
using the snapshot and answers it took before.

LMDB keys are at most 511 bytes; cache keys can be longer (file paths, tree queries), so
a long key is stored as its first KEEP bytes plus a digest of the whole (prefix scans
by repo still work: a repo id is far shorter). Records carry the full key.
"""

import hashlib
import mmap
import os
import time

import lmdb

SCHEMA = b"1"
MAP_SIZE = 1 << 38          # 256 GiB of address space; the file grows only as used
MAX_READERS = 4096          # one slot per open read transaction, across all processes
KEEP = 400
_DBS = (b"entries", b"revs", b"byblob", b"blobs", b"negative", b"meta")


class IndexUnusable(Exception):
    """The index cannot be opened; the message is for the operator."""


def lkey(key):
    """The LMDB key of cache key `key` (str)."""
    b = key.encode("utf-8", "surrogatepass")
    if len(b) <= KEEP + 33:
        return b
    return b[:KEEP] + b"\0" + hashlib.sha256(b).digest()


def blob_key(blob_id, key=None):
    b = blob_id.encode("ascii", "backslashreplace") + b"\0"
    return b if key is None else b + lkey(key)


def _open_gen(path, writer):
    """The index's generation (IndexDB.gen): 8 bytes at the start of the file `gen` beside
    LMDB's, mapped shared by every process. -> (fd, mmap). The writer makes it before it
    opens LMDB, so an index with a committed transaction has one wherever a kill lands
    (a kill after the first commit and before the file once left a reader with
    FileNotFoundError: tests/behaviour/test_index_crash.py). A reader that finds none, or
    a short one, gets IndexUnusable."""
    name = os.path.join(path, "gen")
    try:
        fd = os.open(name, (os.O_RDWR | os.O_CREAT if writer else os.O_RDONLY) | os.O_CLOEXEC, 0o644)
    except FileNotFoundError:
        raise IndexUnusable("the index %s is not usable: it has no generation file (gen)" % path) from None
    except OSError as e:
        raise IndexUnusable("cannot open the index %s: %s" % (path, e.strerror or e)) from None
    try:
        if os.fstat(fd).st_size < 8:
            if not writer:
                raise IndexUnusable("the index %s is not usable: its generation file (gen) is short" % path)
            os.ftruncate(fd, mmap.PAGESIZE)
        mm = mmap.mmap(fd, 8, mmap.MAP_SHARED, mmap.PROT_READ | (mmap.PROT_WRITE if writer else 0))
    except BaseException:
        os.close(fd)
        raise
    return fd, mm


def _close_gen(gen):
    if gen is not None:
        gen[1].close()
        os.close(gen[0])


class IndexDB:
    def __init__(self, root, writer=True):
        """root: the cache's v1 directory. The writer creates what is missing."""
        self.path = os.path.join(root, "index")
        self.writer = writer
        gen = None
        if writer:
            os.makedirs(self.path, exist_ok=True)
            gen = _open_gen(self.path, True)    # before LMDB's first commit: see _open_gen
        try:
            # meminit stays on (LMDB's default): with MDB_NOMEMINIT the unused part of
            # each page LMDB mallocs is written to the file as the heap left it, and this
            # heap held Hub tokens and API keys (lmdb.h, MDB_NOMEMINIT: "persisting
            # leftover data from other code ... into the data file";
            # tests/unit/test_index_no_heap_leftovers.py)
            self.env = lmdb.open(self.path, map_size=MAP_SIZE, max_dbs=len(_DBS),
                                 max_readers=MAX_READERS, readonly=not writer, create=writer,
                                 subdir=True, lock=True, readahead=False, meminit=True)
        except lmdb.Error as e:
            _close_gen(gen)
            raise IndexUnusable("cannot open the index %s: %s" % (self.path, e)) from None
        try:
            if writer:      # every named database in one transaction: a kill leaves all or none
                with self.env.begin(write=True) as tx:
                    dbs = [self.env.open_db(n, txn=tx, create=True) for n in _DBS]
            else:
                dbs = [self.env.open_db(n, create=False) for n in _DBS]
                gen = _open_gen(self.path, False)
        except lmdb.Error as e:
            self.env.close()
            _close_gen(gen)
            raise IndexUnusable("the index %s is not usable: %s" % (self.path, e)) from None
        except BaseException:
            self.env.close()
            _close_gen(gen)
            raise
        self.entries, self.revs, self.byblob, self.blobs, self.negative, self.meta = dbs
        self._gen_fd, self._gen_mm = gen
        self.genv = memoryview(self._gen_mm).cast("Q")
        if writer:
            self.env.reader_check()        # slots of processes that died holding a snapshot

    def schema(self):
        with self.env.begin(db=self.meta) as tx:
            return tx.get(b"schema")

    def bump(self):
        """Writer, after a commit (under its write lock)."""
        self.genv[0] += 1

    def gen(self):
        return self.genv[0]

    def count(self):
        with self.env.begin() as tx:
            return tx.stat(self.entries)["entries"], tx.stat(self.revs)["entries"]

    def close(self):
        """Idempotent (a descriptor closed twice could be someone else's by then)."""
        if self._gen_fd < 0:
            return
        self.genv.release()
        self._gen_mm.close()
        os.close(self._gen_fd)
        self._gen_fd = -1
        self.env.close()


def offset():
    """Wall clock minus monotonic clock: records hold wall times, Entries monotonic ones."""
    return time.time() - time.monotonic()
