"""Out of file descriptors (EMFILE), on every reactor backend: the listener stays
readable while accept() fails, so a loop that simply tries again spins a CPU at 100 %
for as long as the clients hold their connections. pulsys stops accepting until its
next sweep (once a second) and serves again once descriptors are free.

pulsys runs as its own process here, with RLIMIT_NOFILE lowered in that process only,
so the CPU time it spends can be read from /proc/PID/stat."""

import json
import os
import resource
import signal
import socket
import subprocess
import sys
import time

import pytest

from tests.conftest import ROOT, wait_until

NOFILE = 96            # the whole server process: interpreter, listener, epoll/ring, logs, ...
CLIENTS = 150          # more than NOFILE; the kernel queues the rest in the listen backlog
CLK_TCK = os.sysconf("SC_CLK_TCK")


def _cpu_seconds(pid):
    fields = open("/proc/%d/stat" % pid).read().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK     # utime + stime (proc(5))


@pytest.fixture
def small_server(tmp_path, backend):
    log = open(tmp_path / "pulsys.log", "wb")
    env = {k: v for k, v in os.environ.items() if not k.startswith("PULSYS_")}
    env.update(PULSYS_LISTEN="127.0.0.1:0", PULSYS_ADMIN_LISTEN="off", PULSYS_LOG_FORMAT="json",
               PULSYS_LISTENERS="1", PULSYS_OFFLINE="1", PULSYS_AUTH="off", PULSYS_ACCESS_LOG="off",
               PULSYS_CACHE_DIR=str(tmp_path / "cache"), PULSYS_IOURING=backend, PYTHONPATH=ROOT)
    proc = subprocess.Popen([sys.executable, "-m", "pulsys"], cwd=ROOT, env=env, stdin=subprocess.DEVNULL,
                            stdout=log, stderr=log,
                            preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (NOFILE, NOFILE)))
    started = {}

    def up():
        for line in (tmp_path / "pulsys.log").read_text().splitlines():
            if '"pulsys started"' in line:
                started.update(json.loads(line))
                return True
        return proc.poll() is not None
    try:
        assert wait_until(up, timeout=30) and started, (tmp_path / "pulsys.log").read_text()
        host, port = started["listen"].rsplit("/", 1)[1].rsplit(":", 1)
        yield proc, (host, int(port)), tmp_path / "pulsys.log"
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)
        log.close()


def _healthz(address):
    s = socket.create_connection(address, timeout=5)
    try:
        s.sendall(b"GET /healthz HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
        data = b""
        while True:
            chunk = s.recv(4096)
            if not chunk:
                return data
            data += chunk
    finally:
        s.close()


def test_running_out_of_descriptors_neither_spins_nor_stops_the_server(small_server):
    proc, address, log = small_server
    assert _healthz(address).startswith(b"HTTP/1.1 200 ")
    held = []
    try:
        for _ in range(CLIENTS):
            held.append(socket.create_connection(address, timeout=5))
        time.sleep(1.0)                                  # accept has hit EMFILE by now
        cpu0 = _cpu_seconds(proc.pid)
        time.sleep(1.5)
        spent = _cpu_seconds(proc.pid) - cpu0
        # retrying at once spent 0.65-1.0 s of CPU in this 1.5 s (both backends, 2-CPU VM)
        assert spent < 0.3, "%.2f s of CPU in 1.5 s while out of descriptors" % spent
        assert "out of file descriptors" in log.read_text()
    finally:
        for s in held:
            s.close()
    # descriptors come back as the server reads EOF on the queued connections
    def served():
        try:
            return _healthz(address).startswith(b"HTTP/1.1 200 ")
        except OSError:
            return False
    assert wait_until(served, timeout=10)
    assert proc.poll() is None
