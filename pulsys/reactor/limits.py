"""Accept-time connection limits of one reactor: --max-connections and
--max-connections-per-ip. Consulted once per connection (accept and close), never
per request. A refused connection gets a pre-rendered 503 and is closed."""

import ipaddress
import socket

from pulsys import metrics as M
from pulsys.http1.heads import error_response

BUSY_SERVER = error_response(503, "pulsys has too many open connections; retry later")
BUSY_PEER = error_response(503, "too many open connections from your address "
                                "(--max-connections-per-ip); retry later")


def peer_key(peer):
    """What --max-connections-per-ip counts by: the IPv4 address, or the /64 of an IPv6
    one (RFC 4291 §2.5.4: a host is usually given a whole /64, so counting single IPv6
    addresses would let one client open 2^64 times the cap)."""
    if ":" not in peer:
        return peer
    try:
        a = ipaddress.IPv6Address(peer.partition("%")[0])
    except ValueError:
        return peer
    if a.ipv4_mapped is not None:
        return str(a.ipv4_mapped)
    return a.exploded[:19]


class ConnectionLimits:
    def __init__(self, max_connections, max_per_ip, counters):
        self.max_connections = max_connections
        self.max_per_ip = max_per_ip     # 0: no per-address limit
        self.per_peer = {}               # peer_key -> open connections (only with max_per_ip)
        self.counters = counters

    def admit(self, sock, peer, open_now):
        """True to serve this new socket; False when a limit refused it (answered, closed)."""
        if open_now >= self.max_connections:
            busy = BUSY_SERVER
        elif self.max_per_ip and self.per_peer.get(peer_key(peer), 0) >= self.max_per_ip:
            busy = BUSY_PEER
        else:
            return True
        self.counters[M.CONNECTIONS_REFUSED] += 1
        try:
            sock.send(busy, socket.MSG_DONTWAIT)   # a fresh socket's send buffer is empty
        except OSError:
            pass
        sock.close()
        return False

    def opened(self, peer):
        """Count a served connection; returns the key to give back to closed(), or None."""
        if not self.max_per_ip:
            return None
        key = peer_key(peer)
        self.per_peer[key] = self.per_peer.get(key, 0) + 1
        return key

    def closed(self, key):
        n = self.per_peer.get(key, 1) - 1
        if n:
            self.per_peer[key] = n
        else:
            self.per_peer.pop(key, None)
