"""Paths, keys and response headers over the wire, on every backend:
traversal in any spelling is a 400 and no name ever becomes a path on disk; names that
look alike but differ reach their own bytes, cold and warm; CR/LF and non-ASCII from a
request or from upstream never reach a response head raw."""

import os
from urllib.parse import quote

import pytest

FILES = {
    "a+b.txt": b"plus", "a b.txt": b"space", "A.txt": b"upper", "a.txt": b"lower",
    "caf\u00e9.txt": b"nfc", "cafe\u0301.txt": b"nfd", "x/y.txt": b"nested", "100%.txt": b"percent",
    "100%25.txt": b"percent-25", "..dots.txt": b"leading dots", "a..b.txt": b"inner dots",
    "b|c.txt": b"pipe in name", "dir.with.dots/f": b"dotted dir",
}
MARK = "pwned-" + os.urandom(4).hex()
TRAVERSALS = [
    "/org/names/resolve/main/../../../" + MARK,
    "/org/names/resolve/main/%2e%2e/%2e%2e/" + MARK,
    "/org/names/resolve/main/%2E%2E%2F%2E%2E%2F" + MARK,
    "/org/names/resolve/main/x%2F..%2F..%2F..%2F" + MARK,
    "/org/names/resolve/main/..%5C..%5C" + MARK,
    "/org/names/resolve/main/%5C" + MARK,
    "/org/names/resolve/main/%2Ftmp%2F" + MARK,
    "/org/names/resolve/main//tmp/" + MARK,
    "/org/names/resolve/main/" + MARK + "%00.txt",
    "/org/names/resolve/..%2F..%2F" + MARK + "/f",
    "/org/..%2F" + MARK + "/resolve/main/f",
    "/%2e%2e/" + MARK + "/resolve/main/f",
    "/api/resolve-cache/models/org/names/%s/..%%2F%s" % ("0" * 40, MARK),
    "/api/models/org/names/tree/main/..%2F..%2F" + MARK,
    "/api/x/%2e%2e/%2e%2e/" + MARK,
]


@pytest.fixture
def names(hub):
    hub.add_repo("org/names", files=FILES)
    hub.commit("org/names", {"c.txt": b"rev a|b, file c"}, branch="a|b")
    hub.commit("org/names", {"b|c.txt": b"rev a, file b|c"}, branch="a")


def _get(raw_client, srv, path, method=b"GET"):
    c = raw_client(srv.address)
    c.send(method + b" " + path.encode("ascii") + b" HTTP/1.1\r\nHost: t\r\n\r\n")
    return c.response()


def _fetch(raw_client, srv, path):
    """GET, following relative redirects (regular files go through /api/resolve-cache)."""
    for _ in range(3):
        st, h, body = _get(raw_client, srv, path)
        if st not in (301, 302, 307, 308):
            return st, body
        assert h["location"].startswith("/"), h["location"]
        path = h["location"]
    raise AssertionError("redirect loop at %s" % path)


def test_traversal_in_any_spelling_is_400_and_never_touches_the_disk(names, serve, raw_client, tmp_path):
    srv = serve()
    before = sorted(p.name for p in tmp_path.iterdir())
    for path in TRAVERSALS:
        st, h, body = _get(raw_client, srv, path)
        assert st == 400, (path, st, body)
        assert b"error" in body
    assert sorted(p.name for p in tmp_path.iterdir()) == before
    for root, dirs, files in os.walk(tmp_path):
        assert not [n for n in dirs + files if MARK in n], root
    assert _get(raw_client, srv, "/healthz")[0] == 200


def test_look_alike_names_reach_their_own_bytes_cold_and_warm(names, serve, raw_client, tmp_path):
    srv = serve()
    wanted = {"/org/names/resolve/main/" + quote(name): data for name, data in FILES.items()}
    wanted["/org/names/resolve/" + quote("a|b", safe="") + "/c.txt"] = b"rev a|b, file c"
    wanted["/org/names/resolve/a/" + quote("b|c.txt")] = b"rev a, file b|c"
    wanted["/org/names/resolve/main/x%2Fy.txt"] = b"nested"      # "/" spelled %2F: same file
    for _ in ("cold", "warm"):
        for path, data in wanted.items():
            assert _fetch(raw_client, srv, path) == (200, data), path
    # what is on disk is named by content and keys, never by a requested name
    for root, dirs, files in os.walk(tmp_path):
        for n in dirs + files:
            assert n.isascii() and "|" not in n and "%" not in n and " " not in n, os.path.join(root, n)


def test_crlf_and_non_ascii_never_reach_a_response_head(names, serve, raw_client):
    srv = serve()
    for path in ("/org/names/resolve/main/a%0D%0AX-Evil:%201.txt",
                 "/org/names/resolve/main/a%0AX-Evil:%201.txt",
                 "/org/names/resolve/caf%C3%A9/a.txt",                 # Hub: "Invalid rev id: café"
                 "/org/names/resolve/main/caf%C3%A9-missing.txt",
                 "/org/names/resolve/main/%E6%97%A5%E6%9C%AC.txt",
                 "/api/models/org/names/revision/caf%C3%A9"):
        c = raw_client(srv.address)
        c.send(b"GET " + path.encode() + b" HTTP/1.1\r\nHost: t\r\n\r\n")
        while b"\r\n\r\n" not in c.buf:
            c._fill()
        head = c.buf.partition(b"\r\n\r\n")[0]
        assert head.isascii(), (path, head)
        assert b"\r" not in head.replace(b"\r\n", b"") and b"\n" not in head.replace(b"\r\n", b"")
        assert b"x-evil" not in head.lower()
        st, h, _ = c.response()
        assert st in (400, 404), (path, st)
        if "caf%C3%A9/a.txt" in path:
            assert h["x-error-message"] == "Invalid rev id: caf\\xe9"


def test_unknown_methods_are_501_and_route_methods_405_with_allow(names, serve, raw_client):
    srv = serve()
    for method, path, status, allow in (
            (b"BREW", "/org/names/resolve/main/a.txt", 501, None),
            (b"PROPFIND", "/healthz", 501, None),
            (b"DELETE", "/org/names/resolve/main/a.txt", 405, "GET, HEAD"),
            (b"PUT", "/api/models/org/names/revision/main", 405, "GET, HEAD"),
            (b"GET", "/api/models/org/names/paths-info/main", 405, "POST")):
        st, h, _ = _get(raw_client, srv, path, method)
        assert st == status and h.get("allow") == allow, (method, path, st, h)
