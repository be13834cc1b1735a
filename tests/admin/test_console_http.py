"""The web console over real HTTP (no browser), with the store on SQLite and on Postgres: login, session cookie, CSRF refusals,
security headers, HTML escaping of names from the store, logout, a session ending when
its key is revoked, and clear error pages for bad input."""

import re

import pytest
import requests

from tests.auth.conftest import admin_url, call, store_keys

EVIL = '<script>alert("x")</script>'


@pytest.fixture
def console(auth_server, db_url):
    server, admin, read = auth_server(db_url=db_url)
    return admin_url(server), admin, read, server


def csrf_of(html):
    return re.search(r'name="csrf" value="([^"]+)"', html).group(1)


def login(base, key, **headers):
    s = requests.Session()
    s.trust_env = False
    page = s.get(base + "/console/login", timeout=10)
    r = s.post(base + "/console/login", data={"key": key, "csrf": csrf_of(page.text)},
               headers=headers, allow_redirects=False, timeout=10)
    return s, r


def test_pages_carry_security_headers_and_login_needs_an_admin_key(console):
    base, admin, read, _ = console
    r = requests.get(base + "/console/keys", allow_redirects=False, timeout=10)
    assert r.status_code == 303 and r.headers["Location"] == "/console/login"
    s, r = login(base, read)
    assert r.status_code == 401 and "scope read" in r.text and "scope admin" in r.text
    s, r = login(base, "pulsys_0123456789ab_" + "z" * 43)
    assert r.status_code == 401 and "not an active pulsys API key" in r.text
    s, r = login(base, admin)
    assert r.status_code == 303 and r.headers["Location"] == "/console/"
    cookie = [c for c in r.raw.headers.getlist("Set-Cookie") if c.startswith("pulsys_session=")][0]
    assert "HttpOnly" in cookie and "SameSite=Strict" in cookie and "Path=/console" in cookie
    assert "Secure" not in cookie        # plain http: a Secure cookie would never come back
    for path in ("/console/", "/console/keys", "/console/audit", "/console/jobs", "/console/repos"):
        page = s.get(base + path, timeout=10)
        assert page.status_code == 200, (path, page.text[-500:])
        h = page.headers
        csp = h["Content-Security-Policy"]
        assert "unsafe-inline" not in csp and "script-src 'self'" in csp and "frame-ancestors 'none'" in csp
        assert h["X-Frame-Options"] == "DENY" and h["X-Content-Type-Options"] == "nosniff"
        assert h["Referrer-Policy"] == "same-origin" and h["Cache-Control"] == "no-store"
        assert "<script>" not in page.text and " style=" not in page.text     # no inline script or style
    js = s.get(base + "/console/static/console.js", timeout=10)
    assert js.status_code == 200 and js.headers["Content-Type"].startswith("text/javascript")
    assert s.get(base + "/console/static/../server.py", timeout=10).status_code == 404
    # behind a TLS-terminating proxy the cookie is Secure
    _, r = login(base, admin, **{"X-Forwarded-Proto": "https"})
    assert any(c.startswith("pulsys_session=") and "; Secure" in c for c in r.raw.headers.getlist("Set-Cookie"))


def test_posts_without_the_right_csrf_token_or_from_another_origin_are_refused(console):
    base, admin, read, _ = console
    s, _ = login(base, admin)
    token = csrf_of(s.get(base + "/console/keys", timeout=10).text)
    before = len(call(base + "/api/v1/keys", key=admin)[2]["keys"])
    for data, headers, why in [
            ({"name": "a", "scope": "read"}, {}, "CSRF token"),
            ({"name": "a", "scope": "read", "csrf": "wrong" + token}, {}, "CSRF token"),
            ({"name": "a", "scope": "read", "csrf": token}, {"Origin": "http://evil.example"}, "cross-origin"),
            ({"name": "a", "scope": "read", "csrf": token}, {"Sec-Fetch-Site": "cross-site"}, "cross-site")]:
        r = s.post(base + "/console/keys", data=data, headers=headers, allow_redirects=False, timeout=10)
        assert r.status_code == 403 and why in r.text, (why, r.status_code, r.text[-300:])
    # a login form without its cookie-bound token
    r = requests.post(base + "/console/login", data={"key": admin, "csrf": "x"}, allow_redirects=False, timeout=10)
    assert r.status_code == 403 and "pulsys_session" not in r.headers.get("Set-Cookie", "")
    assert len(call(base + "/api/v1/keys", key=admin)[2]["keys"]) == before      # nothing was created
    r = s.post(base + "/console/keys", data={"name": "ok", "scope": "read", "csrf": token}, timeout=10)
    assert r.status_code == 200 and len(call(base + "/api/v1/keys", key=admin)[2]["keys"]) == before + 1


def test_names_from_the_store_are_escaped_and_bad_input_gets_an_error_page(console):
    base, admin, read, _ = console
    s, _ = login(base, admin)
    token = csrf_of(s.get(base + "/console/keys", timeout=10).text)
    r = s.post(base + "/console/keys", data={"name": EVIL, "scope": "read", "csrf": token}, timeout=10)
    assert r.status_code == 200 and 'id="secret"' in r.text
    for page in (r.text, s.get(base + "/console/keys", timeout=10).text, s.get(base + "/console/audit", timeout=10).text):
        assert EVIL not in page and "&lt;script&gt;" in page
    r = s.post(base + "/console/keys", data={"name": "x", "scope": "root", "csrf": token}, timeout=10)
    assert r.status_code == 400 and 'class="error"' in r.text and "root" in r.text
    r = s.post(base + "/console/jobs", data={"repo": "", "csrf": token}, timeout=10)
    assert r.status_code == 400 and "org/name" in r.text
    r = s.post(base + "/console/keys/revoke", data={"id": "<b>", "csrf": token}, timeout=10)
    assert r.status_code == 400 and "<b>" not in r.text
    assert s.get(base + "/console/nope", timeout=10).status_code == 404
    assert s.get(base + "/console/", timeout=10).status_code == 200         # still serving


def test_logout_and_revoking_the_sessions_key_end_the_session(console):
    base, admin, read, server = console
    s, _ = login(base, admin)
    token = csrf_of(s.get(base + "/console/keys", timeout=10).text)
    r = s.post(base + "/console/logout", data={"csrf": token}, allow_redirects=False, timeout=10)
    assert r.status_code == 303 and r.headers["Location"] == "/console/login"
    s.cookies.clear()
    # a second admin key, logged in, then revoked through the API
    st, _, doc = call(base + "/api/v1/keys", "POST", admin, {"scope": "admin", "name": "ops"})
    s2, r = login(base, doc["key"])
    assert r.status_code == 303 and s2.get(base + "/console/keys", timeout=10).status_code == 200
    assert call(base + "/api/v1/keys/" + doc["id"], "DELETE", admin)[0] == 200
    r = s2.get(base + "/console/keys", allow_redirects=False, timeout=10)
    assert r.status_code == 303 and r.headers["Location"] == "/console/login"


def test_the_repos_page_lists_what_is_cached_and_purges_it(console, hub):
    base, admin, read, server = console
    hub.add_repo("org/p", files={"w.safetensors": b"p" * 300_000})
    r = requests.get(server.url + "/org/p/resolve/main/w.safetensors", headers={"Authorization": "Bearer " + read},
                     timeout=10)
    assert r.status_code == 200
    s, _ = login(base, admin)
    page = s.get(base + "/console/repos", timeout=10).text
    assert "org/p" in page and "293.0 KiB" in page
    r = s.post(base + "/console/repos/purge", data={"type": "model", "repo": "org/p", "csrf": csrf_of(page)},
               allow_redirects=False, timeout=10)
    assert r.status_code == 303 and r.headers["Location"] == "/console/repos"
    assert "org/p" not in s.get(base + "/console/repos", timeout=10).text
    r = s.post(base + "/console/repos/purge", data={"type": "model", "repo": "org/p", "csrf": csrf_of(page)},
               timeout=10)
    assert r.status_code == 404 and "not in the cache" in r.text
