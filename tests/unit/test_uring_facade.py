"""The io_uring facade against the real kernel: probe, wrap-around of the completion
ring, negative results, recv/send buffers. Skips visibly where io_uring is unusable."""

import socket
import time

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


@pytest.mark.parametrize("wait", ["auto", "epoll"])
def test_negative_results_come_back_as_minus_errno_and_buffers_are_filled(wait):
    from pulsys.platform.uring import Ring
    ring = Ring(8, wait)
    a, b = socket.socketpair()
    got = {}
    try:
        buf = bytearray(8)
        ring.prep_recv(a.fileno(), buf, 1)
        ring.prep_send(a.fileno(), b"hello", 2)
        ring.submit()
        b.sendall(b"ping")
        while len(got) < 2 and ring.wait(2):
            ring.reap(lambda tag, res, flags: got.__setitem__(tag, res))
        assert got == {1: 4, 2: 5} and bytes(buf[:4]) == b"ping" and b.recv(5) == b"hello"
        b.close()
        a.shutdown(socket.SHUT_RDWR)
        ring.prep_send(a.fileno(), b"x" * 100000, 3)
        ring.submit()
        while 3 not in got and ring.wait(2):
            ring.reap(lambda tag, res, flags: got.__setitem__(tag, res))
        assert got[3] < 0       # EPIPE as -32, not an exception out of reap()
    finally:
        a.close()
        ring.close()


def test_ring_mode_defers_task_work_and_epoll_mode_does_not():
    import liburing as L
    from pulsys.platform.uring import Ring
    for wait, deferred in (("ring", True), ("epoll", False)):
        ring = Ring(8, wait)
        try:
            assert ring.wait_mode == wait
            assert bool(ring._ring.flags & L.IORING_SETUP_DEFER_TASKRUN) == deferred
            assert ring._ring.flags & L.IORING_SETUP_SINGLE_ISSUER
        finally:
            ring.close()


def _other_thread_progress(block):
    """Iterations another Python thread makes while block() runs on this one."""
    import threading
    count, stop = [0], [False]

    def spin():
        while not stop[0]:
            count[0] += 1
    t = threading.Thread(target=spin)
    t.start()
    time.sleep(0.05)
    c0 = count[0]
    block()
    n = count[0] - c0
    stop[0] = True
    t.join()
    return n


def test_the_binding_keeps_the_gil_in_its_waits_and_ring_wait_does_not():
    # Why Ring.wait goes through ctypes: the binding's own wait (liburing 2026.3.30)
    # stops every other thread for as long as it sleeps. If a release of the binding
    # lets them run, this fails and the binding's wait could serve instead.
    import liburing as L
    from pulsys.platform.uring import Ring
    ring = Ring(8, "ring")
    try:
        def binding_wait():
            try:
                L.io_uring_wait_cqe_timeout(ring._ring, L.Cqe(), L.timespec(0.3))
            except OSError:
                pass               # ETIME: nothing was in flight
        held = _other_thread_progress(binding_wait)
        free = _other_thread_progress(lambda: ring.wait(0.3))
    finally:
        ring.close()
    assert free > 20 * max(held, 1000), (held, free)


@pytest.mark.parametrize("wait", ["ring", "epoll"])
def test_a_multishot_poll_wakes_a_sleeping_wait_each_time(wait):
    import threading
    from pulsys.platform.uring import CQE_F_MORE, Ring
    ring = Ring(8, wait)
    a, b = socket.socketpair()
    got = []
    try:
        ring.prep_poll_in_multishot(a.fileno(), 7)
        ring.submit()
        for i in range(3):
            threading.Timer(0.05, b.send, (b"x",)).start()
            t0 = time.monotonic()
            assert ring.wait(2) and time.monotonic() - t0 < 1.0
            ring.reap(lambda tag, res, flags: got.append((tag, flags & CQE_F_MORE)))
            assert a.recv(8) == b"x"
        assert got == [(7, CQE_F_MORE)] * 3
        t0 = time.monotonic()
        assert not ring.wait(0.2) and time.monotonic() - t0 >= 0.19     # nothing: the timeout
    finally:
        a.close()
        b.close()
        ring.close()
