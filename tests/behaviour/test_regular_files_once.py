"""A regular (non-LFS) file's body comes from the Hub once per blob, as an LFS file's does.

The Hub sends a regular file's body with its metadata (`/api/resolve-cache/...` answers
200 with the bytes), so every upstream question about it is a body download unless
pulsys asks the right question: concurrent requests that differ only in their query
(the Hub's Location carries `?%2F<repo>%2Fresolve%2F<rev>%2F<file>=&etag=...`, which
differs per revision asked; 0.36.2 drops the query) are one question, and once the blob
is on disk a revalidation after `--revision-ttl` needs no body."""

import concurrent.futures
import hashlib
import os
import time

import pytest
import requests

MIB = 1024 * 1024
BODY = os.urandom(MIB + 3)
SHA1 = hashlib.sha1(b"blob %d\0" % len(BODY) + BODY).hexdigest()


def pytest_generate_tests(metafunc):
    if "listeners" in metafunc.fixturenames:
        metafunc.parametrize("listeners", [1, 2], ids=["1-listener", "2-listeners"])


@pytest.fixture
def commit(hub):
    return hub.add_repo("org/reg", files={"tokenizer.json": BODY}, lfs=set())


def test_concurrent_resolve_cache_requests_differing_in_query_fetch_one_body(hub, commit, make_server):
    srv = make_server(hub)
    base = srv.url + "/api/resolve-cache/models/org/reg/%s/tokenizer.json" % commit
    queries = ["", "?%2Forg%2Freg%2Fresolve%2Fmain%2Ftokenizer.json=&etag=%22" + SHA1 + "%22",
               "?%2Forg%2Freg%2Fresolve%2F" + commit + "%2Ftokenizer.json=&etag=%22" + SHA1 + "%22",
               "?download=true"]
    hub.faults.throttle(MIB)                   # ~1 s: every request arrives while it lands
    with concurrent.futures.ThreadPoolExecutor(12) as ex:
        got = list(ex.map(lambda i: requests.get(base + queries[i % 4], timeout=30), range(12)))
    hub.faults.clear()
    assert all(r.status_code == 200 and r.content == BODY for r in got)
    assert hub.body_fetches(SHA1) == 1, hub.body_fetches(SHA1)


@pytest.mark.parametrize("redirect", [True, False], ids=["resolve-cache", "200-at-resolve"])
def test_revalidation_after_the_ttl_downloads_no_second_body(hub, commit, make_server, redirect):
    hub.regular_redirect = redirect
    srv = make_server(hub, revision_ttl="1")
    for rnd in range(2):
        for rev in ("main", commit):
            # a GET first: the revalidation of a stale `main` is a GET's
            r = requests.get(srv.url + "/org/reg/resolve/%s/tokenizer.json" % rev, timeout=30)
            assert r.status_code == 200 and r.content == BODY
            h = requests.head(srv.url + "/org/reg/resolve/%s/tokenizer.json" % rev, timeout=30,
                              allow_redirects=True)
            assert h.status_code == 200 and h.headers["ETag"] == '"%s"' % SHA1
        r = requests.get(srv.url + "/api/resolve-cache/models/org/reg/%s/tokenizer.json" % commit,
                         timeout=30)
        assert r.content == BODY
        if rnd == 0:
            time.sleep(1.3)                    # every symbolic answer is stale now
    assert hub.body_fetches(SHA1) == 1, [(r.method, r.path) for r in hub.requests]
