"""--upstream-auth client (auth/access.py, upstream/client_access.py): each client's own
token asks the Hub, the Hub's answer decides what that client is served, cached bytes
stay shared, and the answer is remembered for --access-ttl. Fake Hub on loopback, HTTP
on the wire (keep-alive sessions, so the io_uring fused hit is exercised too); one
listener (in-process) and two (worker processes). Real huggingface_hub clients:
tests/integration/test_clients_upstream_auth.py."""

import hashlib
import os
import time

import pytest
import requests

CONFIG = b'{"architectures": ["Llama"]}\n'
WEIGHTS = os.urandom(1 << 20) + b"gated weights"
ALICE, BOB, CAROL = "hf_" + "a" * 34, "hf_" + "b" * 34, "hf_" + "c" * 34


def pytest_generate_tests(metafunc):
    if "listeners" in metafunc.fixturenames:
        metafunc.parametrize("listeners", [1, 2], ids=["1-listener", "2-listeners"])


def session(token=None):
    s = requests.Session()
    s.trust_env = False
    if token:
        s.headers["Authorization"] = "Bearer " + token
    return s


@pytest.fixture
def world(hub, make_server):
    """A public, a gated and a private repo; Alice may read the gated and the private one,
    Bob and Carol are users with no grants."""
    hub.add_repo("org/public", files={"config.json": CONFIG, "model.safetensors": WEIGHTS})
    hub.add_repo("org/gated", files={"config.json": CONFIG, "model.safetensors": WEIGHTS}, gated=True)
    hub.add_repo("org/private", files={"config.json": CONFIG, "model.safetensors": WEIGHTS}, private=True)
    for token in (ALICE, BOB, CAROL):
        hub.add_user(token)
    hub.grant(ALICE, "org/gated")
    hub.grant(ALICE, "org/private")
    return hub


def get(s, srv, path, method="GET"):
    return s.request(method, srv.url + path, timeout=30)


def test_the_hub_decides_per_client_and_the_bytes_are_fetched_once(world, make_server):
    hub = world
    srv = make_server(hub, upstream_auth="client")
    alice, bob, anon = session(ALICE), session(BOB), session()
    for name in ("config.json", "model.safetensors"):
        r = get(alice, srv, "/org/gated/resolve/main/" + name)
        assert r.status_code == 200 and r.content == (CONFIG if name == "config.json" else WEIGHTS)
        r = get(alice, srv, "/org/private/resolve/main/" + name)
        assert r.status_code == 200
    # the bytes are cached now; others get exactly what the Hub gives them
    r = get(bob, srv, "/org/gated/resolve/main/model.safetensors")
    assert r.status_code == 403 and r.headers["X-Error-Code"] == "GatedRepo"
    assert "restricted" in r.headers["X-Error-Message"] and r.json()["error"] == r.headers["X-Error-Message"]
    r = get(anon, srv, "/org/gated/resolve/main/config.json")
    assert r.status_code == 401 and r.headers["X-Error-Code"] == "GatedRepo"
    r = get(bob, srv, "/org/private/resolve/main/config.json", "HEAD")
    assert r.status_code == 404 and r.headers["X-Error-Code"] == "RepoNotFound"
    r = get(anon, srv, "/org/private/resolve/main/model.safetensors")
    assert r.status_code == 401 and r.headers["X-Error-Code"] == "RepoNotFound"
    # metadata: a gated repo's is public, a private repo's is not
    assert get(anon, srv, "/api/models/org/gated").json()["gated"] == "auto"
    assert get(alice, srv, "/api/models/org/private").status_code == 200
    r = get(bob, srv, "/api/models/org/private")
    assert r.status_code == 404 and r.headers["X-Error-Code"] == "RepoNotFound"
    r = get(bob, srv, "/api/models/org/private/tree/main")
    assert r.status_code == 404 and r.headers["X-Error-Code"] == "RepoNotFound"
    # a public repo: anyone, any token
    for s in (anon, bob):
        assert get(s, srv, "/org/public/resolve/main/model.safetensors").content == WEIGHTS
    assert hub.body_fetches(hashlib.sha256(WEIGHTS).hexdigest()) == 1          # one upstream download for all three repos' copies
    v = srv.vars()
    assert v["access_refusals"] >= 6 and v["access_asked"] >= 8


def test_a_warm_download_inside_the_ttl_asks_the_hub_nothing(world, make_server):
    hub = world
    srv = make_server(hub, upstream_auth="client", access_ttl=30)
    alice = session(ALICE)
    assert get(alice, srv, "/org/gated/resolve/main/model.safetensors").content == WEIGHTS
    assert get(alice, srv, "/org/gated/resolve/main/config.json", "HEAD").status_code == 200
    hub.reset_counters()
    for _ in range(20):                          # one keep-alive connection: fused hits too
        r = get(alice, srv, "/org/gated/resolve/main/model.safetensors")
        assert r.status_code == 200 and r.content == WEIGHTS
        assert get(alice, srv, "/org/gated/resolve/main/config.json", "HEAD").status_code == 200
    assert hub.count() == 0
    if getattr(srv, "backend", None) == "uring":
        assert srv.vars()["fused_head_body"] >= 10     # the fused hit honours the grant too
    # Bob is refused once by the Hub, then from the remembered answer
    bob = session(BOB)
    for _ in range(5):
        assert get(bob, srv, "/org/gated/resolve/main/model.safetensors").status_code == 403
    assert hub.count() == 1


def test_a_revoked_access_stops_within_the_ttl_and_a_new_one_starts(world, make_server):
    hub = world
    srv = make_server(hub, upstream_auth="client", access_ttl=1)
    alice, bob = session(ALICE), session(BOB)
    assert get(alice, srv, "/org/gated/resolve/main/model.safetensors").status_code == 200
    assert get(bob, srv, "/org/gated/resolve/main/model.safetensors").status_code == 403
    hub.revoke(ALICE, "org/gated")
    hub.grant(BOB, "org/gated")
    t0 = time.monotonic()
    assert get(alice, srv, "/org/gated/resolve/main/model.safetensors").status_code == 200   # inside the TTL
    time.sleep(max(0.0, 1.2 - (time.monotonic() - t0)))
    r = get(alice, srv, "/org/gated/resolve/main/model.safetensors")
    assert r.status_code == 403 and r.headers["X-Error-Code"] == "GatedRepo"
    r = get(bob, srv, "/org/gated/resolve/main/model.safetensors")
    assert r.status_code == 200 and r.content == WEIGHTS


def test_tokens_go_only_to_the_hub_and_never_into_logs_metrics_or_the_index(world, make_server, tmp_path):
    hub = world
    cache = tmp_path / "cache-tokens"
    srv = make_server(hub, cache_dir=str(cache), upstream_auth="client", access_log="on", log_level="debug")
    alice, bob = session(ALICE), session(BOB)
    assert get(alice, srv, "/org/gated/resolve/main/model.safetensors").status_code == 200
    assert get(bob, srv, "/org/private/resolve/main/config.json").status_code == 404
    assert get(alice, srv, "/api/models/org/private").status_code == 200
    for r in hub.requests:
        if r.server == "hub":
            assert r.headers.get("authorization") in ("Bearer " + ALICE, "Bearer " + BOB), r
        else:
            assert "authorization" not in r.headers, r     # never to the CDN
    srv.stop()
    srv.shutdown()
    seen = []
    for root, _, files in os.walk(cache):
        for name in files:
            with open(os.path.join(root, name), "rb") as f:
                data = f.read()
            seen.append(name)
            assert ALICE.encode() not in data and BOB.encode() not in data, name
    assert seen
    if hasattr(srv, "log_text"):
        text = srv.log_text()
        assert ALICE not in text and BOB not in text


def test_each_identity_meets_its_own_rate_limit(world, make_server):
    hub = world
    srv = make_server(hub, upstream_auth="client")
    hub.faults.status(429, times=1, match="/api/models/org/public", headers=(("Retry-After", "30"),))
    alice, bob = session(ALICE), session(BOB)
    assert get(alice, srv, "/api/models/org/public").status_code == 429
    hub.reset_counters()
    r = get(alice, srv, "/api/models/org/public/tree/main")
    assert r.status_code == 429 and r.headers["X-Error-Code"] == "RateLimited"
    assert hub.count() == 0                      # Alice waits ...
    r = get(bob, srv, "/api/models/org/public/tree/main")
    assert r.status_code == 200 and hub.count() == 1        # ... Bob does not
    assert get(session(), srv, "/org/public/resolve/main/config.json").content == CONFIG
    v = srv.vars()
    assert v["rate_limited_identities"] == 1 and v["upstream_rate_limited"] == 1
    assert v["access_verdicts"] >= 2          # Bob's and anonymous' yes for org/public


def test_while_the_hub_is_down_only_clients_it_said_yes_to_are_served(world, make_server):
    hub = world
    srv = make_server(hub, upstream_auth="client", access_ttl=0.3)
    alice, bob = session(ALICE), session(BOB)
    assert get(alice, srv, "/org/gated/resolve/main/model.safetensors").content == WEIGHTS
    time.sleep(0.4)                              # Alice's yes has expired
    # Bob's fresh no, from a HEAD: no body to replay to his GET, so the GET asks the Hub
    assert get(bob, srv, "/org/gated/resolve/main/model.safetensors", "HEAD").status_code == 403
    hub.faults.status(503, times=1000)
    r = get(alice, srv, "/org/gated/resolve/main/model.safetensors")
    assert r.status_code == 200 and r.content == WEIGHTS          # served stale: the Hub's last word
    r = get(bob, srv, "/org/gated/resolve/main/model.safetensors")
    assert r.status_code >= 500 and r.content != WEIGHTS          # never said yes to Bob


def test_a_public_repo_needs_no_verdict_per_token(world, make_server):
    """An anonymous answer, or an /api info that says public and not gated, makes the repo
    readable by everyone without asking the Hub per token."""
    hub = world
    srv = make_server(hub, upstream_auth="client")
    assert get(session(), srv, "/api/models/org/public").json()["private"] is False
    assert get(session(), srv, "/org/public/resolve/main/config.json").content == CONFIG
    hub.reset_counters()
    for token in (ALICE, BOB, CAROL, None):
        assert get(session(token), srv, "/org/public/resolve/main/config.json").content == CONFIG
    assert hub.count() == 0
