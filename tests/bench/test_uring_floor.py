"""scripts/bench_peers/uring_floor.py, the featureless reference server of bench_compare:
it must serve the same bytes as every other peer (keep-alive, several requests per
connection) and answer an unknown path with 404, or its row would compare nothing."""

import http.client
import os
import subprocess
import sys

import pytest

from pulsys.platform import PlatformFacts

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "scripts"))

import bench_compare  # noqa: E402

_FACTS = PlatformFacts.probe()
pytestmark = pytest.mark.skipif(not _FACTS.uring_ok, reason="io_uring: %s" % _FACTS.uring_error)


def test_floor_serves_the_files_keep_alive_and_404s_the_rest(tmp_path):
    files = {"bench/files/resolve/main/f4096.bin": os.urandom(4096),
             "bench/files/resolve/main/f65536.bin": os.urandom(65536)}
    for rel, data in files.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_bytes(data)
    port = bench_compare.free_port()
    proc = subprocess.Popen([sys.executable, os.path.join(ROOT, "scripts", "bench_peers", "uring_floor.py"),
                             "--port", str(port), "--root", str(tmp_path)], stderr=subprocess.PIPE)
    try:
        assert bench_compare.wait_port(port, proc, timeout=15), proc.stderr.read()
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
        for _ in range(3):
            for rel, data in files.items():
                c.request("GET", "/" + rel)
                r = c.getresponse()
                assert (r.status, r.read()) == (200, data)
        c.request("GET", "/bench/files/resolve/main/missing.bin")
        r = c.getresponse()
        assert (r.status, r.read()) == (404, b"")
        c.close()
    finally:
        proc.terminate()
        assert proc.wait(10) == 0
