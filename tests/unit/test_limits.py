import socket

from pulsys import metrics as M
from pulsys.reactor.limits import ConnectionLimits, peer_key


def test_ipv6_clients_are_counted_by_their_64_and_mapped_ipv4_as_ipv4():
    assert peer_key("192.0.2.7") == "192.0.2.7"
    assert peer_key("2001:db8:1:2:aaaa::1") == peer_key("2001:db8:1:2:ffff:1:2:3") == "2001:0db8:0001:0002"
    assert peer_key("2001:db8:1:3::1") != peer_key("2001:db8:1:2::1")
    assert peer_key("::ffff:192.0.2.7") == "192.0.2.7"
    assert peer_key("fe80::1%eth0") == "fe80:0000:0000:0000"


def test_a_refused_socket_is_answered_503_closed_and_counted():
    counters = M.new()
    lim = ConnectionLimits(max_connections=10, max_per_ip=2, counters=counters)
    keys = [lim.opened("192.0.2.7"), lim.opened("192.0.2.7")]
    a, b = socket.socketpair()
    try:
        assert not lim.admit(a, "192.0.2.7", open_now=2)
        assert b.recv(4096).startswith(b"HTTP/1.1 503 ") and b.recv(1) == b""
        assert a.fileno() == -1 and counters[M.CONNECTIONS_REFUSED] == 1
    finally:
        b.close()
    c, d = socket.socketpair()
    try:
        assert lim.admit(c, "192.0.2.8", open_now=2)        # another address
        lim.closed(keys[0])
        assert lim.admit(c, "192.0.2.7", open_now=1)        # a slot came back
        assert not lim.admit(c, "192.0.2.9", open_now=10)   # the total cap
    finally:
        c.close()
        d.close()
    lim.closed(keys[1])
    assert lim.per_peer == {}
