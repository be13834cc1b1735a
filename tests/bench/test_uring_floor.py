"""scripts/bench_peers/uring_floor.py, the featureless reference server of bench_compare:
it must serve the same bytes as every other peer (keep-alive, several requests per
connection) and answer an unknown path with 404, or its row would compare nothing."""

import http.client
import json
import os
import subprocess
import sys

import pytest

from pulsys.platform import PlatformFacts
from tests.conftest import wait_until

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


def test_floor_with_two_processes_serves_from_both_and_stops_them(tmp_path):
    """--processes 2, pulsys's --listeners layout without pulsys: two forked processes,
    each with its own SO_REUSEPORT socket and ring. Each new connection lands on one of the
    two sockets (the kernel's hash of its ports); of 32 held open, each process holds some."""
    rel, data = "bench/files/resolve/main/f4096.bin", os.urandom(4096)
    (tmp_path / rel).parent.mkdir(parents=True)
    (tmp_path / rel).write_bytes(data)
    port = bench_compare.free_port()
    proc = subprocess.Popen([sys.executable, os.path.join(ROOT, "scripts", "bench_peers", "uring_floor.py"),
                             "--port", str(port), "--root", str(tmp_path), "--processes", "2"],
                            stderr=subprocess.PIPE)
    conns = []
    try:
        assert bench_compare.wait_port(port, proc, timeout=15), proc.stderr.read()
        # the sockets listen before the forks: the port answers before both children exist
        wait_until(lambda: len(bench_compare.process_tree(proc.pid)) >= 3)
        kids = [p for p in bench_compare.process_tree(proc.pid) if p != proc.pid]
        assert len(kids) == 2
        before = {k: len(os.listdir("/proc/%d/fd" % k)) for k in kids}
        for _ in range(32):
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
            for _ in range(3):
                c.request("GET", "/" + rel)
                r = c.getresponse()
                assert (r.status, r.read()) == (200, data)
            conns.append(c)
        held = {k: len(os.listdir("/proc/%d/fd" % k)) - before[k] for k in kids}
        assert sum(held.values()) == 32 and min(held.values()) > 0, held
    finally:
        for c in conns:
            c.close()
        proc.terminate()
        assert proc.wait(10) == 0
    assert not [k for k in kids if os.path.exists("/proc/%d" % k)]


def test_bench_warm_runs_the_floor_as_a_variant_beside_pulsys(tmp_path):
    """bench_warm.py's floor:NAME variants: the floor serves the run's files, and its rows
    carry a rate and a server CPU a request summed over its processes."""
    p = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "bench_warm.py"), "--name", "tiny",
                        "--generator", "loadgen", "--connections", "4", "--duration", "1", "--rounds", "1",
                        "--out-dir", str(tmp_path), "--variant", "pulsys=--iouring --listeners=1",
                        "--variant", "floor:one=--processes=1", "--variant", "floor:two=--processes=2"],
                       cwd=ROOT, capture_output=True, text=True, timeout=150)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    rows = json.loads((tmp_path / "tiny.json").read_text())["results"]
    assert [r["variant"] for r in rows] == ["pulsys", "floor:one", "floor:two"]
    for r in rows:
        assert r["median_req_per_s"] > 0 and r["median_server_cpu_us_per_req"] > 0, r
