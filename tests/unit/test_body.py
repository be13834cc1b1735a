"""upstream/body.py: a fill's body read into one buffer, against a scripted HTTP/1.1
server on loopback (a real socket; requests as the fill uses it)."""

import gzip
import socket
import threading

import pytest
import requests
import urllib3.exceptions as X

from pulsys.upstream.body import more_left, new_buffer, views


class Scripted:
    """Answers each request on a connection with the next scripted (head, body, then)
    where then is "keep", "close" or "stall"; counts connections."""

    def __init__(self, answers):
        self.answers = list(answers)
        self.connections = 0
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.url = "http://127.0.0.1:%d/f" % self.sock.getsockname()[1]
        self.stop = threading.Event()
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self):
        while not self.stop.is_set():
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            self.connections += 1
            threading.Thread(target=self._conn, args=(c,), daemon=True).start()

    def _conn(self, c):
        f = c.makefile("rb")
        with c:
            try:
                while self.answers:
                    while f.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    head, body, then = self.answers.pop(0)
                    c.sendall(head + body)
                    if then == "stall":
                        self.stop.wait(5)
                        return
                    if then == "close":
                        return
            except ConnectionError:
                return      # the client reset it (a close with bytes unread): as a server, done

    def close(self):
        self.stop.set()
        self.sock.close()


def head(n, extra=b""):
    return b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n%s\r\n" % (n, extra)


@pytest.fixture
def session():
    s = requests.Session()
    s.trust_env = False
    s.headers["Accept-Encoding"] = "identity"
    yield s
    s.close()


def read_all(resp, limit):
    """The body, asking views() for at most `limit` bytes in all, as a fill does."""
    out, left = [], [limit]
    for v in views(resp, lambda: left[0], new_buffer()):
        out.append(bytes(v))
        left[0] -= len(v)
    return b"".join(out)


def test_a_plain_body_comes_whole_and_its_connection_serves_the_next_request(session):
    body = bytes(range(256)) * 12_000           # 3 MB: several views of the 1 MiB buffer
    srv = Scripted([(head(len(body)), body, "keep"), (head(5), b"again", "keep")])
    try:
        r = session.get(srv.url, stream=True, timeout=5)
        sizes = [len(v) for v in views(r, lambda: len(body), new_buffer())]
        assert sum(sizes) == len(body) and len(sizes) >= 3 and max(sizes) <= 1 << 20
        r.close()
        r = session.get(srv.url, stream=True, timeout=5)
        assert read_all(r, 5) == b"again" and srv.connections == 1
    finally:
        srv.close()


def test_a_caller_that_stops_at_the_last_byte_still_gives_the_connection_back(session):
    srv = Scripted([(head(300_000), b"a" * 300_000, "keep"), (head(2), b"ok", "keep")])
    try:
        r = session.get(srv.url, stream=True, timeout=5)
        got = 0
        for v in views(r, lambda: 300_000, new_buffer()):
            got += len(v)
            if got >= 300_000:
                break                       # as the fill does once its piece is complete
        r.close()
        r = session.get(srv.url, stream=True, timeout=5)
        assert read_all(r, 2) == b"ok" and srv.connections == 1
    finally:
        srv.close()


def test_a_caller_that_wants_less_midway_gets_no_byte_past_it_and_the_connection_is_not_reused(session):
    body = bytes(range(256)) * 12_000           # 3 MB
    srv = Scripted([(head(len(body)), body, "keep"), (head(2), b"ok", "keep")])
    try:
        r = session.get(srv.url, stream=True, timeout=5)
        got, end = 0, [len(body)]

        def wanted():
            return end[0] - got
        out = []
        for v in views(r, wanted, new_buffer()):
            out.append(bytes(v))
            got += len(v)
            end[0] = min(end[0], 1_500_000)     # the piece was cut after the first view
        assert got == 1_500_000 and b"".join(out) == body[:1_500_000]
        r.close()
        r = session.get(srv.url, stream=True, timeout=5)
        assert read_all(r, 2) == b"ok" and srv.connections == 2     # a new connection
    finally:
        srv.close()


def test_what_arrived_before_a_stall_is_given_before_the_timeout(session):
    srv = Scripted([(head(100_000), b"x" * 30_000, "stall")])
    try:
        r = session.get(srv.url, stream=True, timeout=(5, 0.5))
        got = []
        with pytest.raises(X.ReadTimeoutError):
            for v in views(r, lambda: 100_000, new_buffer()):
                got.append(bytes(v))
        assert b"".join(got) == b"x" * 30_000
    finally:
        srv.close()


def test_a_body_cut_short_ends_early_and_one_longer_than_the_limit_is_told(session):
    srv = Scripted([(head(10_000), b"y" * 4_000, "close")])
    try:
        r = session.get(srv.url, stream=True, timeout=5)
        assert read_all(r, 10_000) == b"y" * 4_000
    finally:
        srv.close()
    srv = Scripted([(head(10_000), b"z" * 10_000, "keep")])
    try:
        r = session.get(srv.url, stream=True, timeout=5)
        assert read_all(r, 6_000) == b"z" * 6_000 and more_left(r)
        r.close()
    finally:
        srv.close()


def test_chunked_and_encoded_bodies_go_through_urllib3(session):
    chunked = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
    gz = gzip.compress(b"hello " * 1000)
    srv = Scripted([(chunked, b"5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n", "keep"),
                    (head(len(gz), b"Content-Encoding: gzip\r\n"), gz, "keep")])
    try:
        r = session.get(srv.url, stream=True, timeout=5)
        assert read_all(r, 1 << 20) == b"hello world"
        r.close()
        r = session.get(srv.url, stream=True, timeout=5)
        assert read_all(r, 1 << 20) == b"hello " * 1000      # decoded, as the fill stored it before
    finally:
        srv.close()
