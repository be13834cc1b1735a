"""Range requests a client can abuse, cold and warm, on every backend: huge, negative,
overflowing and malformed single ranges are 416, several ranges are a plain 200 with
the whole body, and the connection goes on serving (docs/security.md §5)."""

import random

import pytest

# fixed bytes: parameters (and so test ids) must be the same in every pytest-xdist worker
BODY = random.Random(5000).randbytes(5000)
PATH = b"/org/r/resolve/main/w.safetensors"
HUGE = b"9" * 25
ENORMOUS = b"9" * 5000


@pytest.fixture
def srv(hub, serve):
    hub.add_repo("org/r", files={"w.safetensors": BODY})
    return serve()


@pytest.mark.parametrize("rng,status,body", [
    (b"bytes=" + HUGE + b"-", 416, b""),
    (b"bytes=" + ENORMOUS + b"-", 416, b""),
    (b"bytes=18446744073709551616-18446744073709551617", 416, b""),
    (b"bytes=-5-10", 416, b""),
    (b"bytes=+1-2", 416, b""),
    (b"bytes=9-3", 416, b""),
    (b"bytes=0-" + HUGE, 206, BODY),
    (b"bytes=-" + ENORMOUS, 206, BODY),
    (b"bytes=4990-" + HUGE, 206, BODY[4990:]),
    (b"bytes=0-0,-1", 200, BODY),
    (b"bytes=0-,0-,0-,0-", 200, BODY),
])
def test_abusive_ranges_cold_and_warm(srv, raw_client, rng, status, body):
    c = raw_client(srv.address)
    for _ in ("cold", "warm"):
        c.send(b"GET " + PATH + b" HTTP/1.1\r\nHost: t\r\nRange: " + rng + b"\r\n\r\n")
        st, h, got = c.response()
        assert (st, got) == (status, body), (rng[:40], st, h)
        if st == 416:
            assert h["content-range"] == "bytes */%d" % len(BODY)
        if st == 206:
            assert h["content-range"] == "bytes %d-%d/%d" % (len(BODY) - len(body), len(BODY) - 1, len(BODY))
    c.send(b"GET " + PATH + b" HTTP/1.1\r\nHost: t\r\n\r\n")      # the same connection goes on
    assert c.response()[::2] == (200, BODY)
    assert srv.vars()["internal_errors"] == 0
