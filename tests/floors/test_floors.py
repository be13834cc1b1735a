"""Warm-path floors, asserted from counters and allocator statistics (never from time):

- allocation floor: after warm-up, 10,000 warm hits over loopback leave the server's
  allocated-block count flat (net blocks per hit below ALLOC_BLOCKS_PER_HIT) and
  tracemalloc attributes no growth to pulsys modules;
- syscall floor: the io_uring backend makes fewer than one io_uring_enter per warm hit
  at 16 concurrent connections (its own counter).
"""

import json
import os
import subprocess
import sys

import pytest

from pulsys.platform import PlatformFacts
from tests.conftest import vars_when

ALLOC_BLOCKS_PER_HIT = 0.05      # net new allocated blocks per warm hit, after warm-up
# tracemalloc growth attributed to pulsys/ over the run: less than two connections' 64 KiB
# buffers (closed connections must be let go, including from the selector's last event
# batch), while a leak of a single 16-byte object per hit would add 160 KB over HITS
PULSYS_GROWTH_BYTES = 128 * 1024
HITS = 10_000
SIZE = 4096
HERE = os.path.dirname(os.path.abspath(__file__))

_FACTS = PlatformFacts.probe()
BACKENDS = [pytest.param("on", id="uring", marks=pytest.mark.skipif(
                not _FACTS.uring_ok, reason="io_uring: %s" % _FACTS.uring_error)),
            pytest.param("off", id="selector")]


def load(srv, total, conns=16, path="/bench/f/resolve/main/f.bin"):
    host, port = srv.address
    p = subprocess.run([sys.executable, os.path.join(HERE, "loadclient.py"), host, str(port), path,
                        str(total), str(conns), str(SIZE)], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0 and not p.stderr, p.stderr[-2000:] + repr(srv.vars())
    return int(p.stdout)


@pytest.fixture
def warm_server(hub, make_server):
    def make(iouring):
        hub.add_repo("bench/f", files={"f.bin": os.urandom(SIZE)}, lfs={"f.bin"})
        srv = make_server(hub, listeners=1, iouring=iouring, access_log="on")
        srv.access_writer.stream = open(os.devnull, "w")   # the product default, output discarded
        assert load(srv, 2000) == 2000              # warm-up: caches, free lists, memo
        return srv
    return make


@pytest.mark.parametrize("iouring", BACKENDS)
def test_allocation_floor(tmp_path, iouring):
    # measured in a process of its own (alloc_probe.py says why)
    p = subprocess.run([sys.executable, os.path.join(HERE, "alloc_probe.py"), iouring, str(tmp_path / "cache"),
                        str(HITS), str(SIZE)], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    got = json.loads(p.stdout.strip().splitlines()[-1])
    assert got["served"] == HITS and got["cache_hits"] >= HITS, got
    assert got["per_hit"] < ALLOC_BLOCKS_PER_HIT, "%.3f net blocks per warm hit" % got["per_hit"]
    assert got["pulsys_growth"] < PULSYS_GROWTH_BYTES, "pulsys grew by %d bytes: %s; by line: %s" % (
        got["pulsys_growth"], got["growth_top"], got["growth_lines"])


@pytest.mark.skipif(not _FACTS.uring_ok, reason="io_uring: %s" % _FACTS.uring_error)
def test_io_uring_enters_per_warm_hit_below_one_at_c16(warm_server):
    srv = warm_server("on")
    v0 = srv.vars()
    assert load(srv, HITS, conns=16) == HITS
    v1 = vars_when(srv, lambda v: v["cache_hits"] >= v0["cache_hits"] + HITS)
    hits = v1["cache_hits"] - v0["cache_hits"]
    enters = v1["uring_enter"] - v0["uring_enter"]
    assert hits >= HITS, "%d warm hits counted of %d served" % (hits, HITS)
    assert enters / hits < 1.0, "%d io_uring_enter calls for %d warm hits" % (enters, hits)
