"""Shared fixtures: a fake Hub on loopback, and pulsys servers: in-process (one
listener) or the real multi-process layout (`python -m pulsys --listeners N`)."""

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request

import pytest

from pulsys.app import Server
from pulsys.config import build_config
from pulsys.log import configure
from pulsys.testing.fake_hub import FakeHub


@pytest.fixture
def hub():
    h = FakeHub().start()
    yield h
    h.stop()


ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
COUNTER_SYNC = 0.25   # > a worker's counter copy tick (pulsys.reactor.base.TICK, 0.1 s)


class ProcServer:
    """`python -m pulsys --listeners N` (N > 1): the parent and its worker processes.
    `root`: the source tree it runs from (a benchmark's baseline commit, say).

    Offers what tests use of an in-process Server: url, address, vars(), load_stats,
    stop() and shutdown(); plus pid, admin_url, metrics_text() and log_text()."""

    def __init__(self, settings, log_path, start_timeout=30.0, argv=None, root=ROOT):
        env = {k: v for k, v in os.environ.items() if not k.startswith("PULSYS_")}
        for k, v in settings.items():
            env["PULSYS_" + k.upper()] = ",".join(v) if isinstance(v, list) else (
                ("1" if v else "0") if isinstance(v, bool) else str(v))
        env.update(PULSYS_LISTEN="127.0.0.1:0", PULSYS_ADMIN_LISTEN="127.0.0.1:0",
                   PULSYS_LOG_FORMAT="json", PULSYS_LOG_LEVEL="info")
        env["PYTHONPATH"] = os.pathsep.join([root] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
        self.log_path = log_path
        self._log = open(log_path, "wb")
        self.proc = subprocess.Popen(argv or [sys.executable, "-m", "pulsys"], cwd=root, env=env,
                                     stdin=subprocess.DEVNULL, stdout=self._log, stderr=self._log)
        self.pid = self.proc.pid
        self._load_stats = None
        started = self._wait_started(start_timeout)
        try:
            host, port = started["listen"].rsplit("/", 1)[1].rsplit(":", 1)
            self.address = (host, int(port))
            self.url = started["listen"]
            self.admin_url = started["admin"]
            self.worker_pids = started.get("workers", [])
        except BaseException:
            self.stop()
            self.shutdown()
            raise

    def _wait_started(self, timeout):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for line in self.log_text().splitlines():
                if '"pulsys started"' in line:
                    return json.loads(line)
            if self.proc.poll() is not None:
                break
            time.sleep(0.05)
        self.stop()
        self.shutdown()
        raise AssertionError("pulsys did not start:\n" + self.log_text())

    def log_text(self):
        with open(self.log_path, "rb") as f:
            return f.read().decode("utf-8", "replace")

    def get(self, path):
        with urllib.request.build_opener(urllib.request.ProxyHandler({})).open(
                self.admin_url + path, timeout=10) as r:
            return r.read()

    def vars(self, sync=True):
        """/debug/vars, after the workers' counters had time to reach the parent."""
        if sync:
            time.sleep(COUNTER_SYNC)
        return json.loads(self.get("/debug/vars"))

    def metrics_text(self):
        return self.get("/metrics").decode()

    @property
    def load_stats(self):
        if self._load_stats is None:
            self._load_stats = self.vars(sync=False)["startup_index_load"]
        return self._load_stats

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)

    def shutdown(self, timeout=15.0):
        try:
            rc = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            rc = self.proc.wait(5)
        self._log.close()
        return rc


def vars_when(srv, ready, timeout=10.0):
    """srv.vars() once ready(vars) holds, or at the deadline (the caller's assertion then
    says what is missing); srv is either kind make_server starts. For counts that trail
    the answers: the io_uring loop counts its fused hits when the load pauses
    (FOLD_IDLE), and on a loaded CI machine its thread may not run again for longer
    than COUNTER_SYNC (one CI run read 9,966 warm hits of 10,000)."""
    last = []

    def read():
        last[:] = [srv.vars()]
        return ready(last[0])
    wait_until(read, timeout)
    return last[0]


@pytest.fixture
def listeners():
    """The --listeners of servers from make_server; test modules parametrize it."""
    return 1


@pytest.fixture
def make_server(tmp_path, listeners):
    """make_server(hub, **settings) -> a started pulsys on free loopback ports: an in-process
    Server for one listener, a ProcServer (real worker processes) for more."""
    configure("console", "warning")
    started = []
    default_listeners = listeners

    def make(hub, cache_dir=None, listeners=None, **settings):
        n = default_listeners if listeners is None else listeners
        values = {"listen": "127.0.0.1:0", "admin_listen": "off", "upstream": hub.url,
                  "cache_dir": cache_dir or str(tmp_path / "cache"),
                  "allow_upstream_host": [hub.cdn_netloc], "access_log": "off", "listeners": str(n),
                  "auth": "off"}     # tests of API keys pass auth="required" (tests/auth/)
        values.update({k: (v if isinstance(v, (list, bool)) else str(v)) for k, v in settings.items()})
        if n > 1:
            del values["listen"], values["admin_listen"]
            s = ProcServer(values, str(tmp_path / ("pulsys-%d.log" % len(started))))
        else:
            s = Server(build_config(values, {"HOME": os.environ.get("HOME", "/")})).start()
            s.url = "http://%s:%d" % s.address
        started.append(s)
        return s

    yield make
    for s in started:
        s.stop()
        s.shutdown()


class RawClient:
    """A keep-alive HTTP/1.1 client on a raw socket, for exact wire checks."""

    def __init__(self, address, timeout=10):
        self.sock = socket.create_connection(address, timeout=timeout)
        self.buf = b""

    def send(self, data):
        self.sock.sendall(data)

    def _fill(self):
        chunk = self.sock.recv(1 << 20)
        if not chunk:
            raise EOFError("connection closed")
        self.buf += chunk

    def response(self, head_only=False):
        """-> (status, headers dict lower-case, body bytes)."""
        while b"\r\n\r\n" not in self.buf:
            self._fill()
        head, self.buf = self.buf.split(b"\r\n\r\n", 1)
        lines = head.decode("latin-1").split("\r\n")
        status = int(lines[0].split(" ")[1])
        headers = {}
        for line in lines[1:]:
            k, _, v = line.partition(":")
            headers[k.strip().lower()] = v.strip()
        n = 0 if head_only or status in (204, 304) else int(headers.get("content-length", 0))
        while len(self.buf) < n:
            self._fill()
        body, self.buf = self.buf[:n], self.buf[n:]
        return status, headers, body

    def closed(self, wait=5.0):
        """True when the server closed the connection (EOF) within `wait` seconds."""
        self.sock.settimeout(wait)
        try:
            while True:
                data = self.sock.recv(65536)
                if not data:
                    return True
                self.buf += data
        except (ConnectionResetError, BrokenPipeError):
            return True
        except socket.timeout:
            return False

    def close(self):
        self.sock.close()


@pytest.fixture
def raw_client():
    clients = []

    def make(address, timeout=10):
        c = RawClient(address, timeout)
        clients.append(c)
        return c
    yield make
    for c in clients:
        c.close()


def wait_until(pred, timeout=10.0, interval=0.02):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(interval)
    return False


@pytest.fixture(scope="session")
def postgres():
    """A real PostgreSQL server (tests/postgres.py) for the whole session, stopped by PID
    at the end. Fails, never skips, when it cannot be had."""
    from tests.postgres import PostgresServer, PostgresUnavailable
    try:
        srv = PostgresServer.start()
    except PostgresUnavailable as e:
        pytest.fail(str(e), pytrace=False)
    yield srv
    srv.stop()


@pytest.fixture(params=["sqlite", "postgres"])
def db_url(request, tmp_path):
    """A fresh, empty admin store: a SQLite file, or a new database on the session's
    PostgreSQL server. Tests that take it run once per backend."""
    if request.param == "sqlite":
        return "sqlite://" + str(tmp_path / "admin.sqlite3")
    return request.getfixturevalue("postgres").create_database()
