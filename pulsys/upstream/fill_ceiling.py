"""The fill engine's own ceiling on this machine, for `pulsys doctor` (issue 17).

A real FillRun (upstream/fill.py: ranged fetchers with read-ahead, pwrite into a part
file, sha256 as it lands, fsync and rename at the commit) pulls a test file from a
local origin: a thread on loopback that answers each ranged GET with sendfile(2) from
the file, so it costs the machine little more than the kernel's copy. The rate is what
this pulsys could fill at if the network and the disk were infinitely fast; when it is
the slowest stage, `fill` is what binds.
"""

import hashlib
import os
import re
import shutil
import socket
import tempfile
import threading
import time

from pulsys import metrics as M
from pulsys.cache.inflight import DONE, Inflight
from pulsys.cache.store import Store
from pulsys.log import get_logger
from pulsys.model.entry import FILE, Entry
from pulsys.upstream.fill import Budget, Committer, Fetchers, FillRun, Origin
from pulsys.upstream.session import make_session

_RANGE = re.compile(rb"^range:\s*bytes=(\d+)-(\d+)\s*$", re.I | re.M)


class _Origin:
    """HTTP/1.1 keep-alive on 127.0.0.1: every GET answers 206 for its Range of `path`."""

    def __init__(self, path):
        self.path, self.size = path, os.path.getsize(path)
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.url = "http://127.0.0.1:%d/blob" % self.sock.getsockname()[1]
        self.conns = []
        threading.Thread(target=self._accept, name="pulsys-doctor-origin", daemon=True).start()

    def _accept(self):
        while True:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            self.conns.append(c)
            threading.Thread(target=self._serve, args=(c,), daemon=True).start()

    def _serve(self, c):
        fd = os.open(self.path, os.O_RDONLY | os.O_CLOEXEC)
        buf = b""
        try:
            while True:
                while b"\r\n\r\n" not in buf:
                    got = c.recv(65536)
                    if not got:
                        return
                    buf += got
                head, _, buf = buf.partition(b"\r\n\r\n")
                m = _RANGE.search(head)
                a, b = (int(m.group(1)), min(int(m.group(2)), self.size - 1)) if m else (0, self.size - 1)
                c.sendall(b"HTTP/1.1 206 Partial Content\r\nContent-Length: %d\r\n"
                          b"Content-Range: bytes %d-%d/%d\r\n\r\n" % (b - a + 1, a, b, self.size))
                off, end = a, b + 1
                while off < end:
                    off += os.sendfile(c.fileno(), fd, off, end - off)
        except OSError:
            return
        finally:
            os.close(fd)
            c.close()

    def close(self):
        self.sock.close()
        for c in self.conns:
            try:
                c.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


def measure(cache_dir, size, read_ahead, seconds):
    """-> MB/s of one cold fill of `size` random bytes under cache_dir (removed after),
    fetched by `read_ahead` connections as a server's fill with those settings is, or
    None when it did not complete within `seconds`."""
    work = tempfile.mkdtemp(prefix=".pulsys-doctor-fill-", dir=cache_dir)
    origin = None
    try:
        src = os.path.join(work, "origin")
        h = hashlib.sha256()
        with open(src, "wb") as f:
            left = size
            while left:
                block = os.urandom(min(left, 4 << 20))
                h.update(block)
                f.write(block)
                left -= len(block)
        sha = h.hexdigest()
        origin = _Origin(src)
        store, inflight = Store(os.path.join(work, "cache")), Inflight()
        entry = Entry(FILE, "doctor", size, etag=sha, blob_id="sha256/" + sha)
        fill, _ = inflight.join_or_create(entry.blob_id, size, store.new_part_path)
        session = make_session(read_ahead + 1)
        request = lambda method, url, headers: session.request(method, url, headers=headers, stream=True,
                                                               allow_redirects=False, timeout=(5, seconds))
        committer = Committer(store, lambda e: None, inflight, lambda e: e, lambda e: None, lambda *a: None)
        threads = []

        def spawn(fn):
            t = threading.Thread(target=fn, name="pulsys-doctor-fetcher", daemon=True)
            threads.append(t)
            t.start()
        run = FillRun(fill, entry, origin.url, Origin(request, lambda url: False, refetches=False), committer,
                      Fetchers(Budget(read_ahead - 1), spawn, read_ahead, read_ahead), 1, M.new(), get_logger("doctor"))
        t0 = time.monotonic()
        run.run()
        for t in threads:
            t.join(max(0.1, seconds - (time.monotonic() - t0)))
        took = time.monotonic() - t0
        session.close()
        return round(size / took / 1e6, 1) if fill.state == DONE else None
    finally:
        if origin is not None:
            origin.close()
        shutil.rmtree(work, ignore_errors=True)
