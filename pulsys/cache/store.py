"""On-disk layout and atomic writes. Called from fill threads and startup, never from
a reactor thread (it fsyncs).

    <cache-dir>/v1/blobs/sha256/<aa>/<hex>   LFS bodies, named by their sha256
    <cache-dir>/v1/blobs/sha1/<aa>/<hex>     regular files, named by their git blob sha1
    <cache-dir>/v1/tmp/<algo>-<hex>.<random>.part   fills in progress (removed at startup)
    <cache-dir>/v1/index/                    the index, in LMDB (cache/indexdb.py)
    <cache-dir>/v1/suspect/<algo>-<hex>      blobs that once streamed unverified bytes (ADR 0012)
    <cache-dir>/v1/lock                      flock: servers shared, `pulsys verify` exclusive

A blob is written under tmp/, fsynced, verified by the caller, then renamed into
blobs/ and the directory fsynced: a path under blobs/ always holds complete, verified
bytes. Blobs are shared by every repo and revision that points at the same content.
Metadata lives in the index; v1/meta/ is where pulsys before 0.13 kept it
(cache/index_import.py reads it once).
"""

import fcntl
import os
import secrets

from pulsys.log import get_logger

ALGOS = ("sha256", "sha1", "other")


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


class Store:
    def __init__(self, root):
        self.root = os.path.join(root, "v1")
        self.blobs = os.path.join(self.root, "blobs")
        self.tmp = os.path.join(self.root, "tmp")
        self.meta = os.path.join(self.root, "meta")
        self.suspect_dir = os.path.join(self.root, "suspect")
        for d in (self.blobs, self.tmp, self.suspect_dir):
            os.makedirs(d, exist_ok=True)
        # blob ids whose fill failed verification after bytes were readable: entries of
        # them answer open-ended resumes with the whole body (ADR 0012). Replaced whole.
        self.suspects = frozenset(_blob_of(n) for n in os.listdir(self.suspect_dir)
                                  if not n.startswith("."))
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

    # blobs -------------------------------------------------------------

    def blob_path(self, blob_id):
        algo, _, hexd = blob_id.partition("/")
        return "%s%s%s%s%s%s%s" % (self.blobs, os.sep, algo, os.sep, hexd[:2], os.sep, hexd)

    def blob_size(self, blob_id):
        """Bytes of the file under blobs/ for `blob_id`, or None when there is none."""
        try:
            return os.stat(self.blob_path(blob_id)).st_size
        except OSError:
            return None

    def has_blob(self, blob_id, size=None):
        """The blob is in blobs/ (with `size` bytes, when given: a file of another size
        there is a leftover that a fill must replace, never a hit)."""
        found = self.blob_size(blob_id)
        return found is not None and (size is None or found == size)

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
        finally:
            os.close(fd)
        dest = self.blob_path(blob_id)
        os.makedirs(os.path.dirname(dest), exist_ok=True)
        os.replace(part_path, dest)
        _fsync_dir(os.path.dirname(dest))
        return dest

    def remove_blob(self, blob_id, size=None):
        """Unlink an evicted blob. Open descriptors keep reading the old inode until
        they are closed."""
        try:
            os.unlink(self.blob_path(blob_id))
        except FileNotFoundError:
            pass

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
