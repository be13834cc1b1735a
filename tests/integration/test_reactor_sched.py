"""--reactor-sched: the policy lands on the reactor threads and nowhere else, in-process
(one listener) and in every worker process (two), and the server serves under it. The
kernel is asked, not pulsys: sched_getscheduler(2) of each thread of the processes."""

import os
import subprocess
import sys
import threading

import pytest

from pulsys.platform import PlatformFacts
from tests.multiproc.test_listeners import one_request

pytestmark = pytest.mark.skipif(not hasattr(os, "SCHED_BATCH"), reason="SCHED_BATCH is Linux-only")

SMALL = os.urandom(4096)
PATH = "/org/m/resolve/main/small.safetensors"


@pytest.fixture
def repo(hub):
    return hub.add_repo("org/m", files={"small.safetensors": SMALL})


def policies(pid):
    """{thread id: scheduling policy} of every thread of process `pid`."""
    out = {}
    for tid in os.listdir("/proc/%d/task" % pid):
        try:
            out[int(tid)] = os.sched_getscheduler(int(tid))
        except (ProcessLookupError, FileNotFoundError):    # a thread that ended meanwhile
            pass
    return out


def batch_threads(pid):
    return sorted(t for t, p in policies(pid).items() if p == os.SCHED_BATCH)


@pytest.mark.parametrize("backend", ["on", "off"], ids=["uring", "selector"])
def test_batch_is_the_reactor_threads_policy_and_no_other_threads(hub, repo, make_server, backend):
    if backend == "on" and not PlatformFacts.probe().uring_ok:
        pytest.skip("io_uring is not usable here")
    srv = make_server(hub, iouring=backend, reactor_sched="batch")
    assert one_request(srv.address, PATH) == (200, SMALL)
    reactors = sorted(t.native_id for t in threading.enumerate() if t.name.startswith("pulsys-reactor-"))
    assert len(reactors) == 1
    # (the first request was a fill: the pool started its thread from the reactor's)
    names = [t.name for t in threading.enumerate() if t.native_id in batch_threads(os.getpid())]
    assert batch_threads(os.getpid()) == reactors, names
    assert one_request(srv.address, PATH) == (200, SMALL)       # served under it, warm


def test_normal_is_the_default_and_leaves_every_thread_alone(hub, repo, make_server):
    srv = make_server(hub)
    assert one_request(srv.address, PATH) == (200, SMALL)
    assert any(t.name.startswith("pulsys-reactor-") for t in threading.enumerate())
    assert batch_threads(os.getpid()) == []


def test_each_worker_runs_its_reactor_under_batch_and_the_parent_none(hub, repo, make_server):
    srv = make_server(hub, listeners=2, reactor_sched="batch")
    for _ in range(8):
        assert one_request(srv.address, PATH) == (200, SMALL)
    workers = [w["pid"] for w in srv.vars(sync=False)["workers"]]
    assert len(workers) == 2
    for pid in workers:
        got = policies(pid)
        assert len([p for p in got.values() if p == os.SCHED_BATCH]) == 1, got   # the reactor's
    assert batch_threads(srv.pid) == []


def test_a_policy_that_does_not_exist_is_a_cli_error_before_anything_starts(tmp_path):
    p = subprocess.run([sys.executable, "-m", "pulsys", "--reactor-sched", "realtime",
                        "--cache-dir", str(tmp_path)], capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and "Traceback" not in p.stderr
    assert "--reactor-sched 'realtime': choose one of normal, batch" in p.stderr
    assert not os.listdir(tmp_path)
