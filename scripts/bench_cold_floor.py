#!/usr/bin/env python3
"""The floor under a cold byte on this machine (issue 17): what the least a verifying
cache must do per byte costs in CPU, measured without pulsys.

    python scripts/bench_cold_floor.py [--size-mib 1024] [--cache-root /dev/shm]

One process receives a file from the nginx origin of bench_cold.py (sendfile on
loopback) with `readinto` into one reused 1 MiB buffer, and measures its own CPU per GB
for, in turn: receiving only; receiving and writing to a file under --cache-root;
receiving, writing and sha256; and then sendfile of the written file to a loopback
socket (what serving the bytes to one client costs). Two other ways to land and hash
the bytes are measured too, each with one copy fewer than recv + write:

  receive_mmap_sha256    the part file sized first and mapped (MAP_SHARED, populated a
                         piece at a time with MADV_POPULATE_WRITE): recv_into writes
                         straight into its pages, sha256 reads them there
  splice_sha256          splice(2) socket -> pipe -> file (the kernel moves the
                         socket's pages into the pipe and copies them once into the
                         file's), sha256 reading the file's pages through a mapping

A cache that verifies cannot do less than the cheapest of these plus the sendfile,
whatever it is written in; nginx proxy_cache, which does not hash, is measured in
bench_cold.py's results beside it. Results with provenance:
results/<machine>/<name>.json.
"""

import argparse
import fcntl
import hashlib
import mmap
import os
import random
import resource
import socket
import sys
import tempfile
import threading
import time

import requests

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(HERE))
import bench_cold as BK  # noqa: E402
from provenance import provenance, write_result  # noqa: E402

from pulsys.testing.fake_hub import sha256_hex  # noqa: E402


def cpu():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def receive(url, size, path=None, hash_it=False):
    """-> CPU seconds per GB of one GET of `url` into a buffer (and a file, and sha256)."""
    s = requests.Session()
    s.trust_env = False
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600) if path else None
    h = hashlib.sha256() if hash_it else None
    buf = memoryview(bytearray(1 << 20))
    c0 = cpu()
    r = s.get(url, stream=True, headers={"Accept-Encoding": "identity"}, timeout=60)
    fp, got = r.raw._fp, 0
    while True:
        n = fp.readinto(buf)
        if not n:
            break
        if fd is not None:
            os.pwrite(fd, buf[:n], got)
        if h is not None:
            h.update(buf[:n])
        got += n
    took = cpu() - c0
    if fd is not None:
        os.close(fd)
    r.close()
    if got != size:
        raise SystemExit("bench_cold_floor: error: got %d bytes of %d" % (got, size))
    return round(took / (size / 1e9), 3)


PIECE = 1 << 20
MADV_POPULATE_WRITE = getattr(mmap, "MADV_POPULATE_WRITE", 23)    # Linux 5.14, madvise(2)


def _raw_get(url):
    """A GET of `url` on a plain socket, its head read exactly. -> the socket, its body
    next on the wire."""
    host, _, path = url[len("http://"):].partition("/")
    name, port = host.split(":")
    sock = socket.create_connection((name, int(port)), timeout=60)
    sock.sendall(("GET /%s HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n" % (path, host)).encode())
    head = b""
    while b"\r\n\r\n" not in head:
        peek = sock.recv(65536, socket.MSG_PEEK)
        if not peek:
            raise SystemExit("bench_cold_floor: error: the origin closed before its head ended")
        end = (head + peek).find(b"\r\n\r\n")
        take = len(peek) if end < 0 else end + 4 - len(head)
        head += sock.recv(take)
    if not head.startswith(b"HTTP/1.1 200"):
        raise SystemExit("bench_cold_floor: error: origin answered %r" % head[:40])
    return sock


def receive_mmap(url, size, path):
    """-> CPU seconds per GB of recv_into the mapped part file, and sha256 of its pages."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)
    os.ftruncate(fd, size)
    mm = mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
    view, h = memoryview(mm), hashlib.sha256()
    c0 = cpu()
    sock = _raw_get(url)
    got = 0
    while got < size:
        end = min(got + PIECE, size)
        mm.madvise(MADV_POPULATE_WRITE, got, end - got)     # one fault a piece, not a page
        while got < end:
            n = sock.recv_into(view[got:end])
            if not n:
                raise SystemExit("bench_cold_floor: error: got %d bytes of %d" % (got, size))
            h.update(view[got:got + n])
            got += n
    took = cpu() - c0
    sock.close()
    view.release()
    mm.close()
    os.close(fd)
    return round(took / (size / 1e9), 3)


def receive_splice(url, size, path):
    """-> CPU seconds per GB of splice socket -> pipe -> file, and sha256 of its pages."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)
    os.ftruncate(fd, size)
    mm = mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ)
    view, h = memoryview(mm), hashlib.sha256()
    r, w = os.pipe()
    fcntl.fcntl(w, getattr(fcntl, "F_SETPIPE_SZ", 1031), PIECE)   # 64 KiB by default, pipe(7)
    c0 = cpu()
    sock = _raw_get(url)
    sock.settimeout(None)            # splice(2) on a non-blocking socket answers EAGAIN
    got = 0
    while got < size:
        n = os.splice(sock.fileno(), w, min(PIECE, size - got))
        if not n:
            raise SystemExit("bench_cold_floor: error: got %d bytes of %d" % (got, size))
        left = n
        while left:
            left -= os.splice(r, fd, left, offset_dst=got + n - left)
        h.update(view[got:got + n])
        got += n
    took = cpu() - c0
    sock.close()
    os.close(r)
    os.close(w)
    view.release()
    mm.close()
    os.close(fd)
    return round(took / (size / 1e9), 3)


def serve(path, size):
    """-> CPU seconds per GB of sendfile of `path` to a loopback socket (the reader's
    recv is on another thread of this process: its CPU is counted, then taken out by
    measuring the reader alone)."""
    lst = socket.create_server(("127.0.0.1", 0))
    cli = socket.create_connection(lst.getsockname())
    srv, _ = lst.accept()
    lst.close()
    done = threading.Event()

    def drain():
        b = bytearray(1 << 20)
        while cli.recv_into(b):
            pass
        done.set()
    threading.Thread(target=drain, daemon=True).start()
    fd = os.open(path, os.O_RDONLY)
    c0 = cpu()
    t0 = time.thread_time()
    off = 0
    while off < size:
        off += os.sendfile(srv.fileno(), fd, off, size - off)
    mine = time.thread_time() - t0
    srv.shutdown(socket.SHUT_WR)
    done.wait(30)
    total = cpu() - c0
    os.close(fd)
    srv.close()
    cli.close()
    return round(mine / (size / 1e9), 3), round(total / (size / 1e9), 3)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--size-mib", type=int, default=1024)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--cache-root", default="/dev/shm" if os.path.isdir("/dev/shm") else None)
    ap.add_argument("--name", default=None)
    ap.add_argument("--out-dir")
    a = ap.parse_args(argv)
    if not 1 <= a.size_mib <= 8192 or not 1 <= a.rounds <= 10:
        ap.error("--size-mib 1..8192, --rounds 1..10")
    rng = random.Random(5)
    data = b"".join(rng.randbytes(1 << 20) for _ in range(a.size_mib))
    origin = BK.NginxOrigin({"f": data}, a.cache_root, 0)
    url = "http://%s/repos/models/x/%s" % (origin.netloc, sha256_hex(data))
    size = len(data)
    del data
    work = tempfile.mkdtemp(prefix="bench-cold-floor-", dir=a.cache_root)
    rows = []
    try:
        for rnd in range(a.rounds):
            path = os.path.join(work, "part")
            row = {"round": rnd, "receive": receive(url, size), "receive_write": receive(url, size, path),
                   "receive_write_sha256": receive(url, size, path, True),
                   "receive_mmap_sha256": receive_mmap(url, size, path + "-mmap"),
                   "splice_sha256": receive_splice(url, size, path + "-splice")}
            for extra in ("-mmap", "-splice"):
                os.unlink(path + extra)
            row["sendfile_sender"], row["sendfile_sender_and_reader"] = serve(path, size)
            os.unlink(path)
            rows.append(row)
            print(row, flush=True)
    finally:
        origin.stop()
        for n in os.listdir(work):
            os.unlink(os.path.join(work, n))
        os.rmdir(work)
    med = {k: sorted(r[k] for r in rows)[len(rows) // 2] for k in rows[0] if k != "round"}
    med["verifying_cache_floor"] = round(min(med["receive_write_sha256"], med["receive_mmap_sha256"],
                                             med["splice_sha256"]) + med["sendfile_sender"], 3)
    doc = provenance(benchmark="cold_floor", size_mib=a.size_mib, rounds=a.rounds, unit="CPU seconds per GB",
                     cache_on="tmpfs" if (a.cache_root or "").startswith("/dev/shm") else "disk")
    doc["rows"], doc["medians"] = rows, med
    print("medians:", med)
    print("wrote", write_result(a.name or "cold_floor_%s.json" % time.strftime("%Y-%m-%d"), doc, a.out_dir))


if __name__ == "__main__":
    main()
