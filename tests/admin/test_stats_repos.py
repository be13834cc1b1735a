"""GET /api/v1/stats, GET /api/v1/repos and purging a repo, against a running pulsys
with one listener and with two worker processes (whose per-repo counts reach the parent
in DOWNLOADS frames, and which all read the one index a purge changes). The fake Hub's
counters prove what a purge made pulsys fetch again and what it kept."""

import hashlib
import os
import time

import pytest

from tests.admin.helpers import get_file
from tests.auth.conftest import admin_url, call


@pytest.fixture(params=[1, 2], ids=["one-process", "two-workers"])
def listeners(request):
    return request.param


def _wait_stats(base, key, pred, timeout=10.0):
    deadline = time.monotonic() + timeout
    while True:
        st, _, s = call(base + "/api/v1/stats", key=key)
        assert st == 200
        if pred(s):
            return s
        assert time.monotonic() < deadline, s
        time.sleep(0.1)


def _repo(s, name):
    return next((r for r in s["repos"] if r["repo"] == name), {"downloads": 0, "bytes_served": 0})


def test_stats_repos_and_a_purge_that_keeps_shared_blobs(auth_server, hub, tmp_path, listeners):
    shared, own = os.urandom(1 << 20), os.urandom(1 << 20)
    sha_a = hub.add_repo("org/a", files={"shared.bin": shared, "a.bin": own})
    hub.add_repo("org/b", files={"shared.bin": shared})
    cache = str(tmp_path / "cache")
    server, admin, read = auth_server(cache_dir=cache)
    base = admin_url(server)
    for repo, path in [("org/a", "shared.bin"), ("org/a", "a.bin"), ("org/b", "shared.bin"),
                       ("org/a", "shared.bin"), ("org/a", "a.bin")]:
        get_file(server, repo, path, read)
    s = _wait_stats(base, admin, lambda s: _repo(s, "org/a")["downloads"] == 4
                    and _repo(s, "org/b")["downloads"] == 1)
    a = _repo(s, "org/a")
    assert 4 << 20 <= a["bytes_served"] < (4 << 20) + 4 * 2048     # bodies plus their heads
    assert s["bytes_used"] == 2 << 20 and s["blobs"] == 2 and s["quota_bytes"] == 0
    assert s["hits"] >= 2 and 0 < s["hit_ratio"] < 1
    assert s["upstream_body_bytes"] == hub.total_body_bytes() == 2 << 20
    assert s["upstream_bytes_saved"] == s["bytes_served"] - s["upstream_body_bytes"] > 0
    st, _, repos = call(base + "/api/v1/repos", key=admin)
    by = {r["repo"]: r for r in repos}
    assert st == 200 and by["org/a"]["type"] == "model" and by["org/a"]["files"] == 2
    assert by["org/a"]["bytes"] == 2 << 20 and by["org/b"]["bytes"] == 1 << 20
    assert {"revision": "main", "commit": sha_a} in by["org/a"]["revisions"]

    st, _, gone = call(base + "/api/v1/repos/model/org/a", "DELETE", admin)
    assert st == 200 and gone["removed_entries"] >= 2
    assert gone["freed_bytes"] == len(own) and gone["kept_shared_blobs"] == 1
    st, _, repos = call(base + "/api/v1/repos", key=admin)
    assert [r["repo"] for r in repos] == ["org/b"]
    # the shared blob stayed: org/b is still warm (no upstream bytes) on every worker
    before = hub.total_body_bytes()
    for _ in range(2 * listeners):
        assert get_file(server, "org/b", "shared.bin", read) == shared
    assert hub.total_body_bytes() == before
    # org/a's own blob went: asking again fetches it again
    assert get_file(server, "org/a", "a.bin", read) == own
    assert hub.body_fetches(hashlib.sha256(own).hexdigest()) == 2
    # refusals, and the audit event
    assert call(base + "/api/v1/repos/model/org/zzz", "DELETE", admin)[0] == 404
    st, _, doc = call(base + "/api/v1/repos/kernel/org/b", "DELETE", admin)
    assert st == 400 and "repo type" in doc["error"]
    assert call(base + "/api/v1/repos/model/org/b", "DELETE", read)[0] == 403
    assert call(base + "/api/v1/stats", key=read)[0] == 403
    st, _, log = call(base + "/api/v1/audit?action=repo.purge", key=admin)
    ev = log["events"][0]
    assert ev["target"] == "model/org/a" and ev["detail"]["freed_bytes"] == len(own) and ev["actor"].startswith("key:")

    if listeners == 1:      # per-repo totals outlast a restart (the counters table)
        server.stop()
        server.shutdown()
        server, admin, _ = auth_server(cache_dir=cache)
        st, _, s = call(admin_url(server) + "/api/v1/stats", key=admin)
        assert _repo(s, "org/b")["downloads"] >= 2 * listeners + 1 and _repo(s, "org/a")["downloads"] == 5
