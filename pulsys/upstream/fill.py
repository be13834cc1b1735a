"""Stream one upstream body into the cache while clients read it from the part file.

The fill thread is the only writer of a part file. It hashes as it writes, publishes
progress to the Fill (which wakes waiting reactors), and commits only verified bytes:
LFS blobs must match X-Linked-Etag (sha256) and X-Linked-Size, regular files their git
blob sha1 when the Hub gave one (hf-protocol.md §2.1: clients do not verify; we do).
"""

import hashlib
import os

from pulsys.errors import CacheCorrupt, UpstreamError

CHUNK = 256 * 1024


class Verifier:
    """Incremental digest matching a blob id ("sha256/<hex>", "sha1/<hex>" or other)."""
    __slots__ = ("algo", "want", "h")

    def __init__(self, blob_id, size):
        self.algo, _, self.want = blob_id.partition("/")
        if self.algo == "sha256":
            self.h = hashlib.sha256()
        elif self.algo == "sha1":
            self.h = hashlib.sha1(b"blob %d\0" % size)   # git blob object header
        else:
            self.h = None

    def update(self, data):
        if self.h is not None:
            self.h.update(data)

    def ok(self):
        return self.h is None or self.h.hexdigest() == self.want


def write_all(fd, data):
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        view = view[n:]


def stream_into(fill, fd, resp, blob_id, size, on_bytes=None):
    """Copy resp's body into fd, publishing progress. Raises on short, long or bad bytes."""
    if resp.status_code != 200:
        raise UpstreamError("upstream body request answered %d" % resp.status_code)
    decode = bool(resp.headers.get("Content-Encoding", "").strip())
    v = Verifier(blob_id, size)
    written = 0
    for chunk in resp.raw.stream(CHUNK, decode_content=decode):
        if not chunk:
            continue
        written += len(chunk)
        if written > size:
            raise CacheCorrupt("upstream sent more than the %d bytes announced" % size)
        write_all(fd, chunk)
        v.update(chunk)
        fill.progress(written)
        if on_bytes is not None:
            on_bytes(len(chunk))
    if written != size:
        raise UpstreamError("upstream body ended after %d of %d bytes" % (written, size))
    if not v.ok():
        raise CacheCorrupt("content does not match %s" % blob_id)
    return written
