"""Count the syscalls pulsys makes per warm hit, with strace -c on the reactor thread.

Starts the fake Hub and pulsys, warms one file, attaches `strace -c -f`, sends N
keep-alive GETs over C concurrent connections (bounded count), detaches, and prints
syscalls per request. Needs strace (Debian package `strace`).

    python scripts/syscalls_per_hit.py --requests 5000 --connections 1 --size 4096
"""

import argparse
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(HERE))
from bench_warm import start_pulsys  # noqa: E402
from provenance import provenance, write_result  # noqa: E402

from pulsys.testing.fake_hub import FakeHub  # noqa: E402


def client(port, path, n, size, errors):
    s = socket.create_connection(("127.0.0.1", port))
    req = ("GET %s HTTP/1.1\r\nHost: x\r\n\r\n" % path).encode()
    buf = bytearray(size + 4096)
    view = memoryview(buf)
    try:
        for _ in range(n):
            s.sendall(req)
            got, need = 0, -1
            while need < 0 or got < need:
                k = s.recv_into(view[got:])
                if not k:
                    raise EOFError
                got += k
                if need < 0:
                    i = buf.find(b"\r\n\r\n", 0, got)
                    if i >= 0:
                        need = i + 4 + size
    except Exception as e:  # noqa: BLE001 - reported below
        errors.append(e)
    finally:
        s.close()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=5000)
    ap.add_argument("--connections", type=int, default=1)
    ap.add_argument("--size", type=int, default=4096)
    ap.add_argument("--iouring", choices=("on", "off"), default="off",
                    help="the reactor backend: io_uring, or the portable selector (default)")
    ap.add_argument("--record", action="store_true", help="write results/<machine>/syscalls.json")
    a = ap.parse_args()
    if not shutil.which("strace"):
        raise SystemExit("syscalls_per_hit: strace not found (apt-get install strace)")
    hub = FakeHub(record_requests=False).start()
    hub.add_repo("bench/s", files={"f.bin": os.urandom(a.size)}, lfs={"f.bin"})
    with tempfile.TemporaryDirectory() as cache:
        p, url = start_pulsys(hub, cache, ["--access-log", "off", "--iouring" if a.iouring == "on" else "--no-iouring"])
        try:
            path = "/bench/s/resolve/main/f.bin"
            urllib.request.urlopen(url + path).read()
            out = tempfile.mktemp()
            st = subprocess.Popen(["strace", "-c", "-f", "-o", out, "-p", str(p.pid)],
                                  stderr=subprocess.DEVNULL)
            time.sleep(1.0)
            port = int(url.rsplit(":", 1)[1])
            errors = []
            per = a.requests // a.connections
            ts = [threading.Thread(target=client, args=(port, path, per, a.size, errors))
                  for _ in range(a.connections)]
            for t in ts:
                t.start()
            for t in ts:
                t.join(120)
            time.sleep(0.5)
            st.terminate()
            st.wait(10)
            text = open(out).read()
            os.unlink(out)
        finally:
            p.terminate()
            p.wait(10)
    hub.stop()
    if errors:
        raise SystemExit("syscalls_per_hit: client errors: %r" % errors[:3])
    n = per * a.connections
    counts = {m.group(2): int(m.group(1)) for m in re.finditer(r"^\s*[\d.]+\s+[\d.]+\s+\d+\s+(\d+)\s+(?:\d+\s+)?(\w+)$", text, re.M)
              if m.group(2) != "total"}
    total = sum(counts.values())
    print(text)
    print("requests=%d  syscalls=%d  per request=%.2f" % (n, total, total / n))
    for name, c in sorted(counts.items(), key=lambda kv: -kv[1]):
        print("  %-16s %6.2f / request" % (name, c / n))
    if a.record:
        doc = provenance(benchmark="syscalls_per_hit", backend="iouring" if a.iouring == "on" else "selector",
                         requests=n,
                         connections=a.connections, size=a.size,
                         per_request={k: round(v / n, 3) for k, v in counts.items()},
                         total_per_request=round(total / n, 3))
        print("wrote", write_result("syscalls_c%d.json" % a.connections, doc))


if __name__ == "__main__":
    main()
