"""What the cache holds, per repo, and purging a repo (admin API: /api/v1/repos).

Read from the parent's authoritative index (the one fills publish to; workers hold
replicas). Keys are model/key.py's "kind|type|repo|rev|path|extra": every entry of a
repo, metadata documents included, names the repo, so a purge is a scan of the index.
A blob is shared by every entry with the same content (same etag), across repos and
revisions; a purge deletes a blob only when no entry of another repo still points at it.
"""

import threading

from pulsys.cache.downloads import repo_of_key
from pulsys.model import target as T
from pulsys.model.entry import FILE


def _kind(key):
    k, _, _ = key.partition("|")
    return int(k) if k.isdigit() else 0


def _rev_of(key):
    parts = key.split("|")
    return parts[3] if len(parts) > 3 else ""


class CacheView:
    def __init__(self, index, store, space, drop_fds, log):
        self.index = index
        self.store = store
        self.space = space
        self.drop_fds = drop_fds      # fn([path]): every reactor closes its descriptors
        self.log = log
        self.lock = threading.Lock()  # one purge at a time

    def repos(self):
        """[{"type", "repo", "revisions": [{"revision", "commit"}], "files", "bytes"}]:
        files = file entries; bytes = sizes of the distinct blobs on disk."""
        out = {}
        for key, e in list(self.index.entries.items()):
            if e.kind != FILE or _kind(key) != T.RESOLVE:
                continue
            repo = repo_of_key(key)
            if repo is None:
                continue
            r = out.setdefault(repo, {"files": 0, "blobs": {}, "commits": set()})
            r["files"] += 1
            if e.blob_path is not None:
                r["blobs"][e.blob_id] = e.size
            if T.is_commit(e.commit):
                r["commits"].add(e.commit)
        named = {}
        for key, rec in list(self.index.revs.items()):
            repo = repo_of_key(key)
            if repo is not None:
                named.setdefault(repo, []).append({"revision": _rev_of(key), "commit": rec.commit})
        docs = []
        for repo in sorted(set(out) | set(named)):
            r = out.get(repo, {"files": 0, "blobs": {}, "commits": set()})
            revs = sorted(named.get(repo, []), key=lambda d: d["revision"])
            seen = {d["commit"] for d in revs}
            revs += [{"revision": c, "commit": c} for c in sorted(r["commits"] - seen)]
            if not r["files"] and not r["commits"]:
                continue          # only a revision mapping, nothing cached under it
            docs.append({"type": repo[0], "repo": repo[1], "revisions": revs, "files": r["files"],
                         "bytes": sum(r["blobs"].values())})
        return docs

    def purge(self, rtype, repo):
        """Remove every entry, revision mapping and metadata file of the repo, and the
        blobs no other repo's entry points at. -> {"removed_entries", "freed_bytes",
        "kept_shared_blobs"}, or None when nothing of the repo is cached."""
        want = (rtype, repo)
        with self.lock:
            entries = self.index.entries
            mine = [(k, e) for k, e in list(entries.items()) if repo_of_key(k) == want]
            revs = [k for k in list(self.index.revs) if repo_of_key(k) == want]
            if not mine and not revs:
                return None
            blobs = {e.blob_id: e.size for _, e in mine if e.kind == FILE and e.blob_id}
            for k, _ in mine:
                self.index.remove(k)         # workers' replicas too (ipc.ReplicatingIndex)
                self.store.remove_meta(k)
            for k in revs:
                # workers keep the mapping until they restart; it leads to no entry now
                self.index.drop_rev(k)
                self.store.remove_meta(k)
            still = {e.blob_id for e in list(entries.values()) if e.kind == FILE and e.blob_id in blobs}
            freed, paths = 0, []
            for blob_id, size in blobs.items():
                if blob_id in still or not self.store.has_blob(blob_id):
                    continue
                if self.space is not None:
                    self.space.forget(blob_id)
                self.store.remove_blob(blob_id, size)
                paths.append(self.store.blob_path(blob_id))
                freed += size
            if paths:
                self.drop_fds(paths)
        kept = len([b for b in blobs if b in still])
        self.log.info("purged a repo", repo_type=rtype, repo=repo, entries=len(mine),
                      freed_bytes=freed, kept_shared_blobs=kept)
        return {"removed_entries": len(mine), "freed_bytes": freed, "kept_shared_blobs": kept}

