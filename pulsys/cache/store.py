"""On-disk layout and atomic writes. Called from fill threads and startup, never from
a reactor thread (it fsyncs).

    <cache-dir>/v1/blobs/sha256/<aa>/<hex>   LFS bodies, named by their sha256
    <cache-dir>/v1/blobs/sha1/<aa>/<hex>     regular files, named by their git blob sha1
    <cache-dir>/v1/tmp/<algo>-<hex>.<random>.part   fills in progress (removed at startup)
    <cache-dir>/v1/meta/<aa>/<digest>.json   one Entry or revision mapping per file
    <cache-dir>/v1/index-snapshot.json       all of meta/ in one file (cache/snapshot.py)
    <cache-dir>/v1/suspect/<algo>-<hex>      blobs that once streamed unverified bytes (ADR 0012)
    <cache-dir>/v1/lock                      flock: servers shared, `pulsys verify` exclusive

A blob is written under tmp/, fsynced, verified by the caller, then renamed into
blobs/ and the directory fsynced: a path under blobs/ always holds complete, verified
bytes. Blobs are shared by every repo and revision that points at the same content.
"""

import fcntl
import hashlib
import json
import os
import secrets
import threading
import time

from pulsys.cache import snapshot
from pulsys.log import get_logger
from pulsys.model.entry import Entry
from pulsys.model.target import is_commit

ALGOS = ("sha256", "sha1", "other")
LOG_EACH = 20      # skipped files logged one by one at load; the rest only counted


def _digest(key):
    return hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()[:40]


def _file_name(blob_id):
    """"sha256/<hex>" -> "sha256-<hex>": a blob id as one file name (suspect/, tmp/)."""
    return blob_id.replace("/", "-", 1)


def _blob_of(name):
    return name.replace("-", "/", 1)


def _fsync_dir(path):
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


SMALL_BODY_MAX = 16 * 1024          # files up to this size are also kept in memory
SMALL_BODY_BUDGET = 64 * 1024 * 1024  # ... up to this many bytes in all


class Store:
    def __init__(self, root, small_max=SMALL_BODY_MAX, small_budget=SMALL_BODY_BUDGET):
        self.root = os.path.join(root, "v1")
        self.blobs = os.path.join(self.root, "blobs")
        self.tmp = os.path.join(self.root, "tmp")
        self.meta = os.path.join(self.root, "meta")
        self.suspect_dir = os.path.join(self.root, "suspect")
        for d in (self.blobs, self.tmp, self.meta, self.suspect_dir):
            os.makedirs(d, exist_ok=True)
        # blob ids whose fill failed verification after bytes were readable: entries of
        # them answer open-ended resumes with the whole body (ADR 0012). Replaced whole.
        self.suspects = frozenset(_blob_of(n) for n in os.listdir(self.suspect_dir)
                                  if not n.startswith("."))
        self.small_max = small_max
        self.small_left = small_budget
        self._small = {}
        self._small_lock = threading.Lock()
        self.on_commit = None         # callable(blob_id, size) after a blob lands in blobs/
        self.scan = {}                # blob id -> (size, mtime) found by the last load
        self.loaded_from = None       # "snapshot" | "meta", set by load
        self.snapshot_served = {}     # blob id -> wall time last served, from the snapshot
        self._lock_fd = -1
        self.log = get_logger("store")

    def lock(self, exclusive=False):
        """flock v1/lock: a server holds it shared, `pulsys verify` exclusive. Raises
        BlockingIOError when the other kind is held."""
        fd = os.open(os.path.join(self.root, "lock"), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, (fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH) | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            raise
        self._lock_fd = fd

    def unlock(self):
        if self._lock_fd >= 0:
            os.close(self._lock_fd)      # closing the descriptor drops the flock
            self._lock_fd = -1

    def attach_small_body(self, entry):
        """Give a FILE entry with a committed blob its bytes when it is small and the
        in-memory budget allows; bytes are shared by every entry of the same blob.
        Reads the file: call from pool threads or startup only, never a reactor."""
        if entry.blob_path is None or entry.body_mem is not None or entry.size > self.small_max:
            return entry
        with self._small_lock:
            data = self._small.get(entry.blob_id)
            if data is None:
                if self.small_left < entry.size:
                    return entry
                try:
                    with open(entry.blob_path, "rb") as f:
                        data = f.read(entry.size + 1)
                except OSError:
                    return entry
                if len(data) != entry.size:
                    return entry
                self.small_left -= entry.size
                self._small[entry.blob_id] = data
        entry.body_mem = data
        entry.heads = None   # re-rendered with the body by Index.publish
        return entry

    # blobs -------------------------------------------------------------

    def blob_path(self, blob_id):
        algo, _, hexd = blob_id.partition("/")
        return "%s%s%s%s%s%s%s" % (self.blobs, os.sep, algo, os.sep, hexd[:2], os.sep, hexd)

    def has_blob(self, blob_id, size=None):
        """The blob is in blobs/ (with `size` bytes, when given: a file of another size
        there is a leftover that a fill must replace, never a hit)."""
        try:
            st = os.stat(self.blob_path(blob_id))
        except OSError:
            return False
        return size is None or st.st_size == size

    def add_suspect(self, blob_id):
        """Remember for good that `blob_id` streamed bytes that failed verification."""
        if blob_id in self.suspects:
            return
        self.suspects = self.suspects | {blob_id}
        path = os.path.join(self.suspect_dir, _file_name(blob_id))
        try:
            os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o644))
            _fsync_dir(self.suspect_dir)
        except OSError as e:
            self.log.warning("suspect blob not persisted", blob=blob_id, error=str(e))

    def flag_suspect(self, entry):
        """Set restart_resumes on an entry of a suspect blob (a flag only ever set, so also
        safe on an entry the index already holds). -> entry"""
        if entry.blob_id and entry.blob_id in self.suspects:
            entry.restart_resumes = True
        return entry

    def new_part_path(self, blob_id=None):
        """tmp/<algo>-<hex>.<random>.part: named after its blob, so that the part file a
        crash left behind tells the next start which blob streamed unverified bytes."""
        name = secrets.token_hex(12) + ".part"
        if blob_id:
            name = _file_name(blob_id) + "." + name
        return os.path.join(self.tmp, name)

    def commit_blob(self, part_path, blob_id):
        """fsync the part file, rename it to its blob path, fsync the directory."""
        fd = os.open(part_path, os.O_RDONLY)
        try:
            os.fsync(fd)
            size = os.fstat(fd).st_size
        finally:
            os.close(fd)
        dest = self.blob_path(blob_id)
        os.makedirs(os.path.dirname(dest), exist_ok=True)
        os.replace(part_path, dest)
        _fsync_dir(os.path.dirname(dest))
        if self.on_commit is not None:
            self.on_commit(blob_id, size)
        return dest

    def remove_blob(self, blob_id, size):
        """Unlink an evicted blob and drop its in-memory copy. Open descriptors keep
        reading the old inode until they are closed."""
        try:
            os.unlink(self.blob_path(blob_id))
        except FileNotFoundError:
            pass
        with self._small_lock:
            if self._small.pop(blob_id, None) is not None:
                self.small_left += size

    def scan_blobs(self):
        """-> {blob id: (size, mtime)} of every file under blobs/ (one stat each)."""
        out = {}
        for algo in ALGOS:
            top = os.path.join(self.blobs, algo)
            try:
                subs = [d.path for d in os.scandir(top) if d.is_dir(follow_symlinks=False)]
            except FileNotFoundError:
                continue
            prefix = algo + "/"
            for sub in subs:
                aa = os.path.basename(sub)
                with os.scandir(sub) as it:
                    for f in it:
                        if not f.name.startswith(aa):
                            continue            # not where blob_path() looks for it
                        try:
                            st = f.stat(follow_symlinks=False)
                        except FileNotFoundError:
                            continue
                        out[prefix + f.name] = (st.st_size, st.st_mtime)
        return out

    def discard(self, part_path):
        try:
            os.unlink(part_path)
        except FileNotFoundError:
            pass

    def clean_tmp(self):
        """Remove what fills left under tmp/ (at start, before load). A part file with
        bytes in it belonged to a fill a crash interrupted: readers may have received
        some of its bytes unverified, so its blob becomes suspect (ADR 0012)."""
        n = 0
        for name in os.listdir(self.tmp):
            path = os.path.join(self.tmp, name)
            blob_id = _blob_of(name.split(".", 1)[0]) if name.endswith(".part") else ""
            if "/" in blob_id:
                try:
                    streamed = os.path.getsize(path) > 0 and not os.path.samefile(
                        path, self.blob_path(blob_id))
                except FileNotFoundError:
                    streamed = True       # no such blob: the part file was not a link to it
                except OSError:
                    streamed = False
                if streamed:
                    self.add_suspect(blob_id)
            self.discard(path)
            n += 1
        return n

    # metadata ----------------------------------------------------------

    def _meta_path(self, key):
        d = _digest(key)
        return os.path.join(self.meta, d[:2], d + ".json")

    def _write_json(self, key, doc):
        path = self._meta_path(key)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        tmp = "%s.%s.tmp" % (path, secrets.token_hex(4))
        data = json.dumps(doc, separators=(",", ":")).encode()
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            os.write(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)

    def remove_meta(self, key):
        """Delete the metadata file of `key` (an entry or a revision mapping); a purge."""
        try:
            os.unlink(self._meta_path(key))
        except FileNotFoundError:
            pass

    def save_entry(self, entry, fetched_at, immutable):
        doc = {"type": "entry", "fetched_at": fetched_at, "immutable": immutable,
               "entry": entry.to_json()}
        self._write_json(entry.key, doc)

    def save_rev(self, key, rtype, repo, rev, commit, fetched_at):
        self._write_json(key, {"type": "rev", "key": key, "rtype": rtype, "repo": repo,
                               "rev": rev, "commit": commit, "fetched_at": fetched_at})

    def load(self, index, ttl, now_mono, now_wall=None):
        """Rebuild `index` from disk: from the index snapshot when it still describes
        meta/, else from every file in meta/. Blobs are checked against a walk of blobs/
        (kept in self.scan): an entry whose blob is missing or has the wrong size loads as
        metadata only (HEAD answers, GET refetches). Returns (entries, revs, skipped)."""
        now_wall = time.time() if now_wall is None else now_wall
        self.scan = self.scan_blobs()
        doc, why = snapshot.read(self)
        if why is not None:
            self._warn("index snapshot not used; reading metadata files", reason=why)
        if doc is not None:
            try:
                return self._load_snapshot(doc, index, ttl, now_mono, now_wall)
            except (ValueError, KeyError, TypeError, IndexError) as e:
                self._warn("index snapshot unusable; reading metadata files", error=repr(e))
                index.entries.clear()
                index.revs.clear()
        self.loaded_from, self.snapshot_served = "meta", {}
        return self._load_meta(index, ttl, now_mono, now_wall)

    def _warn(self, event, **kw):
        self.log.warning(event, **kw)

    def _skip(self, n, path, why):
        if n < LOG_EACH:
            self._warn("skipped at load", path=path, reason=why)
        elif n == LOG_EACH:
            self._warn("more files skipped at load; counting only")

    def _blob_for(self, blob_id, size, key, n_bad):
        """The blob path for an entry's blob id when the blob is there with its size."""
        found = self.scan.get(blob_id) if blob_id else None
        if found is None:
            return None, n_bad
        if found[0] != size:
            if n_bad < LOG_EACH:
                self._warn("blob has the wrong size; entry loads as metadata only",
                                 key=key, blob=blob_id, size=found[0], expected=size)
            return None, n_bad + 1
        return self.blob_path(blob_id), n_bad

    def _load_meta(self, index, ttl, now_mono, now_wall):
        n_entries = n_revs = skipped = bad_blobs = 0
        loads = json.loads
        with os.scandir(self.meta) as top:
            subs = [d.path for d in top if d.is_dir(follow_symlinks=False)]
        for d in subs:
            with os.scandir(d) as it:
                names = [f.name for f in it]
            for name in names:
                path = d + os.sep + name
                if not name.endswith(".json"):
                    if name.endswith(".tmp"):
                        self.discard(path)      # a metadata write that never got renamed
                    continue
                try:
                    with open(path, "rb") as f:
                        doc = loads(f.read())
                    age = now_wall - float(doc["fetched_at"])
                    if doc["type"] == "rev":
                        commit = doc["commit"]
                        if not is_commit(commit):
                            raise ValueError("bad commit")
                        index.set_rev(doc["rtype"], doc["repo"], doc["rev"], commit,
                                      now_mono + ttl - age, doc["fetched_at"])
                        n_revs += 1
                        continue
                    ed = doc["entry"]
                    blob_path, bad_blobs = self._blob_for(ed.get("blob_id"), ed["size"], ed["key"],
                                                          bad_blobs)
                    expires = 0.0 if doc["immutable"] else now_mono + ttl - age
                    if expires and expires <= 0:
                        expires = 1e-9  # stale but kept for offline fallback
                    e = self.attach_small_body(Entry.from_json(ed, blob_path, expires))
                    index.publish(self.flag_suspect(e))
                    n_entries += 1
                except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
                    self._skip(skipped, path, "%s: %s" % (type(exc).__name__, exc))
                    skipped += 1
        if skipped:
            self._warn("metadata files skipped at load", count=skipped)
        return n_entries, n_revs, skipped

    def _load_snapshot(self, doc, index, ttl, now_mono, now_wall):
        bad_blobs = 0
        for r in doc["entries"]:
            kind, key, size, etag, commit, lfs, blob_id, ctype, cdisp, status, headers, body, \
                fetched, immutable = r[:14]
            blob_path, bad_blobs = self._blob_for(blob_id, size, key, bad_blobs)
            expires = 0.0 if immutable else now_mono + ttl - (now_wall - fetched)
            if expires and expires <= 0:
                expires = 1e-9
            e = Entry(kind, key, size, etag, commit, lfs, blob_id, blob_path, ctype, cdisp, status,
                      tuple(map(tuple, headers)) if headers else (), body.encode("latin-1"), expires)
            e.head_only = len(r) > 14 and bool(r[14])     # rows written before it have 14 fields
            index.publish(self.flag_suspect(self.attach_small_body(e)))
        for key, commit, fetched in doc["revs"]:
            if not is_commit(commit):
                raise ValueError("bad commit in snapshot")
            snapshot.set_rev(index, key, commit, now_mono + ttl - (now_wall - fetched), fetched)
        served = doc.get("served") or {}
        self.loaded_from = "snapshot"
        self.snapshot_served = served if isinstance(served, dict) else {}
        return len(doc["entries"]), len(doc["revs"]), 0
