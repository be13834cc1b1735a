"""Refused requests on the wire, on every backend (docs/security.md, "Request rejection
and Host"): a request refused for its request line or its header section, a bad Host
among them, gets one error response with `Connection: close` and nothing after it on
that connection is read, so bytes pulsys did not understand can never be taken for the
next request (request smuggling, RFC 9112 §11.2). A well-formed request that is merely
refused (404, 405 with its body read) keeps the connection. `If-Range` whose validator
is not the entry's ETag turns a range request into a 200 with the whole body, cold and
warm (RFC 9110 §13.1.5)."""

import hashlib
import os

import pytest

BODY = os.urandom(5000)
ETAG = '"%s"' % hashlib.sha256(BODY).hexdigest()   # an LFS file's ETag is its sha256
PATH = b"/org/r/resolve/main/w.safetensors"
GOOD = b"GET " + PATH + b" HTTP/1.1\r\nHost: t\r\n\r\n"

BAD_HOSTS = [b"a b", b"a/b", b"user@h", b"h:", b"h:99999", b"h:123456", b"h:8o", b"h::80",
             b"", b"{h}", b"h%20", b"[::1", b"[zz::1]", b"[::1]x", b"::1", b"h\\x"]
GOOD_HOSTS = [b"t", b"hf.local:8080", b"127.0.0.1:65535", b"[::1]:8080", b"[2001:db8::1]",
              b"under_score.example", b"xn--bcher-kva.example."]

REFUSED = [
    (b"get " + PATH + b" HTTP/1.1\r\nHost: t\r\n\r\n", 400),              # method not upper case
    (b"Get " + PATH + b" HTTP/1.1\r\nHost: t\r\n\r\n", 400),
    (b"BREW " + PATH + b" HTTP/1.1\r\nHost: t\r\n\r\n", 501),             # unknown method
    (b"M-SEARCH " + PATH + b" HTTP/1.1\r\nHost: t\r\n\r\n", 501),
    (b"GET " + PATH + b" HTTP/1.1\r\nHost: a b\r\n\r\n", 400),
    (b"GET " + PATH + b" HTTP/1.1\r\nHost: t\r\nHost: t\r\n\r\n", 400),
    (b"GET " + PATH + b" HTTP/1.1\r\n\r\n", 400),                          # HTTP/1.1 without Host
    (b"GET " + PATH + b" HTTP/1.1\r\nHost: t\r\nContent-Length: 1x\r\n\r\n", 400),
    (b"GET " + PATH + b" HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n", 501),
    (b"GET " + PATH + b" HTTP/1.1\r\nHost: t\r\nX-Big: " + b"v" * 17000 + b"\r\n\r\n", 431),
    (b"GET /org/r/resolve/main/%2e%2e/x HTTP/1.1\r\nHost: t\r\n\r\n", 400),
]


@pytest.fixture
def srv(hub, serve):
    hub.add_repo("org/r", files={"w.safetensors": BODY})
    return serve()


def _refused_then_eof(c, first):
    """Send `first` and GOOD in one send; -> the status of the only answer."""
    c.send(first + GOOD)
    st, h, _ = c.response()
    assert h.get("connection") == "close", (first[:60], st, h)
    assert c.closed(5.0), "connection left open after a refused request"
    assert c.buf == b"", "the pipelined request was answered: %r" % c.buf[:80]
    return st


@pytest.mark.parametrize("first,status", REFUSED, ids=[
    "get", "Get", "BREW", "M-SEARCH", "host-space", "host-twice", "no-host", "bad-CL", "TE", "431",
    "traversal"])
def test_a_refused_request_is_answered_once_and_the_connection_closes(srv, raw_client, first, status):
    assert _refused_then_eof(raw_client(srv.address), first) == status
    assert srv.vars()["internal_errors"] == 0


@pytest.mark.parametrize("host", BAD_HOSTS)
def test_an_invalid_host_is_400_every_time(srv, raw_client, host):
    req = b"GET " + PATH + b" HTTP/1.1\r\nHost: " + host + b"\r\n\r\n"
    c = raw_client(srv.address)
    for _ in range(2):                # the file warm, GOOD's head remembered (and, on io_uring,
        c.send(GOOD)                  # its answer): req differs from it in the Host line only
        assert c.response()[0] == 200
    for _ in range(3):                # never remembered as good: parsed and refused each time
        assert _refused_then_eof(raw_client(srv.address), req) == 400, host


def test_valid_hosts_are_served_warm_and_remembered(srv, raw_client):
    c = raw_client(srv.address)
    for host in GOOD_HOSTS:
        for _ in range(3):
            c.send(b"GET " + PATH + b" HTTP/1.1\r\nHost: " + host + b"\r\n\r\n")
            assert c.response()[::2] == (200, BODY), host


def test_refusals_of_well_formed_requests_keep_the_connection(srv, raw_client):
    c = raw_client(srv.address)
    c.send(b"DELETE " + PATH + b" HTTP/1.1\r\nHost: t\r\nContent-Length: 3\r\n\r\nabc" + GOOD)
    st, h, _ = c.response()
    assert (st, h["allow"], h["connection"]) == (405, "GET, HEAD", "keep-alive")
    assert c.response()[::2] == (200, BODY)
    c.send(b"GET /nothing/here HTTP/1.1\r\nHost: t\r\n\r\n" + GOOD)
    assert c.response()[0] == 404
    assert c.response()[::2] == (200, BODY)


@pytest.mark.parametrize("if_range,status", [
    (ETAG, 206),
    ('"0123"', 200),
    ("W/" + ETAG, 200),                         # If-Range compares strongly: a weak tag never matches
    ("Sat, 29 Oct 1994 19:43:31 GMT", 200),     # a date: pulsys has no Last-Modified to compare
], ids=["etag", "other-etag", "weak-etag", "date"])
def test_if_range_cold_and_warm(srv, raw_client, if_range, status):
    c = raw_client(srv.address)
    req = (b"GET " + PATH + b" HTTP/1.1\r\nHost: t\r\nRange: bytes=10-19\r\nIf-Range: "
           + if_range.encode() + b"\r\n\r\n")
    for _ in ("cold", "warm", "remembered"):
        c.send(req)
        st, h, got = c.response()
        assert (st, got) == (status, BODY[10:20] if status == 206 else BODY), (if_range, st, h)
        assert h["etag"] == ETAG
        assert ("content-range" in h) is (status == 206)
    c.send(b"GET " + PATH + b" HTTP/1.1\r\nHost: t\r\nRange: bytes=5000-\r\nIf-Range: \"x\"\r\n\r\n")
    assert c.response()[::2] == (200, BODY)     # not matching: not even a 416
