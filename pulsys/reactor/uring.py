"""Linux io_uring reactor backend: one ring per listener, same request step as every
backend (the loop itself is ReactorBase.run).

One I/O turn, where the kernel has IORING_SETUP_DEFER_TASKRUN (6.1+; Ring.wait_mode
"ring", platform/uring.py): one io_uring_enter submits every SQE prepared since the last
turn and runs the completions queued for this thread; only when no completion is ready
and no post waits in the mailbox does the thread sleep, in io_uring_enter itself, without
the GIL; then reap. The mailbox wakes that sleep through a multishot POLL_ADD on its
wake-up socket, on the ring. Elsewhere ("epoll"): submit, sleep in epoll on the ring fd
and the mailbox when nothing is ready, reap. The liburing binding holds the GIL inside
io_uring_enter, so neither sleeps through it (other threads, the fill pool and the
access-log writer among them, run meanwhile).

user_data = (fd << 3) | op. A connection's socket is not closed while any of its
operations is in flight, so an fd number is never reused under a pending completion,
and the buffers the kernel writes into stay alive.

What goes through the ring: multishot accept, recv (into the connection's buffer),
and send of every response whose body is in memory (heads, canned answers, and small
files whose bytes the Entry carries). Bodies from files go out with sendfile(2) on the
socket as in the portable backend, with a POLL_ADD on the ring when the socket is full
(docs/internals.md has the reasoning and measurements).
"""

import errno
import select
import socket
from collections import _count_elements   # C: mapping[x] = mapping.get(x, 0) + 1 per item
from time import monotonic

from pulsys import metrics as M
from pulsys.metrics import H_WARM
from pulsys.platform.uring import CQE_F_MORE, LINK_QUIET, MSG_WAITALL, Ring
from pulsys.reactor.base import _PEER_GONE, DONE_SEND, SEND_TURN, WAITING, ReactorBase
from pulsys.reactor.conn import CLOSED, READ, RBUF_SIZE, SEND, Conn, close_socket
from pulsys.reactor.step import grow

OP_ACCEPT, OP_RECV, OP_SEND, OP_POLL, OP_WAKE = 1, 2, 3, 4, 5
_SEND_FROM_RECV = OP_SEND - OP_RECV     # a connection's send tag from its recv tag
FOLD_AT = 128       # fused hits kept unfolded at most (fold_hits)
FOLD_IDLE = 0.001   # a pause in the load this long folds them (the counters lag by it at most)
FOLD_AGE = 0.01     # and so does the first of them being this old when the loop would sleep
FOLDS_HELD = 256    # folds whose per-turn work waits for the tick at most (turn_work)
MARK_SPAN = 0.001   # turns that begin within this of a mark's turn share that mark (mark_turn)
IBUF_SIZE = 16 * 1024
_REQUESTS, _SQES, _BYTES, _FUSED, _ENTER, _HITS = (M.REQUESTS, M.URING_SQES, M.BYTES_SERVED,
                                                  M.FUSED_HEAD_BODY, M.URING_ENTER, M.CACHE_HITS)


def mark_turn(marks, now, took, n):
    """Mark the end of a loop turn's fused hits: the hits up to index n were answered by a
    turn that began at `now` and took `took` seconds, the time the histogram and the
    access log give each of them (fold_hits). A turn that begins within MARK_SPAN of the
    last mark's turn extends that mark: its hits take the mark's start as their time and
    the longest of the turns' durations as theirs. A mark's cost is paid at the tick,
    turn_work's histogram and log text, ~1.7 us each; at a few hits a turn (16
    connections over two reactors: ~5) that was 5% of the server's CPU a request, which
    one mark a fold saved (nomark_c16.json; docs/benchmarks.md, issue 18, twentieth
    day). So a hit's logged time is its turn's start to within MARK_SPAN, and its
    duration at least its own turn's, as nginx's timer_resolution directive trades
    precision of $msec for gettimeofday() calls."""
    if marks:
        t0, t, _ = marks[-1]
        if now - t0 < MARK_SPAN:
            marks[-1] = (t0, took if took > t else t, n)
            return
    marks.append((now, took, n))


class UringConn(Conn):
    """A connection of the io_uring reactor: the operations it has in flight and the
    buffers they own (a buffer must outlive the operation that reads or writes it)."""
    __slots__ = ("inflight", "recv_pending", "recv_ibuf", "ibuf", "sending", "send_buf", "poll_pending")

    def __init__(self, sock, now):
        super().__init__(sock, now)
        self.inflight = 0
        self.recv_pending = False
        self.recv_ibuf = False
        self.ibuf = None
        self.sending = False
        self.send_buf = None
        self.poll_pending = False


class UringReactor(ReactorBase):
    name = "uring"

    def __init__(self, *args, wait="auto", **kw):
        """wait: how the ring is set up and the loop sleeps (platform.uring.WAIT_MODES)."""
        super().__init__(*args, **kw)
        self.wait = wait
        self.ring = self.epoll = None
        self.wake_fd = self.mailbox.rsock.fileno()
        self.zombies = {}
        self.family = self.listener.family
        self.answers = self.step.answers     # read per fused hit (one attribute, not two)
        self._turn_hits = []                 # fused hits not yet folded, in order (fold_hits)
        self._turn_hit = self._turn_hits.append
        self._turn_marks = []                # per turn among them: (t0, seconds, end index)
        self._turn_counts = {}               # fold_hits: Answer -> its hits in the fold
        self._held = []                      # folds whose per-turn work waits (turn_work)
        self.tick_hooks.append(self._turn_work_hook)
        if self.access is not None:
            self.access = self._after_fold(self.access, self.log_formatter())
        self.submit = self._after_fold(self.submit)

    # -- the I/O turn ------------------------------------------------------------------

    def io_open(self):
        # on the loop's thread: DEFER_TASKRUN wants it; io_uring_enter calls are counted
        # straight into this reactor's counters
        ring = self.ring = Ring(wait=self.wait, counter=(self.counters, _ENTER))
        self.dispatch = self.make_dispatch()
        self.accept_on()
        if ring.wait_mode == "ring":
            ring.prep_poll_in_multishot(self.wake_fd, OP_WAKE)
            # (One enter that submits and sleeps, Ring.submit_and_wait, measured worse under
            # load: it is a ctypes call on every turn, where cycle() enters through the
            # binding, a cheap call holding the GIL.)
            self.io_turn = self._turn(ring.wait)
        else:
            self.io_turn = self._turn(self._epoll_sleep())

    def _epoll_sleep(self):
        """The sleep of the "epoll" mode: in epoll on the ring fd and the mailbox's wake-up
        socket. -> sleep(timeout), True unless the timeout passed."""
        ep = self.epoll = select.epoll()
        wake, poll, drain = self.wake_fd, ep.poll, self.mailbox.drain
        ep.register(self.ring.fd, select.EPOLLIN)
        ep.register(wake, select.EPOLLIN)

        def sleep(timeout):
            ev = poll(timeout)
            if ev and (len(ev) > 1 or ev[0][0] == wake):
                # the wake-up socket can be readable with nothing queued: a post made
                # while the mailbox drained wrote a byte for a call that drain then
                # ran. Read it now, or epoll reports it on every turn and the loop
                # spins until the next post (tests/unit/test_reactor_loop.py).
                drain()
            return bool(ev)
        return sleep

    def _turn(self, sleep):
        """The loop's I/O turn: ring.cycle() submits what is prepared ("ring" mode: and
        runs the completions queued as task work) and reaps what is ready; when nothing
        was and no post waits, `sleep(timeout)` waits for a completion or a post without
        the GIL (-> True unless the timeout passed), then reap. Then mark this turn's
        fused hits and run the posts. Under load the turn is the loop's whole pass, paid
        once per batch of completions: one Python call to the ring, none for the mailbox
        or the access log (turn_work makes its text at the tick), the enters counted by
        the ring (scripts/ops_per_request.py counts a pass's bytecodes)."""
        # the turn runs once per loop pass: what it uses is bound here, once
        cycle, reap, dispatch = self.ring.cycle, self.ring.reap, self.dispatch
        posts, drain, me = self.mailbox.queue, self.mailbox.drain, self
        hits, fold, marks = self._turn_hits, self.fold_hits, self._turn_marks

        def turn():
            # The pass's time is taken before its enter (which does not block): what
            # dispatch reads as now, and where this turn's hits begin.
            now = me.now = monotonic()
            # Never sleep with a completion ready or a post queued. Completions still
            # queued as task work need no check here: the "ring" wait runs them first and
            # sleeps only if none of them posted a CQE.
            if not cycle(dispatch) and not posts:
                if not hits:
                    sleep(me.idle_wait)
                elif not (marks and now - marks[0][0] < FOLD_AGE and sleep(FOLD_IDLE)):
                    fold()        # the load paused (or the hits aged): see fold_hits
                    sleep(me.idle_wait)
                now = me.now = monotonic()
                reap(dispatch)
            n = len(hits)
            if n and (not marks or marks[-1][2] != n):     # hits since the last mark: this turn's
                mark_turn(marks, now, monotonic() - now, n)
                if n >= FOLD_AT:
                    fold()
            if posts:
                drain()
            return now
        return turn

    def _after_fold(self, fn, then=None):
        """fn(x), called once the fused hits served before it are folded and their turns'
        texts made (turn_work); then then(). For the general step's access-log append
        (then: its formatter, log_formatter): the log keeps the order in which requests
        were answered. For the submit of a Job: a fill may evict, and the Space's victims
        follow the last-served times (cache/recency.py) that the fold records."""
        hits, fold, held, work = self._turn_hits, self.fold_hits, self._held, self.turn_work

        def call(x):
            if hits:
                fold()
            if held:
                work()
            fn(x)
            if then is not None:
                then()
        return call

    def io_close(self):
        if self._turn_hits:
            self.fold_hits()
        if self._held:
            self.turn_work()
        ring = self.ring
        ring.submit()
        if self.epoll is not None:
            self.epoll.close()
        ring.close()
        for conn in list(self.zombies.values()):
            close_socket(conn)
        self.zombies.clear()

    # -- connections -------------------------------------------------------------------

    def want(self, conn, events):
        if events == 2 and not conn.poll_pending and conn.state != CLOSED:
            self.ring.prep_poll_out(conn.fd, (conn.fd << 3) | OP_POLL)
            conn.poll_pending = True
            conn.inflight += 1
            self.counters[M.URING_SQES] += 1

    def accept_on(self):
        self.ring.prep_accept(self.listener.fileno(), OP_ACCEPT)

    def accept_off(self):
        pass      # the multishot accept has ended already (its last completion said EMFILE)

    def recv(self, conn):
        if conn.recv_pending:
            return False
        if conn.rstart == conn.rend:
            conn.rstart = conn.rend = 0
            conn.recv_ibuf = False
            self.ring.prep_fused_recv(conn.rop or self._conn_op(conn))
        else:
            buf = conn.ibuf
            if buf is None:
                buf = conn.ibuf = bytearray(IBUF_SIZE)
            conn.recv_ibuf = True
            self.ring.prep_recv(conn.fd, buf, (conn.fd << 3) | OP_RECV)
        conn.recv_pending = True
        conn.inflight += 1
        self.counters[M.URING_SQES] += 1
        return False

    def send(self, conn):
        if conn.file_left:
            return self.send_stream(conn)     # sendfile, POLL_ADD on EAGAIN (want)
        if conn.sending:
            return WAITING
        out = conn.out
        if conn.out_off >= len(out):
            return DONE_SEND
        data = out if conn.out_off == 0 else out[conn.out_off:]
        c = self.counters
        if conn.plan.body or conn.status in (200, 206) and conn.plan.count == 0:
            c[M.FUSED_HEAD_BODY] += 1
        if not conn.close_after and not conn.recv_pending and conn.rstart == conn.rend:
            # send, then recv the next request, in one submission: the send posts a
            # completion only on failure, so one CQE per request; the recv completing
            # proves the send is done and its buffer free (kept alive until then)
            conn.send_buf = self.ring.prep_send(conn.fd, data, (conn.fd << 3) | OP_SEND, MSG_WAITALL, LINK_QUIET)
            self.recv(conn)
            c[M.URING_SQES] += 1
            conn.out_off = len(out)
            conn.sent += len(data)
            return DONE_SEND
        conn.send_buf = self.ring.prep_send(conn.fd, data, (conn.fd << 3) | OP_SEND, MSG_WAITALL)
        conn.sending = True
        conn.inflight += 1
        c[M.URING_SQES] += 1
        return WAITING

    def open_sockets(self):
        # closed connections whose last operations are still in flight keep their socket
        return len(self.conns) + len(self.zombies)

    def release_socket(self, conn):
        if conn.inflight:
            try:
                conn.sock.shutdown(socket.SHUT_RDWR)  # completes a pending recv
            except OSError:
                pass
            self.zombies[conn.fd] = conn
        else:
            close_socket(conn)

    # -- completions -------------------------------------------------------------------

    def make_dispatch(self):
        """The completion handler the turn's reap calls for every CQE, built once the ring
        exists (io_open). It serves the warm hit itself: a recv that brought exactly the
        bytes of a head seen before (heads are remembered by their exact bytes, one head
        each, so no scan for its end), whose remembered Answer is a whole keep-alive
        answer that is still current (index generation and freshness unchanged) and whose
        key the Gate has accepted. An answer in memory is sent by one linked send + recv
        pair on the ring and counted with the turn's others (fold_hits); one from the
        blob file goes to _hit_file. Everything else goes to _dispatch and the general
        step (the same lookup and plan_warm). One closure, with what it reads bound once,
        where it was a method calling a method calling the ring's: two Python calls and a
        dozen attribute loads less per hit (with the per-Answer fold, 14-17% fewer
        instructions a hit at 7-20 hits a turn: scripts/rig_instructions.py,
        docs/benchmarks.md, issue 18)."""
        conns_get, answers_get, genv, gate = self.conns.get, self.answers.get, self.genv, self.gate
        ring = self.ring
        send_recv, conn_op, fused_data = ring.prep_fused, self._conn_op, ring.fused_data
        turn_hit, general = self._turn_hit, self._dispatch
        remember, hit_file = self.step.remember, self._hit_file
        me = self

        def dispatch(tag, res, flags):
            if tag & 7 != OP_RECV or res <= 0:
                return general(tag, res, flags)
            conn = conns_get(tag >> 3)    # (a closed connection is a zombie until drained)
            if conn is None or conn.state != READ or conn.recv_ibuf or conn.sending:
                return general(tag, res, flags)
            # most completions: a new head into the empty buffer of an idle connection
            # (_on_recv's common case, in its order)
            now = conn.last_active = me.now
            held = True                   # the completed recv is not yet accounted for
            try:
                key = conn.rview[:res].tobytes()
                a = answers_get(key)
                if a is None or a.gen != genv[0] or now >= a.until:
                    a = remember(key, now)
                # a whole answer (else the general step), for a key the Gate has accepted
                # (not yet, or revoked: the general step checks it)
                whole = False
                if a is not None:
                    out = a.out
                    whole = (out is not None or a.file is not None) and (gate is None or a.auth in gate.verdicts)
                    if whole and out is not None:
                        # the pair's recv takes the place of the one that completed:
                        # inflight and recv_pending stay as they are
                        rop, ref = conn.rop, a.ref
                        if rop is None:
                            rop = conn_op(conn)
                        if ref is None:
                            ref = a.ref = fused_data(out)
                        send_recv(ref, rop)
                        conn.send_buf = out
                        turn_hit(a)       # counted and logged with the turn's others
                        return
                held = False
                conn.inflight -= 1
                conn.recv_pending = False
                conn.send_buf = None
                if whole and a.file is not None and hit_file(conn, a, monotonic()):
                    return
                conn.rend += res
                me.advance(conn)
            except Exception:
                if held:
                    conn.inflight -= 1
                    conn.recv_pending = False
                me.internal_error(conn)
        return dispatch

    def _conn_op(self, conn):
        """The connection's part of its fused sends and recvs (Ring.fused_conn), made
        once per read buffer: Conn.rop, which step.grow drops with the buffer it replaces."""
        fd = conn.fd
        tag = (fd << 3) | OP_RECV
        rop = conn.rop = self.ring.fused_conn(fd, conn.rbuf, tag + _SEND_FROM_RECV, tag)
        return rop

    def _dispatch(self, tag, res, flags):
        """Every completion the fused hit does not take (make_dispatch)."""
        if tag & 7 == OP_RECV:
            conn = self.conns.get(tag >> 3)
            if conn is not None:
                conn.inflight -= 1
                try:
                    self._on_recv(conn, res)
                except Exception:
                    self.internal_error(conn)
                return
        op = tag & 7
        if op == OP_ACCEPT:
            self._on_accept(res, flags)
            return
        if op == OP_WAKE:
            # the mailbox's wake-up socket became readable: drain it even when the queue
            # is empty now, to read the byte (a post made while the mailbox drained
            # leaves one behind, and its flag set: no later post would write another)
            if not flags & CQE_F_MORE:
                self.ring.prep_poll_in_multishot(self.wake_fd, OP_WAKE)   # it has ended: re-arm
            self.mailbox.drain()
            return
        fd = tag >> 3
        conn = self.conns.get(fd)
        if conn is None:
            conn = self.zombies.get(fd)
            if conn is None:
                return
        if op == OP_SEND and not conn.sending:
            # a linked quiet send failed (its recv is cancelled and counted separately)
            if conn.state != CLOSED:
                self.counters[M.PEER_RESETS] += 1
                self.close(conn)
            return
        conn.inflight -= 1
        if conn.state == CLOSED:
            if op == OP_SEND:
                conn.sending = False
                conn.send_buf = None
            if conn.inflight == 0:
                self.zombies.pop(fd, None)
                close_socket(conn)
            return
        try:
            if op == OP_RECV:
                self._on_recv(conn, res)
            elif op == OP_SEND:
                self._on_send(conn, res)
            else:
                conn.poll_pending = False
                self.advance(conn)
        except Exception:
            self.internal_error(conn)

    def _on_accept(self, res, flags):
        if res == -errno.EMFILE or res == -errno.ENFILE:
            if not flags & CQE_F_MORE:
                self.pause_accept()     # re-armed by the next sweep, not at once
            return
        if not flags & CQE_F_MORE:
            self.ring.prep_accept(self.listener.fileno(), OP_ACCEPT)   # re-arm
        if res < 0:
            return
        sock = socket.socket(self.family, socket.SOCK_STREAM, 0, res)
        peer = ""
        if self.max_per_ip:
            try:
                peer = sock.getpeername()[0]   # multishot accept returns no address
            except OSError:
                sock.close()
                return
        if not self.admit(sock, peer):
            return
        sock.setblocking(False)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        conn = UringConn(sock, self.now)
        self.register(conn, peer)
        try:
            self.advance(conn)
        except Exception:
            self.internal_error(conn)

    def _on_recv(self, conn, res):
        conn.recv_pending = False
        if not conn.sending:
            conn.send_buf = None   # a linked send before this recv has completed
        if res <= 0:
            if res < 0:
                self.counters[M.PEER_RESETS] += 1
            self.close(conn)
            return
        if conn.recv_ibuf:
            need = conn.rend + res
            if need > len(conn.rbuf):
                n = conn.rend - conn.rstart
                conn.rbuf[:n] = conn.rbuf[conn.rstart:conn.rend]
                conn.rstart, conn.rend = 0, n
                if n + res > len(conn.rbuf):
                    grow(conn, max(n + res, RBUF_SIZE))
            conn.rbuf[conn.rend:conn.rend + res] = conn.ibuf[:res]
        else:
            # into the empty rbuf (rstart == rend == 0): a new head begins
            conn.last_active = self.now   # (as SelectorReactor.recv; sweep)
        conn.rend += res
        if conn.state == READ:
            self.advance(conn)

    def fold_hits(self):
        """Count the fused hits served since the last fold, in one pass, and hold their
        turns for turn_work (the histogram and the access log).

        A turn's sends are all submitted by the next turn's first io_uring_enter, so its
        hits share one time: each started when the turn began (`now`, taken once after
        the wait, as nginx takes its clock once per event-loop pass: its `timer_resolution`
        directive documents gettimeofday() "each time a kernel event is received") and
        took until the turn's end, which is what the histogram and the access log record
        for each. The turn only marks where its hits end with those two times (turns
        that begin within MARK_SPAN share a mark: mark_turn). The loop
        folds at FOLD_AT hits; when it would sleep and no completion came for FOLD_IDLE
        (the load paused: the sends just submitted travel meanwhile) or the first unfolded
        turn is FOLD_AGE old (a trickle of requests that never pauses that long); before
        the general step logs a request or submits a Job (_after_fold); and at close. So
        the counters lag the answers by a millisecond when load stops and by FOLD_AGE or
        FOLD_AT hits under load (the histogram and the log by a tick more). The
        bookkeeping runs once per fold instead of once per turn, where it cost ~27,600
        instructions (CPython 3.11, valgrind), twice a hit's own ~12,800; folded before
        every sleep it was still once a request at one connection (docs/benchmarks.md,
        issue 18). Hits are mostly the same few Answers
        (a busy cache answers the same files over and over), so they are counted per
        distinct Answer: collections' C helper _count_elements tallies them into a reused
        dict, and the Python below runs once per distinct Answer, not per hit. Hits not
        yet marked (a caller outside the loop's turn) are one turn that began at `now`."""
        hits, counts, marks = self._turn_hits, self._turn_counts, self._turn_marks
        n = len(hits)
        if not n:
            return
        now = self.now
        if not marks or marks[-1][2] != n:
            marks.append((now, monotonic() - now, n))
        _count_elements(counts, hits)
        nbytes = fused = cached = sqes = 0
        served, d = self.served, self.downloads
        for a, k in counts.items():
            nbytes += a.size * k
            sqes += a.sqes * k
            if a.fused:
                fused += k
            if a.blob is not None:
                cached += k
                served[a.blob] = now
            if a.dkey is not None:
                d[a.dkey] = d.get(a.dkey, 0) + a.dcount * k   # k GETs and their bytes (packed)
        c = self.counters
        c[_REQUESTS] += n
        c[_SQES] += sqes
        c[_BYTES] += nbytes
        c[_FUSED] += fused
        c[_HITS] += cached
        held = self._held
        held.append((hits[:], marks[:], list(counts)))    # (copies made in C)
        if len(held) >= FOLDS_HELD:
            self.turn_work()
        counts.clear()
        hits.clear()
        marks.clear()

    def turn_work(self):
        """What the folds held since the last tick do turn by turn: each turn's hits into
        the latency histogram, and the access log's text of each turn (its timestamp and
        duration on every line). Run on the reactor's tick (every TICK while it works),
        before the general step logs a request or submits a Job (_after_fold), when
        FOLDS_HELD folds wait, and at close: so the histogram and the log lag the answers
        by a tick at most, where the counters lag by a fold. Made at each fold, among
        the turns of a loop whose caches another reactor on the CPU keeps taking, they
        were most of what the access log adds to --listeners 2 against --listeners 1;
        made a tick's worth at a time, their code and data stay warm through the run of
        them: the server's CPU a 4 KiB request 0.4-1.5% less with one reactor, 1.1-3.9%
        less with two (turnwork_c64.json, deferlog*_c64.json; docs/benchmarks.md, issue
        18, nineteenth day)."""
        held, c, acc = self._held, self.counters, self.access_log
        observe = M.observe_turns
        for hits, marks, distinct in held:
            observe(c, H_WARM, marks)
            if acc is not None:
                acc.add_turns(hits, marks, distinct)   # the writer's, once it drains acc
        held.clear()
        if acc is not None and acc.buffered() >= acc.BATCH:
            acc.format_ready()

    def _turn_work_hook(self, now):
        # a tick hook (ReactorBase.tick_hooks): True while folds came since the last tick
        if self._held:
            self.turn_work()
            return True
        return False

    def _hit_file(self, conn, a, t0):
        """A remembered answer whose body is read from the blob file (sizes above the
        in-memory limit, ranges of them), sent here while the socket takes it: the head
        with MSG_MORE, the body with one sendfile, then the next recv on the ring. What
        the socket does not take goes on through the shared state machine, set up as
        serve_hit would have (conn fields as _start sets them, with the progress made).
        The general path ran ~24 us of Python per 256 KiB hit (the copy evicts its
        working set between hits; results/<machine>/profile_*_262144_*), this one a third
        of its calls. -> False: the blob cannot be opened (the general step makes it a
        miss)."""
        head, entry, plan = a.file
        path = entry.blob_path
        try:
            ffd = self.fdcache.acquire(path, entry.size)
        except OSError:
            return False
        out, off, left = plan.head, plan.offset, plan.count
        n = 0
        try:
            h = self.send_head(conn.sock, out, True)
            if h == len(out):
                n = self.send_body(conn.fd, ffd, off, left if left < SEND_TURN else SEND_TURN)
        except _PEER_GONE:
            self.fdcache.release(path, ffd)
            c = self.counters
            c[_REQUESTS] += 1
            self.book(a.blob, a.dkey, a.dcount, t0)
            c[M.PEER_RESETS] += 1
            self.close(conn)
            return True
        if n == left:
            # all sent: counted and logged with the turn's other fused hits (fold_hits)
            self.fdcache.release(path, ffd)
            self.ring.prep_fused_recv(conn.rop or self._conn_op(conn))
            conn.recv_pending = True
            conn.inflight += 1
            self._turn_hit(a)
            return True
        c = self.counters
        c[_REQUESTS] += 1
        self.book(a.blob, a.dkey, a.dcount, t0)
        if h == len(out):
            c[_FUSED] += 1
        # the socket is full (or the file ended early: sendfile's -1, which the state
        # machine meets again and answers by closing)
        conn.head, conn.t0, conn.close_after = head, t0, False
        conn.out, conn.out_off, conn.sent = out, h, h + (n if n > 0 else 0)
        conn.status, conn.outcome, conn.state, conn.hbase = plan.status, "hit", SEND, H_WARM
        conn.file_fd, conn.file_path = ffd, path
        if n > 0:
            off += n
            left -= n
        conn.file_off, conn.file_left = off, left
        self.advance(conn)
        return True

    def _on_send(self, conn, res):
        conn.sending = False
        conn.send_buf = None
        if res < 0:
            self.counters[M.PEER_RESETS] += 1
            self.close(conn)
            return
        conn.out_off += res
        conn.sent += res
        conn.last_active = self.now
        self.advance(conn)
