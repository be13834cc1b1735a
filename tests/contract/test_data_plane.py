"""Behaviour every reactor backend x sender must show, over real loopback sockets,
with a real fill from the fake Hub. Parametrised by sender implementation and by
process layout (one listener in-process; two listeners as worker processes)."""

import os
import socket
import sys
import time

import pytest
import requests

from pulsys.testing.fake_hub import sha256_hex
from tests.conftest import vars_when


def _uring_ok():
    from pulsys.platform import PlatformFacts
    f = PlatformFacts.probe()
    return f.uring_ok, f.uring_error


_LINUX = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux only")
_URING_OK, _URING_WHY = _uring_ok()
# (io_uring setting, sendfile setting): every backend x sender this machine can run
SENDERS = [pytest.param(("on", "linux"), id="uring-linux-sendfile",
                        marks=pytest.mark.skipif(not _URING_OK, reason="io_uring: %s" % _URING_WHY)),
           pytest.param(("off", "linux"), id="selector-linux-sendfile", marks=_LINUX),
           pytest.param(("off", "portable"), id="selector-portable")]

BODY = os.urandom(2 * 1024 * 1024 + 123)
BIG = os.urandom(24 * 1024 * 1024 + 7)
SMALL = b'{"model_type": "bert"}'


# answered by the reactor's parser and router alone, which no process layout changes
PARSER_ONLY = {"test_malformed_requests_get_4xx_and_close_and_the_server_keeps_serving",
               "test_oversized_head_is_431", "test_unknown_route_is_404_and_keeps_the_connection"}


def pytest_generate_tests(metafunc):
    if "listeners" in metafunc.fixturenames and metafunc.function.__name__ not in PARSER_ONLY:
        metafunc.parametrize("listeners", [1, 2], ids=["1-listener", "2-listeners"])


@pytest.fixture(params=SENDERS)
def warm(request, hub, make_server):
    """A server whose cache already holds org/m's files (one cold round done)."""
    commit = hub.add_repo("org/m", files={"model.safetensors": BODY, "config.json": SMALL,
                                          "big.safetensors": BIG})
    iouring, sendfile = request.param
    srv = make_server(hub, sendfile=sendfile, iouring=iouring)
    r = requests.get(srv.url + "/org/m/resolve/main/model.safetensors", timeout=30)
    assert r.status_code == 200 and r.content == BODY
    hub.reset_counters()
    return srv, commit


def GET(path, extra=b"", method=b"GET"):
    return method + b" " + path + b" HTTP/1.1\r\nHost: t\r\n" + extra + b"\r\n"


LFS = b"/org/m/resolve/main/model.safetensors"


def test_keep_alive_many_requests_one_connection(warm, raw_client):
    srv, commit = warm
    c = raw_client(srv.address)
    for _ in range(20):
        c.send(GET(LFS))
        st, h, body = c.response()
        assert st == 200 and body == BODY and h["x-repo-commit"] == commit
        assert h["x-linked-etag"] == '"%s"' % sha256_hex(BODY) and h["connection"] == "keep-alive"
    assert not c.closed(wait=0.2)


def test_pipelined_requests_are_answered_in_order(warm, raw_client):
    srv, _ = warm
    c = raw_client(srv.address)
    c.send(GET(LFS, b"Range: bytes=0-9\r\n") + GET(LFS, method=b"HEAD") + GET(LFS, b"Range: bytes=10-19\r\n")
           + GET(b"/healthz"))
    r1 = c.response()
    r2 = c.response(head_only=True)
    r3 = c.response()
    r4 = c.response()
    assert (r1[0], r1[2]) == (206, BODY[:10])
    assert r2[0] == 200 and r2[1]["content-length"] == str(len(BODY))
    assert (r3[0], r3[2]) == (206, BODY[10:20])
    assert (r4[0], r4[2]) == (200, b"ok\n")


def test_ranges_304_and_416(warm, raw_client):
    srv, _ = warm
    c = raw_client(srv.address)
    n = len(BODY)
    c.send(GET(LFS, b"Range: bytes=%d-%d\r\n" % (n - 5, n + 100000)))
    st, h, body = c.response()
    assert st == 206 and body == BODY[-5:] and h["content-range"] == "bytes %d-%d/%d" % (n - 5, n - 1, n)
    c.send(GET(LFS, b"Range: bytes=-3\r\n"))
    assert c.response()[2] == BODY[-3:]
    c.send(GET(LFS, b"Range: bytes=0-0\r\n"))
    st, h, body = c.response()
    assert st == 206 and h["content-range"] == "bytes 0-0/%d" % n and body == BODY[:1]
    c.send(GET(LFS, b"Range: bytes=%d-\r\n" % n))
    st, h, _ = c.response()
    assert st == 416 and h["content-range"] == "bytes */%d" % n
    c.send(GET(LFS, b'If-None-Match: "%s"\r\n' % sha256_hex(BODY).encode()))
    st, h, body = c.response()
    assert st == 304 and body == b""
    assert not c.closed(wait=0.2)


def test_connection_close_is_honoured(warm, raw_client):
    srv, _ = warm
    c = raw_client(srv.address)
    c.send(GET(LFS, b"Connection: close\r\n"))
    st, h, body = c.response()
    assert st == 200 and h["connection"] == "close" and body == BODY
    assert c.closed()


@pytest.mark.parametrize("bad", [
    b"GET /x HTTP/1.1\r\nHost: t\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n",
    b"GET /x HTTP/1.1\r\nHost: t\r\n bad fold\r\n\r\n",
    b"GET /x HTTP/1.1\r\nHost : t\r\n\r\n",
    b"GARBAGE\r\n\r\n",
    b"GET /x HTTP/9.9\r\nHost: t\r\n\r\n",
    b"GET /x\x00 HTTP/1.1\r\nHost: t\r\n\r\n",
])
def test_malformed_requests_get_4xx_and_close_and_the_server_keeps_serving(warm, raw_client, bad):
    srv, _ = warm
    c = raw_client(srv.address)
    c.send(bad)
    st, h, _ = c.response()
    assert 400 <= st < 600 and st != 500 and h["connection"] == "close"
    assert c.closed()
    ok = raw_client(srv.address)
    ok.send(GET(LFS, b"Range: bytes=0-3\r\n"))
    assert ok.response()[2] == BODY[:4]


def test_oversized_head_is_431(warm, raw_client):
    srv, _ = warm
    c = raw_client(srv.address)
    c.send(b"GET / HTTP/1.1\r\nHost: t\r\nX: " + b"a" * 70000 + b"\r\n\r\n")
    assert c.response()[0] == 431
    assert c.closed()


def test_slow_reader_gets_every_byte(warm):
    """The client reads slower than loopback can send, so the server's sendfile hits
    EAGAIN and must resume at the right offset after the socket drains."""
    srv, _ = warm
    before = srv.vars()["sendfile_eagain"]
    s = socket.create_connection(srv.address, timeout=30)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 65536)
    s.sendall(GET(b"/org/m/resolve/main/big.safetensors"))
    data = bytearray()
    t_end = time.monotonic() + 30
    while len(data) < len(BIG) + 200 and time.monotonic() < t_end:
        chunk = s.recv(262144)
        if not chunk:
            break
        data += chunk
        time.sleep(0.001)
    s.close()
    body = bytes(data.split(b"\r\n\r\n", 1)[1])
    assert len(body) == len(BIG) and body == BIG
    assert srv.vars()["sendfile_eagain"] > before


def test_client_reset_mid_body_does_not_hurt_the_server(warm, raw_client):
    srv, _ = warm
    for _ in range(5):
        s = socket.create_connection(srv.address)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        s.sendall(GET(LFS))
        s.recv(1000)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
        s.close()
    c = raw_client(srv.address)
    c.send(GET(LFS))
    assert c.response()[2] == BODY
    assert vars_when(srv, lambda v: v["cache_hits"] >= 6)["cache_hits"] >= 6


def test_warm_hits_make_no_upstream_request(warm, raw_client):
    srv, _ = warm
    hub_before = hubless_counters(srv)["upstream_requests"]
    c = raw_client(srv.address)
    for _ in range(10):
        c.send(GET(LFS, method=b"HEAD"))
        c.response(head_only=True)
        c.send(GET(LFS, b"Range: bytes=5-9\r\n"))
        c.response()
    assert hubless_counters(srv)["upstream_requests"] == hub_before


def test_unknown_route_is_404_and_keeps_the_connection(warm, raw_client):
    srv, _ = warm
    c = raw_client(srv.address)
    c.send(GET(b"/nothing/here"))
    st, h, body = c.response()
    assert st == 404 and b"error" in body and h["connection"] == "keep-alive"
    c.send(GET(b"/org/m/resolve/main/model.safetensors", b"Range: bytes=0-1\r\n"))
    assert c.response()[2] == BODY[:2]


def hubless_counters(srv):
    return srv.vars()


SMALL_PATH = b"/org/m/resolve/main/config.json"


@pytest.mark.parametrize("path,body", [(SMALL_PATH, SMALL), (LFS, BODY)], ids=["in-memory", "file"])
def test_a_repeated_head_is_answered_like_the_first(warm, raw_client, path, body):
    """Reactors remember heads by their exact bytes and skip the parser (and, on io_uring,
    take a fused send path) when the same bytes come again: answers must not change."""
    srv, commit = warm
    c = raw_client(srv.address)
    c.send(GET(path))
    st, h, _ = c.response()
    if st == 307:   # the Hub redirects regular files at a branch to /api/resolve-cache/...
        path = h["location"].encode()
    req = GET(path, b"User-Agent: t/1\r\n")
    answers = []
    for _ in range(4):
        c.send(req)
        answers.append(c.response())
    c.send(req * 3)
    answers += [c.response() for _ in range(3)]
    for st, h, got in answers:
        assert st == 200 and got == body and h["x-repo-commit"] == commit
        assert {k: v for k, v in h.items() if k != "date"} == \
            {k: v for k, v in answers[0][1].items() if k != "date"}
    c.send(GET(path, b"User-Agent: t/1\r\nConnection: close\r\n"))
    st, h, got = c.response()
    assert st == 200 and got == body and h["connection"] == "close" and c.closed()


def test_a_remembered_head_still_follows_the_revision(hub, make_server, raw_client):
    hub.add_repo("org/r", files={"config.json": b"old"})
    srv = make_server(hub, revision_ttl=0.3)
    c = raw_client(srv.address)
    req = GET(b"/org/r/resolve/main/config.json")

    def fetch():
        c.send(req)
        st, h, got = c.response()
        if st == 307:
            c.send(GET(h["location"].encode()))
            st, h, got = c.response()
        return st, got, h["x-repo-commit"]
    first = fetch()
    assert first[:2] == (200, b"old") and fetch() == first and fetch() == first
    new = hub.commit("org/r", {"config.json": b"new!"})
    time.sleep(0.5)
    assert fetch() == (200, b"new!", new)
