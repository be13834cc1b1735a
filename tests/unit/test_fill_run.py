"""FillRun on its own, against a scripted origin (upstream/fill.py): resume after a
broken body, a new URL after a 403, the retry limit, a digest mismatch and its refetch,
the budget of extra fetchers. Real part files and a real Store; no sockets: the origin
is the narrow interface a fill needs (Origin), so a test can be one."""

import hashlib
import os
import re
import threading

import pytest
import urllib3

from pulsys import metrics as M
from pulsys.cache.inflight import DONE, FAILED, NEAR, Inflight
from pulsys.cache.store import Store
from pulsys.errors import Refetching, UpstreamError
from pulsys.log import get_logger
from pulsys.model.entry import FILE, Entry
from pulsys.upstream.fill import FIRST_PIECE, Budget, Committer, Fetchers, FillRun, Origin

SIZE = 300_000


class Body:
    """A response body: `data` in 64 KiB chunks, then `error` if given (a cut)."""

    def __init__(self, data, error=None):
        self.data, self.error = data, error

    def stream(self, n, decode_content=False):
        for i in range(0, len(self.data), 65536):
            yield self.data[i:i + 65536]
        if self.error is not None:
            raise self.error


class Resp:
    def __init__(self, status, headers, body=b"", error=None):
        self.status_code, self.headers, self.raw = status, headers, Body(body, error)
        self.closed = False

    def close(self):
        self.closed = True


class ScriptedOrigin:
    """Answers each ranged GET from `blob`; `script` says, per request in order, what to
    do instead: ("cut", n) sends n bytes then breaks the connection, ("status", s)
    answers s. Requests past the script are answered in full."""

    def __init__(self, blob, script=()):
        self.blob, self.script, self.asked = blob, list(script), []

    def request(self, method, url, headers):
        a, b = map(int, re.fullmatch(r"bytes=(\d+)-(\d+)", headers["Range"]).groups())
        self.asked.append((url, a, b))
        step = self.script.pop(0) if self.script else ("full",)
        if step[0] == "status":
            return Resp(step[1], {})
        part = self.blob[a:b + 1]
        cr = {"Content-Range": "bytes %d-%d/%d" % (a, b, len(self.blob))}
        if step[0] == "cut":
            return Resp(206, cr, part[:step[1]], urllib3.exceptions.ProtocolError("connection reset"))
        return Resp(206, cr, part)


class Rig:
    def __init__(self, tmp_path, served=None, refetches=True, budget=0, size=SIZE, spawn=None, per_fill=8):
        self.blob = os.urandom(size)
        served = self.blob if served is None else served
        sha = hashlib.sha256(self.blob).hexdigest()
        self.entry = Entry(FILE, "k", size, etag=sha, blob_id="sha256/" + sha)
        self.store = Store(str(tmp_path))
        self.inflight = Inflight()
        self.fill, _ = self.inflight.join_or_create(self.entry.blob_id, size, self.store.new_part_path)
        self.published, self.refetch_asked, self.spawned = [], [], []
        self.cache = Committer(self.store, self.published.append, self.inflight, lambda e: e,
                               self._prepare_refetch, lambda *a: None)
        self.fetchers = Fetchers(Budget(budget), spawn or self.spawned.append, per_fill)
        self.served = served
        self.refetches = refetches
        self.c = M.new()

    def _prepare_refetch(self, entry):
        self.refetch_asked.append(entry.blob_id)
        return None

    def run(self, script=(), renew=None, retries=2):
        self.origin = ScriptedOrigin(self.served, script)
        origin = Origin(self.origin.request, lambda url: False, refetches=self.refetches)
        self.fill_run = FillRun(self.fill, self.entry, "http://origin/blob", origin, self.cache,
                                self.fetchers, retries, self.c, get_logger("test"), renew=renew)
        self.fill_run.run()
        return self.fill

    def committed(self):
        path = self.store.blob_path(self.entry.blob_id)
        with open(path, "rb") as f:
            return f.read()


def test_a_broken_body_resumes_from_the_last_byte_written(tmp_path):
    rig = Rig(tmp_path)
    fill = rig.run(script=[("cut", 100_000)])
    assert fill.state == DONE and rig.committed() == rig.blob
    # asked for everything, then again from where the cut left it
    assert [(a, b) for _, a, b in rig.origin.asked] == [(0, SIZE - 1), (100_000, SIZE - 1)]
    assert rig.c[M.UPSTREAM_RETRIES] == 1 and rig.c[M.FILLS_COMPLETED] == 1
    assert rig.c[M.UPSTREAM_BODY_BYTES] == SIZE                  # each byte once
    assert [e.blob_path for e in rig.published] == [rig.store.blob_path(rig.entry.blob_id)]
    assert rig.inflight.get(rig.entry.blob_id) is None          # the registry let it go


def test_a_403_asks_for_a_new_url_once_and_goes_on(tmp_path):
    rig = Rig(tmp_path)
    renewed = []

    def renew():
        renewed.append(1)
        return "http://origin/renewed"
    fill = rig.run(script=[("status", 403)], renew=renew)
    assert fill.state == DONE and rig.committed() == rig.blob
    assert renewed == [1]
    assert [u for u, _, _ in rig.origin.asked] == ["http://origin/blob", "http://origin/renewed"]
    assert rig.c[M.UPSTREAM_RETRIES] == 0                        # a renewal is no retry


def test_a_403_without_a_way_to_renew_fails_the_fill(tmp_path):
    rig = Rig(tmp_path)
    fill = rig.run(script=[("status", 403)])
    assert fill.state == FAILED and isinstance(fill.error, UpstreamError)
    assert not os.path.exists(fill.part_path) and rig.published == []


def test_more_failed_attempts_in_a_row_than_retries_fail_the_fill(tmp_path):
    rig = Rig(tmp_path)
    fill = rig.run(script=[("cut", 10)] * 3, retries=2)         # each brings less than RESET_AFTER
    assert fill.state == FAILED and "after 2 retries" in str(fill.error)
    assert len(rig.origin.asked) == 3 and rig.c[M.UPSTREAM_RETRIES] == 2
    assert rig.c[M.FILLS_FAILED] == 1 and rig.published == []
    assert not os.path.exists(fill.part_path)
    assert rig.inflight.get(rig.entry.blob_id) is None


@pytest.mark.parametrize("refetches", [True, False])
def test_a_digest_mismatch_commits_nothing_and_asks_for_a_refetch_only_where_the_origin_allows(
        tmp_path, refetches):
    rig = Rig(tmp_path, served=os.urandom(SIZE), refetches=refetches)
    fill = rig.run()
    assert fill.state == FAILED and rig.published == []
    assert not os.path.exists(rig.store.blob_path(rig.entry.blob_id)) and not os.path.exists(fill.part_path)
    assert rig.c[M.INTEGRITY_FAILURES] == 1 and rig.c[M.FILLS_FAILED] == 1
    assert rig.refetch_asked == ([rig.entry.blob_id] if refetches else [])
    assert not isinstance(fill.error, Refetching)                # prepare_refetch found none to run


def test_extra_fetchers_stay_within_the_budget(tmp_path):
    rig = Rig(tmp_path, budget=1)
    origin = Origin(ScriptedOrigin(rig.blob).request, lambda url: False)
    run = FillRun(rig.fill, rig.entry, "http://origin/blob", origin, rig.cache, rig.fetchers, 2, rig.c,
                  get_logger("test"))
    run._on_demand(rig.fill, 200_000)         # a reader waits where no one fetches: one extra
    run._on_demand(rig.fill, 250_000)         # the budget (1) is spent: none
    assert len(rig.spawned) == 1 and rig.c[M.FILL_FETCHERS] == 1 and rig.fetchers.budget.left == 0
    run.run()                                 # the first fetcher does the whole file
    rig.spawned[0]()                          # the extra one finds nothing left, gives its budget back
    assert rig.fill.state == DONE and rig.committed() == rig.blob and rig.fetchers.budget.left == 1


class GatedBody(Body):
    """A body whose first chunk waits at `barrier`: it flows only once that many bodies
    are being read at once."""

    def __init__(self, data, barrier):
        super().__init__(data)
        self.barrier = barrier

    def stream(self, n, decode_content=False):
        self.barrier.wait()
        yield from super().stream(n, decode_content)


class GatedOrigin(ScriptedOrigin):
    """A ScriptedOrigin whose first `n` bodies all wait until `n` are being read at once:
    the fill completes only if that many fetchers fetch concurrently (else the barrier
    times out). The requests themselves answer at once: read-ahead starts the other
    fetchers when the first piece's answer has arrived (upstream/fill.py)."""

    def __init__(self, blob, n):
        super().__init__(blob)
        self.barrier = threading.Barrier(n, timeout=10)
        self.threads = set()
        self.lock = threading.Lock()

    def request(self, method, url, headers):
        with self.lock:
            first = len(self.asked) < self.barrier.parties
            self.threads.add(threading.get_ident())
        resp = super().request(method, url, headers)
        if first:
            resp.raw = GatedBody(resp.raw.data, self.barrier)
        return resp


def test_a_ranged_body_is_fetched_by_several_fetchers_at_once_ahead_of_any_reader(tmp_path):
    """Read-ahead: a 3-piece body from a ranged origin starts 3 fetchers before any reader
    asks, they fetch concurrently, and every byte is asked for exactly once."""
    threads = []

    def spawn(fn):
        t = threading.Thread(target=fn)
        threads.append(t)
        t.start()
    size = 2 * FIRST_PIECE + 12345
    rig = Rig(tmp_path, budget=4, size=size, spawn=spawn)
    origin = GatedOrigin(rig.blob, 3)
    run = FillRun(rig.fill, rig.entry, "http://origin/blob", Origin(origin.request, lambda url: False),
                  rig.cache, rig.fetchers, 2, rig.c, get_logger("test"))
    run.run()
    for t in threads:
        t.join(10)
    assert rig.fill.state == DONE and rig.committed() == rig.blob
    assert len(origin.threads) == 3 and rig.c[M.FILL_FETCHERS] == 2
    ranges = sorted((a, b) for _, a, b in origin.asked)
    assert ranges[0][0] == 0 and ranges[-1][1] == size - 1
    assert all(x[1] + 1 == y[0] for x, y in zip(ranges, ranges[1:]))     # disjoint, no gap
    assert rig.fetchers.budget.left == 4


def test_read_ahead_stays_within_per_file_and_the_budget(tmp_path):
    size = 6 * FIRST_PIECE
    for per_fill, budget, extra in ((8, 16, 5), (3, 16, 2), (8, 1, 1), (1, 16, 0)):
        rig = Rig(tmp_path / ("r%d-%d" % (per_fill, budget)), budget=budget, size=size, per_fill=per_fill)
        rig.run()
        assert len(rig.spawned) == extra and rig.fill.state == DONE and rig.committed() == rig.blob
        for fn in rig.spawned:
            fn()                  # nothing left: each gives its budget back
        assert rig.fetchers.budget.left == budget


def test_fills_of_different_blobs_fetch_at_the_same_time(tmp_path):
    """Two fills on two pool threads: each one's body flows only while the other's is
    being read too (a shared barrier), so the test completes only if nothing (a lock, the
    write lock of one fill, the hasher) serializes fills of different blobs."""
    barrier = threading.Barrier(2, timeout=10)
    rigs = [Rig(tmp_path / str(i), budget=0) for i in range(2)]

    class Both(ScriptedOrigin):
        def request(self, method, url, headers):
            resp = super().request(method, url, headers)
            resp.raw = GatedBody(resp.raw.data, barrier)
            return resp
    runs = [FillRun(r.fill, r.entry, "http://origin/blob", Origin(Both(r.blob).request, lambda url: False),
                    r.cache, r.fetchers, 2, r.c, get_logger("test")) for r in rigs]
    threads = [threading.Thread(target=run.run) for run in runs]
    for t in threads:
        t.start()
    for t in threads:
        t.join(15)
    assert [r.fill.state for r in rigs] == [DONE, DONE]
    assert [r.committed() for r in rigs] == [r.blob for r in rigs]


def test_a_piece_cut_while_its_request_is_on_the_way_ends_at_the_cut(tmp_path):
    """A reader far inside the first piece demands a fetcher while that piece's request is
    being answered: the new fetcher takes the bytes from the reader's offset, the first
    stops at the cut (its answer holds more, which is not an error), and every byte lands
    once."""
    size = 2 * FIRST_PIECE
    rig = Rig(tmp_path, budget=1, size=size)
    far = NEAR + (FIRST_PIECE - NEAR) // 2 + 1000   # inside the first piece, far from byte 0
    assert NEAR < far < FIRST_PIECE
    first = []

    class CutDuringRequest(ScriptedOrigin):
        def request(self, method, url, headers):
            if not first:
                first.append(headers["Range"])
                rig.fill.demand(far)              # the reader; its fetcher runs at once
                assert len(rig.spawned) == 1
                rig.spawned.pop()()
            return super().request(method, url, headers)

    rig.origin = CutDuringRequest(rig.served)
    origin = Origin(rig.origin.request, lambda url: False)
    FillRun(rig.fill, rig.entry, "http://origin/blob", origin, rig.cache, rig.fetchers, 2, rig.c,
            get_logger("test")).run()
    assert rig.fill.state == DONE and rig.committed() == rig.blob
    assert [(a, b) for _, a, b in rig.origin.asked] == [(far, FIRST_PIECE - 1), (FIRST_PIECE, size - 1),
                                                        (0, FIRST_PIECE - 1)]
    assert rig.c[M.UPSTREAM_BODY_BYTES] == size and rig.c[M.INTEGRITY_FAILURES] == 0
