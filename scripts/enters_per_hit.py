"""io_uring_enter calls and SQEs per warm hit, from pulsys's own counters.

Starts the fake Hub and an in-process pulsys (--iouring, one listener), warms two
files (4 KiB: body in memory, one send; 1 MiB: sendfile), then runs the floor tests'
closed-loop client at several concurrencies and reads the counters before and after.
Writes results/<machine>/uring_enters.json with provenance.

    python scripts/enters_per_hit.py
"""

import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
sys.path.insert(0, ROOT)
from provenance import provenance, write_result  # noqa: E402

from pulsys.app import Server  # noqa: E402
from pulsys.config import build_config  # noqa: E402
from pulsys.log import configure  # noqa: E402
from pulsys.testing.fake_hub import FakeHub  # noqa: E402

CASES = [(1, "f", 4096, 4000), (16, "f", 4096, 8000), (64, "f", 4096, 8000), (16, "g", 1 << 20, 400)]


def main():
    configure("console", "warning")
    hub = FakeHub(record_requests=False).start()
    hub.add_repo("bench/f", files={"f.bin": os.urandom(4096), "g.bin": os.urandom(1 << 20)},
                 lfs={"f.bin", "g.bin"})
    with tempfile.TemporaryDirectory() as cache:
        srv = Server(build_config({"listen": "127.0.0.1:0", "admin_listen": "off", "upstream": hub.url, "auth": "off",
                                   "cache_dir": cache, "allow_upstream_host": [hub.cdn_netloc],
                                   "access_log": "off", "listeners": "1", "iouring": "on"}, {})).start()
        client = os.path.join(ROOT, "tests", "floors", "loadclient.py")

        def load(n, c, name, size):
            subprocess.run([sys.executable, client, "127.0.0.1", str(srv.address[1]),
                            "/bench/f/resolve/main/%s.bin" % name, str(n), str(c), str(size)],
                           check=True, capture_output=True, timeout=300)
        try:
            load(200, 4, "f", 4096)
            load(20, 2, "g", 1 << 20)
            rows = []
            for c, name, size, n in CASES:
                v0 = srv.vars()
                load(n, c, name, size)
                v1 = srv.vars()
                d = {k: v1[k] - v0[k] for k in ("cache_hits", "uring_enter", "uring_sqes", "sendfile_eagain")}
                row = {"concurrency": c, "size": size, "hits": d["cache_hits"],
                       "enters_per_hit": round(d["uring_enter"] / d["cache_hits"], 4),
                       "sqes_per_hit": round(d["uring_sqes"] / d["cache_hits"], 3),
                       "sendfile_eagain_per_hit": round(d["sendfile_eagain"] / d["cache_hits"], 3)}
                rows.append(row)
                print(row)
        finally:
            srv.stop()
            srv.shutdown()
            hub.stop()
    print("wrote", write_result("uring_enters.json", provenance(
        benchmark="uring_enters_per_hit", backend="uring", listeners=1, results=rows)))


if __name__ == "__main__":
    main()
