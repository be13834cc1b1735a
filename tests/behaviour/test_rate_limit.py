"""The Hub's 429 (upstream/ratelimit.py): after one, pulsys asks the Hub nothing more for
metadata until the time it named, serves what it has cached however old, and answers
the rest with a 429 of its own carrying Retry-After; and concurrent identical metadata
requests ask the Hub once. Fake Hub on loopback; with one listener (in-process) and two
(worker processes)."""

import concurrent.futures
import time

import requests

CONFIG = b'{"architectures": ["Bert"]}\n'


def pytest_generate_tests(metafunc):
    if "listeners" in metafunc.fixturenames:
        metafunc.parametrize("listeners", [1, 2], ids=["1-listener", "2-listeners"])


def get(srv, path, **kw):
    kw.setdefault("timeout", 30)
    return requests.get(srv.url + path, **kw)


def test_a_429_stops_metadata_requests_until_its_retry_after(hub, make_server):
    hub.add_repo("org/m", files={"config.json": CONFIG})
    hub.add_repo("org/other", files={"config.json": CONFIG})
    srv = make_server(hub)
    hub.faults.status(429, times=1, match="/api/models/org/m", headers=(("Retry-After", "2"),))
    r = get(srv, "/api/models/org/m")
    assert r.status_code == 429 and r.headers["Retry-After"] == "2"      # the Hub's own answer
    hub.reset_counters()
    t0 = time.monotonic()
    for path in ("/api/models/org/m", "/api/models/org/other", "/org/other/resolve/main/config.json",
                 "/api/models?search=org"):
        r = get(srv, path)
        assert r.status_code == 429 and r.headers["X-Error-Code"] == "RateLimited", path
        assert 1 <= int(r.headers["Retry-After"]) <= 2 and "rate-limiting" in r.json()["error"]
    assert hub.count() == 0                    # none of them reached the Hub
    time.sleep(max(0.0, 2.1 - (time.monotonic() - t0)))
    r = get(srv, "/api/models/org/m")
    assert r.status_code == 200 and r.json()["id"] == "org/m" and hub.count() == 1
    v = srv.vars()
    assert v["upstream_rate_limited"] == 1 and v["rate_limited_answers"] == 4


def test_cached_answers_are_served_while_limited(hub, make_server):
    hub.add_repo("org/m", files={"config.json": CONFIG})
    srv = make_server(hub, revision_ttl=0.2)
    assert get(srv, "/org/m/resolve/main/config.json").content == CONFIG
    assert get(srv, "/api/models/org/m").status_code == 200
    time.sleep(0.3)                            # both stale now
    hub.faults.status(429, times=1, headers=(("RateLimit", '"api";r=0;t=30'),))
    r = get(srv, "/org/m/resolve/main/config.json")
    assert r.status_code == 200 and r.content == CONFIG        # the Hub said 429: the stale copy
    hub.reset_counters()
    r = get(srv, "/api/models/org/m")
    assert r.status_code == 200 and r.json()["id"] == "org/m"
    r = get(srv, "/org/m/resolve/main/config.json")
    assert r.status_code == 200 and r.content == CONFIG
    r = get(srv, "/api/models/org/m/revision/main")            # never cached: pulsys's own 429
    assert r.status_code == 429 and 25 <= int(r.headers["Retry-After"]) <= 30
    assert hub.count() == 0
    assert srv.vars()["stale_served"] >= 3


def test_concurrent_identical_metadata_requests_ask_the_hub_once(hub, make_server):
    hub.add_repo("org/m", files={"config.json": CONFIG})
    srv = make_server(hub)
    hub.faults.slow(0.5, match="/api/models/org/m")       # every asker arrives while the first waits
    paths = ["/api/models/org/m"] * 8 + ["/api/models/org/m/tree/main"] * 4
    with concurrent.futures.ThreadPoolExecutor(len(paths)) as ex:
        answers = list(ex.map(lambda p: get(srv, p), paths))
    assert all(r.status_code == 200 for r in answers)
    assert {r.json()["id"] for r in answers[:8]} == {"org/m"}
    assert hub.count(path_contains="/api/models/org/m/tree/") == 1
    assert hub.count(path_contains="/api/models/org/m") == 2     # one info, one tree
