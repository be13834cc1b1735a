"""Opening the index of a cache directory, and bringing older caches into it.

pulsys before 0.13 kept one JSON metadata file per entry under v1/meta/ (and, after a
clean shutdown, all of them in v1/index-snapshot.json) and walked blobs/ at every start.
The first start of this version with such a cache imports it into LMDB in one write
transaction, with one log line, then removes the old files in the background:

  - entries and revision mappings from the snapshot when it still describes meta/,
    else from every metadata file (torn or foreign files are skipped and counted);
  - an entry keeps its blob when the walk of blobs/ found it with the entry's size,
    else it becomes metadata only (HEAD answers, GET refetches);
  - every blob found becomes a `blobs` record, last served when the snapshot says, else
    when the file was last written.

An index that exists but cannot be opened (a damaged file; one written by a newer
pulsys) is moved aside to v1/index.unusable-<time>/ and rebuilt from what is on disk:
blobs are found again, metadata is fetched again as clients ask for it.
"""

import json
import os
import shutil
import threading
import time

from pulsys.cache.index import Index
from pulsys.cache.indexdb import SCHEMA, IndexDB, IndexUnusable
from pulsys.model.entry import Entry
from pulsys.model.key import rev_key
from pulsys.model.target import is_commit

LOG_EACH = 20
SNAPSHOT = "index-snapshot.json"


def open_index(store, ttl, log):
    """The writer's Index for `store` (its blobs and suspects already known), importing
    or rebuilding as needed. -> (Index, stats dict for the start log)."""
    t0 = time.monotonic()
    try:
        db = IndexDB(store.root, writer=True)
        schema = db.schema()
        if schema not in (None, SCHEMA):
            db.close()
            raise IndexUnusable("written by another pulsys version (schema %r)" % schema)
    except IndexUnusable as e:
        aside = os.path.join(store.root, "index.unusable-%d" % int(time.time()))
        os.replace(os.path.join(store.root, "index"), aside)
        log.warning("index not usable; moved aside and rebuilt from the blobs on disk",
                    reason=str(e), moved_to=aside)
        db = IndexDB(store.root, writer=True)
        schema = None
    index = Index(db, store.blob_path, ttl)
    stats = {"from": "index"}
    if schema is None:
        stats = _import(store, index, ttl, log)
        with db.env.begin(write=True, db=db.meta) as tx:
            tx.put(b"schema", SCHEMA)
    _remove_old_files(store, log)
    n_entries, n_revs = db.count()
    stats.update({"entries": n_entries, "revisions": n_revs,
                  "seconds": round(time.monotonic() - t0, 3)})
    return index, stats


def _import(store, index, ttl, log):
    now_mono, now_wall = time.monotonic(), time.time()
    scan = store.scan_blobs()
    entries, revs, skipped, served, source = [], [], 0, {}, "nothing"
    doc = _snapshot(store, log)
    if doc is not None:
        try:
            entries, revs, served = _from_snapshot(doc, store, scan, ttl, now_mono, now_wall)
            source = "snapshot"
        except (ValueError, KeyError, TypeError, IndexError) as e:
            log.warning("index snapshot unusable; reading metadata files", error=repr(e))
            entries, revs = [], []
    if source == "nothing" and os.path.isdir(store.meta):
        entries, revs, skipped = _from_meta(store, scan, ttl, now_mono, now_wall, log)
        source = "meta" if entries or revs or skipped else "nothing"
    for e in entries:
        store.flag_suspect(e)
    index.publish_many(entries)
    for key, commit, expires, fetched in revs:
        index.set_rev_key(key, commit, expires, fetched)
    blobs = []
    for b, (size, mtime) in scan.items():
        t = served.get(b)
        blobs.append((b, size, t if isinstance(t, (int, float)) else mtime))
    index.put_blobs(blobs)
    if source != "nothing" or scan:
        log.info("index built from the files of an older pulsys" if source != "nothing" else
                 "index rebuilt from the blobs on disk; metadata is fetched again as clients ask",
                 source=source, entries=len(entries), revisions=len(revs), skipped=skipped,
                 blobs=len(scan), seconds=round(time.monotonic() - now_mono, 3))
    return {"from": "import-" + source, "skipped": skipped, "blobs_found": len(scan)}


def _remove_old_files(store, log):
    """meta/ and the snapshot are not read again once imported."""
    try:
        os.unlink(os.path.join(store.root, SNAPSHOT))
    except FileNotFoundError:
        pass
    if not os.path.isdir(store.meta):
        return
    gone = store.meta + ".imported-%d" % os.getpid()
    try:
        os.replace(store.meta, gone)
    except OSError as e:
        log.warning("old metadata files not removed", error=str(e))
        return
    threading.Thread(target=shutil.rmtree, args=(gone, True), name="pulsys-old-meta",
                     daemon=True).start()


def _blob_for(scan, blob_id, size, store):
    found = scan.get(blob_id) if blob_id else None
    if found is None or found[0] != size:
        return None
    return store.blob_path(blob_id)


def _expires(immutable, ttl, age, now_mono):
    if immutable:
        return 0.0
    exp = now_mono + ttl - age
    return exp if exp > 0 else 1e-9


def _snapshot(store, log):
    try:
        with open(os.path.join(store.root, SNAPSHOT), "rb") as f:
            doc = json.loads(f.read())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as e:
        log.warning("index snapshot not used; reading metadata files", reason=type(e).__name__)
        return None
    if not isinstance(doc, dict) or doc.get("format") != "pulsys-index-snapshot/1" \
            or doc.get("meta") != _meta_signature(store.meta):
        log.warning("index snapshot not used; reading metadata files",
                    reason="unknown format or metadata changed since it was written")
        return None
    return doc


def _meta_signature(meta_dir):
    try:
        sig = {".": os.stat(meta_dir).st_mtime_ns}
        with os.scandir(meta_dir) as it:
            for d in it:
                if d.is_dir(follow_symlinks=False):
                    sig[d.name] = d.stat(follow_symlinks=False).st_mtime_ns
    except FileNotFoundError:
        return None
    return sig


def _from_snapshot(doc, store, scan, ttl, now_mono, now_wall):
    entries = []
    for r in doc["entries"]:
        kind, key, size, etag, commit, lfs, blob_id, ctype, cdisp, status, headers, body, \
            fetched, immutable = r[:14]
        e = Entry(kind, key, size, etag, commit, lfs, blob_id, _blob_for(scan, blob_id, size, store),
                  ctype, cdisp, status, tuple(map(tuple, headers)) if headers else (),
                  body.encode("latin-1"), _expires(immutable, ttl, now_wall - fetched, now_mono))
        e.head_only = len(r) > 14 and bool(r[14])
        entries.append(e)
    revs = []
    for key, commit, fetched in doc["revs"]:
        if not is_commit(commit):
            raise ValueError("bad commit in snapshot")
        revs.append((key, commit, _expires(False, ttl, now_wall - fetched, now_mono), fetched))
    served = doc.get("served")
    return entries, revs, served if isinstance(served, dict) else {}


def _from_meta(store, scan, ttl, now_mono, now_wall, log):
    entries, revs, skipped = [], [], 0
    with os.scandir(store.meta) as top:
        subs = [d.path for d in top if d.is_dir(follow_symlinks=False)]
    for d in subs:
        with os.scandir(d) as it:
            names = [f.name for f in it if f.name.endswith(".json")]
        for name in names:
            path = d + os.sep + name
            try:
                with open(path, "rb") as f:
                    doc = json.loads(f.read())
                age = now_wall - float(doc["fetched_at"])
                if doc["type"] == "rev":
                    commit = doc["commit"]
                    if not is_commit(commit):
                        raise ValueError("bad commit")
                    revs.append((rev_key(doc["rtype"], doc["repo"], doc["rev"]), commit,
                                 _expires(False, ttl, age, now_mono), doc["fetched_at"]))
                    continue
                ed = doc["entry"]
                entries.append(Entry.from_json(ed, _blob_for(scan, ed.get("blob_id"), ed["size"], store),
                                               _expires(doc["immutable"], ttl, age, now_mono)))
            except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
                if skipped < LOG_EACH:
                    log.warning("skipped at import", path=path, reason="%s: %s" % (type(exc).__name__, exc))
                skipped += 1
    return entries, revs, skipped
