"""What the cache holds, per repo, and purging a repo (admin API: /api/v1/repos).

Read from the index through the writer's Index. Keys are model/key.py's
"kind|type|repo|rev|path|extra": every entry of a repo, metadata documents included,
starts with "kind|type|repo|", so a purge is one prefix scan per kind of key.
A blob is shared by every entry with the same content (same etag), across repos and
revisions; a purge deletes a blob only when no entry of another repo still points at it.
"""

import threading

from pulsys.cache.downloads import repo_of_key
from pulsys.model import target as T
from pulsys.model.entry import FILE
from pulsys.model.key import REV, repo_prefix

# XET_RECON: with --xet facade, the record that a file belongs to the repo (upstream/xet.py);
# xorb ranges and reconstructions are content, shared by repos, left to LRU eviction
CACHED_KINDS = (T.RESOLVE, T.API_INFO, T.API_TREE, T.API_PATHS_INFO, T.XET_RECON)


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
        files = file entries; bytes = sizes of the distinct blobs on disk. One scan of
        the /resolve keys that decodes no Entry (Index.peek)."""
        out = {}
        for k, (kind, _, blob_id, on_disk, size) in self.index.peek("%d|" % T.RESOLVE):
            if kind != FILE:
                continue
            key = k.decode("utf-8", "surrogatepass")
            repo = repo_of_key(key)
            if repo is None:
                continue
            r = out.setdefault(repo, {"files": 0, "blobs": {}, "commits": set()})
            r["files"] += 1
            if on_disk:
                r["blobs"][blob_id] = size
            rev = _rev_of(key)
            if T.is_commit(rev):
                r["commits"].add(rev)
        named = {}
        for key, rec in self.index.revs("%d|" % REV):
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
        """Remove every entry and revision mapping of the repo, and the blobs no other
        repo's entry points at. -> {"removed_entries", "freed_bytes", "kept_shared_blobs"},
        or None when nothing of the repo is cached. Prefix scans: one per kind of key."""
        with self.lock:
            mine = []
            for kind in CACHED_KINDS:
                mine.extend(self.index.entries(repo_prefix(kind, rtype, repo)))
            revs = [k for k, _ in self.index.revs(repo_prefix(REV, rtype, repo))]
            if not mine and not revs:
                return None
            blobs = {e.blob_id: e.size for e in mine if e.kind == FILE and e.blob_id}
            self.index.remove_many([e.key for e in mine])   # every process reads the index
            self.index.drop_revs(revs)
            still = {b for b in blobs if self.index.keys_of_blob(b)}
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

