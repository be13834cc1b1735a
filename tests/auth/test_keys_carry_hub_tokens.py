"""--upstream-auth client with --auth required (ADR 0017): a client sends its pulsys key,
the key carries its owner's Hub token (sealed in the store), and the Hub decides with
that token what the client is served. Fake Hub on loopback; one listener (in-process)
and two (worker processes); the admin API sets tokens, by an admin or by the key itself."""

import hashlib
import os
import stat
import subprocess
import sys
import time

import pytest
import requests

from tests.auth.conftest import admin_url, call

CONFIG = b'{"architectures": ["Llama"]}\n'
WEIGHTS = os.urandom(1 << 20) + b"gated weights"
ALICE, BOB = "hf_" + "A" * 34, "hf_" + "B" * 34


def pytest_generate_tests(metafunc):
    if "listeners" in metafunc.fixturenames:
        metafunc.parametrize("listeners", [1, 2], ids=["1-listener", "2-listeners"])


def session(key=None):
    s = requests.Session()
    s.trust_env = False
    if key:
        s.headers["Authorization"] = "Bearer " + key
    return s


@pytest.fixture
def world(hub):
    hub.add_repo("org/public", files={"config.json": CONFIG, "model.safetensors": WEIGHTS})
    hub.add_repo("org/gated", files={"config.json": CONFIG, "model.safetensors": WEIGHTS}, gated=True)
    hub.add_repo("org/private", files={"config.json": CONFIG}, private=True)
    for token in (ALICE, BOB):
        hub.add_user(token)
    hub.grant(ALICE, "org/gated")
    hub.grant(ALICE, "org/private")
    return hub


@pytest.fixture
def keyed(world, auth_server):
    """A server, its admin URL and keys: `alice` (made by the admin with Alice's token),
    `bob` (a plain read key that then gives itself Bob's token), `none` (no token)."""
    srv, admin, _ = auth_server(upstream_auth="client", access_ttl=1)
    base = admin_url(srv)
    st, _, doc = call(base + "/api/v1/keys", "POST", admin, {"name": "alice", "hub_token": ALICE})
    assert st == 201 and doc["has_hub_token"] is True and ALICE not in repr(doc)
    alice = doc["key"]
    bob = call(base + "/api/v1/keys", "POST", admin, {"name": "bob"})[2]["key"]
    none = call(base + "/api/v1/keys", "POST", admin, {"name": "none"})[2]["key"]
    st, _, doc = call(base + "/api/v1/keys/self/hub-token", "PUT", bob, {"hub_token": BOB})
    assert st == 200 and doc["has_hub_token"] is True and doc["name"] == "bob"
    return srv, base, admin, {"alice": alice, "bob": bob, "none": none}


def get(key, srv, path, method="GET"):
    return session(key).request(method, srv.url + path, timeout=30)


def test_each_key_reads_what_its_owners_hub_token_may(keyed):
    srv, _, _, k = keyed
    for name in ("config.json", "model.safetensors"):
        r = get(k["alice"], srv, "/org/gated/resolve/main/" + name)
        assert r.status_code == 200 and r.content == (CONFIG if name == "config.json" else WEIGHTS)
    assert get(k["alice"], srv, "/org/private/resolve/main/config.json").content == CONFIG
    r = get(k["bob"], srv, "/org/gated/resolve/main/model.safetensors")
    assert r.status_code == 403 and r.headers["X-Error-Code"] == "GatedRepo"
    r = get(k["none"], srv, "/org/gated/resolve/main/config.json")          # anonymous to the Hub
    assert r.status_code == 401 and r.headers["X-Error-Code"] == "GatedRepo"
    r = get(k["bob"], srv, "/org/private/resolve/main/config.json", "HEAD")
    assert r.status_code == 404 and r.headers["X-Error-Code"] == "RepoNotFound"
    r = get(k["bob"], srv, "/api/models/org/private")
    assert r.status_code == 404 and r.headers["X-Error-Code"] == "RepoNotFound"
    for key in k.values():                     # a public repo: every key
        assert get(key, srv, "/org/public/resolve/main/model.safetensors").content == WEIGHTS
    # pulsys's own check still comes first: no key, no download (the Hub never asked)
    r = get(None, srv, "/org/public/resolve/main/model.safetensors")
    assert r.status_code == 401 and "API key" in r.headers["X-Error-Message"]


def test_the_hub_sees_the_owners_tokens_never_a_pulsys_key(keyed, world):
    srv, _, _, k = keyed
    hub = world
    assert get(k["alice"], srv, "/org/gated/resolve/main/model.safetensors").status_code == 200
    assert get(k["bob"], srv, "/org/gated/resolve/main/config.json").status_code == 403
    sent = {r.headers.get("authorization") for r in hub.requests if r.server == "hub"}
    assert "Bearer " + ALICE in sent and "Bearer " + BOB in sent
    assert not any(v and "pulsys" in v for v in sent), sent
    assert hub.body_fetches(hashlib.sha256(WEIGHTS).hexdigest()) == 1


def test_a_warm_gated_hit_inside_the_ttl_asks_nothing_and_a_token_change_applies_after_it(keyed, world):
    srv, base, admin, k = keyed
    hub = world
    assert get(k["alice"], srv, "/org/gated/resolve/main/model.safetensors").content == WEIGHTS
    hub.reset_counters()
    for _ in range(10):
        assert get(k["alice"], srv, "/org/gated/resolve/main/model.safetensors").content == WEIGHTS
    assert hub.count() == 0
    # the admin takes Alice's token off her key: within the TTL, the Hub is asked anonymously
    kid = k["alice"][len("hf_pulsys"):len("hf_pulsys") + 12]
    st, _, doc = call(base + "/api/v1/keys/%s/hub-token" % kid, "DELETE", admin)
    assert st == 200 and doc["has_hub_token"] is False
    deadline = time.monotonic() + 10
    while True:
        r = get(k["alice"], srv, "/org/gated/resolve/main/model.safetensors")
        if r.status_code != 200 or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert r.status_code == 401 and r.headers["X-Error-Code"] == "GatedRepo"
    # and Bob, given access on the Hub, is served once his refusal has expired
    hub.grant(BOB, "org/gated")
    time.sleep(1.2)
    assert get(k["bob"], srv, "/org/gated/resolve/main/model.safetensors").content == WEIGHTS


def test_tokens_are_sealed_at_rest_and_shown_nowhere(keyed, tmp_path):
    srv, base, admin, k = keyed
    assert get(k["alice"], srv, "/org/gated/resolve/main/config.json").status_code == 200
    secret = tmp_path / "cache" / "token-secret"
    assert stat.S_IMODE(secret.stat().st_mode) == 0o600
    for path in (tmp_path / "cache").glob("pulsys.sqlite3*"):
        raw = path.read_bytes()
        assert ALICE.encode() not in raw and BOB.encode() not in raw, path
    st, _, doc = call(base + "/api/v1/keys", key=admin)
    assert st == 200 and sorted(d["has_hub_token"] for d in doc["keys"]) == [False, False, False, True, True]
    st, _, audit = call(base + "/api/v1/audit", key=admin)
    text = repr(doc) + repr(audit)
    assert "key.hub_token.set" in text and ALICE not in text and BOB not in text
    logs = srv.log_text() if hasattr(srv, "log_text") else ""
    assert ALICE not in logs and BOB not in logs


def test_only_an_admin_sets_another_keys_token_and_bad_tokens_are_refused(keyed):
    srv, base, admin, k = keyed
    alice_id = k["alice"][len("hf_pulsys"):len("hf_pulsys") + 12]
    st, _, doc = call(base + "/api/v1/keys/%s/hub-token" % alice_id, "PUT", k["bob"], {"hub_token": BOB})
    assert st == 403 and "only its own" in doc["error"]
    for bad, why in ((k["none"], "pulsys key"), ("hf_ with space", "printable"), ("", "non-empty"), (7, "string")):
        st, _, doc = call(base + "/api/v1/keys/self/hub-token", "PUT", k["none"], {"hub_token": bad})
        assert st == 400 and why in doc["error"], doc
    st, _, doc = call(base + "/api/v1/keys/self/hub-token", "PUT", k["none"], {"token": ALICE})
    assert st == 400 and "unknown field" in doc["error"]
    # the server serves on
    assert get(k["alice"], srv, "/org/gated/resolve/main/config.json").status_code == 200


def test_the_cli_reads_the_token_from_stdin_and_refuses_a_secret_others_may_read(tmp_path):
    cache = tmp_path / "cache"
    env = dict(os.environ, PULSYS_CACHE_DIR=str(cache))
    run = lambda *a, stdin="": subprocess.run([sys.executable, "-m", "pulsys", "keys", *a], input=stdin,
                                              capture_output=True, text=True, env=env, timeout=60)
    made = run("create", "--name", "alice", "--hub-token-stdin", "--json", stdin=ALICE + "\n")
    assert made.returncode == 0, made.stderr
    assert '"has_hub_token": true' in made.stdout and ALICE not in made.stdout + made.stderr
    kid = made.stdout.split('"id": "')[1][:12]
    listed = run("list")
    assert listed.returncode == 0 and " yes " in listed.stdout
    removed = run("hub-token", kid, "--remove")
    assert removed.returncode == 0 and "carries no Hub token" in removed.stdout
    os.chmod(cache / "token-secret", 0o644)
    refused = run("hub-token", kid, stdin=BOB)
    assert refused.returncode == 2 and "chmod 600" in refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1 and "Traceback" not in refused.stderr
