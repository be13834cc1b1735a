"""Micro-benchmarks of the warm path's pure steps (pytest-benchmark).

Each benchmark asserts the result is right; none asserts a timing (timings live in
pytest-benchmark's report and in results/, never in pass/fail). `--benchmark-disable`
runs each body once, as a plain test.

    bash scripts/test.sh tests/bench/test_bench_micro.py --benchmark-columns=min,median,ops
"""

import pytest

from pulsys.http1.heads import render_partial
from pulsys.http1.parse import parse_request_head
from pulsys.model import target as T
from pulsys.model.entry import FILE, Entry
from pulsys.model.key import target_key
from pulsys.model.request import RequestHead
from pulsys.route import route
from pulsys.warm import WarmPlan, plan_warm
from tests.indexes import new_index, view_of

pytestmark = pytest.mark.benchmark(max_time=0.5, min_rounds=20, warmup=True)

COMMIT = "0123456789abcdef0123456789abcdef01234567"
SHA256 = "5318b270ef106ee5a3c086cf9ff84bf75f138bb61b5a03237cbb5c402539dc95"
PATH = "/openai-community/gpt2/resolve/main/model.safetensors"
SIZE = 548105171

# What huggingface_hub 2.x sends for a download (requests/urllib3 header set).
HF_HUB_GET = (
    b"GET " + PATH.encode() + b" HTTP/1.1\r\n"
    b"Host: 127.0.0.1:8080\r\n"
    b"User-Agent: unknown/None; hf_hub/1.1.0; python/3.11.7; torch/2.5.1\r\n"
    b"Accept-Encoding: identity\r\n"
    b"Accept: */*\r\n"
    b"Connection: keep-alive\r\n"
    b"Range: bytes=0-\r\n"
    b"\r\n")


def head(target=PATH, method="GET", rng=None):
    h = RequestHead()
    h.method = method
    h.target = target
    h.path, _, h.query = target.partition("?")
    h.range = rng
    return h


def file_entry(ix, repo="openai-community/gpt2", path="model.safetensors", size=SIZE, publish=True):
    t = T.Target(T.RESOLVE, "model", repo, COMMIT, path)
    e = Entry(FILE, target_key(t), size, SHA256, COMMIT, True, "sha256/" + SHA256, "/cache/blobs/" + SHA256,
              content_type="application/octet-stream")
    if not publish:
        return e
    ix.publish(e)
    return ix.get(e.key)    # as decoded from its record, heads rendered


def big_index(root):
    """An index with 10,000 files in 1,000 repos and `main` mapped to a commit for each,
    and a reactor's view of it. -> (view, the gpt2 entry as the view first decoded it)"""
    ix = new_index(root)
    entries = []
    for r in range(1000):
        repo = "org%d/model%d" % (r, r)
        entries.extend(file_entry(ix, repo, "shard-%05d.safetensors" % f, 1000 + f, False) for f in range(10))
        ix.set_rev("model", repo, "main", COMMIT, expires=1e18, fetched_at=0)
    ix.publish_many(entries)
    file_entry(ix)
    ix.set_rev("model", "openai-community/gpt2", "main", COMMIT, expires=1e18, fetched_at=0)
    view = view_of(ix)
    return view, view.lookup(route(head()), 1000.0)


def test_parse_request_head(benchmark):
    buf = bytearray(65536)           # the reactor's receive buffer, as recv_into fills it
    buf[:len(HF_HUB_GET)] = HF_HUB_GET
    h = benchmark(parse_request_head, buf, 0, len(HF_HUB_GET))
    assert (h.method, h.target, h.path, h.query) == ("GET", PATH, PATH, "")
    assert h.http11 and h.keep_alive and h.host == "127.0.0.1:8080"
    assert h.range == "bytes=0-" and h.if_none_match is None and h.authorization is None
    assert h.head_len == len(HF_HUB_GET)


def test_route_resolve(benchmark):
    h = head()
    t = benchmark(route, h)
    assert (t.kind, t.rtype, t.repo, t.rev, t.path) == (T.RESOLVE, "model", "openai-community/gpt2", "main",
                                                        "model.safetensors")
    assert t.upstream_path == PATH


def test_index_lookup_branch_memoised(benchmark, tmp_path):
    # The warm path: the reactor remembers (head, Target) per exact head bytes, so the Target and its
    # keys are reused; the Target keeps the reactor's last hit on it (IndexView: valid while
    # the index generation is unchanged and the answer fresh).
    view, entry = big_index(str(tmp_path))
    t = route(head())
    e = benchmark(view.lookup, t, 1000.0)
    assert e is entry and e.size == SIZE and e.commit == COMMIT
    assert view.lookup(t, 1e18 + 1) is None           # a stale mapping is a miss


def test_index_lookup_first_time(benchmark, tmp_path):
    # A Target fresh from route(): the keys are built on this lookup.
    view, entry = big_index(str(tmp_path))

    def lookup():
        return view.lookup(route(head()), 1000.0)
    e = benchmark(lookup)
    assert e is entry


def test_index_lookup_memo_miss(benchmark, tmp_path):
    # What a reactor pays for a key it has not decoded (or after its memo started over):
    # two LMDB gets (mapping, entry) and one record decoded with its heads.
    view, entry = big_index(str(tmp_path))
    t = route(head())

    def lookup():
        view.memo.clear()
        t.seen = None
        return view.lookup(t, 1000.0)
    e = benchmark(lookup)
    assert e is not entry and e.key == entry.key and e.heads.ok_ka == entry.heads.ok_ka


def test_index_revalidate_after_a_change(benchmark, tmp_path):
    # Another key changed (gen moved): a hot key costs one LMDB get per key, no decode.
    view, entry = big_index(str(tmp_path))
    t = route(head())
    decodes, reads = view.decodes, view.reads

    def changed_then_lookup():
        for m in view.memo.values():
            m[0] = -1          # as if the writer had bumped gen since every key was read
        t.seen = None
        return view.lookup(t, 1000.0)
    e = benchmark(changed_then_lookup)
    assert e is entry and view.decodes == decodes and view.reads > reads


def test_plan_warm_full_get(benchmark):
    entry = file_entry(new_index())
    h, plan = head(), WarmPlan()
    h.keep_alive = True
    ok = benchmark(plan_warm, h, entry, plan)
    assert ok and plan.status == 200 and (plan.offset, plan.count) == (0, SIZE)
    assert plan.head is entry.heads.ok_ka
    assert plan.head.startswith(b"HTTP/1.1 200 OK\r\n") and b"Content-Length: %d\r\n" % SIZE in plan.head


def test_plan_warm_range(benchmark):
    entry = file_entry(new_index())
    h, plan = head(rng="bytes=1048576-2097151"), WarmPlan()
    ok = benchmark(plan_warm, h, entry, plan)
    assert ok and plan.status == 206 and (plan.offset, plan.count) == (1048576, 1048576)
    assert b"Content-Range: bytes 1048576-2097151/%d\r\n" % SIZE in plan.head


def test_render_partial(benchmark):
    entry = file_entry(new_index())
    fh = entry.heads
    out = benchmark(render_partial, fh, 100, 199, True)
    assert out == (fh.partial_prefix + b"Content-Range: bytes 100-199/%d\r\nContent-Length: 100\r\n"
                   b"Connection: keep-alive\r\n\r\n" % SIZE)
    assert out.startswith(b"HTTP/1.1 206 Partial Content\r\n")
    assert b'X-Linked-Etag: "%s"\r\n' % SHA256.encode() in out


@pytest.mark.skipif(not __import__("sys").platform.startswith("linux"), reason="io_uring reactor: Linux")
def test_uring_warm_hit_python_cost(benchmark, tmp_path):
    """One warm 4 KiB hit through the io_uring reactor's completion handler: the head is
    already remembered, the body is in memory, so this is the fused path end to end."""
    from pulsys import metrics as M
    from tests.uring_stub import FusedHitRig

    rig = FusedHitRig(tmp_path, HF_HUB_GET.replace(b"Range: bytes=0-\r\n", b""), COMMIT, SHA256)
    try:
        benchmark(rig.deliver)
        sent, r = rig.ring.sent, rig.reactor
        rounds = len(sent)
        assert rounds >= (1 if benchmark.disabled else 20) and all(s is sent[0] for s in sent)
        assert sent[0].endswith(b"\r\n\r\n" + rig.body) and sent[0].startswith(b"HTTP/1.1 200 OK\r\n")
        assert r.counters[M.CACHE_HITS] == rounds == r.counters[M.FUSED_HEAD_BODY]
        assert len(r.step.heads) == 1          # parsed once, remembered after
    finally:
        rig.close()


@pytest.mark.skipif(not __import__("sys").platform.startswith("linux"), reason="io_uring reactor: Linux")
def test_general_step_warm_hit_python_cost(benchmark, tmp_path):
    """One warm 4 KiB hit through the general step (ReactorBase.advance: HttpStep.read
    from the remembered heads, decide, serve_hit, book, the send), on the io_uring
    reactor's recording ring: what a hit costs when the fused path does not take it,
    and the Python the selector backend runs per hit besides its syscalls."""
    from pulsys import metrics as M
    from pulsys.reactor.conn import READ
    from tests.uring_stub import FusedHitRig

    req = HF_HUB_GET.replace(b"Range: bytes=0-\r\n", b"")
    rig = FusedHitRig(tmp_path, req, COMMIT, SHA256)
    r, conn, n = rig.reactor, rig.conn, len(req)

    def one():
        conn.rbuf[0:n] = req
        conn.rstart, conn.rend, conn.recv_pending, conn.state = 0, n, False, READ
        r.advance(conn)
    try:
        benchmark(one)
        sent = rig.ring.sent
        assert len(sent) >= (1 if benchmark.disabled else 20)
        assert r.counters[M.CACHE_HITS] == len(sent) == r.counters[M.REQUESTS]
        assert sent[-1].endswith(b"\r\n\r\n" + rig.body) and len(r.step.heads) == 1
    finally:
        rig.close()
