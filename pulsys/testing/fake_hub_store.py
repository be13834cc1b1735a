"""Repositories of the fake Hub: blobs, commits, refs and renames.

Owns the content model and every id the Hub derives from file bytes
(hf-protocol.md §2.1: git blob sha1 for regular files, sha256 for LFS files and
their Xet hash, from fake_hub_xet.py; §2.2: the tree entry shape). Knows nothing about
HTTP.
"""

import gzip
import hashlib
import re
import threading
import time

from pulsys.testing.fake_hub_xet import file_hash

REPO_TYPES = ("model", "dataset", "space")

# The Hub stores these suffixes in LFS/Xet by default (its .gitattributes), and
# anything from 10 MiB up regardless of name.
LFS_SUFFIXES = frozenset(
    ".safetensors .bin .pt .pth .ckpt .h5 .onnx .gguf .msgpack .parquet .arrow .npz .zip .tar .gz".split()
)
LFS_MIN_SIZE = 10 * 1024 * 1024

_REPO_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
_HEX40 = re.compile(r"^[0-9a-f]{40}$")


def git_blob_sha1(data):
    """The git object id of a blob: sha1(b"blob <len>\\0" + data)."""
    h = hashlib.sha1(b"blob %d\0" % len(data))
    h.update(data)
    return h.hexdigest()


def sha256_hex(data):
    return hashlib.sha256(data).hexdigest()


def is_sha(rev):
    return bool(_HEX40.match(rev))


def iso_time(ts):
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(ts)) + ".000Z"


def lfs_pointer(sha256, size):
    """The git-lfs pointer file committed in place of the bytes (its sha1 is the tree `oid`)."""
    return b"version https://git-lfs.github.com/spec/v1\noid sha256:%s\nsize %d\n" % (sha256.encode(), size)


class Blob:
    """One file's bytes, stored once per (content, lfs) and shared between repos."""

    __slots__ = ("data", "size", "lfs", "sha256", "git_sha1", "pointer", "oid", "_xet_hash", "_gzip", "_md5")

    def __init__(self, data, lfs, sha256=None):
        self.data = data
        self.size = len(data)
        self.lfs = lfs
        self.sha256 = sha256 or sha256_hex(data)
        self.git_sha1 = git_blob_sha1(data)
        self.pointer = lfs_pointer(self.sha256, self.size) if lfs else b""
        # The tree lists the git object actually committed: the pointer for LFS files.
        self.oid = git_blob_sha1(self.pointer) if lfs else self.git_sha1
        self._xet_hash = None
        self._gzip = None
        self._md5 = None

    @property
    def xet_hash(self):
        """An LFS file's Xet hash (fake_hub_xet.file_hash: the Merkle hash of its chunks,
        computed on first use), None for a regular file."""
        if self.lfs and self._xet_hash is None:
            self._xet_hash = file_hash(self.data)
        return self._xet_hash

    @property
    def etag(self):
        """The HF etag: what clients name the cached blob after (§2.1)."""
        return self.sha256 if self.lfs else self.git_sha1

    def gzipped(self):
        if self._gzip is None:
            self._gzip = gzip.compress(self.data, compresslevel=6, mtime=0)
        return self._gzip

    def s3_etag(self):
        """What an S3-backed CDN sends as ETag: an md5, deliberately not the HF etag (§4.2)."""
        if self._md5 is None:
            self._md5 = hashlib.md5(self.data).hexdigest()
        return self._md5


class Commit:
    __slots__ = ("sha", "parent", "files", "date", "title", "_dir_oids")

    def __init__(self, sha, parent, files, date, title):
        self.sha = sha
        self.parent = parent
        self.files = files  # path -> Blob; never mutated after creation
        self.date = date
        self.title = title
        self._dir_oids = {}

    def directories(self):
        dirs = set()
        for path in self.files:
            parts = path.split("/")[:-1]
            for i in range(1, len(parts) + 1):
                dirs.add("/".join(parts[:i]))
        return dirs

    def dir_oid(self, path):
        """A stable stand-in for the git tree id of a directory."""
        oid = self._dir_oids.get(path)
        if oid is None:
            prefix = path + "/"
            h = hashlib.sha1(b"tree " + path.encode())
            for p in sorted(self.files):
                if p.startswith(prefix):
                    h.update(b"\n%s %s" % (p.encode(), self.files[p].oid.encode()))
            oid = self._dir_oids[path] = h.hexdigest()
        return oid


class Repo:
    """A repository: commits by sha and refs by full name (refs/heads/…, refs/tags/…, refs/pr/N)."""

    def __init__(self, repo_type, repo_id, private, gated, created):
        self.type = repo_type
        self.id = repo_id
        self.private = private
        self.gated = gated  # False, "auto" or "manual", as the Hub's JSON says
        self.created = created
        self.commits = {}
        self.refs = {}

    def resolve(self, rev):
        """Revision (branch, tag, refs/… name or 40-hex sha) -> Commit, or None."""
        for name in (rev, "refs/heads/" + rev, "refs/tags/" + rev):
            if name.startswith("refs/") and name in self.refs:
                return self.commits[self.refs[name]]
        return self.commits.get(rev) if is_sha(rev) else None

    def head(self):
        return self.resolve("main")


def file_entry(path, blob, xet, commit=None):
    """A /tree and /paths-info entry for a file (§2.2)."""
    entry = {"type": "file", "oid": blob.oid, "size": blob.size, "path": path}
    if blob.lfs:
        entry["lfs"] = {"oid": blob.sha256, "size": blob.size, "pointerSize": len(blob.pointer)}
        if xet:
            entry["xetHash"] = blob.xet_hash
    if commit is not None:
        entry["lastCommit"] = {"id": commit.sha, "title": commit.title, "date": iso_time(commit.date)}
    return entry


def dir_entry(path, commit):
    return {"type": "directory", "oid": commit.dir_oid(path), "size": 0, "path": path}


def tree_listing(commit, path, recursive, xet, expand):
    """Entries below `path` ("" = root), sorted by path; None if `path` is not a directory."""
    dirs = commit.directories()
    if path and path not in dirs:
        return None
    prefix = path + "/" if path else ""
    last = commit if expand else None
    entries = []
    for p in sorted(set(commit.files) | dirs):
        if not p.startswith(prefix) or (not recursive and "/" in p[len(prefix):]):
            continue
        blob = commit.files.get(p)
        entries.append(file_entry(p, blob, xet, last) if blob else dir_entry(p, commit))
    return entries


def paths_info(commit, paths, xet, expand):
    dirs = commit.directories()
    last = commit if expand else None
    out = []
    for p in paths:
        p = p.strip("/")
        if p in commit.files:
            out.append(file_entry(p, commit.files[p], xet, last))
        elif p in dirs:
            out.append(dir_entry(p, commit))
    return out


def _check_repo_id(repo_id):
    parts = repo_id.split("/")
    if not 1 <= len(parts) <= 2 or not all(_REPO_NAME.match(p) for p in parts):
        raise ValueError("repo id must be 'name' or 'org/name', got %r" % (repo_id,))


def _check_type(repo_type):
    if repo_type not in REPO_TYPES:
        raise ValueError("repo_type must be one of %s, got %r" % (REPO_TYPES, repo_type))


def _check_path(path):
    parts = path.split("/")
    if not path or any(p in ("", ".", "..") for p in parts):
        raise ValueError("bad file path %r" % (path,))


class RepoStore:
    """All repositories, renames and blobs; every method is thread-safe."""

    def __init__(self, clock):
        self._clock = clock
        self._lock = threading.RLock()
        self._repos = {}  # (type, id) -> Repo
        self._renamed = {}  # (type, old id) -> new id
        self._blobs = {}  # (sha256, lfs) -> Blob
        self._aliases = {}  # git sha1 / sha256 / pointer oid -> sha256
        self._seq = 0

    def add_repo(self, repo_id, files, repo_type, lfs, private, gated):
        _check_repo_id(repo_id)
        _check_type(repo_type)
        gated = "auto" if gated is True else gated
        if gated not in (False, None, "auto", "manual"):
            raise ValueError("gated must be False, True, 'auto' or 'manual'")
        with self._lock:
            if (repo_type, repo_id) in self._repos:
                raise ValueError("%s %s already exists" % (repo_type, repo_id))
            repo = Repo(repo_type, repo_id, bool(private), gated or False, self._clock())
            self._repos[(repo_type, repo_id)] = repo
            self._renamed.pop((repo_type, repo_id), None)
            return self._commit(repo, "main", files, lfs, "initial commit")

    def commit(self, repo_id, files, repo_type, branch, lfs):
        with self._lock:
            repo = self._existing(repo_type, repo_id)
            return self._commit(repo, branch, files, lfs, "update")

    def set_ref(self, repo_id, ref, sha, repo_type):
        """`ref` may be a full name (refs/heads/x, refs/tags/x, refs/pr/N); a bare name
        moves an existing branch of that name, else creates or moves a tag."""
        with self._lock:
            repo = self._existing(repo_type, repo_id)
            if sha not in repo.commits:
                raise ValueError("unknown commit %r in %s" % (sha, repo_id))
            if ref.startswith("refs/"):
                name = ref
            elif "refs/heads/" + ref in repo.refs:
                name = "refs/heads/" + ref
            else:
                name = "refs/tags/" + ref
            repo.refs[name] = sha

    def rename(self, old_id, new_id, repo_type):
        _check_repo_id(new_id)
        with self._lock:
            repo = self._existing(repo_type, old_id)
            if (repo_type, new_id) in self._repos:
                raise ValueError("%s %s already exists" % (repo_type, new_id))
            del self._repos[(repo_type, old_id)]
            repo.id = new_id
            self._repos[(repo_type, new_id)] = repo
            for key, target in self._renamed.items():
                if key[0] == repo_type and target == old_id:
                    self._renamed[key] = new_id
            self._renamed[(repo_type, old_id)] = new_id
            self._renamed.pop((repo_type, new_id), None)

    def lookup(self, repo_type, repo_id):
        with self._lock:
            return self._repos.get((repo_type, repo_id))

    def renamed_to(self, repo_type, repo_id):
        with self._lock:
            return self._renamed.get((repo_type, repo_id))

    def resolve(self, repo, rev):
        with self._lock:
            return repo.resolve(rev)

    def refs(self, repo):
        with self._lock:
            return dict(repo.refs)

    def blob(self, sha256):
        """The bytes behind a sha256 (any repo), for the CDN."""
        with self._lock:
            return self._blobs.get((sha256, True)) or self._blobs.get((sha256, False))

    def blob_by_xet(self, xet_hash):
        """The LFS blob whose Xet hash this is, or None."""
        with self._lock:
            for (_, lfs), blob in self._blobs.items():
                if lfs and blob.xet_hash == xet_hash:
                    return blob
        return None

    def repo_has_xet(self, repo_type, repo_id, xet_hash):
        """Does any commit of the repo hold a file with this Xet hash?"""
        with self._lock:
            repo = self._repos.get((repo_type, repo_id))
            return repo is not None and any(
                b.xet_hash == xet_hash for c in repo.commits.values() for b in c.files.values())

    def canonical_id(self, blob_id):
        """Map any id a test may hold (sha256, git sha1, pointer oid) to the counter key."""
        blob_id = blob_id.strip('"').lower()
        with self._lock:
            return self._aliases.get(blob_id, blob_id)

    def _existing(self, repo_type, repo_id):
        _check_type(repo_type)
        repo = self._repos.get((repo_type, repo_id))
        if repo is None:
            raise KeyError("no %s %s" % (repo_type, repo_id))
        return repo

    def _blob(self, data, lfs):
        digest = sha256_hex(data)
        blob = self._blobs.get((digest, lfs))
        if blob is None:
            blob = self._blobs[(digest, lfs)] = Blob(data, lfs, digest)
            for alias in (blob.sha256, blob.git_sha1, blob.oid):
                self._aliases[alias] = digest
        return blob

    def _commit(self, repo, branch, files, lfs, title):
        ref = branch if branch.startswith("refs/") else "refs/heads/" + branch
        parent_sha = repo.refs.get(ref) or repo.refs.get("refs/heads/main")
        tree = dict(repo.commits[parent_sha].files) if parent_sha else {}
        for path, data in (files or {}).items():
            _check_path(path)
            if data is None:
                tree.pop(path, None)
                continue
            data = bytes(data)
            is_lfs = (path in lfs) if lfs is not None else _auto_lfs(path, data)
            tree[path] = self._blob(data, is_lfs)
        self._seq += 1
        h = hashlib.sha1(b"commit %d %s/%s %s\n" % (self._seq, repo.type.encode(), repo.id.encode(),
                                                     (parent_sha or "").encode()))
        for path in sorted(tree):
            h.update(b"%s %s\n" % (path.encode(), tree[path].oid.encode()))
        commit = Commit(h.hexdigest(), parent_sha, tree, self._clock(), title)
        repo.commits[commit.sha] = commit
        repo.refs[ref] = commit.sha
        return commit.sha


def _auto_lfs(path, data):
    name = path.rsplit("/", 1)[-1]
    dot = name.rfind(".")
    return len(data) >= LFS_MIN_SIZE or (dot > 0 and name[dot:].lower() in LFS_SUFFIXES)
