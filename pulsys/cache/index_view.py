"""IndexView: one reactor's read side of the index, with a memo of hot answers.

Every process reads the same LMDB file (cache/indexdb.py); nothing is loaded at start
and nothing is broadcast. A reactor remembers what it decoded, per key, with the
index generation (`gen`, an mmap'd word the writer bumps after each commit) it read it
at:

  - gen unchanged since: the remembered value answers (one dict get, one word read);
  - gen changed: one LMDB get in a fresh read transaction; when the record's bytes are
    the ones remembered (compared by a 128-bit BLAKE2b digest, 0.85 us for a 700-byte
    record here, so the memo does not keep a copy of every record: 16 bytes, not ~700),
    the remembered value answers again and is stamped with the new gen, so one change
    elsewhere costs each hot key one LMDB read, not a decode;
  - otherwise the record is decoded (~2 us) and its heads assembled from the head lines
    the record carries.

A miss is remembered too (so a burst of requests for a cold file asks LMDB once per
generation). A hit is also kept on the Target it answered (`seen`), which the reactor
keeps per exact request head: the next lookup of that Target is then one attribute read
and one word read. The read transaction is reused while gen is unchanged and dropped by
refresh() (the reactor's sweep, once a second) when it is behind, so an idle reactor
never pins an old snapshot for long. A small file (<= small_max) gets its bytes read
when it is looked up a second time: a remembered hit on one is then a single send of
head + body, and a key looked up once (random hits over many files) never pays the
read (measured: ~20 us a decode on this VM, open + pread + close).

The memo is bounded: at `memo_max` keys or `memo_bytes` of small bodies it starts over.
One thread (the reactor's) uses a view.
"""

import os
from hashlib import blake2b as _digest

from pulsys.cache import record as R
from pulsys.cache.index import RevRecord, points_back, resolve
from pulsys.cache.indexdb import lkey, offset
from pulsys.http1.heads import prepare
from pulsys.model.entry import FILE
from pulsys.model.key import rev_key, target_key

# A body this small is sent from memory: on io_uring one send SQE with its head, fused with
# the next recv. At 64 KiB, 16 connections, that cost 30-35% less CPU per hit than head +
# sendfile from the blob (46 vs 73 and 36 vs 51 us/request in two rounds of one A/B run,
# results/<machine>/profile_floors_65536_c16_*; docs/benchmarks.md, issue 18).
SMALL_BODY_MAX = 64 * 1024
MEMO_MAX = 2048          # as many keys as the reactor remembers request heads (reactor/step.py)
MEMO_BYTES = 32 << 20    # per reactor: 512 bodies of the largest small size before it starts over


def read_small(path, size):
    """The whole blob when it has `size` bytes, else None."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        data = os.pread(fd, size + 1, 0)
    except OSError:
        return None
    finally:
        os.close(fd)
    return data if len(data) == size else None


class IndexView:
    def __init__(self, db, blob_path, ttl=0.0, small_max=SMALL_BODY_MAX, memo_max=MEMO_MAX,
                 memo_bytes=MEMO_BYTES):
        self.db = db
        self.ttl = ttl          # --revision-ttl, as the writer's (cache/record.py)
        self.env = db.env
        self.genv = db.genv
        self.blob_path = blob_path
        self.small_max = small_max
        self.memo_max = memo_max
        self.memo_bytes = memo_bytes
        # key -> [gen, BLAKE2b-128 of the record bytes or None, Entry / RevRecord / None,
        # head lines of a small file whose body is not read yet (else None)]
        self.memo = {}
        self.body_bytes = 0
        self.no_body = set()    # blob paths whose small body could not be read
        self._tx = None
        self._txgen = -1
        self.offset = offset()
        self.reads = 0          # LMDB gets (memo misses and revalidations), for tests and stats
        self.decodes = 0

    @property
    def gen(self):
        return self.genv[0]

    def refresh(self):
        """Drop a read snapshot older than the index; re-read the clock offset."""
        if self._tx is not None and self._txgen != self.genv[0]:
            self._tx.abort()
            self._tx = None
        self.offset = offset()

    def close(self):
        if self._tx is not None:
            self._tx.abort()
            self._tx = None

    def _raw(self, dbi, key, g):
        tx = self._tx
        if tx is None or self._txgen != g:
            if tx is not None:
                tx.abort()
            tx = self._tx = self.env.begin()
            self._txgen = g
        self.reads += 1
        return tx.get(lkey(key), db=dbi)

    def _remember(self, key, g, digest, value, pending):
        memo = self.memo
        if len(memo) >= self.memo_max or self.body_bytes > self.memo_bytes:
            memo.clear()
            self.no_body.clear()
            self.body_bytes = 0
        memo[key] = [g, digest, value, pending]
        return value

    def entry(self, key):
        m = self.memo.get(key)
        if m is not None and m[0] == self.genv[0]:
            if m[3] is not None:
                self._read_body(m)      # a small file asked for again: keep its bytes
            return m[2]
        return self._reread(key, m, self.db.entries, self._decode_entry)

    def _read_body(self, m):
        """Read the body of a small file the memo holds without it (one pread, on its
        second lookup: keys looked up once, as in a scan over many files, never pay it)."""
        e, common = m[2], m[3]
        m[3] = None
        data = read_small(e.blob_path, e.size)
        if data is None:
            self.no_body.add(e.blob_path)
            return
        e.body_mem = data               # this view's own copy of the entry: no one else sees it
        self.body_bytes += e.size
        prepare(e, common)

    def small_pending(self, e):
        """A small file whose body this view has not read yet (nor failed to)."""
        return (e.kind == FILE and e.body_mem is None and e.blob_path is not None
                and e.size <= self.small_max and e.blob_path not in self.no_body)

    def rev_by_key(self, rk):
        m = self.memo.get(rk)
        if m is not None and m[0] == self.genv[0]:
            return m[2]
        return self._reread(rk, m, self.db.revs, self._decode_rev)

    def _reread(self, key, m, dbi, decode):
        """The memo is behind the index (or never saw `key`): read the record again; the
        remembered value stands when the record is the same bytes."""
        g = self.genv[0]
        raw = self._raw(dbi, key, g)
        digest = None if raw is None else _digest(raw, digest_size=16).digest()
        if m is not None and m[1] == digest:
            m[0] = g
            return m[2]
        if raw is None:
            return self._remember(key, g, None, None, None)
        value, pending = decode(raw)
        return self._remember(key, g, digest, value, pending)

    def _decode_entry(self, raw):
        """-> (Entry with its heads, head lines when its small body is still to read)."""
        self.decodes += 1
        e, common = R.decode_entry(raw, self.blob_path, self.offset, self.ttl)
        if e.kind != FILE:
            return e, None
        prepare(e, common)
        return e, common if self.small_pending(e) else None

    def _decode_rev(self, raw):
        return RevRecord(*R.decode_rev(raw, self.offset, self.ttl)), None

    def lookup(self, t, now):
        s = t.seen
        if s is not None and s[0] == self.genv[0] and now < s[2]:
            return s[1]
        return self.lookup_until(t, now)[0]

    def lookup_until(self, t, now, body=False):
        """The lookup rule (cache/index.py resolve) through the memo; a hit is also kept
        on the Target (reactors keep their Targets per exact head), so the next lookup of
        it, while gen is unchanged and the answer fresh, is one attribute and one word.
        body: read a small file's body now if it is still to be read (the io_uring
        reactor remembers answers only for heads it has seen before)."""
        g = self.genv[0]
        s = t.seen
        if s is not None and s[0] == g and now < s[2]:
            return s[1], s[2]
        e, until = resolve(t, now, self.entry, self.rev_by_key)
        if body and e is not None and self.small_pending(e):
            m = self.memo.get(e.key)
            if m is not None and m[2] is e and m[3] is not None:
                self._read_body(m)
        # not kept while a small body is still to be read: the next lookup reads it
        t.seen = (g, e, until) if e is not None and not self.small_pending(e) else None
        return e, until

    def lookup_stale(self, t):
        e = self.entry(target_key(t))
        if e is not None and not points_back(t, e):
            return e
        r = self.rev_by_key(rev_key(t.rtype, t.repo, t.rev))
        return self.entry(target_key(t, r.commit)) if r is not None else None
