"""The io_uring facade against the real kernel: probe, wrap-around of the completion
ring, negative results, recv/send buffers. Skips visibly where io_uring is unusable."""

import select
import socket

import pytest

from pulsys.platform import PlatformFacts

FACTS = PlatformFacts.probe()
pytestmark = pytest.mark.skipif(not FACTS.uring_ok, reason="io_uring: %s" % FACTS.uring_error)


def test_probe_passes_and_names_no_reason():
    assert FACTS.uring_ok and FACTS.uring_error == ""


def test_completions_survive_the_ring_wrapping_around():
    from pulsys.platform.uring import Ring
    import liburing as L
    ring = Ring(4)                      # a CQ of 8 entries wraps every 8 completions
    seen = []
    try:
        for rnd in range(20):
            for i in range(3):
                s = ring._sqe()
                L.io_uring_prep_nop(s)
                L.io_uring_sqe_set_data64(s, rnd * 10 + i)
            ring.submit()
            ring.reap(lambda tag, res, flags: seen.append((tag, res)))
    finally:
        ring.close()
    assert seen == [(r * 10 + i, 0) for r in range(20) for i in range(3)]


def test_negative_results_come_back_as_minus_errno_and_buffers_are_filled():
    from pulsys.platform.uring import Ring
    ring = Ring(8)
    a, b = socket.socketpair()
    ep = select.epoll()
    ep.register(ring.fd, select.EPOLLIN)
    got = {}
    try:
        buf = bytearray(8)
        ring.prep_recv(a.fileno(), buf, 1)
        ring.prep_send(a.fileno(), b"hello", 2)
        ring.submit()
        b.sendall(b"ping")
        while len(got) < 2 and ep.poll(2):
            ring.reap(lambda tag, res, flags: got.__setitem__(tag, res))
        assert got == {1: 4, 2: 5} and bytes(buf[:4]) == b"ping" and b.recv(5) == b"hello"
        b.close()
        a.shutdown(socket.SHUT_RDWR)
        ring.prep_send(a.fileno(), b"x" * 100000, 3)
        ring.submit()
        while 3 not in got and ep.poll(2):
            ring.reap(lambda tag, res, flags: got.__setitem__(tag, res))
        assert got[3] < 0       # EPIPE as -32, not an exception out of reap()
    finally:
        ep.close()
        a.close()
        ring.close()
