"""Upstream guard (SSRF): which hosts and addresses pulsys may connect to.

Clients choose only a path on the upstream; the hosts pulsys contacts come from its
configuration and from the upstream's redirects (a 302 to a CDN). Two checks, both
enforced where sockets are made (pulsys/upstream/session.py) and both counted in
`upstream_refused`:

  * the host: the configured upstream, the Hub's CDN hosts (config.HUB_CDN_HOSTS) or an
    --allow-upstream-host entry. An entry without a port allows every port.
  * the address, after DNS, on the exact address the socket then connects to (so a name
    that answers differently the second time, DNS rebinding, cannot slip through): it
    must be globally routable (`ipaddress.is_global`: not loopback, private, link-local,
    CGNAT, unspecified, reserved; IPv4 inside IPv6 is judged as that IPv4), unless
      - the host is the configured upstream and not a Hub host (an operator's mirror such
        as `--upstream http://hub-mirror.internal` may live on a private network), or
      - the address itself is an --allow-upstream-host entry (`127.0.0.2:9000`, `10.0.0.5`).

URLs are parsed with urllib3's parser, the one `requests` connects with: Python's
`urllib.parse.urlsplit` reads `http://a.example\\@b.example/` as host b.example while
urllib3 connects to a.example, so a check on urlsplit's answer could be bypassed.
With HTTP(S)_PROXY set, `requests` connects to the proxy: the host check still applies
to every URL, the address check is then the proxy's job (docs/security.md).
"""

import ipaddress
import socket

from requests.utils import get_environ_proxies
from urllib3.util import parse_url
from urllib3.util.timeout import _DEFAULT_TIMEOUT

from pulsys import metrics as M
from pulsys.config import HUB_CDN_HOSTS
from pulsys.errors import UpstreamRefused

__all__ = ["UpstreamGuard", "url_host", "host_allowed"]

_URL_JUNK = frozenset("\\ \t\r\n\x00")


def url_host(url):
    """(scheme, host, port) of an absolute http(s) URL as urllib3 will connect, or None when
    the URL is not one pulsys should follow (other scheme, userinfo, backslash, whitespace)."""
    if any(ch in _URL_JUNK or ch < " " for ch in url):
        return None
    try:
        u = parse_url(url)
    except ValueError:
        return None
    if u.scheme not in ("http", "https") or not u.host or u.auth is not None:
        return None
    host = u.host.lower()
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    return u.scheme, host, u.port or (443 if u.scheme == "https" else 80)


def _split_entry(entry):
    """'host', 'host:port', '[v6]:port', 'v6' -> (host, port or None)."""
    entry = entry.strip().lower()
    if entry.startswith("["):
        host, _, rest = entry[1:].partition("]")
        return host, int(rest[1:]) if rest.startswith(":") and rest[1:].isdigit() else None
    if entry.count(":") == 1:
        host, _, port = entry.partition(":")
        return host, int(port) if port.isdigit() else None
    return entry, None


def _matches(entries, host, port):
    return (host, None) in entries or (host, port) in entries


def host_allowed(url, entries):
    """True when `url` is an http(s) URL to a host named in `entries` ('host', 'host:port')."""
    parts = url_host(url)
    return parts is not None and _matches({_split_entry(e) for e in entries}, parts[1], parts[2])


_NAT64 = ipaddress.ip_network("64:ff9b::/96")


def _ip(text):
    """The address to judge: IPv4 carried in IPv6 (mapped ::ffff:0:0/96, the NAT64 prefix
    64:ff9b::/96 of RFC 6052, 6to4 2002::/16 of RFC 3056) is judged as that IPv4, which
    Python's is_global does not do for the last two (64:ff9b::7f00:1 "is global")."""
    try:
        a = ipaddress.ip_address(text)
    except ValueError:
        return None
    if a.version == 6:
        if a.ipv4_mapped is not None:
            return a.ipv4_mapped
        if a in _NAT64:
            return ipaddress.IPv4Address(int(a) & 0xFFFFFFFF)
        if a.sixtofour is not None:
            return a.sixtofour
    return a


def _kind(address):
    a = _ip(address.partition("%")[0])
    if a is None:
        return "unparseable"
    for name in ("loopback", "link_local", "private", "multicast", "unspecified", "reserved"):
        if getattr(a, "is_" + name):
            return name.replace("_", "-")
    return "non-public"


class UpstreamGuard:
    """One per process, shared by every upstream connection. `resolver` has the signature of
    socket.getaddrinfo (tests inject one to play DNS without a DNS server)."""

    def __init__(self, upstream_url, allow_entries, counters, resolver=socket.getaddrinfo, log=None):
        up = url_host(upstream_url)
        self.upstream = (up[1], up[2]) if up else None
        self.hosts = {(h, None) for h in HUB_CDN_HOSTS}
        self.hosts.update(_split_entry(e) for e in allow_entries)
        if up is not None:
            self.hosts.add((up[1], up[2]))
        self.addresses = set()
        for e in allow_entries:
            host, port = _split_entry(e)
            a = _ip(host)
            if a is not None:
                self.addresses.add((a, port))
        self.upstream_trusted = up is not None and up[1] not in HUB_CDN_HOSTS
        self.trusted = set()    # (host, port) the operator named besides the upstream: trust()
        self.counters = counters
        self.resolver = resolver
        self.log = log

    def _refuse(self, message):
        self.counters[M.UPSTREAM_REFUSED] += 1
        if self.log is not None:
            self.log.warning("upstream connection refused", reason=message)
        return UpstreamRefused(message)

    def address_allowed(self, host, port, address):
        a = _ip(address.partition("%")[0])
        if a is None:
            return False
        if a.is_global and not a.is_multicast:
            return True
        if self.upstream_trusted and (host, port) == self.upstream:
            return True
        if (host, port) in self.trusted:
            return True
        return (a, None) in self.addresses or (a, port) in self.addresses

    def trust(self, url):
        """Allow connections to the host of `url` at any address, like the configured upstream:
        for a server the operator configured by URL (the --shared-store endpoint)."""
        parts = url_host(url)
        if parts is None:
            raise ValueError("not an http(s) URL pulsys can connect to: %r" % url)
        self.hosts.add((parts[1], parts[2]))
        self.trusted.add((parts[1], parts[2]))

    def check_url(self, url):
        """Raise UpstreamRefused unless `url` may be fetched: host allowed and, when its
        addresses are checked, at least one allowed address. Resolves the name (a pool
        thread may block); the connection itself checks again (session.py)."""
        parts = url_host(url)
        if parts is None or not _matches(self.hosts, parts[1], parts[2]):
            raise self._refuse("upstream redirect to %s refused: not an allowed upstream host "
                               "(see --allow-upstream-host)" % _show(parts, url))
        if get_environ_proxies(url):
            return    # the proxy resolves and connects; local DNS may not even know the name
        self._allowed_infos(parts[1], parts[2])

    def _allowed_infos(self, host, port):
        infos = self.resolver(host, port, 0, socket.SOCK_STREAM)
        ok = [i for i in infos if self.address_allowed(host, port, i[4][0])]
        if not ok:
            kinds = sorted({_kind(i[4][0]) for i in infos})
            raise self._refuse("upstream connection to %s:%d refused: the name resolves only to %s "
                               "addresses (allow one with --allow-upstream-host ADDRESS)"
                               % (host, port, "/".join(kinds) or "no"))
        return ok

    def connect(self, host, port, timeout=_DEFAULT_TIMEOUT, source_address=None, socket_options=None):
        """A connected socket to an allowed address of host:port (urllib3's create_connection
        with the checks). Raises UpstreamRefused, socket.gaierror or OSError."""
        host = host.rstrip(".").lower()
        if host.startswith("[") and host.endswith("]"):
            host = host[1:-1]
        if not _matches(self.hosts, host, port):
            raise self._refuse("upstream connection to %s:%d refused: not an allowed upstream host "
                               "(see --allow-upstream-host)" % (host, port))
        err = None
        for family, kind, proto, _, sockaddr in self._allowed_infos(host, port):
            sock = None
            try:
                sock = socket.socket(family, kind, proto)
                for opt in socket_options or ():
                    sock.setsockopt(*opt)
                if timeout is not _DEFAULT_TIMEOUT:
                    sock.settimeout(timeout)
                if source_address:
                    sock.bind(source_address)
                sock.connect(sockaddr)
                return sock
            except OSError as e:
                err = e
                if sock is not None:
                    sock.close()
        raise err


def _show(parts, url):
    if parts is None:
        return "a URL pulsys does not follow (%d characters)" % len(url)
    return "%s:%d" % (parts[1], parts[2])
