"""Upstream body faults during a cold fill, injected with the fake Hub's switches: what
the client sees, and that nothing corrupt is ever served complete or committed.

Resumable faults (drop, reset, stall, 5xx) end in a complete, correct body (slower) and
a verified blob; the fill resumes with `Range` from the last byte it wrote. Corrupt
bytes cut the client short of Content-Length, are counted, and the blob is fetched once
more; a second bad copy, or retries running out, fail for good: the client is cut
short, nothing lands in blobs/, the part file is removed and the server keeps serving.
"""

import concurrent.futures
import os
import time

import pytest

from pulsys.testing.fake_hub import FakeHub, git_blob_sha1, sha256_hex
from tests.behaviour.fillcheck import blob_files, part_files, raw_get
from tests.conftest import wait_until

BODY = os.urandom(6 * 1024 * 1024 + 17)      # one piece (a fill asks for 8 MiB first)
SMALL = os.urandom(20000)
TEXT = b"".join(b'{"row": %d}\n' % i for i in range(300000))   # a regular (non-LFS) file, ~4 MiB
PATH = "/org/m/resolve/main/model.safetensors"
SHA = sha256_hex(BODY)
MIB = 1024 * 1024


@pytest.fixture
def repo(hub):
    return hub.add_repo("org/m", files={"model.safetensors": BODY, "small.safetensors": SMALL,
                                        "rows.jsonl": TEXT})


@pytest.fixture
def cache(tmp_path):
    return str(tmp_path / "cache")


def cdn_ranges(hub):
    return [r.range for r in hub.requests if r.server == "cdn" and r.method == "GET"]


def assert_clean(cache, committed):
    """Every blob on disk hashes to its name; BODY's is there iff `committed`; no part file."""
    blobs = blob_files(cache)
    assert all(blobs.values()), blobs
    assert (("sha256/" + SHA) in blobs) == committed
    assert wait_until(lambda: part_files(cache) == [], 5), part_files(cache)


def test_premature_eof_is_resumed_from_the_last_byte_written(hub, repo, make_server, cache):
    srv = make_server(hub, cache_dir=cache)
    hub.faults.drop_after(MIB, times=1, match="/repos/")
    st, _, body, complete = raw_get(srv.address, PATH)
    assert st == 200 and complete and body == BODY
    assert cdn_ranges(hub)[-1] == "bytes=%d-%d" % (MIB, len(BODY) - 1)
    # the hub counts a piece after its send returns: give it a moment, then no more
    assert wait_until(lambda: hub.body_bytes(SHA) == len(BODY), 5)
    assert hub.body_bytes(SHA) == len(BODY)                  # no byte fetched twice
    v = srv.vars()
    assert v["upstream_retries"] == 1 and v["fills_failed"] == 0
    assert_clean(cache, committed=True)


def test_a_regular_file_is_resumed_and_checked_against_its_git_sha1(hub, repo, make_server, cache):
    srv = make_server(hub, cache_dir=cache)
    hub.faults.drop_after(MIB, times=1, match="resolve-cache")
    st, hdrs, _, _ = raw_get(srv.address, "/org/m/resolve/main/rows.jsonl")
    assert st == 307
    st, _, body, complete = raw_get(srv.address, hdrs["location"])
    assert st == 200 and complete and body == TEXT
    body_gets = [r for r in hub.requests if "resolve-cache" in r.path and r.method == "GET"]
    assert body_gets[-1].range == "bytes=%d-%d" % (MIB, len(TEXT) - 1)
    assert srv.vars()["upstream_retries"] == 1
    blobs = blob_files(cache)
    assert blobs == {"sha1/" + git_blob_sha1(TEXT): True}


def test_tcp_reset_mid_body_is_resumed(hub, repo, make_server, cache):
    srv = make_server(hub, cache_dir=cache)
    hub.faults.reset_after(2 * MIB, times=1, match="/repos/")
    st, _, body, complete = raw_get(srv.address, PATH)
    assert st == 200 and complete and body == BODY
    resumed_at = int(cdn_ranges(hub)[-1][6:].split("-")[0])
    assert 0 <= resumed_at <= 2 * MIB           # bytes in flight when the RST came are lost
    assert srv.vars()["upstream_retries"] == 1
    assert_clean(cache, committed=True)


def test_a_stalled_body_is_abandoned_after_the_read_timeout_and_resumed(hub, repo, make_server, cache):
    srv = make_server(hub, cache_dir=cache, upstream_timeout=0.5)
    hub.faults.hang_after(MIB, seconds=20, times=1, match="/repos/")
    t0 = time.monotonic()
    st, _, body, complete = raw_get(srv.address, PATH)
    assert st == 200 and complete and body == BODY
    assert time.monotonic() - t0 < 10                        # not the 20 s stall
    assert cdn_ranges(hub)[-1] == "bytes=%d-%d" % (MIB, len(BODY) - 1)
    assert srv.vars()["upstream_retries"] == 1
    assert_clean(cache, committed=True)


def test_an_expired_cdn_url_is_renewed_mid_fill(make_server, cache):
    """A fill asks the CDN for piece after piece for as long as it runs; signed URLs
    expire (hf-protocol.md §4.2), so a 403 makes pulsys ask the Hub for a new one."""
    skew = [0.0]
    hub = FakeHub(clock=lambda: time.time() + skew[0]).start()
    try:
        big = os.urandom(12 * MIB + 3)                   # two pieces: 8 MiB, then the rest
        hub.add_repo("org/e", files={"w.safetensors": big})
        # one connection, so the second piece is asked for after the URL expired
        srv = make_server(hub, cache_dir=cache, fill_fetchers_per_file=1)
        hub.faults.throttle(8 * MIB, match="/repos/")
        with concurrent.futures.ThreadPoolExecutor(1) as ex:
            fut = ex.submit(raw_get, srv.address, "/org/e/resolve/main/w.safetensors")
            assert wait_until(lambda: hub.body_bytes(sha256_hex(big)) > MIB, 10)
            skew[0] = 7200.0                             # two hours on: the first URL expired
            st, _, body, complete = fut.result()
        assert st == 200 and complete and body == big
        gets = [r for r in hub.requests if r.server == "cdn" and r.method == "GET"]
        assert len({r.query for r in gets}) == 2 and len(gets) == 3    # piece, 403, piece
        assert hub.count(method="HEAD", server="hub") == 1           # the renewal
    finally:
        hub.stop()


def test_5xx_on_the_body_request_is_retried(hub, repo, make_server, cache):
    srv = make_server(hub, cache_dir=cache)
    hub.faults.status(503, times=2, match="/repos/")
    st, _, body, complete = raw_get(srv.address, PATH)
    assert st == 200 and complete and body == BODY
    assert srv.vars()["upstream_retries"] == 2 and hub.body_fetches(SHA) == 1
    assert_clean(cache, committed=True)


@pytest.mark.parametrize("listeners", [1, 2], ids=["1-listener", "2-listeners"])
def test_retries_running_out_cut_the_client_short_and_commit_nothing(hub, repo, make_server, cache):
    srv = make_server(hub, cache_dir=cache, fill_retries=2)
    assert raw_get(srv.address, "/org/m/resolve/main/small.safetensors")[2] == SMALL
    hub.reset_counters()
    hub.faults.drop_after(0, times=None, match=SHA)           # every body request: no bytes
    st, hdrs, body, complete = raw_get(srv.address, PATH)
    assert st == 200 and hdrs["content-length"] == str(len(BODY)) and not complete
    assert len(cdn_ranges(hub)) == 3                         # the request and 2 retries
    v = srv.vars()
    assert v["fills_failed"] == 1 and v["upstream_retries"] == 2
    assert_clean(cache, committed=False)
    assert raw_get(srv.address, "/org/m/resolve/main/small.safetensors")[2] == SMALL   # still serving
    hub.faults.clear()
    st, _, body, complete = raw_get(srv.address, PATH)
    assert complete and body == BODY


@pytest.mark.parametrize("listeners", [1, 2], ids=["1-listener", "2-listeners"])
def test_corrupt_bytes_cut_the_client_short_and_the_blob_is_fetched_once_more(
        hub, repo, make_server, cache):
    srv = make_server(hub, cache_dir=cache)
    hub.faults.corrupt(times=1, match="/repos/")
    st, _, body, complete = raw_get(srv.address, PATH)
    assert st == 200 and not complete and len(body) < len(BODY)
    assert wait_until(lambda: srv.vars()["fills_completed"] == 1, 15)
    v = srv.vars()
    assert v["integrity_failures"] == 1 and v["fill_refetches"] == 1 and v["fills_failed"] == 1
    assert wait_until(lambda: hub.body_bytes(SHA) == 2 * len(BODY), 5)
    assert_clean(cache, committed=True)
    hub.reset_counters()
    st, _, body, complete = raw_get(srv.address, PATH)
    assert complete and body == BODY and hub.count() == 0    # the refetched copy, warm


def test_a_second_corrupt_copy_fails_for_good(hub, repo, make_server, cache):
    srv = make_server(hub, cache_dir=cache)
    hub.faults.corrupt(times=None, match="/repos/")
    st, _, body, complete = raw_get(srv.address, PATH)
    assert not complete
    assert wait_until(lambda: srv.vars()["fills_failed"] == 2, 15)
    v = srv.vars()
    assert v["integrity_failures"] == 2 and v["fill_refetches"] == 1 and v["fills_completed"] == 0
    assert_clean(cache, committed=False)
    hub.faults.clear()
    st, _, body, complete = raw_get(srv.address, PATH)
    assert complete and body == BODY
    assert_clean(cache, committed=True)


def test_a_reader_joining_during_resumes_gets_the_whole_body(hub, repo, make_server, cache):
    srv = make_server(hub, cache_dir=cache)
    hub.faults.throttle(8 * MIB, match="/repos/")
    hub.faults.drop_after(2 * MIB, times=1, match="/repos/")
    hub.faults.reset_after(MIB, times=1, match="/repos/")
    with concurrent.futures.ThreadPoolExecutor(4) as ex:
        futs = [ex.submit(raw_get, srv.address, PATH)]
        time.sleep(0.3)
        futs += [ex.submit(raw_get, srv.address, PATH) for _ in range(3)]
        results = [f.result() for f in futs]
    for st, _, body, complete in results:
        assert st == 200 and complete and body == BODY
    assert srv.vars()["upstream_retries"] == 2
    assert_clean(cache, committed=True)
