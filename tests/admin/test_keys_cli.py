"""`pulsys keys` as a person runs it (a subprocess): directly on the store (SQLite and
PostgreSQL) and through a running server's admin listener."""

import json
import os
import subprocess
import sys

import pytest

from pulsys.admin.keys import KeyService
from pulsys.auth.keys import digest, key_id
from pulsys.db.database import Database
from tests.auth.conftest import admin_url
from tests.conftest import ROOT


def keys(*args, env=None):
    e = {k: v for k, v in os.environ.items() if not k.startswith("PULSYS_")}
    e.update(env or {})
    return subprocess.run([sys.executable, "-m", "pulsys", "keys", *args], cwd=ROOT, env=e,
                          capture_output=True, text=True, timeout=60)


def one_line_error(p, code=2):
    assert p.returncode == code, (p.returncode, p.stdout, p.stderr)
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("pulsys keys: error:"), p.stderr
    return lines[0]


def test_direct_on_the_store(db_url):
    p = keys("create", "--scope", "admin", "--name", "ops", "--db", db_url)
    assert p.returncode == 0, p.stderr
    key = p.stdout.strip()
    assert p.stdout.count("\n") == 1 and key_id(key) and "only time" in p.stderr
    db = Database.open(db_url)
    try:
        _, table = KeyService(db).snapshot()
    finally:
        db.close()
    assert table == {key_id(key): (digest(key), "admin", None)}
    p = keys("list", "--db", db_url)
    assert p.returncode == 0 and key_id(key) in p.stdout and "ops" in p.stdout and key not in p.stdout
    p = keys("revoke", key_id(key), "--db", db_url)
    assert p.returncode == 0 and "revoked key %s" % key_id(key) in p.stdout
    p = keys("list", "--active", "--json", "--db", db_url)
    assert p.returncode == 0 and json.loads(p.stdout) == []
    assert "already revoked" in one_line_error(keys("revoke", key_id(key), "--db", db_url))
    assert "no key with id" in one_line_error(keys("revoke", "0123456789ab", "--db", db_url))


def test_a_key_limited_to_repos(db_url):
    p = keys("create", "--repo", "acme/*", "--repo", "datasets/team-a/*", "--db", db_url)
    assert p.returncode == 0 and "repos acme/* datasets/team-a/*" in p.stderr, p.stderr
    key = p.stdout.strip()
    db = Database.open(db_url)
    try:
        _, table = KeyService(db).snapshot()
    finally:
        db.close()
    assert table == {key_id(key): (digest(key), "read", ((None, "acme/*"), ("dataset", "team-a/*")))}
    listed = json.loads(keys("list", "--json", "--db", db_url).stdout)
    assert [r["repos"] for r in listed] == [["acme/*", "datasets/team-a/*"]]
    assert "acme/* datasets/team-a/*" in keys("list", "--db", db_url).stdout
    assert "repo pattern 'acme/a b'" in one_line_error(keys("create", "--repo", "acme/a b", "--db", db_url))


def test_the_default_store_is_the_one_in_the_cache_dir(tmp_path):
    p = keys("create", env={"PULSYS_CACHE_DIR": str(tmp_path)})
    assert p.returncode == 0, p.stderr
    assert (tmp_path / "pulsys.sqlite3").exists()
    listed = keys("list", "--json", "--cache-dir", str(tmp_path))
    assert [r["id"] for r in json.loads(listed.stdout)] == [key_id(p.stdout.strip())]


def test_through_a_running_server(auth_server):
    srv, admin, read = auth_server()
    base = admin_url(srv)
    p = keys("create", "--server", base, "--token", admin, "--name", "ci", "--json")
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    assert doc["created_by"] == "key:" + key_id(admin) and doc["key"].startswith("hf_pulsys")
    p = keys("list", env={"PULSYS_ADMIN_URL": base, "PULSYS_ADMIN_TOKEN": admin})
    assert p.returncode == 0 and doc["id"] in p.stdout
    p = keys("revoke", doc["id"], "--server", base, "--token", admin)
    assert p.returncode == 0 and doc["id"] in p.stdout
    assert "scope admin" in one_line_error(keys("list", "--server", base, "--token", read))
    assert "invalid API key" in one_line_error(keys("list", "--server", base, "--token", "pulsys_nope"))
    assert "needs an admin key" in one_line_error(keys("list", "--server", base))


@pytest.mark.parametrize("args,code,text", [
    (["frobnicate"], 2, "invalid choice"),
    ([], 2, "required"),
    (["create", "--scope", "root"], 2, "invalid choice"),
    (["list", "--db", "mysql://u:hunter2@h/x"], 2, "expected sqlite"),
    (["list", "--server", "ftp://x"], 2, "expected http"),
    (["list", "--server", "http://127.0.0.1:1", "--token", "k"], 1, "cannot reach"),
    (["list", "--db", "postgresql://u:hunter2@127.0.0.1:1/x"], 1, "cannot open the database"),
])
def test_bad_input_is_one_line(args, code, text):
    p = keys(*args)
    line = one_line_error(p, code)
    assert text in line and "hunter2" not in p.stderr and "Traceback" not in p.stderr
