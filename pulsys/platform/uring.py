"""Facade over the PyPI `liburing` binding — the only module that imports it.

The reactor speaks in intents (prep_recv, prep_send, prep_fused, prep_accept,
prep_poll_out, submit, reap) with small-integer tags; liburing's SQE/CQE objects never
leave this module. On x86-64 the binding only sets the ring up and tears it down:
RingMemory checks where liburing keeps the queues and Ring then writes SQEs and reads
CQEs there with struct, as liburing's own inline functions do in C, at a fraction of
the binding's per-call cost (docs/decisions/0021-ring-memory.md has the counts).
Elsewhere, or where that check fails, every call goes through the binding. Facts about
the binding (2026.3.30) this relies on, checked by probe() and
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
import platform
import select
import socket
import struct
import sys

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

# Where liburing keeps a ring (struct io_uring, src/include/liburing.h, 2.x, 64-bit):
# io_uring_sq at 0 and io_uring_cq at 104, then flags and ring_fd. The binding wraps a
# pointer to that struct as the first field after the PyObject header (PyOZ's PyWrapper:
# ob_base, then the Zig struct Ring { _io_uring: *c.io_uring }). RingMemory checks all of
# it against what the binding reports before anything is read or written through it.
_SQ_KHEAD, _SQ_KTAIL, _SQ_SQES, _SQ_SQE_HEAD, _SQ_SQE_TAIL, _SQ_MASK, _SQ_ENTRIES = 0, 8, 56, 64, 68, 88, 92
_CQ = 104
_CQ_KHEAD, _CQ_KTAIL, _CQ_CQES, _CQ_MASK, _CQ_ENTRIES = _CQ + 0, _CQ + 8, _CQ + 48, _CQ + 72, _CQ + 76
_OFF_FLAGS, _OFF_RING_FD = 192, 196
_PYOBJECT_HEAD = ctypes.sizeof(ctypes.c_ssize_t) + ctypes.sizeof(ctypes.c_void_p)
# struct io_uring_sqe (64 bytes) and io_uring_cqe (16) in include/uapi/linux/io_uring.h.
# The fused hit's pair: a SEND whose first 8 bytes (opcode, flags, ioprio, fd) and len |
# msg_flags << 32 come packed, then the connection's RECV, already made (fused_conn).
# Native byte order and alignment ("@", x86-64 only, as RingMemory is): the fields fall
# where the kernel's structs have them, and struct converts with the C-typed fast
# functions (the "<" variants go through _PyLong_AsByteArray: 330 instructions more).
_SQE = struct.Struct("@BBHiQQIIQHHiQQ")
_SEND_RECV = struct.Struct("@Q8xQQQ24x64s")
_CQE = struct.Struct("@QiI")
assert _SQE.size == 64 and _SEND_RECV.size == 128 and _CQE.size == 16
# where a bytes object's data starts (CPython's PyBytesObject: ob_sval after the header)
_BYTES_DATA = bytes.__basicsize__ - 1
_RING_MEMORY = platform.machine() in ("x86_64", "AMD64") and sys.byteorder == "little"


OP_NOP = 0
_ACCEPT_MULTISHOT = 1 << 0        # IORING_ACCEPT_MULTISHOT, in the SQE's ioprio
_POLL_ADD_MULTI = 1 << 0          # IORING_POLL_ADD_MULTI, in the SQE's len


def _address(buf):
    """Where the bytes of a bytes or bytearray object are (a bytearray's stay there until
    it is resized, which a live memoryview of it forbids)."""
    if type(buf) is bytes:
        return id(buf) + _BYTES_DATA
    return ctypes.addressof(ctypes.c_char.from_buffer(buf)) if len(buf) else 0


class RingMemory:
    """The submission and completion queues of a set-up ring as Python sees memory:
    c_uint32 views of the indexes and memoryviews of the SQE and CQE arrays, for reading
    completions with one struct call per batch and writing the fused hit's two SQEs with
    one (a binding call costs 900-1,300 instructions here, its CQE objects more:
    docs/decisions/0021-ring-memory.md). liburing does the same in C: its get_sqe, flush,
    peek and advance are inline functions over these fields. Only on x86-64, whose
    stores are not reordered with earlier loads or stores (Intel SDM vol. 3, 8.2.2), so
    plain stores are the release stores liburing uses; elsewhere, or where the layout
    does not check out, RingMemory.of() returns None and the binding does it all."""

    @classmethod
    def of(cls, ring, entries):
        if not _RING_MEMORY or ctypes.sizeof(ctypes.c_void_p) != 8 or type(ring) is not L.Ring:
            return None
        try:
            return cls(ring, entries)
        except (ValueError, AttributeError, TypeError, OverflowError):
            return None

    def __init__(self, ring, entries):
        base = ctypes.c_void_p.from_address(id(ring) + _PYOBJECT_HEAD).value
        if not base:
            raise ValueError("no ring")
        u32, ptr = ctypes.c_uint32.from_address, lambda off: ctypes.c_void_p.from_address(base + off).value
        n = 1 << (entries - 1).bit_length()
        if (ctypes.c_int.from_address(base + _OFF_RING_FD).value != ring.ring_fd
                or u32(base + _OFF_FLAGS).value != ring.flags
                or u32(base + _SQ_ENTRIES).value != n or u32(base + _SQ_MASK).value != n - 1
                or ring.flags & (L.IORING_SETUP_SQPOLL | L.IORING_SETUP_SQE128 | L.IORING_SETUP_CQE32
                                 | getattr(L, "IORING_SETUP_SQ_REWIND", 0))):
            raise ValueError("not the layout checked")
        self.sq_entries, self.sq_mask = n, n - 1
        self.cq_entries, self.cq_mask = u32(base + _CQ_ENTRIES).value, u32(base + _CQ_MASK).value
        if self.cq_entries < n or self.cq_mask != self.cq_entries - 1:
            raise ValueError("not the layout checked")
        if not all(ptr(o) for o in (_SQ_KHEAD, _SQ_KTAIL, _SQ_SQES, _CQ_KHEAD, _CQ_KTAIL, _CQ_CQES)):
            raise ValueError("no ring")
        self.sqe_head, self.sqe_tail = u32(base + _SQ_SQE_HEAD), u32(base + _SQ_SQE_TAIL)
        self.sq_khead, self.sq_ktail = u32(ptr(_SQ_KHEAD)), u32(ptr(_SQ_KTAIL))
        self.cq_khead, self.cq_ktail = u32(ptr(_CQ_KHEAD)), u32(ptr(_CQ_KTAIL))
        self.sqes = memoryview((ctypes.c_char * (64 * n)).from_address(ptr(_SQ_SQES))).cast("B")
        self.cqes = memoryview((ctypes.c_char * (16 * self.cq_entries)).from_address(ptr(_CQ_CQES))).cast("B")
        # nothing prepared yet: liburing's indexes and the kernel's agree
        if not (self.sqe_head.value == self.sqe_tail.value == self.sq_ktail.value == self.sq_khead.value
                and L.io_uring_sq_ready(ring) == 0 and self.cq_khead.value == self.cq_ktail.value):
            raise ValueError("indexes disagree")


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

    def __init__(self, entries=4096, wait="auto", memory=True, counter=None):
        """wait: "auto", "ring" (OSError where it cannot be had) or "epoll" (WAIT_MODES).
        With "ring" (DEFER_TASKRUN), only the thread that made the ring may run its
        completions: make it on the thread that uses it. memory: reach the queues
        through RingMemory where it checks out (False: the binding for everything).
        counter: (list, index) where io_uring_enter calls are counted, e.g. a reactor's
        counters (metrics.URING_ENTER), so no loop pass copies the count over."""
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
        # io_uring_enter calls made by submit(), get_events(), cycle(), submit_and_wait(),
        # wait(): Ring.enters
        count, ci = self._count, self._ci = counter if counter is not None else ([0], 0)
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
            # -> the object whose bytes the kernel reads: keep it alive until the send ends
            s = get_sqe(r) or sqe()
            prep_send(s, fd, data, flags)
            set_data(s, tag)
            if sqe_flags:
                s.flags = sqe_flags
            return data

        # The fused hit's pair: send an answer (MSG_WAITALL, linked, no completion on
        # success), then recv the connection's next request; one call where send + recv
        # are two. What stays the same is made once: fused_conn per connection (its fd,
        # read buffer and tags), fused_data per answer (bytes, kept alive by the caller
        # until the recv completes).
        def fused_conn(fd, buf, send_tag, recv_tag):
            return fd, buf, send_tag, recv_tag

        def fused_data(data):
            return data

        def recv_fused(conn):
            # the recv of fused_conn alone (after an answer that did not go as a pair)
            recv(conn[0], conn[1], conn[3])

        def send_recv(data, conn):
            fd, buf, send_tag, recv_tag = conn
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
                count[ci] += 1
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
                count[ci] += 1

        def submit_and_wait(timeout):
            get_events()
            return True if self.ready() else self.wait(timeout)

        enter_once = get_events if self.wait_mode == "ring" else do_submit

        def cycle(dispatch):
            # the loop's pass under load (the memory version's comment has it)
            enter_once()
            return self.reap(dispatch) if self.ready() else 0

        self._sqe = sqe
        self.prep_recv = recv
        self.prep_send = send
        self.fused_conn, self.fused_data, self.prep_fused = fused_conn, fused_data, send_recv
        self.prep_fused_recv = recv_fused
        self.submit = do_submit
        self.get_events = get_events
        self.submit_and_wait = submit_and_wait
        self.cycle = cycle
        if self.wait_mode == "ring":
            self.wait = self._ring_wait()
        self.mem = RingMemory.of(r, entries) if memory else None
        self.one_enter = self.mem is not None and self.wait_mode == "ring"
        if self.mem is not None:
            self._use_memory(self.mem)

    def _use_memory(self, m):
        """Run the queues through RingMemory: every prep, submit, reap and wait below
        replaces the binding's. The SQ tail lives in a Python int here and reaches the
        kernel's ring at each enter, as liburing's private sqe_tail does at its submit
        (__io_uring_flush_sq); the binding is left to set the ring up and tear it down."""
        sqes, sq_khead, sq_ktail, entries = m.sqes, m.sq_khead, m.sq_ktail, m.sq_entries
        cqes, cq_khead, cq_ktail, cq_mask, cq_entries = m.cqes, m.cq_khead, m.cq_ktail, m.cq_mask, m.cq_entries
        end, last = entries << 6, (entries - 1) << 6
        # The next SQE goes at byte `off` of the queue; `pend` SQEs were written since the
        # kernel last saw the tail, `ktail` (a u32, as the kernel counts); at most `limit`
        # may be pending before the queue is full: kept as small Python ints so that a
        # hit's bookkeeping allocates nothing (CPython caches ints below 257).
        ktail = sq_ktail.value
        off, pend, limit = (ktail & (entries - 1)) << 6, 0, entries
        pack_sqe, pack_pair, sqe_bytes = _SQE.pack_into, _SEND_RECV.pack_into, _SQE.pack
        send_head, waitall, u32 = OP_SEND | LINK_QUIET << 8, MSG_WAITALL << 32, 0xFFFFFFFF
        enter, wait_result = self._enter, self._wait_result
        count, ci = self._count, self._ci

        def free(k):
            # room for k more SQEs, submitting what is written if the queue is full
            nonlocal limit
            limit = entries - ((ktail - sq_khead.value) & u32)
            if pend > limit - k:
                submit()
                limit = entries - ((ktail - sq_khead.value) & u32)
                if pend > limit - k:
                    raise OSError(errno.EBUSY, "io_uring submission queue full")

        def put(op, flags, ioprio, fd, addr_off, addr, length, op_flags, tag):
            nonlocal off, pend
            if pend >= limit:
                free(1)
            pack_sqe(sqes, off, op, flags, ioprio, fd, addr_off, addr, length, op_flags, tag, 0, 0, 0, 0, 0)
            off = off + 64 if off != last else 0
            pend += 1

        def flush():
            # -> how many SQEs the next enter submits; the kernel reads the tail there
            nonlocal ktail, pend, limit
            n = pend
            if n:
                ktail = sq_ktail.value = (ktail + n) & u32
                pend = 0
                limit -= n     # taken until free() reads how far the kernel has consumed
            return n

        def fused_conn(fd, buf, send_tag, recv_tag):
            # the first 8 bytes of the SEND (opcode, flags, ioprio, fd), its tag, and the
            # RECV into the whole of `buf` (a bytearray that is not resized while this is
            # used: the reactor keeps a memoryview of it, which forbids that)
            return (send_head | fd << 32, send_tag,
                    sqe_bytes(OP_RECV, 0, 0, fd, 0, _address(buf), len(buf), 0, recv_tag, 0, 0, 0, 0, 0))

        def fused_data(data):
            return id(data) + _BYTES_DATA, len(data) | waitall      # data: bytes

        def recv_fused(conn):
            nonlocal off, pend
            if pend >= limit:
                free(1)
            sqes[off:off + 64] = conn[2]
            off = off + 64 if off != last else 0
            pend += 1

        def send_recv(data, conn):
            nonlocal off, pend
            if pend > limit - 2:
                free(2)
            addr, len_flags = data
            head, send_tag, recv = conn
            if off != last:
                pack_pair(sqes, off, head, addr, len_flags, send_tag, recv)
                off += 128
                if off == end:
                    off = 0
            else:        # the pair wraps around the end of the queue
                pack_sqe(sqes, off, OP_SEND, LINK_QUIET, 0, head >> 32, 0, addr, len_flags & u32,
                         MSG_WAITALL, send_tag, 0, 0, 0, 0, 0)
                sqes[0:64] = recv
                off = 64
            pend += 2

        def recv(fd, buf, tag):
            put(OP_RECV, 0, 0, fd, 0, _address(buf), len(buf), 0, tag)

        def send(fd, data, tag, flags=0, sqe_flags=0):
            if type(data) is not bytes and type(data) is not bytearray:
                data = bytes(data)           # (a read-only view has no address to give)
            put(OP_SEND, sqe_flags, 0, fd, 0, _address(data), len(data), flags, tag)
            return data

        def accept(fd, tag, multishot=True):
            put(OP_ACCEPT, 0, _ACCEPT_MULTISHOT if multishot else 0, fd, 0, 0, 0, 0, tag)

        def poll_out(fd, tag):
            put(OP_POLL_ADD, 0, 0, fd, 0, 0, 0, POLLOUT, tag)

        def poll_in_multishot(fd, tag):
            put(OP_POLL_ADD, 0, 0, fd, 0, 0, _POLL_ADD_MULTI, POLLIN, tag)

        def nop(tag):
            put(OP_NOP, 0, 0, -1, 0, 0, 0, 0, tag)

        # Enters that do not wait go through the binding's io_uring_enter2: it holds the
        # GIL, which costs nothing when the call does not block, and it is a third of a
        # ctypes call's cost, whose GIL release and reacquire also let the process's other
        # threads in on every turn (measured: bench_warm, docs/decisions/0021). to_submit
        # is exactly what the kernel has not consumed: given more, io_uring_enter returns
        # before it runs the completions queued for this thread.
        ring_fd, enter2, getevents = self.fd, L.io_uring_enter2, L.IORING_ENTER_GETEVENTS

        def unconsumed():
            flush()
            return (ktail - sq_khead.value) & u32

        def submit():
            n = unconsumed()
            if not n:
                return 0
            count[ci] += 1
            try:
                return enter2(ring_fd, n, 0, 0, None, 0)
            except OSError as e:     # (EAGAIN, EBUSY: they stay queued for the next enter)
                return -(e.errno or 1)

        def submit_and_wait(timeout):
            # one enter that submits exactly the flushed SQEs (the kernel skips the wait
            # if it submits fewer: io_uring_enter returns at once when io_submit_sqes !=
            # to_submit), runs the completions queued for this thread and sleeps only if
            # none of them posted a CQE
            n = unconsumed()
            count[ci] += 1
            return wait_result(enter(1, timeout, n))

        unpack = _CQE.iter_unpack

        def reap(dispatch):
            chead = cq_khead.value
            n = (cq_ktail.value - chead) & u32
            if n:
                reap_from(dispatch, chead, n)
            return n

        def reap_from(dispatch, chead, n):
            # the n completions from chead; the common case, no wrap-around, one slice
            i = chead & cq_mask
            j = i + n
            if j > cq_entries:
                return reap_wrapped(dispatch, chead, n, cq_entries - i)
            it = unpack(cqes[i << 4:j << 4])
            try:
                for tag, res, flags in it:
                    dispatch(tag, res, flags)
            except BaseException:      # the completions dispatch saw are consumed
                cq_khead.value = (chead + n - it.__length_hint__()) & u32
                raise
            cq_khead.value = (chead + n) & u32

        def reap_wrapped(dispatch, chead, n, first):
            # `first` completions up to the queue's end, then the rest from its start
            done = 0
            it = unpack(cqes[(chead & cq_mask) << 4:])
            try:
                for tag, res, flags in it:
                    dispatch(tag, res, flags)
                done = first
                it = unpack(cqes[:(n - first) << 4])
                for tag, res, flags in it:
                    dispatch(tag, res, flags)
                done = n
            finally:
                if done != n:      # dispatch raised: the completions it saw are consumed
                    done += (first if done == 0 else n - first) - it.__length_hint__()
                cq_khead.value = (chead + done) & u32

        # The loop's pass under load is one cycle(): flush written out in it, the enter,
        # the reap (each Python call costs ~10 bytecodes and a frame; a pass of the loop
        # ran ~490 bytecodes with a call each for these: scripts/ops_per_request.py,
        # docs/benchmarks.md, issue 18).
        enter_flags = getevents if self.wait_mode == "ring" else 0

        def cycle(dispatch):
            # submit what is prepared ("ring" mode: and run the completions queued as
            # task work), then reap what is ready -> completions reaped (0: none was
            # ready; the caller may sleep, then reap())
            nonlocal ktail, pend, limit
            if pend:
                ktail = sq_ktail.value = (ktail + pend) & u32
                limit -= pend
                pend = 0
            n = (ktail - sq_khead.value) & u32
            if n:
                count[ci] += 1
                try:
                    enter2(ring_fd, n, 0, enter_flags, None, 0)
                except OSError:     # (EAGAIN, EBUSY: they stay queued for the next enter)
                    pass
            chead = cq_khead.value
            n = (cq_ktail.value - chead) & u32
            if n:
                reap_from(dispatch, chead, n)
            return n

        def ready():
            return (cq_ktail.value - cq_khead.value) & u32

        self._sqe = None
        self.fused_conn, self.fused_data, self.prep_fused = fused_conn, fused_data, send_recv
        self.prep_fused_recv = recv_fused
        self.prep_recv, self.prep_send = recv, send
        self.prep_accept, self.prep_poll_out, self.prep_poll_in_multishot, self.prep_nop = (
            accept, poll_out, poll_in_multishot, nop)
        self.submit, self.reap, self.ready, self.cycle = submit, reap, ready, cycle
        self.get_events = None   # the binding's would not see the SQEs written here: cycle() enters
        if self.wait_mode == "ring":
            self.submit_and_wait = submit_and_wait
        else:
            def submit_then_wait(timeout):
                submit()
                return True if ready() else self.wait(timeout)
            self.submit_and_wait = submit_then_wait

    def _setup(self, entries, flags):
        ring = L.Ring()
        L.io_uring_queue_init(entries, ring, flags)
        self._ring = ring       # only a ring that was set up is ever torn down
        self.fd = ring.ring_fd

    def _wait_args(self):
        self._args = {}     # timeout -> (address of its getevents arg, the ctypes objects holding it)
        self._argsz = ctypes.sizeof(_GetEventsArg)
        self._sys = _raw_enter()

    def _wait_arg(self, timeout):
        """-> the address of a struct io_uring_getevents_arg whose timespec is `timeout`,
        made once per value (the loop uses two) rather than rewritten when it changes."""
        args = self._args
        got = args.get(timeout)
        if got is None:
            if len(args) >= 16:       # (callers with many values: only the reactor's two stay)
                args.clear()
            sec = int(timeout)
            ts = _KernelTimespec(sec, int((timeout - sec) * 1e9))
            arg = _GetEventsArg(0, 0, 0, ctypes.addressof(ts))
            got = args[timeout] = (ctypes.addressof(arg), ts, arg)
        return got[0]

    def _enter(self, min_complete, timeout, to_submit=0):
        n = self._sys(NR_IO_URING_ENTER, self.fd, to_submit, min_complete, _ENTER_WAIT,
                      self._wait_arg(timeout), self._argsz)
        return n if n >= 0 else -ctypes.get_errno()

    @staticmethod
    def _wait_result(n):
        if n >= 0 or n == -errno.EINTR:
            return True
        if n == -errno.ETIME:
            return False
        raise OSError(-n, "io_uring_enter: %s" % errno.errorcode.get(-n, -n))

    @property
    def enters(self):
        """io_uring_enter calls made so far (counted where the constructor's counter says)."""
        return self._count[self._ci]

    def _ring_wait(self):
        """Ring.wait in the "ring" mode, as one closure (the constructor sets it on the
        instance; the method below is the "epoll" mode's): one io_uring_enter through
        ctypes, the GIL released, min_complete 1. The kernel first runs the completions
        queued for this thread and sleeps only when none of them posted a CQE
        (io_cqring_wait)."""
        sysc, fd, size, count, ci = self._sys, self.fd, self._argsz, self._count, self._ci
        args, arg_for, wait_result, get_errno = self._args, self._wait_arg, self._wait_result, ctypes.get_errno

        def wait(timeout):
            got = args.get(timeout)
            count[ci] += 1
            if sysc(NR_IO_URING_ENTER, fd, 0, 1, _ENTER_WAIT, got[0] if got is not None else arg_for(timeout),
                    size) >= 0:
                return True
            return wait_result(-get_errno())
        return wait

    def wait(self, timeout):
        """Sleep until at least one completion is ready or `timeout` seconds pass, without
        holding the GIL. Submits nothing: submit (or cycle) first. -> True unless the
        timeout passed. This is the "epoll" mode's, in epoll on the ring fd; a "ring"
        mode Ring has _ring_wait's in its place."""
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

    def prep_nop(self, tag):
        s = self._sqe()
        L.io_uring_prep_nop(s)
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

    def reap(self, dispatch):
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
