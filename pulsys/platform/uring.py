"""Facade over the PyPI `liburing` binding — the only module that imports it.

The reactor speaks in intents (prep_recv, prep_send, prep_accept, prep_poll_out,
submit, reap) with small-integer tags; liburing's SQE/CQE objects never leave this
module. Facts about the binding (2026.3.30) this relies on, checked by probe() and
tests/unit/test_uring_facade.py:
  - buffers must be bytes/bytearray objects (no memoryview, no offset): recv fills a
    whole bytearray from index 0, send takes a whole bytes/bytearray;
  - the binding holds the GIL inside io_uring_enter, waits included (its source calls
    no PyEval_SaveThread; tests/unit/test_uring_facade.py measures another thread
    stopped for the whole of a binding wait), so the reactor never waits through it.
    Ring.wait() sleeps in io_uring_enter through ctypes instead, which releases the
    GIL for the call (ctypes docs: functions of a CDLL release it); the epoll mode
    sleeps in epoll on the ring fd;
  - a Timespec or buffer handed to a prep call must be kept alive by the caller until
    its completion arrives;
  - reading a CQE's `res` raises OSError for a negative result (-errno); reap() turns
    that back into the negative number, so the reactor sees the kernel's value.
"""

import ctypes
import errno
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
POLLOUT, POLLIN = select.POLLOUT, select.POLLIN
ECANCELED = 125
# How the thread sleeps until completions come (Ring.wait_mode):
#   "ring"   IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN (kernel >= 6.1; man
#            io_uring_setup: DEFER_TASKRUN requires SINGLE_ISSUER). A completion produced on
#            another CPU (a recv's data arriving) is queued as local task work and run
#            inside this thread's next io_uring_enter(GETEVENTS): nothing interrupts the
#            thread while it runs Python. It sleeps in io_uring_enter itself, min_complete
#            1, through ctypes (the GIL released), and the kernel wakes it when work is
#            queued (io_req_local_work_add). Profiled against the reference server
#            (docs/benchmarks.md, issue 18): 0.03 IPIs per request, against 0.3-0.35 in
#            "epoll" mode.
#   "epoll"  SINGLE_ISSUER only: completions are task work run by interrupting the thread
#            (an IPI when it runs elsewhere), which makes the ring fd readable; the thread
#            sleeps in epoll on it. With DEFER_TASKRUN epoll on the ring fd does not work:
#            seen on 6.18, it reports the fd readable while the completion ring is still
#            empty (the work is queued, not run), so a loop polling it spins; an earlier
#            kernel here stalled for the full poll timeout instead.
# "auto" takes "ring" when the kernel sets such a ring up and a wait on it works, else "epoll".
WAIT_MODES = ("auto", "ring", "epoll")
_SETUP_RING = L.IORING_SETUP_SINGLE_ISSUER | L.IORING_SETUP_DEFER_TASKRUN
_ENTER_WAIT = L.IORING_ENTER_GETEVENTS | L.IORING_ENTER_EXT_ARG
# io_uring_enter's number in the generic syscall table, which every Linux architecture
# but alpha uses for the io_uring calls (425-427 since 5.1; arch/*/syscall*.tbl)
NR_IO_URING_ENTER = 426


class _KernelTimespec(ctypes.Structure):      # struct __kernel_timespec
    _fields_ = [("tv_sec", ctypes.c_int64), ("tv_nsec", ctypes.c_int64)]


class _GetEventsArg(ctypes.Structure):        # struct io_uring_getevents_arg (5.11+)
    _fields_ = [("sigmask", ctypes.c_uint64), ("sigmask_sz", ctypes.c_uint32),
                ("min_wait_usec", ctypes.c_uint32), ("ts", ctypes.c_uint64)]


_syscall = None


def _raw_enter():
    """libc's syscall(2) as a ctypes function: a CDLL call releases the GIL."""
    global _syscall
    if _syscall is None:
        f = ctypes.CDLL(None, use_errno=True).syscall
        f.restype = ctypes.c_long
        f.argtypes = [ctypes.c_long, ctypes.c_long, ctypes.c_long, ctypes.c_long, ctypes.c_long,
                      ctypes.c_void_p, ctypes.c_long]
        _syscall = f
    return _syscall


class Ring:
    """One io_uring instance owned by one thread."""

    def __init__(self, entries=4096, wait="auto"):
        """wait: "auto", "ring" (OSError where it cannot be had) or "epoll" (WAIT_MODES).
        With "ring" (DEFER_TASKRUN), only the thread that made the ring may run its
        completions: make it on the thread that uses it."""
        if wait not in WAIT_MODES:
            raise ValueError("wait must be one of %s" % (WAIT_MODES,))
        self._ring = self._epoll = None
        self.wait_mode = None
        if wait != "epoll":
            try:
                self._setup(entries, _SETUP_RING)
                self._wait_args()
                if self._enter(0, 0.0) != 0:      # GETEVENTS, nothing to wait for: 0 at once
                    raise OSError(errno.ENOSYS, "io_uring_enter through ctypes failed")
                self.wait_mode = "ring"
            except (OSError, AttributeError, TypeError):
                self.close()
                if wait == "ring":
                    raise
        if self.wait_mode is None:
            try:
                self._setup(entries, L.IORING_SETUP_SINGLE_ISSUER)   # 6.0+
            except OSError:
                self._setup(entries, 0)
            self.wait_mode = "epoll"
        self._cqe = L.Cqe()
        self.enters = 0             # io_uring_enter calls made by submit(), get_events(), wait()
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

        def send_recv(fd, data, send_tag, buf, recv_tag):
            # the fused hit's pair: send `data` (MSG_WAITALL, linked, no completion on
            # success), then recv into `buf`; one call where send + recv are two
            s = get_sqe(r) or sqe()
            prep_send(s, fd, data, MSG_WAITALL)
            set_data(s, send_tag)
            s.flags = LINK_QUIET
            s = get_sqe(r) or sqe()
            prep_recv(s, fd, buf, 0)
            set_data(s, recv_tag)

        def do_submit():
            n = submit(r)
            if n:
                self.enters += 1
            return n

        submit_and_get_events, sq_ready = L.io_uring_submit_and_get_events, L.io_uring_sq_ready

        def get_events():
            # "ring" mode: one enter submits what is prepared and runs the completions
            # queued as local task work (IORING_ENTER_GETEVENTS, wait_nr 0: it does not
            # block, so holding the GIL in it costs nothing). The kernel runs a bounded
            # batch per enter (io_run_local_work: IO_LOCAL_TW_DEFAULT_MAX, 20 in 6.x) and
            # keeps the rest queued; wait() runs that rest before it would sleep.
            if sq_ready(r):
                submit_and_get_events(r)
                self.enters += 1

        self._sqe = sqe
        self.prep_recv = recv
        self.prep_send = send
        self.prep_send_recv = send_recv
        self.submit = do_submit
        self.get_events = get_events

    def _setup(self, entries, flags):
        ring = L.Ring()
        L.io_uring_queue_init(entries, ring, flags)
        self._ring = ring       # only a ring that was set up is ever torn down
        self.fd = ring.ring_fd

    def _wait_args(self):
        self._ts = _KernelTimespec(0, 0)
        self._arg = _GetEventsArg(0, 0, 0, ctypes.addressof(self._ts))
        self._argp = ctypes.addressof(self._arg)
        self._argsz = ctypes.sizeof(self._arg)
        self._sys = _raw_enter()

    def _enter(self, min_complete, timeout):
        ts = self._ts
        ts.tv_sec = sec = int(timeout)
        ts.tv_nsec = int((timeout - sec) * 1e9)
        n = self._sys(NR_IO_URING_ENTER, self.fd, 0, min_complete, _ENTER_WAIT, self._argp, self._argsz)
        return n if n >= 0 else -ctypes.get_errno()

    def wait(self, timeout):
        """Sleep until at least one completion is ready or `timeout` seconds pass, without
        holding the GIL. Submits nothing: submit (or get_events) first. In "ring" mode the
        kernel first runs the completions queued for this thread and sleeps only when
        none of them posted a CQE (io_cqring_wait); -> True unless the timeout passed."""
        if self.wait_mode == "ring":
            self.enters += 1
            n = self._enter(1, timeout)
            if n >= 0 or n == -errno.EINTR:
                return True
            if n == -errno.ETIME:
                return False
            raise OSError(-n, "io_uring_enter: %s" % errno.errorcode.get(-n, -n))
        ep = self._epoll
        if ep is None:
            ep = self._epoll = select.epoll()
            ep.register(self.fd, select.EPOLLIN)
        return bool(ep.poll(timeout)) or self.ready() > 0

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

    def prep_poll_in_multishot(self, fd, tag):
        """A completion (flag CQE_F_MORE) each time fd is woken and readable, until one
        comes without CQE_F_MORE: then it has ended and must be prepared again."""
        s = self._sqe()
        L.io_uring_prep_poll_multishot(s, fd, POLLIN)
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
        if self._epoll is not None:
            self._epoll.close()
            self._epoll = None
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
        if not ring.wait(2) or not ring.reap(note) or 1 not in got or got[1][0] < 0:
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
            ring.wait(0.1)
            ring.reap(note)
            deadline += 1
        if got.get(2, (0,))[0] != 4 or bytes(buf) != b"ping" or got.get(3, (0,))[0] != 4:
            return False, "recv/send through io_uring failed: %r" % (got,)
        if cli.recv(4) != b"pong":
            return False, "send through io_uring delivered wrong bytes"
        return True, ""
    except Exception as e:  # noqa: BLE001
        return False, "io_uring probe failed: %s: %s" % (type(e).__name__, e)
    finally:
        for s in (cli, srv, lst):
            if s is not None:
                s.close()
        ring.close()
