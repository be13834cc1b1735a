"""On-disk layout and atomic writes. Called from fill threads and startup, never from
a reactor thread (it fsyncs).

    <cache-dir>/v1/blobs/sha256/<aa>/<hex>   LFS bodies, named by their sha256
    <cache-dir>/v1/blobs/sha1/<aa>/<hex>     regular files, named by their git blob sha1
    <cache-dir>/v1/tmp/<random>.part         fills in progress (removed at startup)
    <cache-dir>/v1/meta/<aa>/<digest>.json   one Entry or revision mapping per file

A blob is written under tmp/, fsynced, verified by the caller, then renamed into
blobs/ and the directory fsynced: a path under blobs/ always holds complete, verified
bytes. Blobs are shared by every repo and revision that points at the same content.
"""

import hashlib
import json
import os
import secrets
import threading
import time

from pulsys.model.entry import Entry
from pulsys.model.target import is_commit


def _digest(key):
    return hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()[:40]


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
        for d in (self.blobs, self.tmp, self.meta):
            os.makedirs(d, exist_ok=True)
        self.small_max = small_max
        self.small_left = small_budget
        self._small = {}
        self._small_lock = threading.Lock()

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
        return os.path.join(self.blobs, algo, hexd[:2], hexd)

    def has_blob(self, blob_id):
        return os.path.exists(self.blob_path(blob_id))

    def new_part_path(self):
        return os.path.join(self.tmp, secrets.token_hex(12) + ".part")

    def commit_blob(self, part_path, blob_id):
        """fsync the part file, rename it to its blob path, fsync the directory."""
        fd = os.open(part_path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        dest = self.blob_path(blob_id)
        os.makedirs(os.path.dirname(dest), exist_ok=True)
        os.replace(part_path, dest)
        _fsync_dir(os.path.dirname(dest))
        return dest

    def discard(self, part_path):
        try:
            os.unlink(part_path)
        except FileNotFoundError:
            pass

    def clean_tmp(self):
        n = 0
        for name in os.listdir(self.tmp):
            self.discard(os.path.join(self.tmp, name))
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

    def save_entry(self, entry, fetched_at, immutable):
        doc = {"type": "entry", "fetched_at": fetched_at, "immutable": immutable,
               "entry": entry.to_json()}
        self._write_json(entry.key, doc)

    def save_rev(self, key, rtype, repo, rev, commit, fetched_at):
        self._write_json(key, {"type": "rev", "key": key, "rtype": rtype, "repo": repo,
                               "rev": rev, "commit": commit, "fetched_at": fetched_at})

    def load(self, index, ttl, now_mono, now_wall=None):
        """Rebuild `index` from disk. Returns (entries, revs, skipped)."""
        now_wall = time.time() if now_wall is None else now_wall
        n_entries = n_revs = skipped = 0
        for sub in os.listdir(self.meta):
            d = os.path.join(self.meta, sub)
            if not os.path.isdir(d):
                continue
            for name in os.listdir(d):
                path = os.path.join(d, name)
                if not name.endswith(".json"):
                    if name.endswith(".tmp"):
                        self.discard(path)
                    continue
                try:
                    with open(path, "rb") as f:
                        doc = json.load(f)
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
                    blob_path = None
                    if ed.get("blob_id"):
                        p = self.blob_path(ed["blob_id"])
                        if os.path.exists(p) and os.path.getsize(p) == ed["size"]:
                            blob_path = p
                    expires = 0.0 if doc["immutable"] else now_mono + ttl - age
                    if expires and expires <= 0:
                        expires = 1e-9  # stale but kept for offline fallback
                    e = self.attach_small_body(Entry.from_json(ed, blob_path, expires))
                    index.publish(e)
                    n_entries += 1
                except (OSError, ValueError, KeyError, TypeError) as exc:
                    skipped += 1
                    del exc
        return n_entries, n_revs, skipped
