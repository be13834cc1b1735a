"""The index: key -> Entry, and (repo, revision) -> commit, in LMDB (cache/indexdb.py).

Index is the writer's side and the place for whole-index questions (scans by blob or
repo, counts): the process that runs fills publishes through it, and its pool and admin
threads read through it with a short read transaction per call. Reactors read through
an IndexView (cache/index_view.py) instead, which remembers hot answers.

Lookup rules (both sides): an entry fresh at `now` (monotonic; expires 0 = never) answers;
a symbolic revision (branch, tag) answers through a fresh revision mapping to the
entry at its commit.
"""

import threading

from pulsys.cache import record as R
from pulsys.cache.indexdb import blob_key, lkey, offset
from pulsys.cache.negatives import is_negative_record
from pulsys.http1.heads import prepare
from pulsys.model import target as T
from pulsys.model.entry import FILE
from pulsys.model.key import rev_key, target_key

FOREVER = float("inf")
SCAN_BATCH = 2000          # records read per read transaction by scans


class RevRecord:
    __slots__ = ("commit", "expires", "fetched_at")

    def __init__(self, commit, expires, fetched_at):
        self.commit = commit
        self.expires = expires        # monotonic deadline
        self.fetched_at = fetched_at  # wall clock


def points_back(t, e):
    """/resolve/<commit>/f may redirect to this body URL: its answer must not be that redirect."""
    return t.body_url and e.kind != FILE and 300 <= e.status < 400


def resolve(t, now, entry_of, rev_of):
    """The lookup rule, over two getters: entry_of(key) -> Entry or None, rev_of(rev key)
    -> RevRecord or None. -> (fresh Entry, monotonic time it stops being fresh) or (None, 0)."""
    k = t.key
    if k is None:
        k = t.key = target_key(t)
    e = entry_of(k)
    if e is not None and (e.expires == 0 or e.expires > now):
        if points_back(t, e):
            return None, 0
        return e, e.expires or FOREVER
    rk = t.rkey
    if rk is None:
        if T.is_commit(t.rev):
            return None, 0
        rk = t.rkey = rev_key(t.rtype, t.repo, t.rev)
    r = rev_of(rk)
    if r is None or r.expires <= now:
        return None, 0
    ck = t.ckey
    if ck is None or ck[0] != r.commit:
        ck = t.ckey = (r.commit, target_key(t, r.commit))
    e = entry_of(ck[1])
    if e is None:
        return None, 0
    return e, r.expires


class Index:
    def __init__(self, db, blob_path, ttl=0.0):
        """db: an IndexDB opened for writing; blob_path: blob id -> path (Store.blob_path);
        ttl: --revision-ttl (cache/record.py: records are judged by the TTL in force)."""
        self.db = db
        self.genv = db.genv                 # the generation word (readers compare against it)
        self.ttl = ttl
        self.env = db.env
        self.blob_path = blob_path
        self.lock = threading.Lock()        # one write transaction, then its gen bump

    # -- reading -------------------------------------------------------------------

    def __len__(self):
        return self.db.count()[0]

    def rev_count(self):
        return self.db.count()[1]

    @property
    def gen(self):
        return self.genv[0]

    def _decode(self, raw):
        e, common = R.decode_entry(raw, self.blob_path, offset(), self.ttl)
        if e.kind == FILE:
            prepare(e, common)
        return e

    def get(self, key):
        with self.env.begin(db=self.db.entries) as tx:
            raw = tx.get(lkey(key))
        return self._decode(raw) if raw is not None else None

    def rev(self, rtype, repo, rev):
        return self.rev_by_key(rev_key(rtype, repo, rev))

    def rev_by_key(self, rk):
        with self.env.begin(db=self.db.revs) as tx:
            raw = tx.get(lkey(rk))
        if raw is None:
            return None
        return RevRecord(*R.decode_rev(raw, offset(), self.ttl))

    def lookup(self, t, now):
        """Fresh Entry for a RESOLVE target, or None (miss or stale)."""
        return resolve(t, now, self.get, self.rev_by_key)[0]

    def lookup_until(self, t, now):
        return resolve(t, now, self.get, self.rev_by_key)

    def lookup_stale(self, t):
        """Best Entry regardless of age (offline fallback), or None."""
        e = self.get(target_key(t))
        if e is not None and not points_back(t, e):
            return e
        r = self.rev(t.rtype, t.repo, t.rev)
        if r is None:
            return None
        return self.get(target_key(t, r.commit))

    # -- scans ---------------------------------------------------------------------

    def _scan(self, dbi, prefix, decode):
        """(key bytes, decoded value) of every record whose LMDB key starts with
        `prefix`, SCAN_BATCH per read transaction (a long scan pins no old snapshot)."""
        start = prefix
        while True:
            batch = []
            with self.env.begin(db=dbi) as tx:
                cur = tx.cursor()
                if not cur.set_range(start):
                    return
                for k, v in cur:
                    if not k.startswith(prefix):
                        break
                    batch.append((k, v))
                    if len(batch) >= SCAN_BATCH:
                        break
            for k, v in batch:
                yield k, decode(v)
            if len(batch) < SCAN_BATCH:
                return
            start = batch[-1][0] + b"\0"

    def entries(self, prefix=""):
        """Every Entry whose key starts with `prefix` (str), in key order."""
        for _, e in self._scan(self.db.entries, prefix.encode("utf-8", "surrogatepass"), self._decode):
            yield e

    def peek(self, prefix=""):
        """(key bytes, (kind, status, blob_id, on_disk, size)) per entry: no Entry built."""
        return self._scan(self.db.entries, prefix.encode("utf-8", "surrogatepass"), R.peek_entry)

    def revs(self, prefix=""):
        """(rev key, RevRecord) of every revision mapping whose key starts with `prefix`
        (model.key.repo_prefix(REV, ...) for one repo's)."""
        off = offset()
        for k, rec in self._scan(self.db.revs, prefix.encode("utf-8", "surrogatepass"),
                                 lambda raw: RevRecord(*R.decode_rev(raw, off, self.ttl))):
            yield k.decode("utf-8", "surrogatepass"), rec

    def negative_keys(self):
        """The keys of every negative entry (4xx answers), in key order."""
        for _, full in self._scan(self.db.negative, b"", bytes):
            yield full.decode("utf-8", "surrogatepass")

    def keys_of_blob(self, blob_id):
        """Keys of the entries that point at `blob_id` (LMDB keys, see indexdb.lkey)."""
        pre = blob_key(blob_id)
        return [k[len(pre):] for k, _ in self._scan(self.db.byblob, pre, bytes)]

    def entries_of_blob(self, blob_id):
        out = []
        with self.env.begin(db=self.db.entries) as tx:
            for k in self.keys_of_blob(blob_id):
                raw = tx.get(k)
                if raw is not None:
                    out.append(raw)
        return [self._decode(raw) for raw in out]

    # -- writing -------------------------------------------------------------------

    def _write(self, fn):
        with self.lock:
            with self.env.begin(write=True) as tx:
                out = fn(tx, offset())
            self.db.bump()
        return out

    def _put(self, tx, entry, off):
        db = self.db
        k = lkey(entry.key)
        old = tx.get(k, db=db.entries)
        if old is not None:
            old_blob = R.peek_entry(old)[2]
            if old_blob and old_blob != entry.blob_id:
                tx.delete(blob_key(old_blob) + k, db=db.byblob)
        if entry.blob_id:
            tx.put(blob_key(entry.blob_id) + k, b"", db=db.byblob)
        if is_negative_record(entry.kind, entry.status):
            tx.put(k, entry.key.encode("utf-8", "surrogatepass"), db=db.negative)
        elif old is not None:
            tx.delete(k, db=db.negative)
        tx.put(k, R.encode_entry(entry, off, self.ttl), db=db.entries)

    def _delete(self, tx, key):
        db = self.db
        k = lkey(key)
        old = tx.get(k, db=db.entries)
        if old is None:
            return False
        blob_id = R.peek_entry(old)[2]
        if blob_id:
            tx.delete(blob_key(blob_id) + k, db=db.byblob)
        tx.delete(k, db=db.negative)
        tx.delete(k, db=db.entries)
        return True

    def publish(self, entry, revs=()):
        """Write `entry`, and the (key, commit, expires, fetched_at) of `revs` in the same
        transaction (one commit, one fsync on disk)."""
        def put(tx, off):
            self._put(tx, entry, off)
            for key, commit, expires, fetched_at in revs:
                self._put_rev(tx, off, key, commit, expires, fetched_at)
        self._write(put)

    def publish_many(self, entries):
        def put_all(tx, off):
            for e in entries:
                self._put(tx, e, off)
        self._write(put_all)

    def remove(self, key):
        return self._write(lambda tx, off: self._delete(tx, key))

    def remove_many(self, keys):
        return self._write(lambda tx, off: sum(self._delete(tx, k) for k in keys))

    def set_rev(self, rtype, repo, rev, commit, expires, fetched_at):
        self.set_rev_key(rev_key(rtype, repo, rev), commit, expires, fetched_at)

    def set_rev_key(self, key, commit, expires, fetched_at):
        self._write(lambda tx, off: self._put_rev(tx, off, key, commit, expires, fetched_at))

    def _put_rev(self, tx, off, key, commit, expires, fetched_at):
        tx.put(lkey(key), R.encode_rev(commit, expires, fetched_at, off, self.ttl), db=self.db.revs)

    def drop_rev(self, key):
        return self._write(lambda tx, off: tx.delete(lkey(key), db=self.db.revs))

    def drop_revs(self, keys):
        return self._write(lambda tx, off: sum(bool(tx.delete(lkey(k), db=self.db.revs)) for k in keys))

    # -- the blobs under blobs/ (cache/space.py keeps the accounts) -------------------

    def blob_records(self):
        """(blob id, size, last served wall time) of every blob the index knows."""
        for k, (size, served) in self._scan(self.db.blobs, b"", R.BLOB.unpack):
            yield k.decode("ascii", "backslashreplace"), size, served

    def put_blobs(self, items):
        """items: [(blob id, size, last served wall time)]; written, not announced (no
        reader looks at these records)."""
        if not items:
            return
        with self.lock:
            with self.env.begin(write=True, db=self.db.blobs) as tx:
                for blob_id, size, served in items:
                    tx.put(blob_id.encode("ascii", "backslashreplace"), R.BLOB.pack(size, served))

    def drop_blobs(self, blob_ids):
        if not blob_ids:
            return
        with self.lock:
            with self.env.begin(write=True, db=self.db.blobs) as tx:
                for blob_id in blob_ids:
                    tx.delete(blob_id.encode("ascii", "backslashreplace"))
