"""Quota accounting and LRU choice (cache/space.py), recency hand-off (cache/recency.py),
closing evicted blobs' fds (reactor/fdcache.py), and the size flag."""

import os
import subprocess
import sys

import pytest

from pulsys.cache.recency import RecencyReporter, take_served
from pulsys.cache.space import Space
from pulsys.config import build_config, parse_size
from pulsys.errors import ConfigError
from pulsys.reactor.fdcache import FdCache


class Clock:
    def __init__(self):
        self.t = 100.0

    def __call__(self):
        return self.t


@pytest.mark.parametrize("text,want", [
    ("0", 0), ("1048576", 1048576), ("500G", 500 * 10**9), ("10GiB", 10 << 30),
    ("750MB", 750 * 10**6), ("1.5T", 1500 * 10**9), (" 2 mib ", 2 << 20), ("4k", 4000),
])
def test_sizes(text, want):
    assert parse_size(text) == want


@pytest.mark.parametrize("text", ["", "-1", "10X", "G", "1.2.3", "ten", "5 GiBs"])
def test_bad_sizes_are_config_errors(text):
    with pytest.raises(ConfigError, match="expected bytes or a size"):
        parse_size(text)


def test_flags_and_env():
    c = build_config({"cache_max_bytes": "2GiB", "evict": "none"}, {})
    assert c.cache_max_bytes == 2 << 30 and c.evict == "none"
    c = build_config({}, {"PULSYS_CACHE_MAX_BYTES": "1G"})
    assert c.cache_max_bytes == 10**9 and c.evict == "lru"
    assert build_config({}, {}).cache_max_bytes == 0


@pytest.mark.parametrize("args", [["--cache-max-bytes", "lots"], ["--evict", "fifo"]])
def test_bad_space_flags_are_one_line_and_exit_2(args):
    p = subprocess.run([sys.executable, "-m", "pulsys"] + args, capture_output=True, text=True, timeout=30)
    assert p.returncode == 2 and "Traceback" not in p.stderr
    assert p.stderr.count("\n") == 1 and p.stderr.startswith("pulsys: error:"), p.stderr


def space(max_bytes, policy="lru", running=None, served=None):
    clock = Clock()
    evicted = []
    sp = Space(max_bytes, policy, clock=clock, evict_fn=evicted.extend, running=running, served=served)
    return sp, clock, evicted


def test_unlimited_accepts_everything_and_still_counts():
    sp, _, evicted = space(0)
    sp.add_existing("sha256/a", 10**12, 1.0)
    assert sp.reserve("sha256/b", 10**12)
    sp.committed("sha256/b", 10**12)
    assert sp.used == 2 * 10**12 and sp.reserved_total == 0 and not evicted


def test_none_refuses_a_fill_that_does_not_fit_and_evicts_nothing():
    sp, _, evicted = space(100, "none")
    sp.add_existing("sha256/a", 60, 1.0)
    assert sp.reserve("sha256/b", 40)            # exactly full is allowed
    assert not sp.reserve("sha256/c", 1)
    assert sp.c[sp_index("quota_rejects")] == 1 and not evicted and "sha256/a" in sp.blobs


def sp_index(name):
    from pulsys import metrics as M
    return M.INDEX[name]


def test_lru_evicts_least_recently_served_first_and_only_enough():
    sp, clock, evicted = space(100)
    for i, b in enumerate(("a", "b", "c")):
        sp.add_existing("sha1/" + b, 30, 10.0 + i)
    sp.touch_many([("sha1/a", 50.0)])            # a was served last: b, then c are older
    assert sp.reserve("sha1/d", 40)              # 90 + 40 > 100: free 30 -> b only
    assert evicted == [("sha1/b", 30)]
    assert set(sp.blobs) == {"sha1/a", "sha1/c"} and sp.used == 60 and sp.reserved_total == 40
    assert sp.reserve("sha1/e", 45)              # 60 + 40 + 45 - 100 = 45: c (30) then a (30)
    assert evicted[1:] == [("sha1/c", 30), ("sha1/a", 30)]
    assert sp.c[sp_index("evictions")] == 3 and sp.c[sp_index("evicted_bytes")] == 90


def test_lru_refuses_when_pins_and_reservations_leave_too_little():
    sp, _, evicted = space(100)
    sp.add_existing("sha1/a", 50, 1.0)
    sp.add_existing("sha1/b", 30, 2.0)
    assert sp.pin("sha1/a")
    assert not sp.reserve("sha1/c", 60)          # only b is evictable: 30 < 60 - 20
    assert not evicted and sp.used == 80
    sp.unpin("sha1/a")
    assert sp.reserve("sha1/c", 60)              # 40 to free: b (older), then a (pinned = served)
    assert evicted == [("sha1/b", 30), ("sha1/a", 50)]
    assert not sp.reserve("sha1/big", 101)       # larger than the quota: never fits


def test_a_pin_fails_for_an_evicted_blob():
    sp, _, _ = space(10)
    sp.add_existing("sha1/a", 10, 1.0)
    assert sp.reserve("sha1/b", 10)
    assert not sp.pin("sha1/a")


def test_commit_turns_a_reservation_into_used_bytes_and_dead_reservations_are_dropped():
    live = {"sha1/a", "sha1/b"}
    sp, clock, _ = space(100, running=live.__contains__)
    assert sp.reserve("sha1/a", 40) and sp.reserve("sha1/b", 50)
    clock.t = 200.0
    sp.committed("sha1/a", 40)
    assert sp.used == 40 and sp.reserved_total == 50 and sp.blobs["sha1/a"] == [40, 200.0]
    live.discard("sha1/b")                        # that fill failed
    assert sp.stats()["cache_reserved_bytes"] == 0
    sp.committed("sha1/a", 41)                    # a refill replaced it with other bytes
    assert sp.used == 41


def test_collect_pulls_reactor_recency():
    class R:
        served = {}
    r = R()
    sp, _, evicted = space(20, served=lambda: take_served(r))
    sp.add_existing("sha1/a", 10, 1.0)
    sp.add_existing("sha1/b", 10, 2.0)
    r.served["sha1/a"] = 9.0
    r.served[""] = 9.5                            # a CANNED hit: no blob
    assert sp.reserve("sha1/c", 10)
    assert evicted == [("sha1/b", 10)] and r.served == {}


def test_reporter_sends_at_most_once_an_interval_and_says_when_it_waits():
    class R:
        served, downloads = {}, {}
    r = R()
    sent, dl = [], []
    rep = RecencyReporter(r, sent.append, interval=0.5, send_downloads=dl.append)
    assert rep(10.0) is False and sent == []         # nothing recorded: no tick wanted
    r.served["sha1/a"] = 1.0
    r.downloads["k"] = 7
    assert rep(10.0) is False                        # the first report goes at once
    assert sent == [[("sha1/a", 1.0)]] and dl == [[("k", 7)]] and r.served == {}
    r.served["sha1/b"] = 2.0
    r.served[""] = 2.5                               # a CANNED hit: no blob
    assert rep(10.2) is True and len(sent) == 1      # within the interval: held, tick again
    assert rep(10.5) is False
    assert sent == [[("sha1/a", 1.0)], [("sha1/b", 2.0)]] and dl == [[("k", 7)]]
    r.served["sha1/c"] = 3.0
    rep.flush()                                      # the worker's last report: whenever
    assert sent[-1] == [("sha1/c", 3.0)] and r.served == {}


def _open(fd):
    try:
        os.fstat(fd)
        return True
    except OSError:
        return False


def test_fdcache_forget_closes_idle_fds_now_and_busy_ones_on_release(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    a.write_bytes(b"a")
    b.write_bytes(b"b")
    fc = FdCache()
    fa = fc.acquire(str(a))
    fc.release(str(a), fa)                        # idle
    fb = fc.acquire(str(b))                       # a connection still sends from it
    fc.forget([str(a), str(b), str(tmp_path / "never-opened")])
    assert not _open(fa) and _open(fb)
    fc.release(str(b), fb)
    assert not _open(fb)
    fa2 = fc.acquire(str(a))                      # a new file at the same path: a new fd
    assert _open(fa2)
    fc.close_all()
