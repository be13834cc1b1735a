"""An idle `--listeners 2` pulsys sleeps. Each worker used to wake 17 times a second (its
counter copy 10, access-log writer 4, recency report 2, reactor 1) and the parent 20
(supervisor and admin polls, 10 each); now a worker wakes for its reactor's
once-a-second sweep only, and the parent's supervisor and admin server sleep until a
worker's link ends or a connection comes. Counted as the
voluntary context switches of every thread of each process (/proc), over a few quiet
seconds after some load, with the access log on."""

import os
import socket
import time

import pytest

WINDOW = 4.0

pytestmark = pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="counts wake-ups in /proc")


def _wakes(pid):
    n = 0
    for tid in os.listdir("/proc/%d/task" % pid):
        try:
            with open("/proc/%d/task/%s/status" % (pid, tid)) as f:
                n += next(int(l.split()[1]) for l in f if l.startswith("voluntary_ctxt_switches:"))
        except (OSError, StopIteration):
            pass                   # a thread that ended meanwhile
    return n


def test_an_idle_server_with_two_workers_does_not_poll(hub, make_server):
    hub.add_repo("org/idle", files={"f.bin": os.urandom(4096)}, lfs={"f.bin"})
    srv = make_server(hub, listeners=2, access_log="on")
    for _ in range(50):            # both workers serve (the kernel spreads connections)
        with socket.create_connection(srv.address, timeout=10) as s:
            s.sendall(b"GET /org/idle/resolve/main/f.bin HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
            while s.recv(1 << 16):
                pass
    assert srv.vars()["requests"] == 50                  # the counters reached the parent
    assert len(srv.worker_pids) == 2
    time.sleep(1.5)                # the last report, log flush and counter copy go out
    pids = [srv.pid] + srv.worker_pids
    w0 = [_wakes(p) for p in pids]
    time.sleep(WINDOW)
    rates = [(_wakes(p) - w) / WINDOW for p, w in zip(pids, w0)]
    assert all(r <= 2.0 for r in rates[1:]), rates       # the reactor's sweep: 1 a second
    # the parent's own: the key sync's poll of the store (2 a second, ADR 0009), the
    # pre-warm queue's (1), the supervisor's check (0.2); one 10-a-second poll back fails
    assert rates[0] <= 8.0, rates
