"""Helpers for servers with --auth required: keys made in the store before the server
starts (so no first-start key), the admin listener's URL, raw requests."""

import json
import urllib.error
import urllib.request

import pytest

from pulsys.admin.keys import KeyService
from pulsys.db.database import Database
from pulsys.db.migrate import migrate


def store_keys(db_url, *scopes, actor="test"):
    """Create one key per scope directly in the store; -> [key, ...]."""
    db = Database.open(db_url)
    try:
        migrate(db)
        svc = KeyService(db)
        return [svc.create(scope, "k%d" % i, actor)[0] for i, scope in enumerate(scopes)]
    finally:
        db.close()


def admin_url(srv):
    if hasattr(srv, "admin_url"):
        return srv.admin_url
    return "http://%s:%d" % srv.admin.address[:2]


def call(url, method="GET", key=None, body=None, headers=None, timeout=10):
    """-> (status, headers, parsed JSON or raw bytes) without raising on 4xx/5xx."""
    h = dict(headers or {})
    if key is not None:
        h["Authorization"] = "Bearer " + key
    data = body if isinstance(body, (bytes, type(None))) else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method=method, headers=h)
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(req, timeout=timeout) as r:
            status, hdrs, raw = r.status, r.headers, r.read()
    except urllib.error.HTTPError as e:
        status, hdrs, raw = e.code, e.headers, e.read()
    try:
        return status, hdrs, json.loads(raw)
    except ValueError:
        return status, hdrs, raw


@pytest.fixture
def auth_server(hub, make_server, tmp_path):
    """make: (db_url=None, **settings) -> (server, admin key, read key), --auth required,
    admin listener on."""
    def make(db_url=None, **settings):
        cache = settings.pop("cache_dir", None) or str(tmp_path / "cache")
        url = db_url or "sqlite://%s/pulsys.sqlite3" % cache
        admin, read = store_keys(url, "admin", "read")
        srv = make_server(hub, cache_dir=cache, auth="required", admin_listen="127.0.0.1:0", db=url, **settings)
        return srv, admin, read
    return make
