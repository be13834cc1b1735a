"""Client-side helpers for the security suite: raw reads that tell a close from a wait."""

import socket


def read_until_closed(s, limit=1 << 20):
    """Everything the server sends until it closes the connection (EOF or reset)."""
    data = b""
    try:
        while len(data) < limit:
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
    except ConnectionResetError:
        pass
    return data


def closed_by_server(s, wait):
    """True when the server closes `s` within `wait` seconds (bytes before EOF are dropped)."""
    s.settimeout(wait)
    try:
        while True:
            if not s.recv(65536):
                return True
    except ConnectionResetError:
        return True
    except socket.timeout:
        return False
