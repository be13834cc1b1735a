"""--listeners N > 1: one worker process per listening socket, the upstream plane in the
parent. Real processes on loopback, against the fake Hub (docs/decisions/0006)."""

import concurrent.futures
import json
import os
import signal
import socket
import time

import pytest
import requests
from prometheus_client.parser import text_string_to_metric_families

from pulsys.config import build_config
from pulsys.testing.fake_hub import sha256_hex
from tests.conftest import vars_when, wait_until

BODY = os.urandom(3 * 1024 * 1024 + 5)
SMALL = os.urandom(4096)
LFS = "/org/m/resolve/main/model.safetensors"


@pytest.fixture
def repo(hub):
    return hub.add_repo("org/m", files={"model.safetensors": BODY, "small.safetensors": SMALL})


@pytest.fixture
def srv(hub, repo, make_server):
    return make_server(hub, listeners=2)


def one_request(address, path, extra=b""):
    """A new connection, one GET, the whole response; -> (status, body)."""
    with socket.create_connection(address, timeout=30) as s:
        s.sendall(b"GET %s HTTP/1.1\r\nHost: t\r\nConnection: close\r\n%s\r\n" % (path.encode(), extra))
        data = bytearray()
        while True:
            chunk = s.recv(1 << 20)
            if not chunk:
                break
            data += chunk
    head, _, body = bytes(data).partition(b"\r\n\r\n")
    return int(head.split(b" ", 2)[1]), body


def per_worker(v, name):
    return [w["counters"][name] for w in v["workers"]]


def test_default_listeners_is_the_number_of_cpus():
    assert build_config({}, {"HOME": "/"}).listeners == (os.cpu_count() or 1)


def test_connections_are_spread_over_both_workers(srv):
    v = srv.vars(sync=False)
    assert v["listeners"] == 2 and len(v["workers"]) == 2
    assert all(w["alive"] and w["ready"] and w["pid"] != srv.pid for w in v["workers"])
    assert one_request(srv.address, "/org/m/resolve/main/small.safetensors")[1] == SMALL
    for _ in range(64):
        st, body = one_request(srv.address, "/org/m/resolve/main/small.safetensors")
        assert st == 200 and body == SMALL
    v = vars_when(srv, lambda v: v["cache_hits"] >= 64)
    accepted = per_worker(v, "connections_accepted")
    assert sum(accepted) == 65 and min(accepted) > 0, accepted
    assert v["connections_accepted"] == 65 and v["cache_hits"] >= 64


def test_a_file_filled_through_one_worker_is_warm_in_the_other_without_upstream(hub, srv):
    st, body = one_request(srv.address, LFS)
    assert st == 200 and body == BODY and hub.body_fetches(sha256_hex(BODY)) == 1
    time.sleep(0.05)                          # the index broadcast is a few microseconds behind
    before = srv.vars()
    filler = per_worker(before, "cache_misses").index(1)
    hub.reset_counters()
    for _ in range(40):
        st, body = one_request(srv.address, LFS)
        assert st == 200 and body == BODY
    after = srv.vars()
    assert hub.count() == 0
    assert after["cache_misses"] == before["cache_misses"] == 1      # every worker answered alone
    other = 1 - filler
    assert per_worker(after, "cache_hits")[other] > 0
    assert after["upstream_requests"] == before["upstream_requests"]


def test_concurrent_cold_requests_over_both_workers_fetch_the_body_once(hub, srv):
    hub.faults.throttle(20 * 1024 * 1024)

    def fetch(i):
        rng = {"Range": "bytes=%d-%d" % (i * 1000, i * 1000 + 999)} if i % 2 else {}
        return i, requests.get(srv.url + LFS, headers=rng, timeout=30)
    with concurrent.futures.ThreadPoolExecutor(16) as ex:
        results = list(ex.map(fetch, range(16)))
    hub.faults.clear()
    for i, r in results:
        assert r.content == (BODY[i * 1000:i * 1000 + 1000] if i % 2 else BODY)
    assert hub.body_fetches(sha256_hex(BODY)) == 1
    assert hub.body_bytes(sha256_hex(BODY)) == len(BODY)
    v = srv.vars()
    assert min(per_worker(v, "requests")) > 0 and v["requests"] == 16
    assert v["fills_started"] == 1


def test_a_fill_streams_to_clients_of_both_workers_while_it_lands(hub, srv):
    hub.faults.throttle(1024 * 1024)          # ~3 s for the whole file

    def stream(_):
        t0 = time.monotonic()
        r = requests.get(srv.url + LFS, stream=True, timeout=30)
        first = next(r.iter_content(65536))
        t_first = time.monotonic() - t0
        rest = b"".join(r.iter_content(1 << 20))
        return first + rest, t_first, time.monotonic() - t0
    # 24 connections: SO_REUSEPORT hashes each to a worker, so all landing on one of
    # two workers is ~1e-7 likely (with 8 it happened in a CI run)
    with concurrent.futures.ThreadPoolExecutor(24) as ex:
        results = list(ex.map(stream, range(24)))
    hub.faults.clear()
    for body, t_first, t_all in results:
        assert body == BODY and t_first < t_all / 2, (t_first, t_all)
    assert hub.body_fetches(sha256_hex(BODY)) == 1
    assert min(per_worker(srv.vars(), "requests")) > 0


def test_debug_vars_sum_the_workers_and_the_pool(hub, srv):
    for _ in range(20):
        assert one_request(srv.address, "/org/m/resolve/main/small.safetensors")[0] == 200
    v = srv.vars()
    for name in ("requests", "cache_hits", "cache_misses", "bytes_served", "connections_accepted"):
        assert v[name] == sum(per_worker(v, name)), name
    assert v["requests"] == 20 and v["upstream_requests"] >= 1 and v["fills_completed"] == 1
    assert sum(per_worker(v, "upstream_requests")) == 0         # the parent talks to upstream
    assert v["pid"] == srv.pid and {w["pid"] for w in v["workers"]} == set(srv.worker_pids)


def test_metrics_are_prometheus_text_with_the_backend_label(srv):
    for _ in range(5):
        one_request(srv.address, "/org/m/resolve/main/small.safetensors")
    v = srv.vars()
    fams = {f.name: f for f in text_string_to_metric_families(srv.metrics_text())}
    assert fams["pulsys_requests"].type == "counter"
    assert fams["pulsys_requests"].samples[0].name == "pulsys_requests_total"
    assert fams["pulsys_requests"].samples[0].value == v["requests"] == 5
    for name in ("index_entries", "fills_in_flight", "open_connections", "listeners"):
        assert fams["pulsys_" + name].type == "gauge"
    assert fams["pulsys_listeners"].samples[0].value == 2
    info = fams["pulsys_backend_info"].samples[0]     # an info metric is a gauge in text format 0.0.4
    assert info.name == "pulsys_backend_info" and info.value == 1
    assert info.labels["backend"] == v["backend"] and info.labels["sender"] == v["sender"]


def test_a_killed_worker_is_restarted_and_the_server_keeps_serving(srv):
    for _ in range(10):
        one_request(srv.address, "/org/m/resolve/main/small.safetensors")
    before = srv.vars()
    victim = before["workers"][0]["pid"]
    os.kill(victim, signal.SIGKILL)

    def restarted():
        w = srv.vars(sync=False)["workers"][0]
        return w["pid"] != victim and w["alive"] and w["ready"] and w["restarts"] == 1
    assert wait_until(restarted, timeout=20)
    for _ in range(40):
        st, body = one_request(srv.address, "/org/m/resolve/main/small.safetensors")
        assert st == 200 and body == SMALL
    after = srv.vars()
    assert after["requests"] == before["requests"] + 40          # the dead worker's counts are kept
    assert min(per_worker(after, "requests")) > 0
    assert srv.log_text().count('"worker exited; restarting it"') == 1


def _gone(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_stop_signal_exits_0_and_leaves_no_worker(srv, sig):
    assert one_request(srv.address, "/org/m/resolve/main/small.safetensors")[0] == 200
    pids = [w["pid"] for w in srv.vars(sync=False)["workers"]]
    os.kill(srv.pid, sig)
    assert srv.shutdown() == 0, srv.log_text()
    assert wait_until(lambda: all(_gone(p) for p in pids), timeout=5), pids
    assert '"pulsys stopped"' in srv.log_text()


def test_a_crash_loop_makes_the_parent_exit_1(srv):
    victims = 0
    deadline = time.monotonic() + 20
    while srv.proc.poll() is None and time.monotonic() < deadline:
        try:
            w = srv.vars(sync=False)["workers"][victims % 2]
        except OSError:
            break                             # the admin listener went away: the parent is exiting
        if w["alive"] and w["ready"]:
            try:
                os.kill(w["pid"], signal.SIGKILL)
                victims += 1
            except ProcessLookupError:
                pass                          # it died since the parent said alive (the parent exiting)
        time.sleep(0.05)
    assert srv.shutdown() == 1
    log = srv.log_text()
    assert "workers keep dying" in log and "pulsys: error:" in log
    assert victims >= 6                       # a 7th kill may land while the parent exits


def _ppid(pid):
    with open("/proc/%d/stat" % pid) as f:
        return int(f.read().rsplit(")", 1)[1].split()[1])


@pytest.mark.skipif(not os.path.exists("/proc/self/stat"), reason="reads /proc")
def test_workers_are_forked_by_the_fork_server_and_restarts_are_too(srv):
    workers = srv.vars(sync=False)["workers"]
    assert [w["started_by"] for w in workers] == ["fork server"] * 2
    zygotes = {_ppid(w["pid"]) for w in workers}
    assert len(zygotes) == 1 and zygotes != {srv.pid}
    zygote = zygotes.pop()
    assert _ppid(zygote) == srv.pid
    with open("/proc/%d/cmdline" % srv.pid, "rb") as f:
        server_cmdline = f.read()
    with open("/proc/%d/cmdline" % workers[0]["pid"], "rb") as f:
        assert f.read() == server_cmdline           # no exec: the server's interpreter, forked
    os.kill(workers[0]["pid"], signal.SIGKILL)
    assert wait_until(lambda: srv.vars(sync=False)["workers"][0]["restarts"] == 1
                      and srv.vars(sync=False)["workers"][0]["ready"], timeout=10)
    again = srv.vars(sync=False)["workers"][0]
    assert again["started_by"] == "fork server" and _ppid(again["pid"]) == zygote
    assert one_request(srv.address, "/org/m/resolve/main/small.safetensors") == (200, SMALL)


@pytest.mark.skipif(not os.path.exists("/proc/self/stat"), reason="reads /proc")
def test_a_dead_worker_is_never_shown_ready_while_it_is_restarted(srv):
    """/debug/vars while worker 0 is killed and restarted: no view shows the restart
    counted and the worker ready with the dead one's pid."""
    old = srv.vars(sync=False)["workers"][0]["pid"]
    os.kill(old, signal.SIGKILL)
    seen = []
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        w = srv.vars(sync=False)["workers"][0]
        seen.append((w["restarts"], w["ready"], w["pid"]))
        if w["restarts"] == 1 and w["ready"] and w["pid"] != old:
            break
    assert [v for v in seen if v == (1, True, old)] == []
    assert seen[-1][:2] == (1, True) and seen[-1][2] != old, seen[-5:]
    assert os.path.exists("/proc/%d" % seen[-1][2])


@pytest.mark.skipif(not os.path.exists("/proc/self/stat"), reason="reads /proc")
def test_a_killed_server_leaves_no_fork_server_and_no_worker(srv):
    pids = [w["pid"] for w in srv.vars(sync=False)["workers"]]
    pids.append(_ppid(pids[0]))
    os.kill(srv.pid, signal.SIGKILL)
    srv.shutdown()
    assert wait_until(lambda: all(_gone(p) for p in pids), timeout=10), pids


def _mapped(pid, names):
    with open("/proc/%d/maps" % pid) as f:
        return {n for line in f for n in names if n in line.rsplit("/", 1)[-1]}


@pytest.mark.skipif(not os.path.exists("/proc/self/maps"), reason="reads /proc")
def test_workers_do_not_map_what_only_the_upstream_plane_loads(srv):
    # the fork server forks before pulsys.app imports the key store (sqlite3) and
    # psycopg2: their C extensions are in the server's address space, never in a worker's
    names = ("_sqlite3.", "psycopg2")
    assert _mapped(srv.pid, names) >= {"_sqlite3."}
    for w in srv.vars(sync=False)["workers"]:
        assert _mapped(w["pid"], names) == set(), w


def test_the_start_log_says_how_the_heap_was_set(srv):
    """glibc's malloc thresholds are fixed before the fork server starts, so every worker
    inherits them (pulsys/platform/heap.py); the start log says so."""
    started = [json.loads(line) for line in srv.log_text().splitlines() if '"pulsys started"' in line]
    assert [s["heap"] for s in started] == ["trim 64 MiB, mmap 32 MiB"]
