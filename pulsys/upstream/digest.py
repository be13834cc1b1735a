"""Whole-file digests of blobs whose pieces land in any order.

LFS blobs must match X-Linked-Etag (sha256) and regular files their git blob sha1 (the
ETag); clients do not check either (hf-protocol.md §2.1), so this is the only check.
A Hasher digests the part file from byte 0 up as far as it is contiguous on disk: bytes
that land right at the hashed prefix are hashed from memory as they are written, bytes
that landed ahead of it are read back from the part file when the gap before them
closes (from the page cache: they were written moments before).
"""

import hashlib
import os
import threading

from pulsys.cache import spans as S

READ_BACK = 1 << 20


class Hasher:
    __slots__ = ("want", "h", "done", "lock", "fd")

    def __init__(self, blob_id, size, fd):
        algo, _, self.want = blob_id.partition("/")
        if algo == "sha256":
            self.h = hashlib.sha256()
        elif algo == "sha1":
            self.h = hashlib.sha1(b"blob %d\0" % size)   # git blob object header
        else:
            self.h = None
        self.done = 0          # bytes [0, done) are in the digest
        self.lock = threading.Lock()
        self.fd = fd           # the part file, readable

    def wrote(self, pos, data, fill):
        """Bytes `data` were written at `pos` and recorded in fill.spans."""
        if self.h is None or pos != self.done:
            return   # ahead of the prefix: whoever closes the gap reads these back
        with self.lock:
            if pos == self.done:
                self.h.update(data)
                self.done = pos + len(data)
            self._catch_up(S.end_at(fill.spans, self.done))

    def _catch_up(self, end):
        while self.done < end:
            data = os.pread(self.fd, min(READ_BACK, end - self.done), self.done)
            if not data:
                raise OSError("part file shorter than the bytes recorded as written")
            self.h.update(data)
            self.done += len(data)

    def matches(self, size):
        """Digest the rest (every byte is on disk now) and compare with the blob id."""
        if self.h is None:
            return True
        with self.lock:
            self._catch_up(size)
            return self.h.hexdigest() == self.want
