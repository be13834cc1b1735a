"""Shared fixtures: a fake Hub on loopback and in-process pulsys servers."""

import os
import socket
import time

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


@pytest.fixture
def make_server(tmp_path):
    """make_server(hub, **settings) -> a started in-process pulsys Server on free ports."""
    configure("console", "warning")
    started = []

    def make(hub, cache_dir=None, **settings):
        values = {"listen": "127.0.0.1:0", "admin_listen": "off", "upstream": hub.url,
                  "cache_dir": cache_dir or str(tmp_path / "cache"),
                  "allow_upstream_host": [hub.cdn_netloc], "access_log": "off"}
        values.update({k: (v if isinstance(v, (list, bool)) else str(v)) for k, v in settings.items()})
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
