"""`pulsys verify`: re-hash every blob of a cache directory while no server uses it, and
bring the index (cache/indexdb.py) back in line with what is on disk.

A blob's name is its content hash: sha256 of the bytes (LFS), or the git blob sha1,
i.e. sha1 of b"blob <size>\\0" + bytes (regular files): the names the Hub gives them as
X-Linked-Etag and ETag, and the digests fills verify before committing. "other/" blobs
are named after an ETag that is no content hash and cannot be checked.

The index is opened as a server opens it (cache/index_import.open_index): a cache of an
older pulsys (v1/meta/) is imported first, and an index that cannot be opened is moved
aside to v1/index.unusable-<time>/ and rebuilt from the blobs on disk (reported).

What is bad is moved, never deleted, to v1/quarantine/blobs/<algo>/<name> (with a
numeric suffix when the name is taken):
  - a blob whose bytes do not match its name, or whose name is not a hash, or that is
    stored under the wrong directory.
What the index says and the disk contradicts is changed in the index:
  - an entry whose blob was quarantined, whose blob file is missing, or whose size
    disagrees with its (verified) blob becomes metadata only: HEAD still answers, the
    next GET refetches and re-verifies the file;
  - an entry record that does not decode is removed (a client's next request fetches
    it again);
  - a `blobs` record (the quota accounts, cache/space.py) of a file that is gone or
    quarantined is dropped; a good blob file without one (a crash between the rename
    into blobs/ and the record) gets one, last served when the file was written; a
    record of the wrong size is corrected.
"""

import hashlib
import os
import re
import threading

from pulsys.cache.index_import import open_index
from pulsys.cache.indexdb import lkey

CHUNK = 1 << 20
BATCH = 2000             # entry records read per read transaction, republished per write
# verify judges no freshness, but it decodes and re-encodes records (republishing, and
# importing an old cache): any TTL gives back the stored time, except that a deadline
# that decodes to <= 0 becomes record.STALE, i.e. "fetched at boot". A TTL this long
# never gets there (ttl 0 would make an entry fetched before the boot fresh again).
TTL = 1e11
_NAME = {"sha256": re.compile(r"^[0-9a-f]{64}$"), "sha1": re.compile(r"^[0-9a-f]{40}$"),
         "other": re.compile(r"^[0-9a-f]{64}$")}


def content_hasher(algo, size):
    """The hash a blob named `<algo>/<hex>` must match, or None (unverifiable)."""
    if algo == "sha256":
        return hashlib.sha256()
    if algo == "sha1":
        return hashlib.sha1(b"blob %d\0" % size)
    return None


def check_blob(path, algo, name):
    """-> (reason or None, bytes hashed). Reason says why the blob is bad."""
    if algo not in _NAME or not _NAME[algo].match(name):
        return "name is not a %s content hash" % algo, 0
    if os.path.basename(os.path.dirname(path)) != name[:2]:
        return "stored under the wrong directory", 0
    size = os.path.getsize(path)
    h = content_hasher(algo, size)
    if h is None:
        return None, 0
    n = 0
    with open(path, "rb") as f:
        while True:
            chunk = f.read(CHUNK)
            if not chunk:
                break
            h.update(chunk)
            n += len(chunk)
    if n != size:
        return "changed while being read", n
    if h.hexdigest() != name:
        return "content does not match its name", n
    return None, n


def _walk_blobs(store):
    """(algo, path, name) of every file under blobs/<algo>/<aa>/, in a stable order."""
    for algo in sorted(os.listdir(store.blobs)):
        top = os.path.join(store.blobs, algo)
        if not os.path.isdir(top):
            continue
        for sub in sorted(os.listdir(top)):
            d = os.path.join(top, sub)
            if os.path.isdir(d):
                for name in sorted(os.listdir(d)):
                    yield algo, os.path.join(d, name), name


def _quarantine(store, path, *parts):
    dest = os.path.join(store.root, "quarantine", *parts)
    os.makedirs(os.path.dirname(dest), exist_ok=True)
    final, i = dest, 1
    while os.path.exists(final):
        final, i = "%s.%d" % (dest, i), i + 1
    os.replace(path, final)
    return os.path.relpath(final, os.path.dirname(store.root))


class _Notes:
    """A logger for open_index that keeps its lines for the report."""

    def __init__(self):
        self.lines = []

    def _add(self, level, event, **kw):
        self.lines.append(dict(kw, level=level, event=event))

    def info(self, event, **kw):
        self._add("info", event, **kw)

    def warning(self, event, **kw):
        self._add("warning", event, **kw)

    def error(self, event, **kw):
        self._add("error", event, **kw)


def _records(index):
    """(LMDB key, raw record) of every entry, BATCH per read transaction."""
    start = b""
    while True:
        batch = []
        with index.env.begin(db=index.db.entries) as tx:
            cur = tx.cursor()
            if cur.set_range(start):
                for kv in cur:
                    batch.append(kv)
                    if len(batch) >= BATCH:
                        break
        yield from batch
        if len(batch) < BATCH:
            return
        start = batch[-1][0] + b"\0"


_UNDECODABLE = (ValueError, EOFError, TypeError, IndexError, KeyError, AttributeError, OverflowError)


def _check_entries(index, good, bad_ids, rep):
    """Entries whose blob is not what they say become metadata only; records that do not
    decode are removed. -> entries made metadata only for another reason than quarantine."""
    refetch, undecodable, why = [], set(), rep["refetch_reasons"]
    for k, raw in _records(index):
        rep["index_entries"] += 1
        try:
            e = index._decode(raw)
            if lkey(e.key) != k:
                raise ValueError("filed under another key")
        except _UNDECODABLE as exc:
            undecodable.add(k)
            rep["bad_metadata"].append({"key": k.decode("utf-8", "backslashreplace"),
                                        "reason": "%s: %s" % (type(exc).__name__, exc)})
            continue
        if e.blob_path is None:
            continue                      # metadata only already
        if e.blob_id in bad_ids:
            why["blob quarantined"] += 1
        elif e.blob_id not in good:
            why["blob missing"] += 1
        elif good[e.blob_id][0] != e.size:
            why["size differs from its blob"] += 1
        else:
            continue
        refetch.append(e.with_blob(None))
        if len(refetch) >= BATCH:
            index.publish_many(refetch)
            refetch = []
    index.publish_many(refetch)
    rep["entries_to_refetch"] = sum(why.values())
    if undecodable:
        _remove_records(index, undecodable)
    return why["blob missing"] + why["size differs from its blob"]


def _remove_records(index, keys):
    """Delete entry records by LMDB key, and the byblob rows that name them."""
    db = index.db
    with index.lock:
        with index.env.begin(write=True) as tx:
            for k in keys:
                tx.delete(k, db=db.entries)
            stale = [row for row, _ in tx.cursor(db=db.byblob) if row.partition(b"\0")[2] in keys]
            for row in stale:
                tx.delete(row, db=db.byblob)
        db.bump()


def _check_blob_records(index, good, bad_ids, rep):
    """The quota accounts against the blobs that are there and good. -> records wrong for
    another reason than quarantine."""
    drop, put, seen, missing = [], [], set(), 0
    for blob_id, size, served in index.blob_records():
        seen.add(blob_id)
        if blob_id not in good:
            drop.append(blob_id)
            missing += blob_id not in bad_ids
        elif good[blob_id][0] != size:
            put.append((blob_id, good[blob_id][0], served))
            rep["blob_records_fixed"] += 1
    for blob_id, (size, mtime) in good.items():
        if blob_id not in seen:
            put.append((blob_id, size, mtime))
            rep["blob_records_added"] += 1
    index.drop_blobs(drop)
    index.put_blobs(put)
    rep["blob_records_dropped"] = len(drop)
    return missing + rep["blob_records_fixed"] + rep["blob_records_added"]


def _open(store, rep):
    notes = _Notes()
    index, stats = open_index(store, TTL, notes)
    for t in threading.enumerate():
        if t.name == "pulsys-old-meta":   # removing an imported meta/: let it finish
            t.join()
    aside = [n["moved_to"] for n in notes.lines if "moved_to" in n]
    rep["index"] = {"source": stats["from"], "skipped": stats.get("skipped", 0), "log": notes.lines,
                    "moved_aside": os.path.relpath(aside[0], rep["cache_dir"]) if aside else None}
    return index


def verify(store):
    """Check every blob of `store` (held exclusively by the caller) and reconcile its
    index with them. Returns a report dict; report["problems"] counts what was found
    wrong (a bad blob, a bad index record, an index that contradicted the disk or could
    not be opened), not what merely followed from quarantining a blob, nor quota records
    brought up to date with the files."""
    rep = {"cache_dir": os.path.dirname(store.root), "index": None, "blobs_checked": 0,
           "bytes_hashed": 0, "unverifiable": 0, "bad_blobs": [], "index_entries": 0,
           "bad_metadata": [], "entries_to_refetch": 0,
           "refetch_reasons": {"blob quarantined": 0, "blob missing": 0, "size differs from its blob": 0},
           "blob_records_added": 0, "blob_records_dropped": 0, "blob_records_fixed": 0,
           "partial_files": len(os.listdir(store.tmp))}
    index = _open(store, rep)
    try:
        good = {}                         # blob id -> (size, mtime) of the blobs that stay
        for algo, path, name in _walk_blobs(store):
            blob_id = algo + "/" + name
            try:
                why, n = check_blob(path, algo, name)
            except OSError as e:
                why, n = "unreadable: %s" % (e.strerror or e), 0
            rep["blobs_checked"] += 1
            rep["bytes_hashed"] += n
            if why is None:
                st = os.stat(path)
                good[blob_id] = (st.st_size, st.st_mtime)
                if content_hasher(algo, 0) is None:
                    rep["unverifiable"] += 1
                continue
            rep["bad_blobs"].append({"blob": blob_id, "reason": why,
                                     "moved_to": _quarantine(store, path, "blobs", algo, name)})
        bad_ids = {b["blob"] for b in rep["bad_blobs"]}
        repaired = _check_entries(index, good, bad_ids, rep)
        # quota records that lag the files are bookkeeping, not a problem: a kill between
        # a blob's rename into blobs/ and its record leaves one such file (cache/space.py)
        _check_blob_records(index, good, bad_ids, rep)
    finally:
        index.db.close()
    rep["problems"] = (len(rep["bad_blobs"]) + len(rep["bad_metadata"]) + repaired
                       + (rep["index"]["moved_aside"] is not None))
    return rep


_SOURCES = {"index": "opened", "import-snapshot": "imported from v1/index-snapshot.json of an older pulsys",
            "import-meta": "imported from v1/meta/ of an older pulsys",
            "import-nothing": "created (there was none)"}


def render(rep):
    """The human summary of a report: a few lines."""
    ix = rep["index"]
    if ix["moved_aside"]:
        how = ("not usable: moved to %s and rebuilt from the blobs on disk (metadata is fetched "
               "again as clients ask)" % ix["moved_aside"])
    else:
        how = _SOURCES.get(ix["source"], ix["source"])
        if ix["skipped"]:
            how += " (%d unreadable metadata files skipped)" % ix["skipped"]
    lines = ["pulsys verify: %s" % rep["cache_dir"], "index: %s" % how,
             "blobs checked: %d (%d bytes hashed, %d without a content hash to check)"
             % (rep["blobs_checked"], rep["bytes_hashed"], rep["unverifiable"]),
             "index entries checked: %d" % rep["index_entries"]]
    for b in rep["bad_blobs"]:
        lines.append("bad blob %s: %s; moved to %s" % (b["blob"], b["reason"], b["moved_to"]))
    for m in rep["bad_metadata"]:
        lines.append("bad index entry %s: %s; removed" % (m["key"], m["reason"]))
    if rep["entries_to_refetch"]:
        lines.append("entries now metadata only: %d (%s; HEAD still answers, the next GET refetches)"
                     % (rep["entries_to_refetch"], ", ".join(
                         "%s: %d" % kv for kv in rep["refetch_reasons"].items() if kv[1])))
    acc = [(rep["blob_records_added"], "added for blob files that had none"),
           (rep["blob_records_dropped"], "dropped for blob files gone or quarantined"),
           (rep["blob_records_fixed"], "of the wrong size corrected")]
    if any(n for n, _ in acc):
        lines.append("blob records (quota accounts): %s" % ", ".join("%d %s" % a for a in acc if a[0]))
    if rep["partial_files"]:
        lines.append("partial fills left in v1/tmp: %d (removed when a server starts)" % rep["partial_files"])
    lines.append("result: %s" % ("ok" if not rep["problems"] else
                                 "%d problem(s) found; bad blobs quarantined, the index repaired"
                                 % rep["problems"]))
    return "\n".join(lines)
