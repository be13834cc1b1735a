"""Closed-loop keep-alive client that times every request: C connections on one thread
(selectors), each sending its next request when the last response is complete, N per
connection. Every socket has a small receive buffer, so the server's sends of a larger
answer cannot finish inside the call that issues them: the kernel completes them later,
as work the server's loop runs. Runs as its own process (no GIL shared with the server).
Prints a JSON line: responses, the slowest request's seconds, and the median's."""

import json
import selectors
import socket
import sys
import time


def run(host, port, path, per, conns, size, rcvbuf, timeout):
    req = ("GET %s HTTP/1.1\r\nHost: x\r\n\r\n" % path).encode()
    sel = selectors.DefaultSelector()
    state = {}
    for _ in range(conns):
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)   # before connect: the window
        s.connect((host, port))
        s.setblocking(False)
        state[s] = [0, bytearray(), 0.0]    # responses done, bytes of the current one, sent at
        sel.register(s, selectors.EVENT_READ)
    lat = []
    for s, st in state.items():
        st[2] = time.monotonic()
        s.send(req)
    deadline = time.monotonic() + timeout
    live = len(state)
    while live and time.monotonic() < deadline:
        for key, _ in sel.select(1.0):
            s = key.fileobj
            st = state[s]
            data = s.recv(1 << 16)
            if not data:
                raise SystemExit("server closed a connection")
            st[1] += data
            j = st[1].find(b"\r\n\r\n")
            if j < 0 or len(st[1]) < j + 4 + size:
                continue
            if not st[1].startswith(b"HTTP/1.1 200"):
                raise SystemExit("bad response: %r" % bytes(st[1][:200]))
            now = time.monotonic()
            lat.append(now - st[2])
            st[0] += 1
            del st[1][:]
            if st[0] == per:
                sel.unregister(s)
                s.close()
                live -= 1
            else:
                st[2] = now
                s.send(req)
    lat.sort()
    print(json.dumps({"responses": len(lat), "max_s": lat[-1] if lat else None,
                      "p50_s": lat[len(lat) // 2] if lat else None}))


if __name__ == "__main__":
    h, p, path, per, conns, size, rcvbuf, timeout = sys.argv[1:9]
    run(h, int(p), path, int(per), int(conns), int(size), int(rcvbuf), float(timeout))
