"""Counters that many threads increment lose no increments.

The fill pool's threads (and admin threads, the pre-warm runner, ...) all count into the
one counter object the app hands to the Upstream service, the Space, the guard and the
shared tier. `c[i] += n` is a read-modify-write: when another thread runs between the
read and the write, one of the two increments is lost. CPython 3.11 switches threads only
at calls and backward jumps, so the loss shows where the right-hand side calls a Python
function or the list is reached through a Python `__getitem__`/`__setitem__`; a
free-threaded build loses plain `+= 1` too. These tests drive the real counter object of a real Server from many
pool threads with a tiny switch interval and require exact totals, in `vars()` (what
/debug/vars and /metrics serve) and over the admin listener itself.
"""

import json
import os
import queue
import re
import sys
import threading
import urllib.request

import pytest

from pulsys import metrics as M
from pulsys.app import ProcessServer, Server
from pulsys.config import build_config
from pulsys.log import configure

THREADS = 16
ROUNDS = 4000


def _config(tmp_path, **extra):
    values = {"listen": "127.0.0.1:0", "admin_listen": "127.0.0.1:0", "upstream": "http://127.0.0.1:9",
              "cache_dir": str(tmp_path / "cache"), "access_log": "off", "listeners": "1",
              "auth": "off", "fill_threads": str(THREADS)}
    values.update(extra)
    return build_config(values, {"HOME": os.environ.get("HOME", "/")})


@pytest.fixture
def fast_switches():
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    yield
    sys.setswitchinterval(old)


def _size(x):
    """A Python-level call between the read and the write of `c[i] += _size(...)`."""
    return len(x)


def _hammer(srv, rounds=ROUNDS):
    """Every counter site the pool threads have, incremented `rounds` times per pool
    thread, all THREADS threads at once. Returns the idents of the threads that ran."""
    start = threading.Barrier(THREADS)
    ran = queue.Queue()
    chunk = b"abc"

    def work():
        start.wait(20)      # all on distinct pool threads, all running together
        up, space, guard = srv.service.c, srv.space.c, srv.guard.counters
        for _ in range(rounds):
            up[M.UPSTREAM_REQUESTS] += 1
            up[M.UPSTREAM_BODY_BYTES] += _size(chunk)
            up[M.SHARED_BODY_BYTES] += 1                # a bucket fill's body bytes (its Origin)
            space[M.EVICTED_BYTES] += 7
            guard[M.UPSTREAM_REFUSED] += 1
        ran.put(threading.get_ident())

    for _ in range(THREADS):
        srv.pool.run(work)
    idents = {ran.get(timeout=60) for _ in range(THREADS)}
    return idents


def _expected(rounds=ROUNDS, threads=THREADS):
    n = rounds * threads
    return {"upstream_requests": n, "upstream_body_bytes": 3 * n, "shared_body_bytes": n,
            "evicted_bytes": 7 * n, "upstream_refused": n}


def _admin_get(srv, path):
    host, port = srv.admin.httpd.server_address[:2]
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open("http://%s:%d%s" % (host, port, path), timeout=10) as r:
        return r.read().decode()


def test_pool_threads_lose_no_increments(tmp_path, fast_switches):
    configure("console", "warning")
    srv = Server(_config(tmp_path)).start()
    try:
        idents = _hammer(srv)
        assert len(idents) == THREADS
        want = _expected()
        d = srv.vars()
        assert {k: d[k] for k in want} == want

        doc = json.loads(_admin_get(srv, "/debug/vars"))
        assert {k: doc[k] for k in want} == want
        text = _admin_get(srv, "/metrics")
        for k, v in want.items():
            m = re.search(r"^pulsys_%s_total (\S+)$" % k, text, re.M)
            assert m is not None and float(m.group(1)) == v, k
    finally:
        srv.stop()
        srv.shutdown()


def test_counts_of_finished_threads_are_kept(tmp_path, fast_switches):
    """Short-lived threads (one per admin request) count too; their totals survive them,
    and the per-thread lists do not pile up."""
    configure("console", "warning")
    srv = Server(_config(tmp_path, admin_listen="off")).start()
    try:
        c = srv.service.c
        for wave in range(20):
            ts = [threading.Thread(target=lambda: [c.__setitem__(M.UPSTREAM_ERRORS,
                                                                 c[M.UPSTREAM_ERRORS] + _size(b"x"))
                                                   for _ in range(100)]) for _ in range(10)]
            for t in ts:
                t.start()
            for t in ts:
                t.join()
        assert srv.vars()["upstream_errors"] == 20 * 10 * 100
        # 200 threads have come and gone: their lists were folded into one
        assert len(srv.pool_counters.lists()) < 20
    finally:
        srv.stop()
        srv.shutdown()


def test_worker_layout_sums_rows_and_pool_threads(tmp_path, fast_switches):
    """--listeners N: /debug/vars is the workers' shared rows (and the dead ones' totals)
    plus every pool thread's counts. The workers are not started here: their rows are
    written directly, as CounterPublisher does."""
    configure("console", "warning")
    srv = ProcessServer(_config(tmp_path, listeners="2", admin_listen="off"))
    try:
        _hammer(srv, rounds=1000)
        table = srv.supervisor.table
        table.view[0 * len(table.row(0)) + M.CACHE_HITS] = 11
        table.view[1 * len(table.row(1)) + M.CACHE_HITS] = 22
        table.retired[M.CACHE_HITS] = 5
        d = srv.vars()
        want = _expected(rounds=1000)
        assert {k: d[k] for k in want} == want
        assert d["cache_hits"] == 38
        assert [w["counters"]["cache_hits"] for w in d["workers"]] == [11, 22]
    finally:
        srv.stop()
        srv.shutdown()


def test_a_thread_that_ends_folds_its_own_counts_not_another_threads_with_equal_counts():
    c = M.PerThread()
    i = M.FILL_FETCHERS
    go_on, counted = threading.Event(), threading.Event()

    def stays():
        c[i] += 1
        counted.set()
        go_on.wait(10)
        c[i] += 1                  # counted after the other thread's list was retired

    t = threading.Thread(target=stays)
    t.start()
    counted.wait(10)
    for _ in range(3):             # short-lived threads whose lists equal the one above
        e = threading.Thread(target=lambda: c.__setitem__(i, c[i] + 1))
        e.start()
        e.join()
    go_on.set()
    t.join()
    assert sum(x[i] for x in c.lists()) == 5
