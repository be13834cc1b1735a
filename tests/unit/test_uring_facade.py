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


@pytest.mark.parametrize("memory", [True, False])
def test_completions_survive_the_ring_wrapping_around(memory):
    from pulsys.platform.uring import Ring
    ring = Ring(4, memory=memory)       # a CQ of 8 entries wraps every 8 completions
    seen = []
    try:
        for rnd in range(20):
            for i in range(3):
                ring.prep_nop(rnd * 10 + i)
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


@pytest.mark.parametrize("wait", ["ring", "epoll"])
def test_submit_and_wait_submits_what_is_prepared_and_liburing_agrees(wait):
    # Ring(4): a 4-entry submission queue wraps every 4 SQEs; 20 rounds of 3 nops go
    # through the hand-made flush ("ring") or liburing's own ("epoll", the fallback)
    from pulsys.platform.uring import Ring
    ring = Ring(4, wait)
    seen = []
    try:
        assert ring.one_enter == (wait == "ring")
        for rnd in range(20):
            for i in range(3):
                ring.prep_nop(rnd * 10 + i)
            e0 = ring.enters
            assert ring.submit_and_wait(2)
            assert ring.enters - e0 == (1 if wait == "ring" else 2 - bool(ring.ready()))
            assert ring.submit() == 0             # nothing was left to submit
            while len(seen) < 3 * (rnd + 1) and ring.wait(2):
                ring.reap(lambda tag, res, flags: seen.append((tag, res)))
    finally:
        ring.close()
    assert seen == [(r * 10 + i, 0) for r in range(20) for i in range(3)]


def test_one_enter_submits_a_recv_and_sleeps_in_it_without_the_gil():
    import threading
    from pulsys.platform.uring import Ring
    ring = Ring(8, "ring")
    a, b = socket.socketpair()
    got, took = {}, []
    try:
        buf = bytearray(8)
        ring.prep_recv(a.fileno(), buf, 1)
        threading.Timer(0.3, b.send, (b"ping",)).start()

        def one_enter():
            e0, t0 = ring.enters, time.monotonic()
            assert ring.submit_and_wait(2)
            took.append((ring.enters - e0, time.monotonic() - t0))
        free = _other_thread_progress(one_enter)
        ring.reap(lambda tag, res, flags: got.__setitem__(tag, res))
        assert got == {1: 4} and bytes(buf[:4]) == b"ping"
        (enters, secs), = took
        assert enters == 1 and 0.2 < secs < 1.5      # slept until the data came, not 2 s
        assert free > 100000, free                   # the other thread ran meanwhile
    finally:
        a.close()
        b.close()
        ring.close()


def test_ring_memory_is_refused_where_the_layout_does_not_match():
    from pulsys.platform.uring import Ring, RingMemory
    ring = Ring(8, "ring")
    try:
        assert RingMemory.of(ring._ring, 8) is not None
        assert RingMemory.of(ring._ring, 64) is None        # another ring size
        assert RingMemory.of(object(), 8) is None           # not a binding Ring
    finally:
        ring.close()


@pytest.mark.parametrize("memory", [True, False])
@pytest.mark.parametrize("wait", ["ring", "epoll"])
def test_the_fused_pair_sends_then_receives_through_memory_and_the_binding_alike(wait, memory):
    # a 4-entry queue: the pair starts at every slot, the last one too (where it wraps)
    from pulsys.platform.uring import OP_RECV, Ring
    ring = Ring(4, wait, memory=memory)
    a, b = socket.socketpair()
    got = []
    try:
        assert (ring.mem is not None) == memory
        buf = bytearray(64)
        conn = ring.fused_conn(a.fileno(), buf, 99, (a.fileno() << 3) | OP_RECV)
        for i in range(9):
            data = b"answer %d " % i + b"x" * (1000 * i)
            ring.prep_fused(ring.fused_data(data), conn)
            ring.submit()
            want = len(data)
            have = b""
            while len(have) < want:
                have += b.recv(65536)
            assert have == data                        # the send went out whole
            b.send(b"next %d" % i)
            while len(got) == i and ring.wait(2):
                ring.reap(lambda tag, res, flags: got.append((tag, res)))
            assert got[i] == ((a.fileno() << 3) | OP_RECV, 6) and bytes(buf[:6]) == b"next %d" % i
        ring.prep_fused_recv(conn)              # the recv alone, as after a file answer
        ring.submit()
        b.send(b"last")
        while len(got) == 9 and ring.wait(2):
            ring.reap(lambda tag, res, flags: got.append((tag, res)))
        assert got[9] == ((a.fileno() << 3) | OP_RECV, 4) and bytes(buf[:4]) == b"last"
    finally:
        a.close()
        b.close()
        ring.close()
    assert len(got) == 10       # no completion of the sends (CQE_SKIP_SUCCESS)


@pytest.mark.parametrize("how", ["reap", "cycle"])
def test_reap_through_memory_consumes_what_it_dispatched_when_dispatch_raises(how):
    from pulsys.platform.uring import Ring
    ring = Ring(4, "ring")             # a completion queue of 8: batches wrap around it
    seen = []

    def dispatch(tag, res, flags):
        seen.append(tag)
        if tag % 5 == 4:
            raise RuntimeError("dispatch failed")
    try:
        assert ring.mem is not None
        tag = 0
        for rnd in range(12):
            for _ in range(3):
                ring.prep_nop(tag)
                tag += 1
            if how == "reap":
                ring.submit_and_wait(2)
            while len(seen) < tag:
                try:
                    ring.reap(dispatch) if how == "reap" else ring.cycle(dispatch)
                except RuntimeError:
                    pass
    finally:
        ring.close()
    assert seen == list(range(36))     # each once, in order, none lost or repeated


@pytest.mark.parametrize("memory", [True, False])
def test_more_sqes_than_the_queue_holds_are_submitted_as_it_fills(memory):
    from pulsys.platform.uring import Ring
    ring = Ring(4, "ring", memory=memory)     # 4 SQEs, 8 CQEs: reaped between batches
    seen = []
    try:
        for rnd in range(5):
            for i in range(7):                 # the 5th of 7 finds the queue full
                ring.prep_nop(rnd * 10 + i)
            while len(seen) < 7 * (rnd + 1) and ring.submit_and_wait(2):
                ring.reap(lambda tag, res, flags: seen.append(tag))
    finally:
        ring.close()
    assert seen == [r * 10 + i for r in range(5) for i in range(7)]


@pytest.mark.parametrize("wait,memory", [("ring", True), ("ring", False), ("epoll", True), ("epoll", False)])
def test_cycle_submits_reaps_and_counts_its_enters_where_it_is_told(wait, memory):
    # cycle() is the loop's pass under load: submit what is prepared, (ring mode) run the
    # completions queued as task work, reap what is ready; 0 when nothing was. A Ring(4)
    # wraps both queues every few rounds. The enters go into the counter handed in.
    from pulsys.platform.uring import Ring
    counters = [0, 0, 0]
    ring = Ring(4, wait, memory=memory, counter=(counters, 2))
    seen = []

    def note(tag, res, flags):
        seen.append((tag, res))
    try:
        for rnd in range(20):
            for i in range(3):
                ring.prep_nop(rnd * 10 + i)
            e0 = counters[2]
            got = ring.cycle(note)
            assert counters[2] - e0 == 1 and ring.enters == counters[2]
            while len(seen) < 3 * (rnd + 1):        # (epoll mode: completions may lag)
                assert ring.wait(2)
                got += ring.reap(note)
            assert got == 3
        assert ring.cycle(note) == 0 and counters[2] == ring.enters    # nothing prepared, none ready
    finally:
        ring.close()
    assert seen == [(r * 10 + i, 0) for r in range(20) for i in range(3)]
    assert counters[:2] == [0, 0]

