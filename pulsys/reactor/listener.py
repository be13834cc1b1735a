"""Listening sockets: non-blocking, SO_REUSEADDR, SO_REUSEPORT when more than one."""

import socket


def create_listener(host, port, reuseport=False, backlog=1024):
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    s = socket.socket(family, socket.SOCK_STREAM)
    try:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if reuseport:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        s.bind((host, port))
        s.listen(backlog)
        s.setblocking(False)
    except BaseException:
        s.close()
        raise
    return s


def create_listeners(host, port, count):
    """`count` sockets on one address (SO_REUSEPORT spreads connections among them).
    Port 0 binds the first to a free port and the rest to the same one."""
    first = create_listener(host, port, reuseport=count > 1)
    out = [first]
    port = first.getsockname()[1]
    try:
        for _ in range(count - 1):
            out.append(create_listener(host, port, reuseport=True))
    except BaseException:
        for s in out:
            s.close()
        raise
    return out
