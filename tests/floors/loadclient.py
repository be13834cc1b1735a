"""Closed-loop keep-alive client for the floor tests: C connections, N requests in all,
each response read completely. Runs as its own process so its allocations and CPU do
not count against the server. Prints the number of responses."""

import socket
import sys
import threading


def run(host, port, path, total, conns, size):
    req = ("GET %s HTTP/1.1\r\nHost: x\r\n\r\n" % path).encode()
    per = total // conns
    done = [0] * conns

    def worker(i):
        s = socket.create_connection((host, port))
        buf = bytearray(size + 8192)
        view = memoryview(buf)
        for _ in range(per):
            s.sendall(req)
            got, need = 0, -1
            while need < 0 or got < need:
                k = s.recv_into(view[got:])
                if not k:
                    raise EOFError("server closed")
                got += k
                if need < 0:
                    j = buf.find(b"\r\n\r\n", 0, got)
                    if j >= 0:
                        need = j + 4 + size
            done[i] += 1
        s.close()
    ts = [threading.Thread(target=worker, args=(i,)) for i in range(conns)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    print(sum(done))


if __name__ == "__main__":
    h, p, path, total, conns, size = sys.argv[1:7]
    run(h, int(p), path, int(total), int(conns), int(size))
