"""The io_uring fused hit answers from an Answer remembered per exact head (warm.Answer,
HttpStep.remember). These check that a remembered answer never outlives what it
was planned from: a new Entry, a removed one, an expired revision, a changed key set."""

import json
import os
import sys
import time

import pytest

from pulsys import metrics as M
from pulsys.reactor import uring
from pulsys.reactor.conn import READ
from tests.uring_stub import FusedHitRig

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="io_uring reactor: Linux")

COMMIT = "0123456789abcdef0123456789abcdef01234567"
SHA = "cd" * 32
GET = b"GET /org/m/resolve/main/f.bin HTTP/1.1\r\nHost: t\r\n\r\n"


@pytest.fixture
def rig(tmp_path):
    r = FusedHitRig(tmp_path, GET, COMMIT, SHA)
    yield r
    r.close()


def served(rig):
    """Deliver the request once; -> (bytes sent, True if the fused path sent them)."""
    hits = rig.reactor.counters[M.CACHE_HITS]
    rig.conn.plan.head = b""
    rig.deliver()
    fused = rig.conn.plan.head == b""          # the general step plans into conn.plan
    assert rig.reactor.counters[M.CACHE_HITS] == hits + 1
    return rig.ring.sent[-1], fused


def test_second_delivery_is_fused_and_identical(rig):
    first, fused1 = served(rig)
    second, fused2 = served(rig)
    assert (fused1, fused2) == (False, True)
    assert first == second and first.endswith(b"\r\n\r\n" + rig.body)


def test_new_entry_under_the_key_is_served_at_once(rig):
    served(rig), served(rig)
    rig.publish(b"new bytes " * 100)
    out, _ = served(rig)
    assert out.endswith(b"\r\n\r\n" + b"new bytes " * 100)
    assert b"Content-Length: 1000\r\n" in out


def test_removed_entry_is_a_miss_not_a_remembered_answer(rig):
    served(rig), served(rig)
    rig.index.remove(rig.key)
    n = len(rig.ring.sent)
    rig.deliver()
    assert len(rig.ring.sent) == n and len(rig.jobs) == 1      # handed to the fill pool
    assert rig.reactor.counters[M.CACHE_MISSES] == 1


def test_expired_revision_is_a_miss(rig):
    t = rig.target
    rig.index.set_rev(t.rtype, t.repo, t.rev, COMMIT, expires=time.monotonic() + 0.5, fetched_at=0)
    assert served(rig)[1] is False and served(rig)[1] is True
    time.sleep(0.6)     # the same generation would keep the answer; its freshness ends it
    rig.deliver()
    assert len(rig.jobs) == 1 and rig.reactor.counters[M.CACHE_MISSES] == 1


def test_range_on_an_in_memory_body_is_fused_with_the_right_bytes(tmp_path):
    req = GET.replace(b"\r\n\r\n", b"\r\nRange: bytes=10-19\r\n\r\n")
    rig = FusedHitRig(tmp_path, req, COMMIT, SHA)
    try:
        first, fused1 = served(rig)
        second, fused2 = served(rig)
        assert (fused1, fused2) == (False, True) and first == second
        assert second.startswith(b"HTTP/1.1 206 Partial Content\r\n")
        assert b"Content-Range: bytes 10-19/4096\r\n" in second
        assert second.endswith(b"\r\n\r\n" + rig.body[10:20])
    finally:
        rig.close()


@pytest.mark.parametrize("bad", [GET.replace(b"Host: t", b"Host: t@u"), GET.replace(b"GET", b"get", 1)])
def test_a_refused_head_is_never_remembered(rig, bad):
    served(rig), served(rig)                       # GET's head and answer are remembered
    rig.req = bad
    rig.deliver()
    out = rig.ring.sent[-1]
    assert out.startswith(b"HTTP/1.1 400 ") and b"Connection: close\r\n" in out
    assert rig.conn.close_after
    assert bad not in rig.reactor.step.heads and bad not in rig.reactor.step.answers


def test_if_range_is_part_of_the_remembered_head(tmp_path):
    # heads are remembered by their exact bytes, so the same Range with another If-Range
    # is another head with an answer of its own: 206 when it names the ETag, else 200
    rng = GET.replace(b"\r\n\r\n", b"\r\nRange: bytes=10-19\r\n")
    match = rng + b'If-Range: "%s"\r\n\r\n' % SHA.encode()
    other = rng + b'If-Range: "%s"\r\n\r\n' % (b"ef" * 32)
    rig = FusedHitRig(tmp_path, match, COMMIT, SHA)
    try:
        for fused in (False, True):
            rig.req = match
            out, was_fused = served(rig)
            assert was_fused is fused and out.startswith(b"HTTP/1.1 206 Partial Content\r\n")
            assert out.endswith(b"\r\n\r\n" + rig.body[10:20])
            rig.req = other
            out, was_fused = served(rig)
            assert was_fused is fused and out.startswith(b"HTTP/1.1 200 OK\r\n"), out[:40]
            assert b"Content-Range" not in out and out.endswith(b"\r\n\r\n" + rig.body)
    finally:
        rig.close()


def test_connection_close_is_never_fused(tmp_path):
    req = GET.replace(b"\r\n\r\n", b"\r\nConnection: close\r\n\r\n")
    rig = FusedHitRig(tmp_path, req, COMMIT, SHA)
    try:
        rig.deliver()                               # the general step remembers the head
        assert len(rig.reactor.step.heads) == 1
        a = rig.reactor.step.remember(req, time.monotonic())
        assert a is not None and a.out is None      # remembered as "take the general step"
    finally:
        rig.close()


def test_body_from_the_blob_file_is_fused_and_sent_whole(rig):
    body = os.urandom(40000)        # above the in-memory size: sendfile
    rig.publish(body, in_memory=False)
    peer = rig.sockets[2]
    peer.setblocking(False)
    for expect_fused in (False, True):
        rig.conn.plan.head = b""
        rig.deliver()
        assert (rig.conn.plan.head == b"") is expect_fused
        got = b""
        while len(got) < len(body) + 200 and not got.endswith(body):
            got += peer.recv(1 << 20)
        head, _, rest = got.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 200 OK") and b"Content-Length: 40000" in head
        assert rest == body
    r = rig.reactor
    assert r.counters[M.CACHE_HITS] == 2 and r.counters[M.BYTES_SERVED] == 2 * len(got)
    assert rig.conn.state == READ and r.served    # back to reading; LRU saw the hits


def _fused_file(rig, size):
    """Publish a body of `size` read from the blob, and deliver the request twice (the
    second is fused); the connection's socket non-blocking as in the reactor."""
    body = os.urandom(size)
    rig.publish(body, in_memory=False)
    rig.sockets[1].setblocking(False)
    polls = []
    rig.ring.prep_poll_out = lambda fd, tag: polls.append(fd)
    return body, polls


def _drain(peer, n):
    peer.setblocking(False)
    got = b""
    while True:
        try:
            chunk = peer.recv(1 << 20)
        except BlockingIOError:
            return got
        got += chunk
        if len(got) >= n:
            return got


def test_fused_file_hit_the_socket_cannot_take_goes_on_in_the_state_machine(rig):
    from pulsys.log import AccessLog
    from pulsys.reactor.conn import SEND
    body, polls = _fused_file(rig, 8 << 20)        # far more than a socket buffer holds
    r, conn, peer = rig.reactor, rig.conn, rig.sockets[2]
    log = AccessLog()
    r.access_log, r.access = log, log.append
    for expect_fused in (False, True):
        rig.conn.plan.head = b""
        rig.deliver()
        assert (rig.conn.plan.head == b"") is expect_fused
        got = b""
        while conn.state == SEND:                  # what each POLLOUT completion does
            assert polls and polls[-1] == conn.fd
            got += _drain(peer, 1 << 30)
            r.advance(conn)
        got += _drain(peer, 1 << 30)
        head, _, rest = got.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 200 OK") and (b"Content-Length: %d" % len(body)) in head
        assert rest == body
        assert conn.state == READ and conn.file_fd == -1 and conn.head is None
    assert r.counters[M.CACHE_HITS] == 2 and r.counters[M.BYTES_SERVED] == 2 * len(got)
    assert r.counters[M.SENDFILE_EAGAIN] >= 2
    assert [rec[1][2:] for rec in log.buf] == [(200, len(got), "hit")] * 2
    assert all(refs == 0 for _, refs in r.fdcache._fds.values())   # the blob's fd released


def test_fused_file_hit_whole_in_one_go_logs_and_counts_like_the_general_step(rig):
    from pulsys.log import AccessLog
    body, polls = _fused_file(rig, 100_000)
    r, peer = rig.reactor, rig.sockets[2]
    log = AccessLog()
    r.access_log, r.access = log, log.append
    sizes = []
    for _ in range(2):
        rig.deliver()
        got = _drain(peer, len(body) + 1000)
        assert got.endswith(body)
        sizes.append(len(got))
    assert not polls and sizes[0] == sizes[1]
    assert [rec[1] for rec in log.buf] == [("GET", "/org/m/resolve/main/f.bin", 200, sizes[0], "hit")] * 2
    assert r.counters[M.BYTES_SERVED] == 2 * sizes[0] and r.counters[M.H_WARM_SUM] >= 0
    assert sum(r.counters[M.H_WARM:M.H_WARM_SUM]) == 2               # both in the warm histogram


def test_fused_file_hit_to_a_peer_that_is_gone_closes_only_that_connection(rig):
    from pulsys.reactor.conn import CLOSED
    body, polls = _fused_file(rig, 100_000)
    r, peer = rig.reactor, rig.sockets[2]
    rig.deliver()
    _drain(peer, len(body) + 1000)
    resets = r.counters[M.PEER_RESETS]
    peer.close()
    rig.deliver()                                   # fused: the send meets a closed peer
    assert r.counters[M.PEER_RESETS] == resets + 1 and rig.conn.state == CLOSED
    assert all(refs == 0 for _, refs in r.fdcache._fds.values())


def test_a_turn_of_fused_hits_is_counted_like_the_general_step(rig):
    """The general step books a hit and its GET; the fused hits of a turn are folded at
    its end (UringReactor.fold_hits) into the same counters, LRU time and per-repo
    downloads: one download and the answer's bytes each."""
    from pulsys.cache.downloads import BYTES, ONE
    from pulsys.log import AccessLog, AccessLogWriter
    r, conn = rig.reactor, rig.conn
    general, fused = served(rig)
    assert not fused
    log = AccessLog()
    AccessLogWriter([log], "json", None)
    r.access_log, r.access = log, log.append
    r.downloads.clear()
    before = list(r.counters)
    n = 5
    r.now = time.monotonic()
    sent = len(rig.ring.sent)
    for _ in range(n):                  # five connections' recvs in one turn
        conn.rbuf[0:len(GET)] = GET
        conn.rstart = conn.rend = 0
        conn.inflight += 1
        rig.dispatch(rig.tag, len(GET), 0)
    assert len(rig.ring.sent) == sent + n and conn.rend == 0   # all fused, none to the general step
    assert r.counters == before         # nothing counted until the turn ends
    r.fold_hits()
    d = [a - b for a, b in zip(r.counters, before)]
    size = len(rig.ring.sent[-1])
    assert size == len(general)
    assert d[M.REQUESTS] == d[M.CACHE_HITS] == d[M.FUSED_HEAD_BODY] == n
    assert d[M.BYTES_SERVED] == n * size and d[M.URING_SQES] == 2 * n
    (tally,) = r.downloads.values()
    assert tally // ONE == n and tally & BYTES == n * size
    assert r.served == {"sha256/" + SHA: r.now}
    # the turn's histogram and log text wait for the reactor's tick (turn_work)
    assert sum(d[M.H_WARM:M.H_WARM_SUM]) == 0 and log.buffered() == 0 and not r._turn_hits
    assert r._turn_work_hook(r.now) is True and r._turn_work_hook(r.now) is False
    d = [a - b for a, b in zip(r.counters, before)]
    assert sum(d[M.H_WARM:M.H_WARM_SUM]) == n
    assert log.buffered() == n and len(log.buf) == 1


def test_a_fused_hit_that_fails_accounts_for_its_recv_and_closes_only_its_connection(rig):
    # the recv completed, then preparing the answer failed: the connection must not be
    # left counting an operation in flight that is not (it would never be freed)
    served(rig), served(rig)
    r = rig.reactor

    def broken(data, conn):
        raise OSError(16, "io_uring submission queue full")
    rig.ring.prep_fused = broken
    rig.dispatch = r.make_dispatch()
    errors, inflight = r.counters[M.INTERNAL_ERRORS], rig.conn.inflight
    rig.deliver()                       # (its recv completing: in flight one more, then this)
    assert r.counters[M.INTERNAL_ERRORS] == errors + 1
    assert rig.conn.inflight == inflight and not rig.conn.recv_pending
    assert rig.conn.fd not in r.conns


def _turns_served_and_logged(rig, turns):
    """After a first request (the general step), the loop's turns as `turns` says: each
    (start, hits, seconds) delivers that many fused hits and ends with the turn's mark
    (mark_turn), with a JSON access log into a StringIO. -> (that StringIO, its writer,
    the counters before the turns)."""
    import io

    from pulsys.log import AccessLog, AccessLogWriter
    r, conn = rig.reactor, rig.conn
    served(rig)                                 # the first delivery: the general step
    log = AccessLog()
    out = io.StringIO()
    w = AccessLogWriter([log], "json", out)
    r.access_log, r.access = log, r._after_fold(log.append)
    before = list(r.counters)
    for now, k, took in turns:
        r.now = now
        for _ in range(k):
            conn.rbuf[0:len(GET)] = GET
            conn.inflight += 1
            rig.dispatch(rig.tag, len(GET), 0)
        uring.mark_turn(r._turn_marks, now, took, len(r._turn_hits))    # the turn's end
    return out, w, before


def test_turns_folded_together_count_each_turns_duration(rig):
    """The loop's turn marks where its fused hits end, with its start and duration, and
    folds several turns at once (UringReactor._turn, fold_hits): each turn's hits go
    into the histogram and the access log with that turn's times, counted once."""
    r = rig.reactor
    t1 = time.monotonic()
    out, w, before = _turns_served_and_logged(rig, ((t1, 2, 0.0002), (t1 + 0.01, 3, 0.003)))
    assert r.counters == before and len(r._turn_hits) == 5 and len(r._turn_marks) == 2
    r.fold_hits()
    d = [a - b for a, b in zip(r.counters, before)]
    assert d[M.REQUESTS] == d[M.FUSED_HEAD_BODY] == 5
    assert not r._turn_hits and not r._turn_marks and len(r._held) == 1
    # a request of the general step logged now comes after them: its append makes their
    # texts (and histogram) first, without waiting for the tick
    r.access((time.monotonic(), ("GET", "/general", 404, 0, "miss"), 0.001))
    assert not r._held
    d = [a - b for a, b in zip(r.counters, before)]
    hist = d[M.H_WARM:M.H_WARM_SUM]
    assert hist[M.LATENCY_BOUNDS.index(0.00025)] == 2 and hist[M.LATENCY_BOUNDS.index(0.005)] == 3
    assert sum(hist) == 5 and d[M.H_WARM_SUM] == 2 * 200 + 3 * 3000
    w.flush()
    lines = [json.loads(l) for l in out.getvalue().splitlines()]
    assert [l["duration_ms"] for l in lines] == [0.2, 0.2, 3.0, 3.0, 3.0, 1.0]
    assert lines[-1]["path"] == "/general" and lines[0]["timestamp"] < lines[2]["timestamp"]


def test_turns_within_mark_span_share_a_mark():
    """A turn that begins within MARK_SPAN of the last mark's turn extends it (the mark's
    start, the longer duration, its own end); one that begins later gets its own."""
    t = 1000.0
    marks = []
    uring.mark_turn(marks, t, 0.0002, 2)
    uring.mark_turn(marks, t + uring.MARK_SPAN / 2, 0.003, 5)
    uring.mark_turn(marks, t + uring.MARK_SPAN * 0.9, 0.0001, 6)
    assert marks == [(t, 0.003, 6)]
    uring.mark_turn(marks, t + uring.MARK_SPAN * 1.5, 0.0004, 9)
    assert marks == [(t, 0.003, 6), (t + uring.MARK_SPAN * 1.5, 0.0004, 9)]


def test_hits_of_turns_sharing_a_mark_are_logged_with_its_time(rig):
    """Two turns 0.4 ms apart share a mark: their five hits go into the histogram and
    the access log with the first turn's start and the longer turn's duration."""
    r = rig.reactor
    t1 = time.monotonic()
    out, w, before = _turns_served_and_logged(rig, ((t1, 2, 0.0002), (t1 + 0.0004, 3, 0.003)))
    assert r._turn_marks == [(t1, 0.003, 5)]
    r.fold_hits()
    r.turn_work()
    d = [a - b for a, b in zip(r.counters, before)]
    hist = d[M.H_WARM:M.H_WARM_SUM]
    assert hist[M.LATENCY_BOUNDS.index(0.005)] == 5 and sum(hist) == 5 and d[M.H_WARM_SUM] == 5 * 3000
    w.flush()
    lines = [json.loads(l) for l in out.getvalue().splitlines()]
    assert [l["duration_ms"] for l in lines] == [3.0] * 5
    assert len({l["timestamp"] for l in lines}) == 1


def test_the_general_step_logs_after_the_fused_hits_answered_before_it(rig):
    from pulsys.log import AccessLog, AccessLogWriter
    r, conn = rig.reactor, rig.conn
    served(rig)
    log = AccessLog()
    AccessLogWriter([log], "json", None)
    r.access_log, r.access = log, r._after_fold(log.append)
    r.now = time.monotonic()
    for _ in range(2):                          # fused, not yet folded (no mark: mid-turn)
        conn.rbuf[0:len(GET)] = GET
        conn.inflight += 1
        rig.dispatch(rig.tag, len(GET), 0)
    requests = r.counters[M.REQUESTS]
    r.access((time.monotonic(), ("GET", "/general", 404, 0, "miss"), 0.001))
    assert r.counters[M.REQUESTS] == requests + 2 and not r._turn_hits
    assert log.buffered() == 3 and log.buf[-1][1][1] == "/general"


def test_held_folds_make_their_turns_texts_without_a_tick_once_folds_held_wait(rig, monkeypatch):
    # a reactor whose tick is late (a long turn) holds at most FOLDS_HELD folds' turns
    from pulsys.log import AccessLog, AccessLogWriter
    monkeypatch.setattr(uring, "FOLDS_HELD", 3)
    r, conn = rig.reactor, rig.conn
    served(rig)
    log = AccessLog()
    AccessLogWriter([log], "json", None)
    r.access_log, r.access = log, r._after_fold(log.append)
    for k in range(1, 4):
        r.now = time.monotonic()
        conn.rbuf[0:len(GET)] = GET
        conn.inflight += 1
        rig.dispatch(rig.tag, len(GET), 0)
        r.fold_hits()
        assert len(r._held) == k % 3 and log.buffered() == (3 if k == 3 else 0)
    assert sum(r.counters[M.H_WARM:M.H_WARM_SUM]) == 3 + 1    # and the general step's first


def test_a_job_is_submitted_after_the_fused_hits_answered_before_it(rig):
    """A fill may evict, choosing victims by last-served time (cache/recency.py): a Job
    leaves the reactor only after the fused hits before it have recorded theirs."""
    from pulsys.cache.recency import take_served
    r, conn = rig.reactor, rig.conn
    served(rig)
    take_served(r)
    r.now = time.monotonic()
    for _ in range(2):                          # fused, not yet folded (mid-turn)
        conn.rbuf[0:len(GET)] = GET
        conn.inflight += 1
        rig.dispatch(rig.tag, len(GET), 0)
    assert r._turn_hits and take_served(r) == []
    rig.index.remove(rig.key)                   # the next request is a miss: a Job
    rig.deliver()
    assert len(rig.jobs) == 1 and not r._turn_hits
    assert [t for _, t in take_served(r)] == [r.now]
