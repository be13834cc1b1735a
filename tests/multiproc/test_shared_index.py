"""One index for every worker process (docs/decisions/0013): what one process commits,
every other reads from the same LMDB file, with no message to it. Real worker processes
on loopback against the fake Hub."""

import os
import time

import pytest

from tests.auth.conftest import admin_url, auth_server, call  # noqa: F401  (a fixture)
from tests.multiproc.test_listeners import one_request, per_worker

BODY = os.urandom(1024 * 1024 + 7)
PATH = "/org/m/resolve/main/model.safetensors"


@pytest.fixture
def repo(hub):
    return hub.add_repo("org/m", files={"model.safetensors": BODY})


def frames_to(srv):
    return [w["frames_sent"] for w in srv.vars()["workers"]]


def test_a_file_filled_through_one_worker_is_warm_in_the_other_with_no_frame_sent_to_it(hub, repo,
                                                                                        make_server):
    srv = make_server(hub, listeners=2)
    before = frames_to(srv)
    st, body = one_request(srv.address, PATH)
    assert st == 200 and body == BODY
    v = srv.vars()
    filler = per_worker(v, "cache_misses").index(1)
    other = 1 - filler
    after_fill = frames_to(srv)
    assert after_fill[filler] > before[filler]          # its Job's reply and the fill's progress
    assert after_fill[other] == before[other]           # nothing: no index broadcast exists
    hub.reset_counters()
    # no pause: the parent commits the entry before it answers the Job
    for _ in range(200):
        st, body = one_request(srv.address, PATH)
        assert st == 200 and body == BODY
        if per_worker(srv.vars(), "cache_hits")[other] > 0:
            break
    v = srv.vars()
    assert per_worker(v, "cache_hits")[other] > 0 and per_worker(v, "cache_misses")[other] == 0
    assert hub.count() == 0 and frames_to(srv)[other] == before[other]


def test_a_purged_repo_is_gone_from_every_worker_within_100_ms(hub, repo, auth_server):
    srv, admin, read = auth_server(listeners=2)
    auth = b"Authorization: Bearer %s\r\n" % read.encode()
    for _ in range(200):                                # warm, and remembered, in both workers
        assert one_request(srv.address, PATH, auth) == (200, BODY)
        if min(per_worker(srv.vars(), "cache_hits")) >= 2:
            break
    assert min(per_worker(srv.vars(), "cache_hits")) >= 2
    hub.faults.status(503, times=None)                  # from now on only the cache could answer 200
    before = srv.vars()
    st, _, doc = call(admin_url(srv) + "/api/v1/repos/model/org/m", "DELETE", admin)
    t0 = time.monotonic()
    assert st == 200 and doc["removed_entries"] >= 1
    seen = []
    while time.monotonic() - t0 < 0.1 or min(w2 - w1 for w1, w2 in zip(
            per_worker(before, "requests"), per_worker(srv.vars(sync=False), "requests"))) == 0:
        seen.append((time.monotonic() - t0, one_request(srv.address, PATH, auth)[0]))
        assert len(seen) < 400
    hub.faults.clear()
    assert all(status != 200 for _, status in seen), seen
    assert seen[0][0] < 0.1                             # asked within 100 ms of the purge
    after = srv.vars()
    assert per_worker(after, "cache_hits") == per_worker(before, "cache_hits")
