"""The io_uring reactor's fused warm hit (UringReactor.make_dispatch) bypasses on_request, so it
checks keys itself: a remembered head with an accepted key is served there; once the
key is gone from the Gate the same bytes fall back to the general step, which refuses."""

import sys
import time

import pytest

from pulsys import metrics as M
from pulsys.auth.gate import Gate
from pulsys.auth.keys import digest, key_id, new_key
from tests.uring_stub import FusedHitRig

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="io_uring reactor: Linux")

COMMIT = "0123456789abcdef0123456789abcdef01234567"
SHA = "ab" * 32


def test_fused_hit_serves_accepted_keys_and_leaves_revoked_ones_to_the_general_step(tmp_path):
    key = new_key()[0]
    req = (b"GET /org/m/resolve/main/f.bin HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer %s\r\n\r\n"
           % key.encode())
    gate = Gate({key_id(key): (digest(key), "read")})
    rig = FusedHitRig(tmp_path, req, COMMIT, SHA, gate=gate)
    r, ring, conn, body = rig.reactor, rig.ring, rig.conn, rig.body

    def arrive():     # a recv into the empty buffer completes; -> True if the fused hit took it
        conn.rstart, conn.rend, conn.recv_pending = 0, 0, False
        conn.rbuf[0:len(req)] = req
        conn.inflight += 1
        r.now = time.monotonic()
        rig.dispatch(rig.tag, len(req), 0)
        fused = len(r._turn_hits) == 1
        r.fold_hits()                                             # the end of its turn
        return fused
    try:
        assert arrive() is False                                  # first time: the general step
        assert ring.sent[-1].startswith(b"HTTP/1.1 200 OK\r\n") and ring.sent[-1].endswith(body)
        assert len(r.step.heads) == 1
        assert arrive() is True                                   # remembered: the fused path
        assert ring.sent[-1].startswith(b"HTTP/1.1 200 OK\r\n") and r.counters[M.CACHE_HITS] == 2

        gate.load({})                                             # the key is revoked
        assert arrive() is False                                  # the same bytes: the general step
        assert ring.sent[-1].startswith(b"HTTP/1.1 401 Unauthorized\r\n")
        assert r.counters[M.AUTH_REFUSALS] == 1 and r.counters[M.CACHE_HITS] == 2
    finally:
        rig.close()
