"""How to put a response head and a file body on a TCP socket: measured, not assumed.

Variants, each serving the same keep-alive request/response loop over loopback TCP
(server process pinned to one CPU, client process to the other):
  msg_more   send(head, MSG_MORE) + sendfile(body)           (what pulsys uses)
  cork       setsockopt(TCP_CORK,1) + send + sendfile + setsockopt(TCP_CORK,0)
  plain      send(head) + sendfile(body), TCP_NODELAY       (two segments)
  copy       one send(head + body read into memory)          (small bodies only)
Rounds interleave the variants so machine noise hits all of them alike; the result is
the median time per response and its ratio to msg_more.

    python scripts/bench_head_body.py [--sizes 4096,65536] [--requests 20000] [--rounds 5]
"""

import argparse
import multiprocessing as mp
import os
import socket
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from provenance import provenance, write_result  # noqa: E402

VARIANTS = ("msg_more", "cork", "plain", "copy")


def server(port_q, path, variant, cpu):
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {cpu})
    ls = socket.socket()
    ls.bind(("127.0.0.1", 0))
    ls.listen(1)
    port_q.put(ls.getsockname()[1])
    c, _ = ls.accept()
    c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    fd = os.open(path, os.O_RDONLY)
    size = os.fstat(fd).st_size
    head = b"HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\nContent-Length: %d\r\n\r\n" % size
    body = os.pread(fd, size, 0)
    out = c.fileno()
    while True:
        req = c.recv(4096)
        if not req:
            break
        if variant == "msg_more":
            c.send(head, socket.MSG_MORE)
            sent = 0
            while sent < size:
                sent += os.sendfile(out, fd, sent, size - sent)
        elif variant == "cork":
            c.setsockopt(socket.IPPROTO_TCP, socket.TCP_CORK, 1)
            c.send(head)
            sent = 0
            while sent < size:
                sent += os.sendfile(out, fd, sent, size - sent)
            c.setsockopt(socket.IPPROTO_TCP, socket.TCP_CORK, 0)
        elif variant == "plain":
            c.send(head)
            sent = 0
            while sent < size:
                sent += os.sendfile(out, fd, sent, size - sent)
        else:
            c.sendall(head + body)
    c.close()


def client(port, size, n, cpu):
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {cpu})
    s = socket.create_connection(("127.0.0.1", port))
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    req = b"GET /f HTTP/1.1\r\nHost: x\r\n\r\n"
    buf = bytearray(size + 4096)
    view = memoryview(buf)
    t0 = time.perf_counter()
    for _ in range(n):
        s.send(req)
        got = 0
        need = -1
        while need < 0 or got < need:
            got += s.recv_into(view[got:])
            if need < 0:
                i = buf.find(b"\r\n\r\n", 0, got)
                if i >= 0:
                    need = i + 4 + size
    dt = time.perf_counter() - t0
    s.close()
    return dt / n


def run_one(path, size, variant, n):
    q = mp.Queue()
    p = mp.Process(target=server, args=(q, path, variant, 0))
    p.start()
    port = q.get(timeout=10)
    with mp.Pool(1) as pool:
        per = pool.apply(client, (port, size, n, 1 if (os.cpu_count() or 1) > 1 else 0))
    p.join(10)
    return per


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="4096,65536,262144")
    ap.add_argument("--requests", type=int, default=20000)
    ap.add_argument("--rounds", type=int, default=5)
    a = ap.parse_args()
    if not sys.platform.startswith("linux"):
        raise SystemExit("bench_head_body: Linux only (MSG_MORE, TCP_CORK)")
    results = []
    with tempfile.TemporaryDirectory() as d:
        for size in (int(x) for x in a.sizes.split(",")):
            path = os.path.join(d, "f%d" % size)
            with open(path, "wb") as f:
                f.write(os.urandom(size))
            times = {v: [] for v in VARIANTS}
            for _ in range(a.rounds):
                for v in VARIANTS:
                    if v == "copy" and size > 65536:
                        continue
                    times[v].append(run_one(path, size, v, a.requests))
            base = statistics.median(times["msg_more"])
            for v in VARIANTS:
                if times[v]:
                    med = statistics.median(times[v])
                    results.append({"size": size, "variant": v, "median_us": round(med * 1e6, 2),
                                    "req_per_s": round(1 / med), "ratio_to_msg_more": round(med / base, 3),
                                    "rounds_us": [round(t * 1e6, 2) for t in times[v]]})
                    print("%8d %-9s %8.2f us/resp  x%.3f" % (size, v, med * 1e6, med / base))
    doc = provenance(benchmark="head_body", requests_per_round=a.requests, rounds=a.rounds,
                     transport="loopback TCP, TCP_NODELAY, server CPU 0, client CPU 1",
                     results=results)
    print("wrote", write_result("head_body.json", doc))


if __name__ == "__main__":
    main()
