"""The reactor loop is written once (ReactorBase.run) and every backend runs in it. These
run each backend's real loop on a loopback listener in a thread."""

import contextlib
import socket
import threading
import time

import pytest

from pulsys import metrics as M
from pulsys.platform import PlatformFacts, load_sender
from pulsys.reactor import backend_class
from pulsys.reactor.fdcache import FdCache
from pulsys.reactor.mailbox import Mailbox
from tests.conftest import wait_until
from tests.indexes import new_index, view_of

_FACTS = PlatformFacts.probe()
_URING = pytest.mark.skipif(not _FACTS.uring_ok, reason="io_uring: %s" % _FACTS.uring_error)
# the io_uring loop in each of its modes (platform/uring.py WAIT_MODES): "ring" sleeps in
# io_uring_enter (DEFER_TASKRUN), "epoll" in epoll on the ring fd (kernels without it)
BACKENDS = ["selector", pytest.param(("uring", "ring"), id="uring-ring", marks=_URING),
            pytest.param(("uring", "epoll"), id="uring-epoll", marks=_URING)]


def make_reactor(param, tmp_path):
    """A reactor of the backend BACKENDS' `param` names on a loopback listener, not yet
    running. -> (reactor, listening socket)."""
    lst = socket.socket()
    lst.bind(("127.0.0.1", 0))
    lst.listen()
    lst.setblocking(False)
    view = view_of(new_index(str(tmp_path / "index")))
    name, kw = param, {}
    if isinstance(name, tuple):
        name, kw = name[0], {"wait": name[1]}
    return backend_class(name)(lst, view, lambda job: None, Mailbox(), load_sender(_FACTS, None)[1], FdCache(),
                               **kw), lst


@contextlib.contextmanager
def looping(param, tmp_path, hooks=()):
    """make_reactor's reactor, with `hooks` as tick hooks, running in a thread:
    -> (reactor, thread); stopped and checked gone on the way out."""
    r, lst = make_reactor(param, tmp_path)
    r.tick_hooks += hooks
    th = threading.Thread(target=r.run, daemon=True)
    th.start()
    try:
        yield r, th
    finally:
        r.stop()
        th.join(5)
        lst.close()
    assert not th.is_alive()


@pytest.fixture(params=BACKENDS)
def running(request, tmp_path):
    with looping(request.param, tmp_path) as got:
        yield got


def _cpu(th, seconds):
    clock = time.pthread_getcpuclockid(th.ident)
    c0 = time.clock_gettime(clock)
    time.sleep(seconds)
    return time.clock_gettime(clock) - c0


def test_an_idle_loop_sleeps_after_a_post_made_while_draining(running):
    # the inner post lands while the mailbox drains: its wake-up byte is written for a
    # call that the same drain runs, so the socket stays readable with nothing queued.
    # The io_uring loop once spun on that byte (a whole CPU) until the next post.
    r, th = running
    ran = threading.Event()
    r.mailbox.post(lambda _: r.mailbox.post(lambda _: ran.set(), None), None)
    assert ran.wait(5)
    time.sleep(0.1)
    assert _cpu(th, 1.0) < 0.2


def test_other_threads_run_while_the_loop_sleeps(running):
    # the fill pool and the access-log writer need the GIL while the loop waits for I/O:
    # a sleep that kept it (the liburing binding's waits do) would stop them for its
    # whole length, up to a second each turn
    r, th = running
    time.sleep(0.1)
    n, t_end = 0, time.monotonic() + 0.5
    while time.monotonic() < t_end:
        n += 1
    if r.name == "uring":
        assert r.ring.wait_mode == r.wait      # the mode the test asked for, not a fallback
    assert n > 10000, "%d iterations in 0.5 s beside an idle loop" % n
    # and a post still wakes it at once
    done = threading.Event()
    t0 = time.monotonic()
    r.mailbox.post(lambda _: done.set(), None)
    assert done.wait(5) and time.monotonic() - t0 < 0.3


def test_posts_run_on_the_loop_thread_and_stop_closes_connections(running):
    r, th = running
    seen = []
    done = threading.Event()
    r.mailbox.post(lambda _: (seen.append(threading.get_ident()), done.set()), None)
    assert done.wait(5) and seen == [th.ident]
    c = socket.create_connection(r.listener.getsockname())
    deadline = time.monotonic() + 5
    while not r.conns and time.monotonic() < deadline:
        time.sleep(0.01)
    assert len(r.conns) == 1
    r.stop()
    th.join(5)
    c.settimeout(5)
    assert c.recv(1) == b""        # the loop closed it on the way out
    c.close()


# -- when the io_uring loop folds its fused hits (UringReactor.fold_hits) -------------------
_GET = b"GET /org/m/resolve/main/f.bin HTTP/1.1\r\nHost: t\r\n\r\n"


@pytest.fixture(params=[pytest.param("ring", marks=_URING), pytest.param("epoll", marks=_URING)])
def warm_loop(request, tmp_path):
    """A real io_uring loop in a thread serving one warm 4 KiB file, its fold_hits
    counted, and a keep-alive client; -> (reactor, folds, get), get() one whole answer."""
    from pulsys.reactor.uring import UringReactor
    from tests.uring_stub import FusedHitRig
    rig = FusedHitRig(tmp_path, _GET, "0123456789abcdef0123456789abcdef01234567", "cd" * 32)
    lst = socket.socket()
    lst.bind(("127.0.0.1", 0))
    lst.listen()
    lst.setblocking(False)
    r = UringReactor(lst, rig.view, lambda job: None, Mailbox(), load_sender(_FACTS, None)[1], FdCache(),
                     wait=request.param)
    folds = []
    fold = r.fold_hits
    r.fold_hits = lambda: (folds.append(len(r._turn_hits)), fold())    # the loop binds it at open
    th = threading.Thread(target=r.run, daemon=True)
    th.start()
    c = socket.create_connection(lst.getsockname())
    c.settimeout(5)
    f = c.makefile("rb")

    def get():
        c.sendall(_GET)
        n = 0
        while (line := f.readline()) not in (b"\r\n", b""):
            if line.lower().startswith(b"content-length:"):
                n = int(line.split(b":")[1])
        assert n == 4096 and len(f.read(n)) == n
    yield r, folds, get
    f.close()
    c.close()
    r.stop()
    th.join(5)
    lst.close()
    rig.close()
    assert not th.is_alive()


def _counted(r, n, within):
    """The loop's request count once it reaches n, or at the deadline."""
    wait_until(lambda: r.counters[M.REQUESTS] >= n, within, interval=0.001)
    return r.counters[M.REQUESTS]


def test_fused_hits_back_to_back_are_folded_together_and_when_the_load_stops(warm_loop):
    # folded before every sleep, one connection's requests were folded one by one: the
    # fold then cost more than the hit (docs/benchmarks.md, issue 18, fifth day)
    r, folds, get = warm_loop
    get()                                   # the general step: counted as it answers
    assert _counted(r, 1, 5) == 1
    for _ in range(60):
        get()
    # counted at the pause that follows (FOLD_IDLE), with no request to prompt it
    assert _counted(r, 61, 5) == 61
    assert sum(folds) == 60
    assert len(folds) <= 30, folds          # a loaded machine can pause the client 1 ms at times


def test_a_trickle_of_fused_hits_is_folded_once_the_first_is_fold_age_old(warm_loop, monkeypatch):
    from pulsys.reactor import uring
    r, folds, get = warm_loop
    monkeypatch.setattr(uring, "FOLD_IDLE", 30.0)   # only age folds now
    monkeypatch.setattr(uring, "FOLD_AGE", 0.05)
    get()
    assert _counted(r, 1, 5) == 1
    get()
    assert _counted(r, 2, 0.3) == 1         # fused, kept: the loop waits on with it
    time.sleep(0.1)
    get()                                   # the turn that answers it finds the first 0.1 s old
    assert _counted(r, 3, 5) == 3 and folds == [2]
