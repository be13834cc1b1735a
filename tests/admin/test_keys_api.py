"""The admin listener's JSON API for keys and the audit log, against a running server
whose store is a real SQLite file or a real PostgreSQL database (db_url: both)."""

import socket

import pytest

from pulsys.auth.keys import key_id
from tests.auth.conftest import admin_url, call


@pytest.fixture
def srv(auth_server, db_url):
    server, admin, read = auth_server(db_url=db_url)
    return admin_url(server), admin, read, server


def test_create_list_get_revoke_and_the_audit_log(srv):
    base, admin, read, server = srv
    st, _, me = call(base + "/api/v1/whoami", key=admin)
    assert st == 200 and me["scope"] == "admin" and admin.startswith("hf_pulsys%s" % me["id"])
    st, _, doc = call(base + "/api/v1/keys", "POST", admin, {"scope": "read", "name": "team-a"})
    assert st == 201 and doc["key"].startswith("hf_pulsys%s" % doc["id"]) and doc["scope"] == "read"
    assert doc["created_by"] == "key:" + me["id"] and doc["active"]
    new_key, new_id = doc["key"], doc["id"]
    st, _, doc = call(server.url + "/healthz", key=new_key)
    assert st == 200
    st, _, listed = call(base + "/api/v1/keys", key=admin)
    assert st == 200 and new_id in [k["id"] for k in listed["keys"]]
    assert all("key" not in k and "digest" not in k for k in listed["keys"])     # shown once only
    st, _, one = call(base + "/api/v1/keys/" + new_id, key=admin)
    assert st == 200 and one["name"] == "team-a"
    st, _, gone = call(base + "/api/v1/keys/" + new_id, "DELETE", admin)
    assert st == 200 and gone["revoked_by"] == "key:" + me["id"] and not gone["active"]
    st, _, active = call(base + "/api/v1/keys?revoked=0", key=admin)
    assert new_id not in [k["id"] for k in active["keys"]]
    st, _, lim = call(base + "/api/v1/keys", "POST", admin, {"name": "ci", "repos": ["acme/*", "datasets/acme/*"]})
    assert st == 201 and lim["repos"] == ["acme/*", "datasets/acme/*"] and lim["scope"] == "read"
    st, _, one = call(base + "/api/v1/keys/" + lim["id"], key=admin)
    assert one["repos"] == ["acme/*", "datasets/acme/*"]
    assert call(base + "/api/v1/keys/" + lim["id"], "DELETE", admin)[0] == 200
    st, _, log = call(base + "/api/v1/audit?limit=4", key=admin)
    assert st == 200
    assert [(e["action"], e["target"], e["actor"]) for e in log["events"]] == [
        ("key.revoke", lim["id"], "key:" + me["id"]), ("key.create", lim["id"], "key:" + me["id"]),
        ("key.revoke", new_id, "key:" + me["id"]), ("key.create", new_id, "key:" + me["id"])]
    assert log["events"][3]["detail"] == {"name": "team-a", "scope": "read"}
    assert log["events"][1]["detail"] == {"name": "ci", "scope": "read", "repos": ["acme/*", "datasets/acme/*"]}
    st, _, older = call(base + log["next"], key=admin)
    assert st == 200 and all(e["id"] < log["events"][-1]["id"] for e in older["events"])
    st, _, only = call(base + "/api/v1/audit?action=key.revoke", key=admin)
    assert [e["target"] for e in only["events"]] == [lim["id"], new_id]


def test_refusals_are_hf_style_errors_and_the_server_keeps_serving(srv):
    base, admin, read, server = srv
    cases = [
        (("/api/v1/keys", "GET", None, None), 401, "admin key"),
        (("/api/v1/keys", "GET", "pulsys_0123456789ab_" + "z" * 43, None), 401, "invalid API key"),
        (("/api/v1/keys", "GET", read, None), 403, "scope admin"),
        (("/api/v1/audit", "GET", read, None), 403, "scope admin"),
        (("/api/v1/keys", "POST", admin, b"{not json"), 400, "not valid JSON"),
        (("/api/v1/keys", "POST", admin, b"[1, 2]"), 400, "JSON object"),
        (("/api/v1/keys", "POST", admin, {"scope": "root"}), 400, "choose one of read, admin"),
        (("/api/v1/keys", "POST", admin, {"scope": "read", "nmae": "x"}), 400, "unknown field nmae"),
        (("/api/v1/keys", "POST", admin, {"name": 7}), 400, "must be a string"),
        (("/api/v1/keys", "POST", admin, {"repos": "acme/*"}), 400, "non-empty list"),
        (("/api/v1/keys", "POST", admin, {"repos": ["acme/x y"]}), 400, "repo pattern"),
        (("/api/v1/keys/0123456789ab", "DELETE", admin, None), 404, "no key"),
        (("/api/v1/keys/%2e%2e", "GET", admin, None), 400, "key id"),
        (("/api/v1/keys", "PUT", admin, None), 405, "allowed: GET, POST"),
        (("/api/v1/audit?limit=lots", "GET", admin, None), 400, "expected int"),
        (("/api/v1/nothing", "GET", admin, None), 404, "not found"),
    ]
    for (path, method, key, body), status, text in cases:
        st, h, doc = call(base + path, method, key, body)
        assert st == status and text in doc["error"], (path, method, st, doc)
        assert h["X-Error-Message"], (path, h)
        if status == 401:
            assert h["WWW-Authenticate"].startswith("Bearer")
    rid = key_id(read)
    assert call(base + "/api/v1/keys/" + rid, "DELETE", admin)[0] == 200
    st, _, doc = call(base + "/api/v1/keys/" + rid, "DELETE", admin)
    assert st == 409 and "already revoked" in doc["error"]
    st, _, doc = call(base + "/api/v1/keys", "POST", admin, b"x" * (65 * 1024))
    assert st == 413
    with socket.create_connection(server.admin.address[:2] if hasattr(server, "admin") else
                                  (base.split("//")[1].split(":")[0], int(base.rsplit(":", 1)[1])),
                                  timeout=10) as s:
        s.sendall(b"POST /api/v1/keys HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n"
                  b"Authorization: Bearer " + admin.encode() + b"\r\n\r\n0\r\n\r\n")
        assert s.recv(100).startswith(b"HTTP/1.0 411")
    assert call(base + "/healthz")[0] == 200 and call(base + "/debug/vars")[0] == 200   # open, and alive
    st, _, doc = call(base + "/api/v1/keys", key=admin)
    assert st == 200


def test_a_key_created_on_the_api_works_on_the_data_plane_at_once(srv, hub):
    base, admin, read, server = srv
    hub.add_repo("org/m", files={"a.safetensors": b"x" * 100}, lfs={"a.safetensors"})
    st, _, doc = call(base + "/api/v1/keys", "POST", admin, {"scope": "read"})
    st, _, body = call(server.url + "/org/m/resolve/main/a.safetensors", key=doc["key"])
    assert st == 200 and body == b"x" * 100
