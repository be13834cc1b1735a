import pytest
from tests.bench.test_bench_micro import COMMIT, HF_HUB_GET, SHA256


def test_general_step_warm_hit_python_cost(benchmark, tmp_path):
    from pulsys import metrics as M
    from pulsys.reactor.conn import READ
    from tests.uring_stub import FusedHitRig

    req = HF_HUB_GET.replace(b"Range: bytes=0-\r\n", b"")
    rig = FusedHitRig(tmp_path, req, COMMIT, SHA256)
    r, conn, n = rig.reactor, rig.conn, len(req)

    def one():
        conn.rbuf[0:n] = req
        conn.rstart, conn.rend, conn.recv_pending, conn.state = 0, n, False, READ
        r.advance(conn)
    try:
        benchmark(one)
        assert r.counters[M.CACHE_HITS] == len(rig.ring.sent) >= 20
    finally:
        rig.close()


def test_fused(benchmark, tmp_path):
    from tests.uring_stub import FusedHitRig
    rig = FusedHitRig(tmp_path, HF_HUB_GET.replace(b"Range: bytes=0-\r\n", b""), COMMIT, SHA256)
    try:
        benchmark(rig.deliver)
    finally:
        rig.close()
