"""pulsys against the fake Hub over loopback, driven with `requests`: cold fill then
warm, de-duplication, restart, freshness, offline, Xet stripping, errors. Upstream body
faults and integrity are in test_fill_faults.py, parallel pieces and fan-out in
test_fill_pieces.py. Each test runs with one listener (in-process) and two (worker
processes), except those that reach into the in-process upstream service."""

import concurrent.futures
import os
import time

import pytest
import requests

from pulsys.testing.fake_hub import git_blob_sha1, sha256_hex

LFS_BODY = os.urandom(5 * 1024 * 1024 + 17)
CONFIG = b'{"architectures": ["Bert"], "hidden": 768}\n'


IN_PROCESS_ONLY = {"test_redirect_to_a_host_not_allowed_is_refused"}


def pytest_generate_tests(metafunc):
    if "listeners" in metafunc.fixturenames and metafunc.function.__name__ not in IN_PROCESS_ONLY:
        metafunc.parametrize("listeners", [1, 2], ids=["1-listener", "2-listeners"])


@pytest.fixture
def repo(hub):
    commit = hub.add_repo("org/m", files={"model.safetensors": LFS_BODY, "config.json": CONFIG,
                                          "sub/tokenizer.json": b'{"t": 1}'})
    return commit


def get(srv, path, **kw):
    kw.setdefault("timeout", 30)
    return requests.get(srv.url + path, **kw)


def test_cold_lfs_is_answered_at_resolve_with_hf_headers_then_warm_without_upstream(hub, repo, make_server):
    srv = make_server(hub)
    h = requests.head(srv.url + "/org/m/resolve/main/model.safetensors", timeout=10)
    assert h.status_code == 200                               # no redirect at all (§7.7)
    assert h.headers["X-Repo-Commit"] == repo
    assert h.headers["X-Linked-Etag"] == '"%s"' % sha256_hex(LFS_BODY)
    assert h.headers["ETag"] == h.headers["X-Linked-Etag"]
    assert h.headers["X-Linked-Size"] == h.headers["Content-Length"] == str(len(LFS_BODY))
    assert not any(k.lower().startswith("x-xet") for k in h.headers) and "Link" not in h.headers
    r = get(srv, "/org/m/resolve/main/model.safetensors")
    assert r.status_code == 200 and r.content == LFS_BODY and r.headers["X-Repo-Commit"] == repo
    assert hub.body_fetches(sha256_hex(LFS_BODY)) == 1
    hub.reset_counters()
    for _ in range(3):
        assert get(srv, "/org/m/resolve/main/model.safetensors").content == LFS_BODY
        assert get(srv, "/org/m/resolve/%s/model.safetensors" % repo).content == LFS_BODY
    assert hub.count() == 0


def test_regular_file_redirect_is_relative_and_verbatim_then_served_and_cached(hub, repo, make_server):
    srv = make_server(hub)
    r = get(srv, "/org/m/resolve/main/config.json", allow_redirects=False)
    assert r.status_code == 307
    loc = r.headers["Location"]
    assert loc.startswith("/api/resolve-cache/models/org/m/%s/config.json?" % repo)
    assert "etag=%22" + git_blob_sha1(CONFIG) + "%22" in loc
    r = get(srv, loc)
    assert r.content == CONFIG and r.headers["ETag"] == '"%s"' % git_blob_sha1(CONFIG)
    # legacy clients drop the query of a relative Location (§3); same cache entry
    hub.reset_counters()
    r = get(srv, loc.split("?")[0])
    assert r.content == CONFIG and hub.count() == 0


def test_concurrent_cold_requests_cause_one_upstream_body_fetch(hub, repo, make_server):
    srv = make_server(hub)
    hub.faults.throttle(20 * 1024 * 1024)   # slow enough that requests overlap

    def fetch(i):
        rng = {"Range": "bytes=%d-%d" % (i * 1000, i * 1000 + 999)} if i % 2 else {}
        return i, get(srv, "/org/m/resolve/main/model.safetensors", headers=rng)
    with concurrent.futures.ThreadPoolExecutor(16) as ex:
        results = list(ex.map(fetch, range(16)))
    hub.faults.clear()
    for i, r in results:
        want = LFS_BODY[i * 1000:i * 1000 + 1000] if i % 2 else LFS_BODY
        assert r.content == want
    assert hub.body_fetches(sha256_hex(LFS_BODY)) == 1
    assert hub.body_bytes(sha256_hex(LFS_BODY)) == len(LFS_BODY)


def test_cold_client_gets_bytes_before_the_fill_completes(hub, repo, make_server):
    srv = make_server(hub)
    hub.faults.throttle(2 * 1024 * 1024)    # ~2.5 s for the whole file
    t0 = time.monotonic()
    r = requests.get(srv.url + "/org/m/resolve/main/model.safetensors", stream=True, timeout=30)
    first = next(r.iter_content(65536))
    t_first = time.monotonic() - t0
    rest = b"".join(r.iter_content(1 << 20))
    t_all = time.monotonic() - t0
    hub.faults.clear()
    assert first + rest == LFS_BODY
    assert t_first < t_all / 2, (t_first, t_all)


def test_restart_rebuilds_the_index_and_serves_with_upstream_gone(hub, repo, make_server, tmp_path):
    cache = str(tmp_path / "c")
    srv = make_server(hub, cache_dir=cache)
    assert get(srv, "/org/m/resolve/main/model.safetensors").content == LFS_BODY
    loc = get(srv, "/org/m/resolve/main/config.json", allow_redirects=False).headers["Location"]
    assert get(srv, loc).content == CONFIG
    assert get(srv, "/api/models/org/m/revision/main").json()["sha"] == repo
    srv.stop()
    srv.shutdown()
    hub.stop()
    srv2 = make_server(hub, cache_dir=cache, revision_ttl=0.01)
    time.sleep(0.05)
    assert srv2.load_stats["entries"] >= 4 and srv2.load_stats["revisions"] >= 1
    assert get(srv2, "/org/m/resolve/main/model.safetensors").content == LFS_BODY
    assert get(srv2, "/org/m/resolve/main/config.json").content == CONFIG
    assert get(srv2, "/api/models/org/m/revision/main").json()["sha"] == repo
    assert srv2.vars()["stale_served"] >= 1          # upstream unreachable: stale mapping used


def test_offline_mode_serves_cache_and_answers_misses_at_once_with_599(hub, repo, make_server, tmp_path):
    cache = str(tmp_path / "c")
    srv = make_server(hub, cache_dir=cache)
    assert get(srv, "/org/m/resolve/main/model.safetensors").content == LFS_BODY
    srv.stop()
    srv.shutdown()
    hub.reset_counters()
    off = make_server(hub, cache_dir=cache, offline=True, revision_ttl=0)
    assert get(off, "/org/m/resolve/main/model.safetensors").content == LFS_BODY
    r = get(off, "/org/m/resolve/main/never-fetched.bin")
    assert r.status_code == 599 and "offline" in r.json()["error"]
    assert r.headers["X-Error-Code"] == "UpstreamUnavailable"     # not retried by HF clients
    assert hub.count() == 0


def test_symbolic_revision_is_refreshed_after_the_ttl(hub, repo, make_server):
    srv = make_server(hub, revision_ttl=0.5)
    assert get(srv, "/org/m/resolve/main/model.safetensors").content == LFS_BODY
    new_body = os.urandom(1024 * 1024)
    new_commit = hub.commit("org/m", files={"model.safetensors": new_body})
    r = get(srv, "/org/m/resolve/main/model.safetensors")
    assert r.content == LFS_BODY                       # still fresh: old commit
    time.sleep(0.6)
    r = get(srv, "/org/m/resolve/main/model.safetensors")
    assert r.content == new_body and r.headers["X-Repo-Commit"] == new_commit
    # the old commit stays addressable forever
    assert get(srv, "/org/m/resolve/%s/model.safetensors" % repo).content == LFS_BODY


def test_upstream_5xx_serves_stale(hub, repo, make_server):
    srv = make_server(hub, revision_ttl=0.2)
    assert get(srv, "/org/m/resolve/main/model.safetensors").content == LFS_BODY
    time.sleep(0.3)
    hub.faults.status(503, times=None)
    r = get(srv, "/org/m/resolve/main/model.safetensors")
    hub.faults.clear()
    assert r.status_code == 200 and r.content == LFS_BODY
    assert srv.vars()["stale_served"] >= 1


def test_blobs_are_stored_once_across_repos(hub, repo, make_server, tmp_path):
    hub.add_repo("other/copy", files={"weights.safetensors": LFS_BODY})
    srv = make_server(hub, cache_dir=str(tmp_path / "c"))
    assert get(srv, "/org/m/resolve/main/model.safetensors").content == LFS_BODY
    hub.reset_counters()
    assert get(srv, "/other/copy/resolve/main/weights.safetensors").content == LFS_BODY
    assert hub.total_body_bytes() == 0
    blobs = [f for _, _, fs in os.walk(tmp_path / "c" / "v1" / "blobs") for f in fs]
    assert blobs.count(sha256_hex(LFS_BODY)) == 1


def test_api_xet_fields_removed_and_pagination_links_point_at_pulsys(hub, make_server):
    hub.tree_page_size = 2
    files = {"f%d.safetensors" % i: os.urandom(100) for i in range(5)}
    commit = hub.add_repo("org/t", files=files)
    srv = make_server(hub)
    url = "/api/models/org/t/tree/%s?recursive=true&expand=false" % commit
    seen, pages = [], 0
    while url:
        r = get(srv, url)
        assert r.status_code == 200 and b"xetHash" not in r.content
        seen += [e["path"] for e in r.json()]
        link = r.headers.get("Link")
        pages += 1
        if not link:
            break
        assert link.startswith("<" + srv.url + "/api/models/org/t/tree/") and 'rel="next"' in link
        url = link[1:link.index(">")][len(srv.url):]
    assert sorted(seen) == sorted(files) and pages == 3
    pi = requests.post(srv.url + "/api/models/org/t/paths-info/%s" % commit,
                       data={"paths": ["f1.safetensors", "f3.safetensors"], "expand": "False"}, timeout=10)
    assert pi.status_code == 200 and b"xetHash" not in pi.content
    assert sorted(e["path"] for e in pi.json()) == ["f1.safetensors", "f3.safetensors"]


def test_errors_pass_through_with_hf_error_codes(hub, repo, make_server):
    hub.add_repo("org/gated", files={"a.bin": b"x"}, gated=True)
    srv = make_server(hub)
    r = get(srv, "/org/m/resolve/main/missing.txt")
    assert r.status_code == 404 and r.headers["X-Error-Code"] == "EntryNotFound"
    assert r.headers["X-Repo-Commit"] == repo
    r = get(srv, "/org/nope/resolve/main/x")
    assert r.status_code in (401, 404) and r.headers["X-Error-Code"] == "RepoNotFound"
    r = get(srv, "/org/m/resolve/no-such-rev/config.json")
    assert r.status_code == 404 and r.headers["X-Error-Code"] == "RevisionNotFound"
    r = get(srv, "/org/gated/resolve/main/a.bin")
    assert r.status_code in (401, 403) and r.headers["X-Error-Code"] == "GatedRepo"
    r = get(srv, "/api/models/org/nope")
    assert r.headers["X-Error-Code"] == "RepoNotFound"


def test_upstream_unreachable_gives_a_status_clients_do_not_retry_with_a_clear_message(hub, make_server):
    srv = make_server(hub)
    hub.stop()
    r = get(srv, "/org/m/resolve/main/model.safetensors")
    # 599, not 502/503/504: huggingface_hub would retry those five times (docs/architecture.md,
    # "When the Hub is down")
    assert r.status_code == 599 and "unavailable" in r.json()["error"]
    assert r.headers["X-Error-Code"] == "UpstreamUnavailable"


def test_redirect_to_a_host_not_allowed_is_refused(hub, repo, make_server):
    srv = make_server(hub, allow_upstream_host=["example.invalid"])
    srv.service.allowed = frozenset({"127.0.0.1:1"})   # the CDN is no longer trusted
    r = get(srv, "/org/m/resolve/main/model.safetensors")
    assert r.status_code == 502 and "allow-upstream-host" in r.json()["error"]
    assert hub.count(server="cdn") == 0


def test_agent_harnesses_answered_locally(hub, make_server):
    srv = make_server(hub)
    r = get(srv, "/api/agent-harnesses")
    assert r.status_code == 200 and isinstance(r.json(), dict) and hub.count() == 0


def test_client_token_is_never_forwarded_and_server_token_is_used(make_server):
    from pulsys.testing.fake_hub import FakeHub
    hub = FakeHub(token="hf_server").start()
    try:
        hub.add_repo("org/priv", files={"w.safetensors": b"p" * 1000}, private=True)
        srv = make_server(hub, hf_token="hf_server")
        r = get(srv, "/org/priv/resolve/main/w.safetensors", headers={"Authorization": "Bearer hf_client"})
        assert r.status_code == 200 and r.content == b"p" * 1000
        auths = {rec.headers.get("authorization") for rec in hub.requests if rec.server == "hub"}
        assert auths == {"Bearer hf_server"}
        assert all("authorization" not in rec.headers for rec in hub.requests if rec.server == "cdn")
    finally:
        hub.stop()


def test_netrc_credentials_reach_no_upstream_host(make_server, tmp_path, monkeypatch):
    """requests reads ~/.netrc (or $NETRC) for every request of a session that trusts the
    environment, and sends its login as Basic auth, over the Hub token too. pulsys sets
    Authorization itself: a netrc naming the Hub's and the CDN's host changes nothing."""
    from pulsys.testing.fake_hub import FakeHub
    hub = FakeHub(token="hf_server").start()
    try:
        netrc = tmp_path / "netrc"
        netrc.write_text("machine 127.0.0.1 login someone password secret\n"
                         "machine localhost login someone password secret\n")
        netrc.chmod(0o600)
        monkeypatch.setenv("NETRC", str(netrc))
        hub.add_repo("org/priv", files={"w.safetensors": b"n" * 5000}, lfs={"w.safetensors"}, private=True)
        srv = make_server(hub, hf_token="hf_server")
        r = get(srv, "/org/priv/resolve/main/w.safetensors")
        assert r.status_code == 200 and r.content == b"n" * 5000
        assert {rec.headers.get("authorization") for rec in hub.requests if rec.server == "hub"} == {"Bearer hf_server"}
        assert [rec for rec in hub.requests if rec.server == "cdn"]
        assert all("authorization" not in rec.headers for rec in hub.requests if rec.server == "cdn")
    finally:
        hub.stop()


def test_upstream_is_asked_for_identity_and_clients_get_raw_bytes(hub, repo, make_server):
    srv = make_server(hub)
    loc = get(srv, "/org/m/resolve/main/config.json", allow_redirects=False).headers["Location"]
    r = get(srv, loc, headers={"Accept-Encoding": "gzip, deflate"})
    assert r.content == CONFIG and "Content-Encoding" not in r.headers
    assert r.headers["Content-Length"] == str(len(CONFIG))
    ups = [rec for rec in hub.requests if rec.server == "hub"]
    assert ups and all(rec.headers.get("accept-encoding") == "identity" for rec in ups)


@pytest.mark.parametrize("rtype,prefix,repo_id", [
    ("dataset", "/datasets", "org/ds"), ("space", "/spaces", "org/sp"), ("model", "", "gpt2"),
    ("dataset", "/datasets", "squad"),
])
def test_repo_types_and_one_segment_ids(hub, make_server, rtype, prefix, repo_id):
    body = os.urandom(300000)
    commit = hub.add_repo(repo_id, repo_type=rtype, files={"data/part.parquet": body})
    srv = make_server(hub)
    r = get(srv, "%s/%s/resolve/main/data/part.parquet" % (prefix, repo_id))
    assert r.status_code == 200 and r.content == body and r.headers["X-Repo-Commit"] == commit
    info = get(srv, "/api/%ss/%s/revision/main" % (rtype, repo_id)).json()
    assert info["sha"] == commit


def test_percent_encoded_pr_revision(hub, repo, make_server):
    body = os.urandom(200000)
    pr = hub.commit("org/m", files={"model.safetensors": body}, branch="refs/pr/1")
    srv = make_server(hub)
    r = get(srv, "/org/m/resolve/refs%2Fpr%2F1/model.safetensors")
    assert r.status_code == 200 and r.content == body and r.headers["X-Repo-Commit"] == pr
    assert get(srv, "/org/m/resolve/main/model.safetensors").content == LFS_BODY


def test_resolve_at_a_commit_then_its_resolve_cache_url_never_loops(hub, repo, make_server):
    srv = make_server(hub)
    for method in ("HEAD", "GET"):
        r = requests.request(method, srv.url + "/org/m/resolve/%s/config.json" % repo,
                             allow_redirects=False, timeout=10)
        if r.status_code == 307:
            r = requests.request(method, srv.url + r.headers["Location"], allow_redirects=False, timeout=10)
        assert r.status_code == 200 and r.headers["ETag"] == '"%s"' % git_blob_sha1(CONFIG)
    r = get(srv, "/org/m/resolve/%s/config.json" % repo)
    assert r.content == CONFIG and len(r.history) <= 1


def test_agent_harnesses_is_a_document_the_hf_cli_can_read(hub, make_server):
    srv = make_server(hub)
    doc = get(srv, "/api/agent-harnesses").json()
    assert isinstance(doc, dict) and doc.get("harnesses") == {}
