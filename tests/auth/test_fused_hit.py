"""The io_uring reactor's fused warm hit (UringReactor._hit) bypasses on_request, so it
checks keys itself: a remembered head with an accepted key is served there; once the
key is gone from the Gate the same bytes fall back to the general step, which refuses."""

import os
import socket
import sys
import time

import pytest

from pulsys import metrics as M
from pulsys.auth.gate import Gate
from pulsys.auth.keys import digest, key_id, new_key
from pulsys.cache.index import Index
from pulsys.http1.parse import parse_request_head
from pulsys.model.entry import FILE, Entry
from pulsys.model.key import target_key
from pulsys.route import route

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="io_uring reactor: Linux")

COMMIT = "0123456789abcdef0123456789abcdef01234567"
SHA = "ab" * 32


class RecordingRing:
    """Records the SQEs the reactor prepares instead of submitting them."""
    enters = 0

    def __init__(self):
        self.sent = []

    def prep_send(self, fd, data, tag, flags=0, sqe_flags=0):
        self.sent.append(bytes(data))

    def prep_recv(self, fd, buf, tag):
        pass

    def prep_poll_out(self, fd, tag):
        raise AssertionError("in-memory answers never wait for POLLOUT")


def test_fused_hit_serves_accepted_keys_and_leaves_revoked_ones_to_the_general_step(tmp_path):
    from pulsys.platform import PlatformFacts, load_sender
    from pulsys.reactor.conn import Conn
    from pulsys.reactor.fdcache import FdCache
    from pulsys.reactor.mailbox import Mailbox
    from pulsys.reactor.uring import OP_RECV, UringReactor

    key = new_key()[0]
    req = (b"GET /org/m/resolve/main/f.bin HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer %s\r\n\r\n"
           % key.encode())
    body = os.urandom(4096)
    blob = tmp_path / "blob"
    blob.write_bytes(body)
    ix = Index()
    t = route(parse_request_head(req, 0, len(req)))
    e = Entry(FILE, target_key(t, COMMIT), len(body), SHA, COMMIT, True, "sha256/" + SHA, str(blob))
    e.body_mem = body
    ix.publish(e)
    ix.set_rev("model", "org/m", "main", COMMIT, expires=1e18, fetched_at=0)
    gate = Gate({key_id(key): (digest(key), "read")})
    lst = socket.socket()
    a, b = socket.socketpair()
    r = UringReactor(lst, ix, None, Mailbox(), load_sender(PlatformFacts.probe(), None)[1], FdCache(),
                     gate=gate)
    r.ring = ring = RecordingRing()
    conn = Conn(a, time.monotonic())
    r.conns[conn.fd] = conn

    def arrive():
        conn.rbuf[0:len(req)] = req
        conn.rstart, conn.rend, conn.recv_pending = 0, len(req), False
    try:
        conn.rbuf[0:len(req)] = req
        conn.inflight += 1
        r._dispatch((conn.fd << 3) | OP_RECV, len(req), 0)      # first time: the general step
        assert ring.sent[-1].startswith(b"HTTP/1.1 200 OK\r\n") and ring.sent[-1].endswith(body)
        assert len(r.heads) == 1
        arrive()
        assert r._hit(conn) is True                               # remembered: the fused path
        assert ring.sent[-1].startswith(b"HTTP/1.1 200 OK\r\n") and r.counters[M.CACHE_HITS] == 2

        gate.load({})                                             # the key is revoked
        arrive()
        assert r._hit(conn) is False
        r.advance(conn)
        assert ring.sent[-1].startswith(b"HTTP/1.1 401 Unauthorized\r\n")
        assert r.counters[M.AUTH_REFUSALS] == 1 and r.counters[M.CACHE_HITS] == 2
    finally:
        for s in (lst, a, b):
            s.close()
