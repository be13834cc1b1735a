"""A reactor's tick hooks (ReactorBase.tick_hooks) do on the loop's own thread what helper
threads did on timers of their own: a worker's counter copy and recency report, the
access-log writer's wake-up. A quiet loop ticks once per wake (about once a second); a
hook that wants more gets a tick every TICK; a turn after a quiet tick ticks at once.
Each backend's real loop on a loopback listener, in a thread."""

import io
import os
import threading
import time

import pytest
from structlog.testing import capture_logs

from pulsys import metrics as M
from pulsys.log import AccessLog, AccessLogWriter
from pulsys.reactor.base import IDLE_WAIT, TICK
from pulsys.workers import ROW, CounterPublisher, CounterTable
from tests.conftest import wait_until
from tests.unit.test_reactor_loop import BACKENDS, looping

_LINUX = pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="counts wake-ups in /proc")


class Hook:
    """A tick hook that records when it ran and answers what the test sets."""

    def __init__(self):
        self.calls = []
        self.more = False

    def __call__(self, now):
        self.calls.append(time.monotonic())
        return self.more

    def since(self, t):
        return [c for c in self.calls if c >= t]


@pytest.fixture(params=BACKENDS)
def ticking(request, tmp_path):
    hook = Hook()
    with looping(request.param, tmp_path, [hook]) as (r, _):
        yield r, hook


def test_a_quiet_loop_ticks_per_wake_a_wanting_one_every_tick(ticking):
    r, hook = ticking
    time.sleep(0.3)
    t0 = time.monotonic()
    time.sleep(2.2)
    quiet = len(hook.since(t0))
    # one tick per idle wake: IDLE_WAIT apart (10 or more would be the TICK cadence)
    assert 1 <= quiet <= 2.2 / IDLE_WAIT + 2, hook.since(t0)
    # a turn after a quiet tick ticks at once
    t1 = time.monotonic()
    hook.more = True
    r.mailbox.post(lambda _: None, None)
    wait_until(lambda: hook.since(t1), 5, interval=0.005)
    assert hook.since(t1)[0] - t1 < 0.5
    # wanting more: a tick every TICK with no I/O at all
    time.sleep(1.5)
    busy = len(hook.since(t1))
    assert busy >= 0.5 * 1.5 / TICK, busy
    hook.more = False
    time.sleep(TICK * 3)
    t2 = time.monotonic()
    time.sleep(2.2)
    assert len(hook.since(t2)) <= 2.2 / IDLE_WAIT + 2, hook.since(t2)


def test_a_failing_hook_is_logged_once_and_the_others_still_run(ticking):
    r, hook = ticking
    hook.more = True                     # a tick every TICK: the bad hook fails each time

    def bad(now):
        raise RuntimeError("hook failed")
    with capture_logs() as logs:
        r.tick_hooks.insert(0, bad)      # the loop reads the same list
        t0 = time.monotonic()
        r.mailbox.post(lambda _: None, None)
        wait_until(lambda: len(hook.since(t0)) >= 5, 5, interval=0.01)
        done = threading.Event()
        r.mailbox.post(lambda _: done.set(), None)
        assert done.wait(5)              # the loop still serves
    failed = [e for e in logs if e["event"] == "tick hook failed"]
    assert len(hook.since(t0)) >= 5      # the good hook ran on every tick
    assert len(failed) == 1 and failed[0]["hook"].endswith("bad"), logs


class _Reactor:
    """What CounterPublisher reads of a reactor: its counters and open sockets."""

    def __init__(self):
        self.counters = M.new()
        self.open = 0

    def open_sockets(self):
        return self.open


def test_counter_publisher_copies_changes_only_and_ignores_the_loops_own_enters():
    table = CounterTable(2)
    try:
        r = _Reactor()
        pub = CounterPublisher(table.fileno(), 1, r)
        r.counters[M.REQUESTS] = 3
        assert pub(0.0) is True and table.row(1)[M.REQUESTS] == 3
        assert pub(0.1) is False                        # nothing changed
        r.counters[M.URING_ENTER] += 1                  # an idle loop's wake-up enters the ring
        assert pub(0.2) is False and table.row(1)[M.URING_ENTER] == 0
        r.open = 2
        assert pub(0.3) is True and table.row(1)[ROW - 1] == 2 and table.row(1)[M.URING_ENTER] == 1
        r.counters[M.URING_ENTER] += 1
        pub.flush()                                     # the last copy takes everything
        assert table.row(1)[M.URING_ENTER] == 2 and table.row(0) == [0] * ROW
    finally:
        table.close()


def _voluntary_switches(native_id):
    with open("/proc/self/task/%d/status" % native_id) as f:
        for line in f:
            if line.startswith("voluntary_ctxt_switches:"):
                return int(line.split()[1])


@_LINUX
def test_the_access_log_writer_sleeps_until_a_reactor_nudges_it():
    log = AccessLog()
    out = io.StringIO()
    w = AccessLogWriter([log], "json", out, interval=0.05)
    nudge = w.nudge_hook(log)
    w.start()
    try:
        wait_until(lambda: w.idle, 5, interval=0.01)
        s0 = _voluntary_switches(w.native_id)
        time.sleep(1.0)
        assert _voluntary_switches(w.native_id) - s0 <= 1      # 20 at its interval
        assert nudge(0.0) is False                             # nothing waits: nothing to do
        log.append((time.monotonic(), ("GET", "/o/n/resolve/main/f", 200, 4, "hit"), 0.001))
        assert nudge(0.0) is True                              # lines wait: woken, tick again
        wait_until(lambda: '"/o/n/resolve/main/f"' in out.getvalue(), 5, interval=0.01)
        assert nudge(0.0) is False
    finally:
        w.stop()
        w.join(5)
    assert not w.is_alive()
