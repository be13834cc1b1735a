"""uring_floor: the least a Python + liburing HTTP server can do per warm hit, as a
reference row for bench_compare.py (peer `uring-floor`), not a product.

It has none of pulsys's features: no parser (a request is "the bytes up to CRLFCRLF",
the path is the second word of the first line), no cache index, freshness, ranges,
auth, counters, histograms or access log. Each file under --root is read into memory
once with a fixed head. The loop is pulsys's io_uring loop stripped bare: multishot
accept, one recv per connection, and per request one send linked to the next recv
(IOSQE_IO_LINK | IOSQE_CQE_SKIP_SUCCESS, MSG_WAITALL), all SQEs of a pass submitted by
one io_uring_enter, sleeping in epoll on the ring fd. What pulsys costs above this row,
at the same load, is the price of its features in CPython.

    python uring_floor.py --port 8080 --root <dir holding bench/files/resolve/main/...> [--processes N]
"""

import argparse
import os
import select
import signal
import socket

import liburing as L

OP_RECV, OP_SEND, ACCEPT_TAG = 2, 3, 1


def load_files(root):
    """{b"/path": whole response bytes} for every file under root."""
    answers = {}
    for dirpath, _dirs, names in os.walk(root):
        for name in names:
            full = os.path.join(dirpath, name)
            with open(full, "rb") as f:
                body = f.read()
            path = "/" + os.path.relpath(full, root).replace(os.sep, "/")
            head = (b"HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\n"
                    b"Content-Length: %d\r\nConnection: keep-alive\r\n\r\n" % len(body))
            answers[path.encode()] = head + body
    return answers


NOT_FOUND = b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: keep-alive\r\n\r\n"


def listener(port):
    lst = socket.socket()
    lst.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    lst.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    lst.bind(("127.0.0.1", port))
    lst.listen(1024)
    return lst


def serve(lst, answers):
    ring = L.Ring()
    L.io_uring_queue_init(4096, ring, L.IORING_SETUP_SINGLE_ISSUER)
    cqe = L.Cqe()
    get_sqe, prep_recv, prep_send = L.io_uring_get_sqe, L.io_uring_prep_recv, L.io_uring_prep_send
    set_data, submit = L.io_uring_sqe_set_data64, L.io_uring_submit
    link_quiet, waitall = L.IOSQE_IO_LINK | L.IOSQE_CQE_SKIP_SUCCESS, socket.MSG_WAITALL
    s = get_sqe(ring)
    L.io_uring_prep_multishot_accept(s, lst.fileno())
    set_data(s, ACCEPT_TAG)
    submit(ring)
    ep = select.epoll()
    ep.register(ring.ring_fd, select.EPOLLIN)
    socks, bufs = {}, {}
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    while not stop:
        if not L.io_uring_cq_ready(ring):
            try:
                ep.poll(1.0)
            except InterruptedError:
                continue
        n = 0
        for _ in L.CqeIter(ring, cqe):
            c = cqe[0]
            n += 1
            tag = c.user_data
            try:
                res = c.res
            except OSError:
                res = -1
            if tag == ACCEPT_TAG:
                if res >= 0:
                    sk = socket.socket(fileno=res)
                    sk.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                    socks[res] = sk
                    buf = bufs[res] = bytearray(16384)
                    s = get_sqe(ring)
                    prep_recv(s, res, buf, 0)
                    set_data(s, (res << 3) | OP_RECV)
                continue
            fd = tag >> 3
            if tag & 7 != OP_RECV:          # a quiet send failed: the peer is gone
                continue
            if res <= 0:
                sk = socks.pop(fd, None)
                bufs.pop(fd, None)
                if sk is not None:
                    sk.close()
                continue
            buf = bufs[fd]
            if buf.find(b"\r\n\r\n", 0, res) == res - 4:   # one whole head, as pulsys's fused hit
                start = buf.find(b" ") + 1
                out = answers.get(bytes(buf[start:buf.find(b" ", start)]), NOT_FOUND)
                s = get_sqe(ring)
                prep_send(s, fd, out, waitall)
                set_data(s, (fd << 3) | OP_SEND)
                s.flags = link_quiet
            s = get_sqe(ring)
            prep_recv(s, fd, buf, 0)
            set_data(s, (fd << 3) | OP_RECV)
        if n:
            L.io_uring_cq_advance(ring, n)
        submit(ring)
    for sk in socks.values():
        sk.close()
    L.io_uring_queue_exit(ring)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--root", required=True)
    ap.add_argument("--processes", type=int, default=1,
                    help="listening sockets (SO_REUSEPORT), one forked process and ring each: "
                         "pulsys's --listeners layout, to measure what it costs without pulsys")
    a = ap.parse_args()
    answers = load_files(a.root)
    socks = [listener(a.port) for _ in range(a.processes)]
    if a.processes == 1:
        return serve(socks[0], answers)
    kids = []
    for lst in socks:
        pid = os.fork()
        if pid == 0:
            serve(lst, answers)
            os._exit(0)
        kids.append(pid)
    signal.signal(signal.SIGTERM, lambda *_: [os.kill(k, signal.SIGTERM) for k in kids])
    for k in kids:
        os.waitpid(k, 0)      # (retried after the handler runs: PEP 475)


if __name__ == "__main__":
    main()
