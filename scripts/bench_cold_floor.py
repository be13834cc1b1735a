#!/usr/bin/env python3
"""The floor under a cold byte on this machine (issue 17): what the least a verifying
cache must do per byte costs in CPU, measured without pulsys.

    python scripts/bench_cold_floor.py [--size-mib 1024] [--cache-root /dev/shm]

One process receives a file from the nginx origin of bench_cold.py (sendfile on
loopback) with `readinto` into one reused 1 MiB buffer, and measures its own CPU per GB
for, in turn: receiving only; receiving and writing to a file under --cache-root;
receiving, writing and sha256; and then sendfile of the written file to a loopback
socket (what serving the bytes to one client costs). A cache that verifies cannot do
less than the sum, whatever it is written in; nginx proxy_cache, which does not hash,
is measured in bench_cold.py's results beside it. Results with provenance:
results/<machine>/<name>.json.
"""

import argparse
import hashlib
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
                   "receive_write_sha256": receive(url, size, path, True)}
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
    med["verifying_cache_floor"] = round(med["receive_write_sha256"] + med["sendfile_sender"], 3)
    doc = provenance(benchmark="cold_floor", size_mib=a.size_mib, rounds=a.rounds, unit="CPU seconds per GB",
                     cache_on="tmpfs" if (a.cache_root or "").startswith("/dev/shm") else "disk")
    doc["rows"], doc["medians"] = rows, med
    print("medians:", med)
    print("wrote", write_result(a.name or "cold_floor_%s.json" % time.strftime("%Y-%m-%d"), doc, a.out_dir))


if __name__ == "__main__":
    main()
