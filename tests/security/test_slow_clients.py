"""Slow and greedy clients, on every reactor backend (docs/security.md §2): the header,
idle and send-stall timeouts and what starts each; the per-IP and total connection
caps at accept time. Timeouts are checked by a sweep once a second, so a deadline of
T seconds closes between T and T + 1 s (plus scheduling); the bounds below allow that."""

import os
import time

import pytest

from tests.conftest import wait_until
from tests.security.wire import closed_by_server, read_until_closed

SWEEP = 1.0        # reactor sweep interval (reactor/selector.py, reactor/uring.py)
SLACK = 1.5        # scheduling on a busy 2-CPU machine
PATH = b"/org/m/resolve/main/small.bin"
SMALL = os.urandom(1000)
REQ = b"GET " + PATH + b" HTTP/1.1\r\nHost: t\r\n\r\n"


@pytest.fixture
def repo(hub):
    hub.add_repo("org/m", files={"small.bin": SMALL}, lfs={"small.bin"})


def _response(s):
    buf = b""
    while b"\r\n\r\n" not in buf:
        chunk = s.recv(65536)
        assert chunk, "closed before a response"
        buf += chunk
    head, _, rest = buf.partition(b"\r\n\r\n")
    n = int([ln.split(b":")[1] for ln in head.split(b"\r\n") if ln.lower().startswith(b"content-length")][0])
    while len(rest) < n:
        rest += s.recv(65536)
    return int(head.split(b" ")[1]), rest[:n]


def test_a_dripping_head_is_cut_at_the_header_timeout(repo, serve, sockets):
    srv = serve(header_timeout=1, idle_timeout=30)
    s = sockets(srv.address)
    s.sendall(b"GET " + PATH + b" HTTP/1.1\r\nHost: t\r\n")
    t0 = time.monotonic()
    s.settimeout(0.2)
    closed_at = None
    while time.monotonic() - t0 < 1 + SWEEP + SLACK + 1:
        try:
            s.send(b"x")                         # one byte of a header name every 0.2 s
            if not s.recv(1):
                closed_at = time.monotonic() - t0
                break
        except TimeoutError:
            continue
        except (ConnectionResetError, BrokenPipeError):
            closed_at = time.monotonic() - t0
            break
    assert closed_at is not None, "a client dripping bytes kept its head open"
    assert 1.0 <= closed_at <= 1 + SWEEP + SLACK, closed_at


def test_the_header_timeout_starts_with_the_head_not_after_idling(repo, serve, sockets):
    srv = serve(header_timeout=1, idle_timeout=4)
    s = sockets(srv.address)
    s.sendall(REQ)
    assert _response(s) == (200, SMALL)
    time.sleep(1 + SWEEP + 0.3)                  # idle past the header timeout: still open
    s.sendall(b"GET " + PATH)                    # a head begins; its deadline starts now
    assert not closed_by_server(s, 0.7)
    assert closed_by_server(s, 1 + SWEEP + SLACK)


def test_an_idle_keep_alive_connection_is_closed_at_the_idle_timeout(repo, serve, sockets):
    srv = serve(idle_timeout=1)
    s = sockets(srv.address)
    s.sendall(REQ)
    assert _response(s) == (200, SMALL)
    t0 = time.monotonic()
    assert closed_by_server(s, 1 + SWEEP + SLACK)
    assert time.monotonic() - t0 >= 0.9
    never_spoke = sockets(srv.address)
    assert closed_by_server(never_spoke, 1 + SWEEP + SLACK)
    s2 = sockets(srv.address)                    # and the server keeps serving
    s2.sendall(REQ)
    assert _response(s2) == (200, SMALL)


# Loopback lets the server push about 4.1 MiB (its autotuned send buffer, tcp_wmem max
# 4 MiB, plus a 64 KiB receive buffer) to a client that does not read; the body must be
# larger for the server to notice a stall or to still be sending seconds later.
BIG = os.urandom(16 << 20)
RATE = 4 << 20      # bytes per second the slow reader takes


@pytest.fixture
def big(hub, serve, sockets):
    """(server, request) with the 16 MiB file already in the cache."""
    hub.add_repo("org/big", files={"w.safetensors": BIG})
    req = b"GET /org/big/resolve/main/w.safetensors HTTP/1.1\r\nHost: t\r\n\r\n"
    srv = serve(send_timeout=1)
    s = sockets(srv.address, timeout=30)
    s.sendall(req)
    assert _response(s) == (200, BIG)
    s.close()
    return srv, req


def test_a_reader_that_stops_is_cut_at_the_send_timeout(big, sockets):
    srv, req = big
    assert wait_until(lambda: srv.vars()["open_connections"] == 0)
    s = sockets(srv.address, rcvbuf=65536)
    s.sendall(req)
    t0 = time.monotonic()
    assert wait_until(lambda: srv.vars()["open_connections"] == 1, timeout=2)
    assert wait_until(lambda: srv.vars()["open_connections"] == 0, timeout=1 + SWEEP + SLACK)
    assert time.monotonic() - t0 >= 0.9
    got = read_until_closed(s, limit=len(BIG) + 4096)
    assert 0 < len(got) < len(BIG), "a stalled reader got %d bytes" % len(got)


def test_a_slow_reader_that_keeps_reading_outlasts_the_send_timeout(big, sockets):
    srv, req = big
    s = sockets(srv.address, rcvbuf=65536, timeout=10)
    s.sendall(req)
    data, t0, total = b"", time.monotonic(), None
    while total is None or len(data) < total:
        while len(data) < min(total or 1 << 62, RATE * (time.monotonic() - t0)):
            chunk = s.recv(1 << 20)
            assert chunk, "cut off after %d bytes, %.1f s" % (len(data), time.monotonic() - t0)
            data += chunk
            if total is None and b"\r\n\r\n" in data:
                total = data.index(b"\r\n\r\n") + 4 + len(BIG)
        time.sleep(0.01)
    elapsed = time.monotonic() - t0
    assert elapsed > 1 + SWEEP + 0.5, elapsed     # it outlived the send timeout, twice over
    assert data.partition(b"\r\n\r\n")[2] == BIG


def test_connections_over_the_per_ip_cap_get_503_at_accept(repo, serve, sockets):
    srv = serve(max_connections_per_ip=4)
    mine = [sockets(srv.address, source="127.0.0.3") for _ in range(4)]
    assert wait_until(lambda: srv.vars()["open_connections"] == 4)
    extra = sockets(srv.address, source="127.0.0.3")
    answer = read_until_closed(extra)            # refused without a request being read
    assert answer.startswith(b"HTTP/1.1 503 ") and b"max-connections-per-ip" in answer
    other = sockets(srv.address, source="127.0.0.4")     # another address is not affected
    other.sendall(REQ)
    assert _response(other) == (200, SMALL)
    for s in mine:                               # the capped ones are served normally
        s.sendall(REQ)
        assert _response(s) == (200, SMALL)
    mine[0].close()
    assert wait_until(lambda: srv.vars()["open_connections"] == 4)
    again = sockets(srv.address, source="127.0.0.3")     # a freed slot can be taken
    again.sendall(REQ)
    assert _response(again) == (200, SMALL)
    assert srv.vars()["connections_refused"] == 1


def test_connections_over_max_connections_get_503(repo, serve, sockets):
    srv = serve(max_connections=3)
    held = [sockets(srv.address) for _ in range(3)]
    assert wait_until(lambda: srv.vars()["open_connections"] == 3)
    answer = read_until_closed(sockets(srv.address))
    assert answer.startswith(b"HTTP/1.1 503 ")
    held[0].sendall(REQ)
    assert _response(held[0]) == (200, SMALL)
    assert srv.vars()["connections_refused"] == 1
