"""The upstream guard (SSRF, docs/security.md §4): pulsys connects only to its upstream and
allowed hosts, never to a private or loopback address a name resolves to unless that
address is allowed, and says so with a 502 that is counted in `upstream_refused`.

Every origin here is a real server on loopback (tests/security/origins.py); the "body"
origin counts the TCP connections it accepts, so "refused" means "never connected".
DNS is played without a DNS server: `localhost` (the system resolver, /etc/hosts read
only) and, for the guard on its own, a resolver function the guard takes."""

import hashlib
import os
import socket
import types

import pytest
import requests

from pulsys import metrics as M
from pulsys.errors import UpstreamRefused
from pulsys.upstream.guard import UpstreamGuard, url_host
from pulsys.upstream.session import make_session
from tests.security.origins import Origin

BODY = os.urandom(3000)
LFS = "/org/m/resolve/main/w.safetensors"


@pytest.fixture
def origins():
    hub, body = Origin("hub", BODY), Origin("body", BODY)
    yield hub, body
    hub.stop()
    body.stop()


def _serve(make_server, upstream_url, allow=(), **settings):
    fake = types.SimpleNamespace(url=upstream_url, cdn_netloc="")
    return make_server(fake, allow_upstream_host=list(allow), auth="off", **settings)


def _localhost_is_loopback():
    try:
        return {i[4][0] for i in socket.getaddrinfo("localhost", 80, socket.AF_INET)} == {"127.0.0.1"}
    except OSError:
        return False


def test_a_cdn_host_that_is_not_allowed_is_refused_before_connecting(hub, make_server):
    hub.add_repo("org/m", files={"w.safetensors": BODY})
    srv = make_server(hub, allow_upstream_host=[], auth="off")    # the fake CDN is not listed
    r = requests.get(srv.url + LFS, timeout=30)
    assert r.status_code == 502 and "--allow-upstream-host" in r.json()["error"]
    assert r.headers["X-Error-Message"] == r.json()["error"]
    assert hub.count(server="cdn") == 0
    assert srv.vars()["upstream_refused"] == 1
    assert requests.get(srv.url + "/healthz", timeout=5).status_code == 200


@pytest.mark.parametrize("location", [
    "http://127.0.0.1:{p}/blob",                 # a loopback literal nobody allowed
    "http://localhost:{p}/blob",
    "http://[::1]:{p}/blob",
    "http://0.0.0.0:{p}/blob",
    "http://2130706433:{p}/blob",                # 127.0.0.1 in decimal
    "http://0x7f000001:{p}/blob",                # ... in hex
    "http://127.1:{p}/blob",
    "http://127.0.0.1:{p}\\@cdn-lfs.hf.co/blob",   # urlsplit: cdn-lfs.hf.co; urllib3: 127.0.0.1
    "http://cdn-lfs.hf.co@127.0.0.1:{p}/blob",   # userinfo
    "//127.0.0.1:{p}/blob",                      # protocol-relative, not a relative redirect
    "/\\127.0.0.1:{p}/blob",
    "ftp://127.0.0.1:{p}/blob",
    "http://127.0.0.1:{p}/blob\r\nX-Injected: 1",
])
def test_redirects_to_hosts_not_allowed_are_502_and_never_connected(origins, make_server, location):
    hub, body = origins
    hub.location = location.format(p=body.port)
    srv = _serve(make_server, hub.url)
    r = requests.get(srv.url + LFS, timeout=30)
    assert r.status_code == 502, (r.status_code, r.headers)
    assert "refused" in r.json()["error"] or "not an allowed upstream host" in r.json()["error"]
    assert "X-Injected" not in r.headers and "Location" not in r.headers
    assert body.connections == 0
    assert srv.vars()["upstream_refused"] >= 1


@pytest.mark.skipif(not _localhost_is_loopback(), reason="localhost does not resolve to 127.0.0.1 only")
def test_an_allowed_name_that_resolves_to_loopback_needs_the_address_allowed(origins, make_server, tmp_path):
    hub, body = origins
    hub.location = "http://localhost:%d/blob" % body.port
    srv = _serve(make_server, hub.url, allow=["localhost:%d" % body.port])
    r = requests.get(srv.url + LFS, timeout=30)
    assert r.status_code == 502 and "loopback" in r.json()["error"]
    assert body.connections == 0 and srv.vars()["upstream_refused"] == 1
    # the same name, with its address allowed explicitly: served, and verified
    srv2 = _serve(make_server, hub.url, allow=["localhost:%d" % body.port, "127.0.0.1:%d" % body.port],
                  cache_dir=str(tmp_path / "second"))
    r = requests.get(srv2.url + LFS, timeout=30)
    assert r.status_code == 200 and hashlib.sha256(r.content).digest() == hashlib.sha256(BODY).digest()
    assert body.connections >= 1 and srv2.vars()["upstream_refused"] == 0


@pytest.mark.skipif(not _localhost_is_loopback(), reason="localhost does not resolve to 127.0.0.1 only")
def test_an_upstream_the_operator_names_may_live_on_a_private_address(hub, make_server):
    hub.add_repo("org/m", files={"config.json": b'{"a": 1}'})
    srv = make_server(hub, upstream="http://localhost:%d" % int(hub.url.rsplit(":", 1)[1]), auth="off")
    r = requests.get(srv.url + "/org/m/resolve/main/config.json", timeout=30)
    assert r.status_code == 200 and r.content == b'{"a": 1}'
    assert srv.vars()["upstream_refused"] == 0


def test_no_request_chooses_the_host_pulsys_connects_to(origins, make_server, raw_client):
    hub, body = origins
    hub.location = "http://127.0.0.1:%d/blob" % body.port
    srv = _serve(make_server, hub.url, allow=["127.0.0.1:%d" % body.port])
    target = b"127.0.0.1:%d" % body.port
    c = raw_client(srv.address)
    for req in (b"GET http://" + target + b"/blob HTTP/1.1\r\nHost: " + target + b"\r\n\r\n",
                b"GET //" + target + b"/blob HTTP/1.1\r\nHost: t\r\n\r\n",
                b"CONNECT " + target + b" HTTP/1.1\r\nHost: " + target + b"\r\n\r\n"):
        c = raw_client(srv.address)
        c.send(req)
        st, _, _ = c.response()
        assert st in (400, 404)
    c = raw_client(srv.address)          # Host names pulsys itself, never the upstream
    c.send(b"GET /api/whoami-v2 HTTP/1.1\r\nHost: " + target + b"\r\n\r\n")
    c.response()
    assert body.connections == 0


# -- the guard on its own, with a resolver that plays DNS ------------------------------------

def _listener(host):
    s = socket.socket()
    s.bind((host, 0))
    s.listen(8)
    s.setblocking(False)
    return s


def _accepted(s):
    n = 0
    while True:
        try:
            c, _ = s.accept()
        except BlockingIOError:
            return n
        c.close()
        n += 1


def _answers(*addresses):
    """A resolver that returns the next address (or fixed list) on each call."""
    seq = list(addresses)

    def resolve(host, port, family=0, kind=0, *rest):
        a = seq.pop(0) if len(seq) > 1 else seq[0]
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (a, port))]
    return resolve


def test_a_name_that_rebinds_to_another_address_between_check_and_connect_is_refused():
    allowed, private = _listener("127.0.0.1"), _listener("127.0.0.2")
    try:
        port = private.getsockname()[1]
        counters = M.new()
        # cdn-lfs.hf.co is a Hub host: its addresses are always checked. 127.0.0.1 is
        # allowed explicitly; the second answer, 127.0.0.2, is not.
        guard = UpstreamGuard("https://huggingface.co", ["127.0.0.1"], counters,
                              resolver=_answers("127.0.0.1", "127.0.0.2"))
        url = "http://cdn-lfs.hf.co:%d/blob" % port
        guard.check_url(url)                    # first answer: an allowed address
        with pytest.raises(UpstreamRefused) as e:
            make_session(2, guard).get(url, timeout=5)
        assert "loopback" in str(e.value)
        assert _accepted(private) == 0 and counters[M.UPSTREAM_REFUSED] == 1
    finally:
        allowed.close()
        private.close()


def test_the_default_hub_name_must_resolve_to_a_public_address():
    lst = _listener("127.0.0.1")
    try:
        port = lst.getsockname()[1]
        counters = M.new()
        guard = UpstreamGuard("https://huggingface.co", [], counters, resolver=_answers("127.0.0.1"))
        for host in ("huggingface.co", "cdn-lfs.hf.co", "huggingface.co."):
            with pytest.raises(UpstreamRefused):
                guard.connect(host, port, 5)
        with pytest.raises(UpstreamRefused):
            guard.connect("example.com", port, 5)      # not on the list at all
        assert _accepted(lst) == 0 and counters[M.UPSTREAM_REFUSED] == 4
    finally:
        lst.close()


def test_a_mixed_answer_connects_only_to_the_allowed_address():
    lst = _listener("127.0.0.2")
    try:
        port = lst.getsockname()[1]

        def resolve(host, p, *rest):
            return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", ("127.0.0.1", p)),
                    (socket.AF_INET, socket.SOCK_STREAM, 6, "", ("127.0.0.2", p))]
        guard = UpstreamGuard("https://huggingface.co", ["127.0.0.2:%d" % port], M.new(), resolver=resolve)
        s = guard.connect("cdn-lfs.hf.co", port, 5)
        try:
            assert s.getpeername() == ("127.0.0.2", port)
        finally:
            s.close()
    finally:
        lst.close()


@pytest.mark.parametrize("url,want", [
    ("https://cdn-lfs.hf.co/x?a=b", ("https", "cdn-lfs.hf.co", 443)),
    ("http://[::1]:8080/x", ("http", "::1", 8080)),
    ("HTTP://Example.COM/x", ("http", "example.com", 80)),
    ("http://a.example\\@b.example/", None),
    ("http://user:pw@b.example/", None),
    ("http://b.example/x y", None),
    ("http://b.example/\x00", None),
    ("file:///etc/passwd", None),
    ("gopher://b.example/", None),
    ("http:///x", None),
])
def test_url_host_reads_urls_as_urllib3_connects(url, want):
    assert url_host(url) == want


@pytest.mark.parametrize("address,allowed", [
    ("8.8.8.8", True), ("2606:4700::1111", True), ("64:ff9b::808:808", True),
    ("127.0.0.1", False), ("127.8.9.10", False), ("10.1.2.3", False), ("172.16.0.1", False),
    ("192.168.1.1", False), ("169.254.169.254", False), ("100.100.100.200", False),   # CGNAT range
    ("0.0.0.0", False), ("224.0.0.1", False), ("255.255.255.255", False), ("::1", False),
    ("::", False), ("fe80::1%eth0", False), ("fd00:ec2::254", False), ("::ffff:127.0.0.1", False),
    ("::ffff:10.0.0.1", False), ("64:ff9b::7f00:1", False), ("2002:7f00:1::", False),
    ("2002:a9fe:a9fe::", False), ("not-an-address", False),
])
def test_which_addresses_a_hub_name_may_resolve_to(address, allowed):
    guard = UpstreamGuard("https://huggingface.co", ["10.1.2.4", "127.0.0.2:9000"], M.new())
    assert guard.address_allowed("cdn-lfs.hf.co", 443, address) is allowed
    assert guard.address_allowed("cdn-lfs.hf.co", 443, "10.1.2.4")          # listed, any port
    assert guard.address_allowed("cdn-lfs.hf.co", 9000, "127.0.0.2")        # listed with its port
    assert not guard.address_allowed("cdn-lfs.hf.co", 9001, "127.0.0.2")


def test_behind_a_proxy_only_the_host_is_checked_before_the_request(monkeypatch):
    # the operator's proxy resolves the name; this machine's DNS may not know it at all
    monkeypatch.setenv("HTTPS_PROXY", "http://127.0.0.1:9")
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)

    def no_dns(*args):
        raise socket.gaierror(socket.EAI_NONAME, "unknown name")
    guard = UpstreamGuard("https://huggingface.co", [], M.new(), resolver=no_dns)
    guard.check_url("https://cdn-lfs.hf.co/repos/x")
    with pytest.raises(UpstreamRefused):
        guard.check_url("https://elsewhere.example/x")
