"""The index snapshot: every entry and revision mapping in one JSON file, written at a
clean shutdown so the next start need not read one metadata file per entry.

    <cache-dir>/v1/index-snapshot.json

It is used only while it still describes meta/: it records the mtime of meta/ and of
every meta/<aa>/ directory, and every change pulsys makes there (a new, replaced or
removed file; writes go through a temp file and a rename) changes its directory's mtime.
Blobs are not trusted from it either: each entry is checked against the walk of
blobs/ that every start does anyway. The parent removes the snapshot once it has
started, so a server that crashes leaves none and the next start reads meta/.

Directory mtimes advance in ticks of a few milliseconds (ext4 takes them from the coarse
kernel clock), so a metadata write within one tick after the snapshot can go unnoticed.
Only fill threads still finishing during shutdown could do that; the next start then
lacks that one write, as if the process had stopped a moment earlier: entries are keyed
by commit or expire by --revision-ttl, and blobs are checked on disk anyway.

JSON rather than pickle: loading it must not be able to run code, whoever wrote the file.
"""

import json
import os

from pulsys.cache.index import RevRecord

FORMAT = "pulsys-index-snapshot/1"
NAME = "index-snapshot.json"


def meta_signature(meta_dir):
    """{name: mtime_ns} of meta/ ('.') and each directory in it."""
    sig = {".": os.stat(meta_dir).st_mtime_ns}
    with os.scandir(meta_dir) as it:
        for d in it:
            if d.is_dir(follow_symlinks=False):
                sig[d.name] = d.stat(follow_symlinks=False).st_mtime_ns
    return sig


def path(store):
    return os.path.join(store.root, NAME)


def write(store, index, served_wall, ttl, now_mono, now_wall):
    """Write the snapshot of `index` atomically. served_wall: {blob id: wall time}."""
    rows = []
    for e in list(index.entries.values()):
        if e.expires == 0:
            fetched, immutable = 0.0, True
        elif e.expires <= 1e-6:                      # loaded stale: keep it stale
            fetched, immutable = 0.0, False
        else:
            fetched, immutable = now_wall - (now_mono - (e.expires - ttl)), False
        rows.append([e.kind, e.key, e.size, e.etag, e.commit, e.lfs, e.blob_id, e.content_type,
                     e.content_disposition, e.status, [list(h) for h in e.headers],
                     e.body.decode("latin-1"), fetched, immutable, e.head_only])
    revs = [[k, r.commit, r.fetched_at] for k, r in list(index.revs.items())]
    doc = {"format": FORMAT, "written": now_wall, "meta": meta_signature(store.meta),
           "entries": rows, "revs": revs, "served": served_wall}
    data = json.dumps(doc, separators=(",", ":")).encode()
    dest = path(store)
    tmp = dest + ".tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, dest)
    return len(rows)


def read(store):
    """-> (doc, None) when a snapshot exists and still describes meta/, else (None, why);
    why is None when there is simply no snapshot."""
    try:
        with open(path(store), "rb") as f:
            doc = json.loads(f.read())
    except FileNotFoundError:
        return None, None
    except (OSError, ValueError) as e:
        return None, "unreadable: %s" % (e.__class__.__name__,)
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        return None, "unknown format"
    if doc.get("meta") != meta_signature(store.meta):
        return None, "metadata changed since it was written"
    return doc, None


def remove(store):
    try:
        os.unlink(path(store))
    except FileNotFoundError:
        pass


def set_rev(index, key, commit, expires, fetched_at):
    """A revision mapping by its key (the snapshot stores keys, not their parts)."""
    index.revs[key] = RevRecord(commit, expires, fetched_at)


def save(store, index, recency, ttl, log, clock, wall):
    """Write the snapshot at shutdown; recency: {blob id: monotonic last served}. Logs
    the outcome; a failure only costs the next start its speed."""
    t0 = clock()
    now_wall = wall()
    try:
        n = write(store, index, {b: now_wall - (t0 - t) for b, t in recency.items()}, ttl, t0, now_wall)
    except OSError as e:
        log.warning("index snapshot not written; the next start reads every metadata file",
                    error=str(e))
        return
    log.info("index snapshot written", entries=n, seconds=round(clock() - t0, 3))
