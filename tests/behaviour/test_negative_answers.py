"""Negative answers against the fake Hub over loopback: 4xx answers to HEAD are cached
(clients probe optional files with HEAD, hf-protocol.md §9); a commit whose complete file
list pulsys holds answers 404 EntryNotFound for any other path without upstream, Hub up
or down; negative entries are bounded by --max-negative-entries (LRU). Each test runs
with one listener (in-process) and two (worker processes) unless it reaches into the
in-process server."""

import os
import time

import pytest
import requests

from pulsys.cache.indexdb import IndexDB
from pulsys.cache.record import peek_entry

from tests.conftest import wait_until

CONFIG = b'{"architectures": ["Bert"]}\n'
FILES = {"config.json": CONFIG, "data/train.csv": b"a,b\n1,2\n", "README.md": b"# d\n"}
IN_PROCESS_ONLY = {"test_the_negative_cap_applies_at_start_and_meta_files_follow_the_index"}
HUB_ERROR_HEADERS = ("X-Error-Code", "X-Error-Message", "X-Repo-Commit")


def pytest_generate_tests(metafunc):
    if "listeners" in metafunc.fixturenames and metafunc.function.__name__ not in IN_PROCESS_ONLY:
        metafunc.parametrize("listeners", [1, 2], ids=["1-listener", "2-listeners"])


@pytest.fixture
def commit(hub):
    return hub.add_repo("org/d", files=FILES, repo_type="dataset")


def head(srv, path):
    return requests.head(srv.url + path, timeout=30)


def get(srv, path, **kw):
    return requests.get(srv.url + path, timeout=30, **kw)


def same_as_hub(hub, r, path, method):
    """The answer pulsys gave is the Hub's: status, error headers, and (GET) body."""
    direct = requests.request(method, hub.url + path, timeout=30, allow_redirects=False)
    assert r.status_code == direct.status_code, (r.status_code, direct.status_code)
    for name in HUB_ERROR_HEADERS:
        assert r.headers.get(name) == direct.headers.get(name), name
    if method == "GET":
        assert r.content == direct.content


# -- A: HEAD 4xx answers are cached -------------------------------------------------------


@pytest.mark.parametrize("rev", ["commit", "main"])
def test_a_second_head_of_a_missing_file_asks_nothing_upstream(hub, commit, make_server, rev):
    srv = make_server(hub)
    path = "/datasets/org/d/resolve/%s/d.py" % (commit if rev == "commit" else "main")
    first = head(srv, path)
    assert first.status_code == 404 and first.headers["X-Error-Code"] == "EntryNotFound"
    assert first.headers["X-Repo-Commit"] == commit     # hf_hub_download writes .no_exist from it
    hub.reset_counters()
    again = head(srv, path)
    assert hub.count() == 0, hub.requests
    same_as_hub(hub, again, path, "HEAD")
    assert again.headers["X-Error-Message"] == "Entry not found"


def test_a_get_after_a_cached_head_404_gets_the_hubs_body_then_is_cached(hub, commit, make_server):
    srv = make_server(hub)
    path = "/datasets/org/d/resolve/%s/missing.json" % commit
    assert head(srv, path).status_code == 404
    hub.reset_counters()
    r = get(srv, path)
    assert r.status_code == 404 and r.json() == {"error": "Entry not found"}   # never an empty body
    assert hub.count() == 1                  # the HEAD's entry had no body: the GET asked once
    hub.reset_counters()
    r2, h2 = get(srv, path), head(srv, path)
    assert hub.count() == 0
    same_as_hub(hub, r2, path, "GET")
    same_as_hub(hub, h2, path, "HEAD")


def test_head_of_a_missing_repo_is_cached_with_its_error_code(hub, commit, make_server):
    srv = make_server(hub)
    path = "/datasets/org/nope/resolve/main/x.json"
    assert head(srv, path).headers["X-Error-Code"] == "RepoNotFound"
    hub.reset_counters()
    r = head(srv, path)
    assert hub.count() == 0 and r.status_code == 401 and r.headers["X-Error-Code"] == "RepoNotFound"


# -- B: a missing file answered from a cached complete file list ---------------------------


def _probe_missing(hub, srv, commit, revs=("commit", "main")):
    """Every way of asking for files that are not at `commit` (at the commit, and at
    "main" when its mapping is known): 404 EntryNotFound from the cache, the Hub's own
    headers and body."""
    for rev in (commit if r == "commit" else r for r in revs):
        for name in ("d.py", ".huggingface.yaml", "data/dataset_infos.json"):
            path = "/datasets/org/d/resolve/%s/%s" % (rev, name)
            hub.reset_counters()
            h, g = head(srv, path), get(srv, path)
            assert hub.count() == 0, (path, hub.requests)
            assert h.status_code == g.status_code == 404
            assert h.headers["X-Error-Code"] == g.headers["X-Error-Code"] == "EntryNotFound"
            assert h.headers["X-Repo-Commit"] == g.headers["X-Repo-Commit"] == commit
            same_as_hub(hub, h, path, "HEAD")
            same_as_hub(hub, g, path, "GET")


def test_revision_info_siblings_answer_missing_files_without_upstream(hub, commit, make_server):
    srv = make_server(hub)
    assert get(srv, "/api/datasets/org/d/revision/main").json()["sha"] == commit
    _probe_missing(hub, srv, commit)
    # files in the list, and folders, still go upstream as usual
    hub.reset_counters()
    assert get(srv, "/datasets/org/d/resolve/%s/data/train.csv" % commit).content == FILES["data/train.csv"]
    assert head(srv, "/datasets/org/d/resolve/%s/data" % commit).status_code == 404
    assert hub.count() >= 2


def test_recursive_tree_answers_missing_files_once_every_page_is_cached(hub, commit, make_server):
    hub.tree_page_size = 1                      # 4 entries (3 files, 1 folder): 4 pages
    srv = make_server(hub)
    missing = "/datasets/org/d/resolve/%s/d.py" % commit
    url = "/api/datasets/org/d/tree/%s?recursive=true&expand=false" % commit
    pages = 0
    while url:
        r = get(srv, url)
        assert r.status_code == 200
        pages += 1
        link = r.headers.get("Link")
        url = link[1:link.index(">")][len(srv.url):] if link else None
        if url:   # the list is not complete yet: a missing file is asked upstream
            hub.reset_counters()
            assert head(srv, missing.replace("d.py", "p%d.py" % pages)).status_code == 404
            assert hub.count() == 1
    assert pages == 4
    _probe_missing(hub, srv, commit, revs=("commit",))   # a tree at a commit says nothing of main


def test_a_tree_of_a_folder_or_not_recursive_is_not_a_complete_list(hub, commit, make_server):
    srv = make_server(hub)
    assert get(srv, "/api/datasets/org/d/tree/%s/data?recursive=true" % commit).status_code == 200
    assert get(srv, "/api/datasets/org/d/tree/%s" % commit).status_code == 200
    hub.reset_counters()
    assert head(srv, "/datasets/org/d/resolve/%s/d.py" % commit).status_code == 404
    assert hub.count() == 1


def test_paths_info_answers_cover_the_paths_it_was_asked(hub, commit, make_server):
    srv = make_server(hub)
    r = requests.post(srv.url + "/api/datasets/org/d/paths-info/%s" % commit,
                      data={"paths": ["config.json", "d.py", "data"], "expand": "False"}, timeout=30)
    assert sorted(e["path"] for e in r.json()) == ["config.json", "data"]
    hub.reset_counters()
    path = "/datasets/org/d/resolve/%s/d.py" % commit
    h, g = head(srv, path), get(srv, path)
    assert hub.count() == 0
    same_as_hub(hub, h, path, "HEAD")
    same_as_hub(hub, g, path, "GET")
    hub.reset_counters()
    assert head(srv, "/datasets/org/d/resolve/%s/other.py" % commit).status_code == 404
    assert hub.count() == 1                       # not asked in that paths-info: upstream


def test_a_cached_file_list_answers_while_the_hub_is_down_and_after_a_restart(hub, commit, make_server,
                                                                                tmp_path):
    cache = str(tmp_path / "c")
    srv = make_server(hub, cache_dir=cache, revision_ttl=0.2)
    assert get(srv, "/api/datasets/org/d/revision/main").json()["sha"] == commit
    srv.stop()
    srv.shutdown()
    srv = make_server(hub, cache_dir=cache, revision_ttl=0.2)
    time.sleep(0.3)                                # "main" is stale: upstream is asked first
    hub.faults.status(503, times=None)
    try:
        for rev in (commit, "main"):
            t0 = time.monotonic()
            r = head(srv, "/datasets/org/d/resolve/%s/d.py" % rev)
            assert r.status_code == 404 and r.headers["X-Error-Code"] == "EntryNotFound", r.headers
            assert r.headers["X-Repo-Commit"] == commit and time.monotonic() - t0 < 5
    finally:
        hub.faults.clear()


# -- D: negative entries are bounded ------------------------------------------------------


def _negatives_in_index(srv, cache):
    """Negative entries in the index every process reads: through the in-process
    server's writer Index, or read-only from the file when the server is a process of
    its own (an LMDB environment must not be opened twice in one process)."""
    if hasattr(srv, "index"):
        return sum(1 for _, (kind, status, _, _, _) in srv.index.peek() if kind == 2 and 400 <= status < 500)
    db = IndexDB(os.path.join(cache, "v1"), writer=False)
    try:
        with db.env.begin(db=db.entries) as tx:
            return sum(1 for v in tx.cursor().iternext(keys=False)
                       if peek_entry(v)[0] == 2 and 400 <= peek_entry(v)[1] < 500)
    finally:
        db.close()


def test_many_missing_files_keep_at_most_the_cap_of_negative_entries(hub, commit, make_server, tmp_path,
                                                                      listeners):
    cache = str(tmp_path / "c")
    srv = make_server(hub, cache_dir=cache, max_negative_entries=5)
    for i in range(30):
        assert head(srv, "/datasets/org/d/resolve/%s/missing-%d.txt" % (commit, i)).status_code == 404
    v = srv.vars()
    assert v["negative_entries"] == 5 and v["negative_evictions"] == 25
    assert _negatives_in_index(srv, cache) == 5
    assert "pulsys_negative_evictions_total 25.0" in srv_metrics(srv)
    # the last five are answered from the cache (every worker's replica)...
    hub.reset_counters()
    for i in range(25, 30):
        for _ in range(4):
            assert head(srv, "/datasets/org/d/resolve/%s/missing-%d.txt" % (commit, i)).status_code == 404
    assert hub.count() == 0
    # ...and an evicted one is gone from every replica: it is asked upstream again
    for _ in range(4):
        assert head(srv, "/datasets/org/d/resolve/%s/missing-0.txt" % commit).status_code == 404
    assert hub.count() == 1


def srv_metrics(srv):
    if hasattr(srv, "metrics_text"):
        return srv.metrics_text()
    from pulsys.admin.server import metrics_text
    return metrics_text(srv.vars()).decode()


def test_the_negative_cap_applies_at_start(hub, commit, make_server, tmp_path):
    cache = str(tmp_path / "c")
    srv = make_server(hub, cache_dir=cache)
    for i in range(12):
        assert head(srv, "/datasets/org/d/resolve/%s/m-%d.txt" % (commit, i)).status_code == 404
    assert srv.vars()["negative_entries"] == 12
    srv.stop()
    srv.shutdown()
    srv = make_server(hub, cache_dir=cache, max_negative_entries=4)
    # the index is read once in the background after start (Upstream.learn_index)
    assert wait_until(lambda: srv.vars()["negative_evictions"] == 8)
    assert srv.vars()["negative_entries"] == 4 and _negatives_in_index(srv, cache) == 4


def test_a_file_that_appears_replaces_its_negative_entry(hub, commit, make_server, listeners):
    srv = make_server(hub, revision_ttl=0.2)
    path = "/datasets/org/d/resolve/main/late.txt"
    assert head(srv, path).status_code == 404
    assert srv.vars()["negative_entries"] == 1
    hub.commit("org/d", {"late.txt": b"here now\n"}, repo_type="dataset")
    time.sleep(0.3)
    assert get(srv, path).content == b"here now\n"
    assert srv.vars()["negative_entries"] == 0
