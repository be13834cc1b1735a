"""Facade over the PyPI `liburing` binding — the only module that imports it.

The reactor speaks in intents (prep_recv, prep_send, prep_accept, prep_poll_out,
submit, reap) with small-integer tags; liburing's SQE/CQE objects never leave this
module. Facts about the binding (2026.3.30) this relies on, checked by probe() and
tests/unit/test_uring_facade.py:
  - buffers must be bytes/bytearray objects (no memoryview, no offset): recv fills a
    whole bytearray from index 0, send takes a whole bytes/bytearray;
  - the binding holds the GIL inside io_uring_enter, so the reactor never blocks in
    it: it submits without waiting and sleeps in epoll on the ring fd, which becomes
    readable when completions are posted (epoll releases the GIL);
  - a Timespec or buffer handed to a prep call must be kept alive by the caller until
    its completion arrives;
  - reading a CQE's `res` raises OSError for a negative result (-errno); reap() turns
    that back into the negative number, so the reactor sees the kernel's value.
"""

import select
import socket

import liburing as L

# enum io_uring_op (include/uapi/linux/io_uring.h); the binding does not export them
OP_POLL_ADD, OP_ACCEPT, OP_SEND, OP_RECV = 6, 13, 26, 27
OPS_USED = {"POLL_ADD": OP_POLL_ADD, "ACCEPT": OP_ACCEPT, "SEND": OP_SEND, "RECV": OP_RECV}
CQE_F_MORE = L.IORING_CQE_F_MORE
# a send linked to the recv that follows it, posting a completion only if it fails:
# the recv's completion then proves the send finished (io_uring_enter(2), IOSQE_*)
LINK_QUIET = L.IOSQE_IO_LINK | L.IOSQE_CQE_SKIP_SUCCESS
MSG_WAITALL = socket.MSG_WAITALL   # io_uring retries short sends instead of returning them
POLLOUT = select.POLLOUT
ECANCELED = 125


class Ring:
    """One io_uring instance owned by one thread."""

    def __init__(self, entries=4096):
        self._ring = L.Ring()
        # Not COOP_TASKRUN or DEFER_TASKRUN: both leave completions as pending task work
        # until this thread enters the kernel, so epoll on the ring fd would not wake
        # for them (measured: iterations stalled for the full poll timeout).
        flags = L.IORING_SETUP_SINGLE_ISSUER
        try:
            L.io_uring_queue_init(entries, self._ring, flags)
        except OSError:
            self._ring = L.Ring()
            L.io_uring_queue_init(entries, self._ring, 0)
        self._cqe = L.Cqe()
        self.fd = self._ring.ring_fd
        self.enters = 0             # io_uring_enter calls made by submit()
        r = self._ring
        get_sqe, set_data = L.io_uring_get_sqe, L.io_uring_sqe_set_data64
        prep_recv, prep_send = L.io_uring_prep_recv, L.io_uring_prep_send
        submit = L.io_uring_submit

        # One SQE costs three binding calls (~0.3 us); these closures add nothing else
        # per SQE. io_uring_submit enters the kernel only when SQEs are waiting (liburing
        # __io_uring_submit: sq_ring_needs_enter is false for 0 submitted, without SQPOLL),
        # so submit() counts an enter exactly when it submitted something.
        def sqe():
            s = get_sqe(r)
            if s is None:              # submission queue full: flush it and retry
                self.submit()
                s = get_sqe(r)
            return s

        def recv(fd, buf, tag):
            s = get_sqe(r) or sqe()
            prep_recv(s, fd, buf, 0)
            set_data(s, tag)

        def send(fd, data, tag, flags=0, sqe_flags=0):
            s = get_sqe(r) or sqe()
            prep_send(s, fd, data, flags)
            set_data(s, tag)
            if sqe_flags:
                s.flags = sqe_flags

        def do_submit():
            n = submit(r)
            if n:
                self.enters += 1
            return n

        self._sqe = sqe
        self.prep_recv = recv
        self.prep_send = send
        self.submit = do_submit

    def prep_accept(self, fd, tag, multishot=True):
        s = self._sqe()
        if multishot:
            L.io_uring_prep_multishot_accept(s, fd)
        else:
            L.io_uring_prep_accept(s, fd)
        L.io_uring_sqe_set_data64(s, tag)

    def prep_poll_out(self, fd, tag):
        s = self._sqe()
        L.io_uring_prep_poll_add(s, fd, POLLOUT)
        L.io_uring_sqe_set_data64(s, tag)

    def reap(self, dispatch, cap=4096):
        """Call dispatch(tag, res, flags) for each completion ready now; -> count.

        Iterates with the binding's CqeIter, which follows the CQ ring's wrap-around;
        indexing `cqe[i]` after one peek does not (it reads past the end of the ring:
        tests/unit/test_uring_facade.py shows the lost completions)."""
        r, cqe = self._ring, self._cqe
        n = 0
        try:
            for _ in L.CqeIter(r, cqe):
                c = cqe[0]
                n += 1
                try:
                    res = c.res
                except OSError as e:   # the binding raises for negative results
                    res = -(e.errno or 1)
                dispatch(c.user_data, res, c.flags)
                if n >= cap:
                    break
        finally:
            if n:
                L.io_uring_cq_advance(r, n)
        return n

    def ready(self):
        return L.io_uring_cq_ready(self._ring)

    def close(self):
        if self._ring is not None:
            L.io_uring_queue_exit(self._ring)
            self._ring = None


def probe():
    """(ok, reason): set up a ring, check the opcodes used, and run one multishot
    accept + recv + send over loopback. Never raises."""
    try:
        ring = Ring(8)
    except Exception as e:  # noqa: BLE001 - any failure means: not usable here
        return False, "io_uring_queue_init failed: %s" % e
    lst = cli = srv = None
    try:
        p = L.io_uring_get_probe_ring(ring._ring)
        if p is None:
            return False, "io_uring_get_probe_ring returned nothing (kernel too old?)"
        missing = [n for n, op in OPS_USED.items() if not L.io_uring_opcode_supported(p, op)]
        L.io_uring_free_probe(p)
        if missing:
            return False, "kernel lacks io_uring ops: %s" % ", ".join(missing)
        lst = socket.socket()
        lst.bind(("127.0.0.1", 0))
        lst.listen(4)
        ring.prep_accept(lst.fileno(), 1)
        ring.submit()
        cli = socket.create_connection(lst.getsockname(), timeout=2)
        got = {}

        def note(tag, res, flags):
            got[tag] = (res, flags)
        ep = select.epoll()
        ep.register(ring.fd, select.EPOLLIN)
        try:
            if not ep.poll(2) or not ring.reap(note) or 1 not in got or got[1][0] < 0:
                return False, "accept through io_uring failed: %r" % (got.get(1),)
            if not got[1][1] & CQE_F_MORE:
                return False, "multishot accept not supported (kernel < 5.19?)"
            srv = socket.socket(fileno=got[1][0])
            buf = bytearray(4)
            ring.prep_recv(srv.fileno(), buf, 2)
            ring.prep_send(srv.fileno(), b"pong", 3)
            ring.submit()
            cli.sendall(b"ping")
            deadline = 0
            while (2 not in got or 3 not in got) and deadline < 20:
                ep.poll(0.1)
                ring.reap(note)
                deadline += 1
            if got.get(2, (0,))[0] != 4 or bytes(buf) != b"ping" or got.get(3, (0,))[0] != 4:
                return False, "recv/send through io_uring failed: %r" % (got,)
            if cli.recv(4) != b"pong":
                return False, "send through io_uring delivered wrong bytes"
        finally:
            ep.close()
        return True, ""
    except Exception as e:  # noqa: BLE001
        return False, "io_uring probe failed: %s: %s" % (type(e).__name__, e)
    finally:
        for s in (cli, srv, lst):
            if s is not None:
                s.close()
        ring.close()
