"""requests.Session for upstream: pooled keep-alive, raw bytes, pulsys's own token.

Client credentials never reach this module; the token is pulsys's own (--hf-token) and
is sent only to the upstream origin, never to CDN hosts (hf-protocol.md §7.5). Every
direct connection is made by the SSRF guard (upstream/guard.py), which checks the host
and the resolved address it connects to.
"""

import socket
import sys

import requests
import requests.adapters
import requests.auth
from urllib3.connection import HTTPConnection, HTTPSConnection
from urllib3.connectionpool import HTTPConnectionPool, HTTPSConnectionPool
from urllib3.exceptions import ConnectTimeoutError, NameResolutionError, NewConnectionError

from pulsys import __version__


def _guarded_new_conn(conn, guard):
    """urllib3's HTTPConnection._new_conn, connecting through the guard (same exceptions)."""
    try:
        sock = guard.connect(conn._dns_host, conn.port, conn.timeout, conn.source_address,
                             conn.socket_options)
    except socket.gaierror as e:
        raise NameResolutionError(conn.host, conn, e) from e
    except socket.timeout as e:
        raise ConnectTimeoutError(conn, "Connection to %s timed out. (connect timeout=%s)"
                                  % (conn.host, conn.timeout)) from e
    except OSError as e:
        raise NewConnectionError(conn, "Failed to establish a new connection: %s" % e) from e
    sys.audit("http.client.connect", conn, conn.host, conn.port)
    return sock


def _pool_classes(guard):
    """Connection pools whose connections ask `guard` where they may connect. Proxied
    connections (HTTP(S)_PROXY) use urllib3's ProxyManager and its own classes."""
    class GuardedHTTPConnection(HTTPConnection):
        def _new_conn(self):
            return _guarded_new_conn(self, guard)

    class GuardedHTTPSConnection(HTTPSConnection):
        def _new_conn(self):
            return _guarded_new_conn(self, guard)

    class GuardedHTTPPool(HTTPConnectionPool):
        ConnectionCls = GuardedHTTPConnection

    class GuardedHTTPSPool(HTTPSConnectionPool):
        ConnectionCls = GuardedHTTPSConnection

    return {"http": GuardedHTTPPool, "https": GuardedHTTPSPool}


class _GuardedAdapter(requests.adapters.HTTPAdapter):
    def __init__(self, guard, **kw):
        self._classes = _pool_classes(guard)
        super().__init__(**kw)

    def init_poolmanager(self, *args, **kw):
        super().init_poolmanager(*args, **kw)
        self.poolmanager.pool_classes_by_scheme = self._classes


class _HeadersOnly(requests.auth.AuthBase):
    """Authorization is set per request by the caller (upstream/service.py). A session
    auth that changes nothing keeps requests from reading ~/.netrc on every request
    (requests.Session.prepare_request does when trust_env is on and no auth is set): two
    stats and a parse per request on the cold path, and it would send that file's
    credentials to any host it names, CDN hosts included."""

    def __call__(self, r):
        return r


class _NoRedirects(requests.Session):
    """Every request pulsys makes is sent with allow_redirects=False: redirects are
    followed by hand, to allowed hosts only (upstream/ranged.py, service.py). For such a
    request whose answer is a redirect, requests.Session.send still prepares the next
    request (for Response.next, which pulsys never reads): it reads the redirect's body,
    copies the request, and looks up ~/.netrc, cookies and proxy variables again, about
    1 ms of the GIL on the cold path of every /resolve (its answer is a 302 for every LFS
    file). So this session prepares no next request; it only reads the redirect's body,
    as requests does, so that its connection goes back to the pool."""

    def resolve_redirects(self, resp, req, **kwargs):
        if resp.is_redirect:
            resp.content      # noqa: B018 (reads and keeps the body; the connection is free)
        return iter(())


def make_session(pool_size, guard=None):
    """guard: an upstream.guard.UpstreamGuard every direct connection goes through."""
    s = _NoRedirects()
    s.trust_env = True  # HTTPS_PROXY / NO_PROXY as users expect from a CLI tool
    s.auth = _HeadersOnly()
    kw = dict(pool_connections=16, pool_maxsize=pool_size, max_retries=0)
    adapter = (_GuardedAdapter(guard, **kw) if guard is not None
               else requests.adapters.HTTPAdapter(**kw))
    s.mount("http://", adapter)
    s.mount("https://", adapter)
    s.headers.clear()
    s.headers["User-Agent"] = "pulsys/%s" % __version__
    s.headers["Accept-Encoding"] = "identity"   # store raw bytes (§7.9)
    s.headers["Accept"] = "*/*"
    return s
