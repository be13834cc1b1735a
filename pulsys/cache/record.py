"""Index records: an Entry or a revision mapping as the bytes LMDB stores. Pure.

A record is a marshal (version 4) tuple of builtins only (str, bytes, int, float,
tuple), so decoding runs no code, whoever wrote the file. A FILE record carries the
head lines its responses share (http1.heads.file_common, rendered once by the
writer): decoding one then costs ~2 us instead of ~10 us with rendering (measured in
tests/bench/test_bench_index.py). Deadlines are stored as wall-clock times (0 = never)
because the file outlives the boot, minus the revision TTL in force (so, in effect, as
the time the answer was fetched): a reader adds its own TTL back, and a restart with
another --revision-ttl judges every cached answer by the new one. Readers turn the
result into a monotonic deadline.

    entry: (1, kind, key, size, etag, commit, lfs, blob_id, on_disk, content_type,
            content_disposition, status, headers, body, fetched, flags, common)
    rev:   (2, commit, fetched, fetched_at)        fetched = deadline (wall) - TTL
    blob:  size, last served wall time (struct BLOB)
"""

import marshal
import struct

from pulsys.http1.heads import file_common
from pulsys.model.entry import FILE, Entry

VERSION = 4
BLOB = struct.Struct("<Qd")     # blobs database: size, last served (wall clock)
F_RESTART_RESUMES = 1
F_HEAD_ONLY = 2
STALE = 1e-9        # a deadline already passed: kept for --offline and stale answers


def encode_entry(entry, offset, ttl=0.0):
    """Bytes for `entry`; offset = wall clock minus monotonic clock now; ttl: the
    revision TTL that made entry.expires."""
    flags = (F_RESTART_RESUMES if entry.restart_resumes else 0) | (F_HEAD_ONLY if entry.head_only else 0)
    common = file_common(entry) if entry.kind == FILE else b""
    exp = entry.expires
    return marshal.dumps((1, entry.kind, entry.key, entry.size, entry.etag, entry.commit,
                          bool(entry.lfs), entry.blob_id, entry.blob_path is not None,
                          entry.content_type, entry.content_disposition, entry.status,
                          tuple((str(n), str(v)) for n, v in entry.headers), bytes(entry.body),
                          exp + offset - ttl if exp else 0.0, flags, common), VERSION)


def decode_entry(raw, blob_path, offset, ttl=0.0):
    """(Entry, common head bytes) from a record. blob_path: blob id -> path; offset and
    ttl as for encode_entry (the reader's own)."""
    (_, kind, key, size, etag, commit, lfs, blob_id, on_disk, ctype, cdisp, status, headers,
     body, exp, flags, common) = marshal.loads(raw)
    if exp:
        exp += ttl - offset
        if exp <= 0:
            exp = STALE
    e = Entry(kind, key, size, etag, commit, lfs, blob_id, blob_path(blob_id) if on_disk else None,
              ctype, cdisp, status, headers, body, exp)
    if flags:
        e.restart_resumes = bool(flags & F_RESTART_RESUMES)
        e.head_only = bool(flags & F_HEAD_ONLY)
    return e, common


def peek_entry(raw):
    """(kind, status, blob_id, on_disk, size) without building an Entry (scans)."""
    v = marshal.loads(raw)
    return v[1], v[11], v[7], v[8], v[3]


def encode_rev(commit, expires, fetched_at, offset, ttl=0.0):
    return marshal.dumps((2, commit, expires + offset - ttl if expires else 0.0, fetched_at), VERSION)


def decode_rev(raw, offset, ttl=0.0):
    """-> (commit, monotonic deadline, fetched_at wall time)."""
    _, commit, exp, fetched_at = marshal.loads(raw)
    if exp:
        exp += ttl - offset
        if exp <= 0:
            exp = STALE
    return commit, exp, fetched_at
