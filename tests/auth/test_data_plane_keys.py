"""--auth required on the data plane, over real sockets, for every reactor backend and
process layout: missing and bad keys get an HF-style 401, good keys are served (warm
hits included, on the fused io_uring hit path too), a key created or revoked on the admin
API is in force on every connection and worker when the API answers (one revoked in the
store, within a second), and client keys never reach upstream."""

import json
import os
import socket
import subprocess
import sys
import time

import pytest

from pulsys.auth.keys import key_id
from tests.auth.conftest import admin_url, call
from tests.conftest import ROOT, vars_when

SMALL = b'{"model_type": "bert", "n": 1}'        # answered from memory: the fused uring hit
BIG = os.urandom(300 * 1024 + 7)                 # a file body: sendfile
SMALL_PATH = b"/org/m/resolve/main/config.json"
BIG_PATH = b"/org/m/resolve/main/model.safetensors"


def _uring_ok():
    from pulsys.platform import PlatformFacts
    f = PlatformFacts.probe()
    return f.uring_ok, f.uring_error


_URING_OK, _URING_WHY = _uring_ok()
BACKENDS = [pytest.param("on", id="uring", marks=pytest.mark.skipif(not _URING_OK, reason="io_uring: %s" % _URING_WHY)),
            pytest.param("off", id="selector")]


ONE_LAYOUT = {"test_a_key_revoked_with_the_cli_in_the_store_reaches_a_running_server"}   # says listeners=2


def pytest_generate_tests(metafunc):
    if "listeners" in metafunc.fixturenames and metafunc.function.__name__ not in ONE_LAYOUT:
        metafunc.parametrize("listeners", [1, 2], ids=["1-listener", "2-listeners"])


def GET(path, key=None, method=b"GET", extra=b""):
    auth = b"Authorization: Bearer %s\r\n" % key.encode() if key else b""
    return method + b" " + path + b" HTTP/1.1\r\nHost: t\r\n" + auth + extra + b"\r\n"


@pytest.fixture
def repo(hub):
    return hub.add_repo("org/m", files={"config.json": SMALL, "model.safetensors": BIG},
                        lfs={"config.json", "model.safetensors"})


@pytest.mark.parametrize("iouring", BACKENDS)
def test_keys_on_one_keep_alive_connection(auth_server, repo, raw_client, iouring, listeners):
    srv, admin, read = auth_server(iouring=iouring)
    c = raw_client(srv.address)
    c.send(GET(SMALL_PATH))
    st, h, body = c.response()
    assert st == 401 and "HF_TOKEN" in h["x-error-message"] and h["x-error-message"] == json.loads(body)["error"]
    assert h["www-authenticate"].startswith("Bearer") and h["connection"] == "keep-alive"
    for key in (read, admin, read, read):          # cold, then warm; admin keys read too
        c.send(GET(SMALL_PATH, key))
        st, h, body = c.response()
        assert st == 200 and body == SMALL, (st, body)
        c.send(GET(BIG_PATH, key))
        st, h, body = c.response()
        assert st == 200 and body == BIG
    c.send(GET(SMALL_PATH, "pulsys_0123456789ab_" + "x" * 43))
    st, h, body = c.response()
    assert st == 401 and "invalid API key" in json.loads(body)["error"]
    c.send(GET(SMALL_PATH, "hf_aHubToken"))
    st, h, body = c.response()
    assert st == 401 and "not a pulsys API key" in h["x-error-message"]
    c.send(GET(SMALL_PATH, extra=b"Authorization: Basic dXNlcjpwYXNz\r\n"))
    st, h, body = c.response()
    assert st == 401 and "Bearer" in json.loads(body)["error"]
    c.send(GET(BIG_PATH, method=b"HEAD"))
    st, h, _ = c.response(head_only=True)
    assert st == 401
    for open_path in (b"/healthz", b"/api/agent-harnesses"):     # open without a key
        c.send(GET(open_path))
        assert c.response()[0] == 200
    c.send(GET(BIG_PATH, read, extra=b"Range: bytes=0-3\r\n"))
    st, _, body = c.response()
    assert st == 206 and body == BIG[:4]
    assert not c.closed(wait=0.1)
    v = vars_when(srv, lambda v: v["cache_hits"] >= 6)
    assert v["auth_refusals"] == 5 and v["cache_hits"] >= 6, v
    if iouring == "on":
        assert v["backend"] == "uring"


def _conns(address, n, key):
    """n keep-alive connections that each got two warm hits with `key`."""
    out = []
    for _ in range(n):
        s = socket.create_connection(address, timeout=10)
        for _ in range(2):
            s.sendall(GET(SMALL_PATH, key))
            assert _status(s) == 200
        out.append(s)
    return out


def _status(s):
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = s.recv(65536)
        if not chunk:
            raise EOFError
        data += chunk
    head, _, rest = data.partition(b"\r\n\r\n")
    n = int([ln for ln in head.split(b"\r\n") if ln.lower().startswith(b"content-length:")][0].split(b":")[1])
    while len(rest) < n:
        rest += s.recv(65536)
    return int(head.split(b" ")[1])


def _refused_within(conns, address, key, limit):
    """Seconds until every connection (and a new one) got 401 for `key`; fails past limit."""
    t0 = time.monotonic()
    pending = list(conns)
    while pending:
        assert time.monotonic() - t0 < limit, "%d connections still served a revoked key" % len(pending)
        for s in list(pending):
            s.sendall(GET(SMALL_PATH, key))
            if _status(s) == 401:
                pending.remove(s)
        time.sleep(0.005)
    took = time.monotonic() - t0
    with socket.create_connection(address, timeout=10) as s:
        s.sendall(GET(SMALL_PATH, key))
        assert _status(s) == 401
    return took


@pytest.mark.parametrize("iouring", BACKENDS)
def test_a_key_change_on_the_admin_api_is_in_force_everywhere_when_it_answers(
        auth_server, repo, iouring, listeners):
    srv, admin, _ = auth_server(iouring=iouring)
    st, _, doc = call(admin_url(srv) + "/api/v1/keys", "POST", admin, {"name": "new"})
    assert st == 201
    read = doc["key"]
    conns = _conns(srv.address, 16, read)       # a new key works at once, on every worker
    if listeners > 1:        # the connections reached both workers, each with warm hits on the key
        hits = [w["counters"]["cache_hits"] for w in srv.vars()["workers"]]
        assert all(h >= 2 for h in hits), hits
    kid = key_id(read)
    st, _, doc = call(admin_url(srv) + "/api/v1/keys/" + kid, "DELETE", admin)
    assert st == 200 and doc["active"] is False
    for s in conns:          # the revocation is in force when the API answers: no grace
        s.sendall(GET(SMALL_PATH, read))
        assert _status(s) == 401
    if listeners > 1:
        refused = [w["counters"]["auth_refusals"] for w in srv.vars()["workers"]]
        assert all(r >= 1 for r in refused), refused
    for s in conns:           # the admin key still works on the same connections
        s.sendall(GET(SMALL_PATH, admin))
        assert _status(s) == 200
        s.close()


def test_a_key_revoked_with_the_cli_in_the_store_reaches_a_running_server(auth_server, repo, tmp_path):
    srv, admin, read = auth_server(listeners=2, cache_dir=str(tmp_path / "c2"))
    conns = _conns(srv.address, 8, read)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PULSYS_")}
    p = subprocess.run([sys.executable, "-m", "pulsys", "keys", "revoke", key_id(read),
                        "--cache-dir", str(tmp_path / "c2")], cwd=ROOT, env=env,
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    # the server learns of it by polling the store (every 0.5 s): well within a second
    assert _refused_within(conns, srv.address, read, 1.0) < 1.0
    for s in conns:
        s.close()


def test_client_keys_never_reach_upstream(auth_server, hub, repo):
    srv, admin, read = auth_server(hf_token="hf_servers_own_token")
    for path in (SMALL_PATH, BIG_PATH, b"/api/models/org/m", b"/api/models/org/m/tree/main"):
        st, _, _ = call(srv.url + path.decode(), key=read)
        assert st == 200, path
    seen = [r.headers.get("authorization") for r in hub.requests]
    assert seen, "nothing reached the fake hub"
    assert not any(read in (a or "") or admin in (a or "") for a in seen), seen
    assert {a for a in seen if a} <= {"Bearer hf_servers_own_token"}, seen


@pytest.mark.parametrize("iouring", BACKENDS)
def test_a_key_limited_to_some_repos_reads_those_and_sees_nothing_else(auth_server, hub, repo, raw_client,
                                                                       iouring, listeners):
    hub.add_repo("other/secret", files={"config.json": SMALL}, lfs={"config.json"})
    hub.add_repo("org/d", files={"data.csv": b"a,b\n"}, repo_type="dataset")
    srv, admin, read = auth_server(iouring=iouring)
    st, _, doc = call(admin_url(srv) + "/api/v1/keys", "POST", admin,
                      {"name": "team-org", "repos": ["models/org/*"]})
    assert st == 201 and doc["repos"] == ["models/org/*"]
    limited = doc["key"]
    c = raw_client(srv.address)
    for _ in range(3):                 # cold, warm, and (io_uring) the fused hit's turn
        for path, body in ((SMALL_PATH, SMALL), (BIG_PATH, BIG)):
            c.send(GET(path, limited))
            st, h, got = c.response()
            assert st == 200 and got == body, (path, st)
        c.send(GET(b"/other/secret/resolve/main/config.json", read))     # warm it for the free key
        assert c.response()[0] == 200
        for path in (b"/other/secret/resolve/main/config.json", b"/api/models/other/secret",
                     b"/datasets/org/d/resolve/main/data.csv", b"/api/datasets/org/d/tree/main"):
            c.send(GET(path, limited))
            st, h, got = c.response()
            assert st == 404 and h["x-error-code"] == "RepoNotFound", (path, st, got)
            assert json.loads(got) == {"error": "Repository not found"}
    c.send(GET(b"/api/models?search=org", limited))                     # not one repo's route
    st, h, _ = c.response()
    assert st == 403 and h["x-error-code"] == "Forbidden"
    c.send(GET(b"/api/models/org/m", limited))
    assert c.response()[0] == 200
    assert not c.closed(wait=0.1)
    v = srv.vars()
    assert v["repo_refusals"] == 13 and v["auth_refusals"] == 0, v
