"""Two pulsys instances on one PostgreSQL database (a fleet): a key created or revoked
through one instance's admin API is in force on the other within a second (it polls
the store's key generation, docs/decisions/0009)."""

import time

from tests.auth.conftest import admin_url, call


def _until(pred, limit):
    t0 = time.monotonic()
    while not pred():
        assert time.monotonic() - t0 < limit, "not within %.1f s" % limit
        time.sleep(0.01)
    return time.monotonic() - t0


def test_keys_changed_on_one_instance_apply_on_the_other(auth_server, hub, postgres, tmp_path):
    hub.add_repo("org/m", files={"w.safetensors": b"w" * 64}, lfs={"w.safetensors"})
    url = postgres.create_database()
    a, admin, _ = auth_server(db_url=url, cache_dir=str(tmp_path / "a"))
    b, _, _ = auth_server(db_url=url, cache_dir=str(tmp_path / "b"))
    path = "/org/m/resolve/main/w.safetensors"
    st, _, doc = call(admin_url(a) + "/api/v1/keys", "POST", admin, {"scope": "read", "name": "fleet"})
    assert st == 201
    assert _until(lambda: call(b.url + path, key=doc["key"])[0] == 200, 1.0) < 1.0
    st, _, _ = call(admin_url(a) + "/api/v1/keys/" + doc["id"], "DELETE", admin)
    assert st == 200
    assert call(a.url + path, key=doc["key"])[0] == 401          # at once where it was revoked
    assert _until(lambda: call(b.url + path, key=doc["key"])[0] == 401, 1.0) < 1.0
    st, _, log = call(admin_url(b) + "/api/v1/audit", key=admin)  # one audit log for the fleet
    assert [e["action"] for e in log["events"][:2]] == ["key.revoke", "key.create"]
