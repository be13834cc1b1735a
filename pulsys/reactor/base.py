"""A reactor: one thread, one listening socket, its connections. The loop, the
connection state machine and every answer's bookkeeping are written here once; a
backend (selector.py, uring.py) owns only its I/O and its per-connection I/O state.

    backend recv -> HttpStep.read / decide (step.py: parse, route, gate, look up, plan)
        ANSWERED  send conn.out (a refusal, a local answer)
        HIT       serve_hit: open the body, book() the hit, send
        MISS      submit(Job) to the fill pool; its Reply comes back through this
                  reactor's Mailbox and is planned and booked the same way

The io_uring fused hit (uring.py) answers a head whose whole answer it remembers
without read/decide, and ends in book() as well.

What a backend provides: io_open() (which also makes self.io_turn, the function the
loop calls each pass: wait up to a second for I/O or a post, dispatch it, run the
mailbox's posts, leave no BATCH of access-log records unformatted (log_formatter), set
self.now and return it; made there so that what a pass uses is bound once: the pass is
the warm path's fixed cost, paid once per batch of completions), io_close(); recv(conn) (False: the
bytes come later, through advance); want(conn, events); send(conn) (default:
send_stream, the head and then the file body with sendfile); release_socket(conn);
accept_on() / accept_off(). Nothing here blocks: no upstream, DNS, fsync or database
call happens on a reactor thread.
"""

import os
import time

from pulsys import metrics as M
from pulsys.cache.downloads import ONE
from pulsys.cache.inflight import DONE, FAILED
from pulsys.errors import Refetching
from pulsys.http1.heads import error_response, prepare
from pulsys.log import get_logger
from pulsys.model.entry import FILE
from pulsys.model import target as T
from pulsys.model.job import Job
from pulsys.reactor.conn import CLOSED, READ, SEND, WAIT_FILL, WAIT_JOB, respond
from pulsys.reactor.limits import ConnectionLimits
from pulsys.reactor.step import ANSWERED, HIT, NEED, HttpStep
from pulsys.route import route
from pulsys.warm import plan_warm

BLOCKED, WAITING, DONE_SEND, ABORT = range(4)
# Body bytes one connection may send before the others get a turn. On loopback a fast
# reader drains the socket as fast as sendfile fills it, so without a cap one 16 MiB
# response holds the loop until done (nginx caps the same way: sendfile_max_chunk, 2m
# by default since 1.21.4).
SEND_TURN = 2 << 20
# A reader of a fill that failed verification is carried over to the refetch when it has
# sent at most this many body bytes: those are compared with the refetched ones before it
# goes on (ADR 0012), on the reactor, 1 MiB per loop turn. hf_transfer's chunks are 10 MiB.
CARRY_MAX = 64 << 20
CHECK_TURN = 1 << 20
_PEER_GONE = (BrokenPipeError, ConnectionResetError, ConnectionAbortedError)
_HITS = M.CACHE_HITS
SWEEP = 1.0       # seconds between sweeps of the connections' timeouts
TICK = 0.1        # seconds between a reactor's tick_hooks calls while it works
IDLE_WAIT = 1.0   # longest sleep of an idle turn with no tick due (the sweep's period)
HOOK_LOG_EVERY = 60.0   # seconds between two logs of the same tick hook's failures


def _open_resume(conn):
    """The request is an open-ended resume (`bytes=N-`, N > 0): its client holds the
    first N bytes from an earlier response, which may have streamed from the fill that
    just failed verification. Carrying it over would complete a file whose prefix nobody
    checked (seen in a fault run: a byte flipped before N, the resume joined the fill
    before it failed), so it is cut instead; its next resume finds the blob suspect and
    gets the whole body (ADR 0012)."""
    rng = conn.head.range
    return conn.plan.offset > 0 and rng is not None and rng.rstrip().endswith("-")


class ReactorBase:
    name = "base"

    def __init__(self, listener, index, submit, mailbox, sender, fdcache, access_log=None,
                 idle_timeout=75.0, header_timeout=30.0, send_timeout=60.0, max_connections=10000,
                 max_per_ip=0, gate=None, grants=None):
        self.listener = listener
        self.gate = gate          # auth.gate.Gate when API keys are required, else None
        self.grants = grants      # auth.access.Grants with --upstream-auth client, else None
        self.max_connections = max_connections
        self.max_per_ip = max_per_ip
        self.accept_paused = False
        self.stopping = False
        self.index = index
        self.genv = index.genv    # the index generation word (cache/indexdb.py), read per fused hit
        self.submit = submit
        self.mailbox = mailbox
        self.send_head = sender.send_head
        self.send_body = sender.send_body
        self.send_both = getattr(sender, "send_head_and_body", None)   # one syscall (darwin)
        self.fdcache = fdcache
        self.counters = M.new()
        self.limits = ConnectionLimits(max_connections, max_per_ip, self.counters)
        self.access_log = access_log   # the buffer an AccessLogWriter drains, or None
        self.access = access_log.append if access_log is not None else None
        self.idle_timeout = idle_timeout
        self.header_timeout = header_timeout
        self.send_timeout = send_timeout
        self.conns = {}
        self.step = HttpStep(index, gate, self.counters, grants)
        self.served = {}   # blob id -> monotonic time of its last warm hit (cache/recency.py)
        self.downloads = {}   # cache key -> GETs answered and bytes, packed (cache/downloads.py)
        self.now = time.monotonic()
        # fn(now) -> bool, run on this thread every TICK while the loop turns (a worker's
        # counter copy and recency report, the access-log writer's wake-up): what other
        # threads did on timers of their own, waking an idle worker 16 times a second
        # (docs/decisions/0023). True: call again on time; all False: the idle loop
        # sleeps IDLE_WAIT.
        self.tick_hooks = []
        self._hook_logged = {}       # hook name -> when its next failure may be logged
        self.idle_wait = IDLE_WAIT   # the longest sleep of an idle turn (the backends read it)
        self.log = get_logger("reactor")

    # -- the loop --------------------------------------------------------------

    def run(self):
        """Serve until stop(): the backend's I/O turn (I/O, posts, access-log text), once
        a second the timeouts, and with tick_hooks a tick every TICK; on the way out
        every connection is closed."""
        self.io_open()
        turn, hooks = self.io_turn, self.tick_hooks
        next_sweep = time.monotonic() + SWEEP
        next_tick = time.monotonic() if hooks else next_sweep
        try:
            while not self.stopping:
                if turn() >= next_tick:
                    now = self.now
                    if now >= next_sweep:
                        self.sweep()
                        next_sweep = now + SWEEP
                    if not hooks:
                        next_tick = next_sweep
                    elif self.tick():
                        self.idle_wait, next_tick = TICK, now + TICK
                    else:
                        # quiet: the next turn ticks, whenever it comes, so what it does
                        # is seen at once and sleeps after it last at most a TICK
                        self.idle_wait, next_tick = IDLE_WAIT, now
        finally:
            for conn in list(self.conns.values()):
                self.close(conn)
            self.io_close()
            self.fdcache.close_all()

    def tick(self):
        """Run every tick hook, on the loop's thread. -> True when one of them wants the
        next tick on time (the loop then sleeps at most TICK when idle)."""
        more, now = False, self.now
        for hook in self.tick_hooks:
            try:
                if hook(now):
                    more = True
            except Exception:
                # a hook that keeps failing is logged once a HOOK_LOG_EVERY, not ten times
                # a second
                name = getattr(hook, "__qualname__", type(hook).__qualname__)
                if now >= self._hook_logged.get(name, 0.0):
                    self._hook_logged[name] = now + HOOK_LOG_EVERY
                    self.log.exception("tick hook failed", hook=name)
        return more

    def log_formatter(self):
        """-> a function that formats the access-log records buffered, once at least
        BATCH wait (log.AccessLog: the reactor formats them, cache-warm, where the
        writer thread would take the GIL for each), or None without an access log."""
        acc = self.access_log
        if acc is None:
            return None
        buffered, batch, fmt = acc.buffered, acc.BATCH, acc.format_ready

        def check():
            if buffered() >= batch:
                fmt()
        return check

    # -- state machine -------------------------------------------------------

    def advance(self, conn):
        """Run the connection as far as it goes without blocking."""
        while True:
            st = conn.state
            if st == SEND:
                r = self.send(conn)
                if r == BLOCKED:
                    conn.last_active = self.now   # the socket took bytes: not stalled
                    self.want(conn, 2)
                    return
                if r == WAITING:
                    self.want(conn, 0)
                    return
                if r == ABORT:
                    self.close(conn)
                    return
                self._finish(conn)
                if conn.close_after:
                    self.close(conn)
                    return
                conn.state = READ
            elif st == READ:
                step = self.step
                v = step.read(conn)
                if v == NEED:
                    if not self.recv(conn):
                        return
                elif v != ANSWERED:
                    self.on_request(conn, step.head, step.body, step.target)
            else:
                self.want(conn, 0)
                return

    # -- requests --------------------------------------------------------------

    def on_request(self, conn, head, body, t):
        step = self.step
        v = step.decide(conn, head, t)
        if v == ANSWERED:
            return
        if v == HIT:
            # a blob the index names but that cannot be opened with its size is a miss: the
            # upstream plane finds out why and repairs the entry (service._blob_gone)
            e = step.entry
            plan = conn.plan
            if e.kind == FILE and head.method == "GET":
                hit = self.serve_hit(conn, e, plan, e.key, ONE + (plan.count or len(plan.head)))
            else:
                hit = self.serve_hit(conn, e, plan, None, 0)
            if hit:
                return
            self.counters[M.CACHE_MISSES] += 1
        conn.state = WAIT_JOB
        conn.gen += 1
        gen = conn.gen
        post, on_reply = self.mailbox.post, self._on_reply

        def reply(r):
            post(on_reply, (conn, gen, r))
        job = Job(t, head.method, head.host, body, head.content_type, reply,
                  None if self.grants is None else head.authorization or "")
        if t.kind == T.XET_RECON:
            job.xet = (head.authorization or "", head.range)
        self.submit(job)

    def serve_hit(self, conn, entry, plan, dkey, dcount):
        """Send a warm hit planned in `plan` through the state machine. -> False (nothing
        set up, nothing counted) when the blob cannot be opened."""
        if not self._start(conn, entry, None, "hit", plan, warm=True):
            return False
        conn.hbase = M.H_WARM
        self.book(entry.blob_id, dkey, dcount, conn.t0)
        return True

    def book(self, blob, dkey, dcount, t0):
        """The one place an answer from the cache is counted, fused or not: a warm hit
        (`blob`, else None for a cold answer) and its time for LRU eviction
        (cache/recency.py; "" for CANNED entries), and a GET of a file (`dkey` its cache
        key, else None) in the per-repo downloads: `dcount` is ONE plus its bytes
        (cache/downloads.py)."""
        if blob is not None:
            self.counters[_HITS] += 1
            self.served[blob] = t0
        if dkey is not None:
            d = self.downloads
            d[dkey] = d.get(dkey, 0) + dcount

    def _on_reply(self, arg):
        conn, gen, r = arg
        if conn.gen != gen or conn.state != WAIT_JOB:
            return
        if r.grant is not None and self.grants is not None:
            self.grants.learn(conn.head.authorization, r.grant)    # the head this job was for
        try:
            self._answer(conn, r)
        except Exception:
            self.internal_error(conn)

    def _answer(self, conn, r):
        head = conn.head
        if r.entry.kind == FILE and r.entry.heads is None:
            prepare(r.entry)
        ok = plan_warm(head, r.entry, conn.plan)
        if r.entry.kind == FILE and head.method == "GET" and (ok or r.fill is not None):
            self.book(None, r.entry.key, ONE + (conn.plan.count or len(conn.plan.head)), conn.t0)
        if not ok and r.fill is None:
            respond(conn, head, 503, error_response(503, "cached body vanished; retry", False), True)
        else:
            self._start(conn, r.entry, r.fill if not ok else None, r.outcome)
        self.advance(conn)

    def _start(self, conn, entry, fill, outcome, plan=None, warm=False):
        """Set the connection up to send `plan` for `entry`. -> False (nothing set up)
        only for a `warm` hit whose blob cannot be opened; otherwise a body that cannot be
        opened becomes a 503."""
        if plan is None:
            plan = conn.plan
        conn.out = plan.head + plan.body if plan.body else plan.head
        conn.out_off = 0
        conn.status = plan.status
        conn.outcome = outcome
        conn.state = SEND
        conn.file_left = plan.count if entry.kind == FILE else 0
        conn.file_off = plan.offset
        if not conn.file_left:
            return True
        why = self._open_body(conn, entry, fill)
        if why is None:
            return True
        if warm:
            conn.file_left = 0
            return False
        respond(conn, conn.head, 503, error_response(503, why), True)
        return True

    def _open_body(self, conn, entry, fill):
        """Open what the body is sent from: the fill's part file (or the blob it has just
        become), else the blob. -> None, or why neither can be opened."""
        if fill is not None and fill.state == DONE:
            entry, fill = fill.entry, None
        if fill is not None:
            # the part file, or — when the fill has just verified and renamed it but not
            # yet announced DONE — the blob it became; both hold the same bytes
            for path in (fill.part_path, getattr(fill, "final_path", None)):
                if path is None:
                    continue
                try:
                    conn.file_fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
                except FileNotFoundError:
                    continue
                conn.file_path = None
                conn.fill = fill
                return None
            if fill.state != DONE:
                return "fill failed; retry"
            entry = fill.entry
        try:
            conn.file_fd = self.fdcache.acquire(entry.blob_path, entry.size)
            conn.file_path = entry.blob_path
        except OSError:
            return "cached body vanished; retry"
        return None

    def _rejoin(self, conn):
        """The fill this connection streams from failed verification. Instead of cutting
        the client, go on from the refetch (ADR 0012): the head it holds is the refetched
        blob's head too, and the body bytes it already has are compared with the
        refetched ones first (`check`), so it continues only if it got none of the wrong
        bytes. hf_transfer gives up when more than 3 chunks fail at once, and every chunk
        in flight is a reader of the failed fill. Once per request (outcome "refetch");
        the body then comes from whatever answers the request now: the refetch, or the
        blob it committed."""
        blob_id = conn.fill.blob_id
        first, check = conn.plan.offset, None
        if conn.file_off > first:
            check = (conn.file_fd, first, conn.file_off)   # the failed fill's part file
            conn.file_fd = -1
        self._release_file(conn)
        conn.check = check
        conn.state = WAIT_JOB
        conn.outcome = "refetch"
        conn.gen += 1
        gen, head = conn.gen, conn.head
        post, on_rejoin = self.mailbox.post, self._on_rejoin

        def reply(r):
            post(on_rejoin, (conn, gen, r, blob_id))
        self.submit(Job(route(head), "GET", head.host, b"", None, reply,
                        None if self.grants is None else head.authorization or ""))
        return WAITING

    def _on_rejoin(self, arg):
        conn, gen, r, blob_id = arg
        if conn.gen != gen or conn.state != WAIT_JOB:
            return
        try:
            e = r.entry
            if e.kind != FILE or e.blob_id != blob_id or self._open_body(conn, e, r.fill) is not None:
                self.close(conn)          # the head is out: nothing else can be said now
                return
            conn.state = SEND
            self.advance(conn)
        except Exception:
            self.internal_error(conn)

    def _on_fill_progress(self, arg):
        conn, gen = arg
        if conn.gen == gen and conn.state == WAIT_FILL:
            conn.state = SEND
            try:
                self.advance(conn)
            except Exception:
                self.internal_error(conn)

    def internal_error(self, conn):
        """A bug while handling one connection: log it once with context, count it, and
        close that connection only. Connection state is per-connection, so the other
        connections of this reactor are unaffected (docs/decisions/0003)."""
        self.counters[M.INTERNAL_ERRORS] += 1
        self.log.exception("internal error while serving a connection",
                           target=conn.head.target if conn.head is not None else None)
        try:
            self.close(conn)
        except Exception:
            self.log.exception("closing after an internal error failed")

    # -- sending ---------------------------------------------------------------

    def send_stream(self, conn):
        """Send conn.out, then the file body (sendfile, MSG_MORE on the head), from the
        blob or from the fill that is writing it."""
        out = conn.out
        try:
            if conn.out_off < len(out) and self.send_both is not None and conn.file_left \
                    and conn.fill is None:
                h, b = self.send_both(conn.sock, out[conn.out_off:] if conn.out_off else out,
                                      conn.fd, conn.file_fd, conn.file_off, conn.file_left)
                conn.out_off += h
                conn.file_off += b
                conn.file_left -= b
                conn.sent += h + b
                if conn.out_off < len(out) or (h + b == 0 and conn.file_left):
                    self.counters[M.SENDFILE_EAGAIN] += 1
                    return BLOCKED
                self.counters[M.FUSED_HEAD_BODY] += 1
            if conn.out_off < len(out):
                more = conn.file_left > 0 and conn.fill is None
                n = self.send_head(conn.sock, memoryview(out)[conn.out_off:] if conn.out_off else out, more)
                conn.out_off += n
                conn.sent += n
                if conn.out_off < len(out):
                    self.counters[M.SENDFILE_EAGAIN] += 1
                    return BLOCKED
                if more:
                    self.counters[M.FUSED_HEAD_BODY] += 1
            send_body = self.send_body
            turn = 0
            if conn.check is not None:
                r = self._check_sent(conn)
                if r is not None:
                    return r
            while conn.file_left > 0:
                if turn >= SEND_TURN:
                    return BLOCKED   # writable again at once: other connections go first
                count = conn.file_left if conn.file_left < SEND_TURN else SEND_TURN
                fill = conn.fill
                if fill is not None:
                    avail = fill.readable(conn.file_off)
                    if avail >= conn.file_left and fill.state != DONE:
                        # the last byte of every response from a fill waits for the
                        # blob's verification, ranges included (ADR 0012)
                        avail = conn.file_left - 1
                        if avail <= 0:
                            if fill.wait_end(self.mailbox.post, self._on_fill_progress,
                                             (conn, conn.gen)):
                                conn.state = WAIT_FILL
                                return WAITING
                            continue
                    if avail <= 0:
                        if fill.state == FAILED:
                            if isinstance(fill.error, Refetching) and conn.outcome != "refetch" \
                                    and conn.file_off - conn.plan.offset <= CARRY_MAX \
                                    and not _open_resume(conn):
                                return self._rejoin(conn)
                            return ABORT
                        if fill.wait(conn.file_off, self.mailbox.post, self._on_fill_progress,
                                     (conn, conn.gen)):
                            conn.state = WAIT_FILL
                            return WAITING
                        continue
                    if count > avail:
                        count = avail
                n = send_body(conn.fd, conn.file_fd, conn.file_off, count)
                if n == 0:
                    self.counters[M.SENDFILE_EAGAIN] += 1
                    return BLOCKED
                if n < 0:
                    return ABORT
                conn.file_off += n
                conn.file_left -= n
                conn.sent += n
                turn += n
        except _PEER_GONE:
            self.counters[M.PEER_RESETS] += 1
            return ABORT
        conn.last_active = self.now
        return DONE_SEND

    send = send_stream     # a backend with its own sends replaces this

    def _check_sent(self, conn):
        """Compare the body bytes sent from a failed fill, [a, x), with the same bytes of
        what answers now, once they are on disk. -> None (equal: go on sending), ABORT
        (the client got a wrong byte: cut it), WAITING or BLOCKED (later)."""
        old_fd, a, x = conn.check
        fill = conn.fill
        if fill is not None and fill.readable(a) < x - a:
            if fill.state == FAILED:
                return ABORT
            if fill.wait(a, self.mailbox.post, self._on_fill_progress, (conn, conn.gen), x - a):
                conn.state = WAIT_FILL
                return WAITING
            return BLOCKED          # readable meanwhile: next turn
        n = min(CHECK_TURN, x - a)
        if os.pread(old_fd, n, a) != os.pread(conn.file_fd, n, a):
            self.counters[M.CARRY_CUTS] += 1
            return ABORT
        if a + n < x:
            conn.check = (old_fd, a + n, x)
            return BLOCKED          # one MiB per turn: the other connections go first
        os.close(old_fd)
        conn.check = None
        self.counters[M.CARRIED_OVER] += 1
        return None

    def _release_file(self, conn):
        if conn.check is not None:
            os.close(conn.check[0])
            conn.check = None
        if conn.file_fd >= 0:
            if conn.file_path is not None:
                self.fdcache.release(conn.file_path, conn.file_fd)
            else:
                os.close(conn.file_fd)
            conn.file_fd = -1
            conn.file_path = None
        conn.fill = None

    def _finish(self, conn):
        self._release_file(conn)
        self.counters[M.BYTES_SERVED] += conn.sent
        if conn.head is not None:
            # from the head being parsed to the last body byte handed to the kernel
            took = time.monotonic() - conn.t0
            if conn.hbase >= 0:
                M.observe(self.counters, conn.hbase, took)
                conn.hbase = -1
            if self.access is not None:
                h = conn.head
                self.access((conn.t0, (h.method, h.target, conn.status, conn.sent, conn.outcome), took))
        conn.sent = 0
        conn.head = None

    # -- lifecycle ---------------------------------------------------------------

    def close(self, conn):
        if conn.state == CLOSED:
            return
        if conn.head is not None and conn.state in (SEND, WAIT_FILL):
            self._finish(conn)
        self._release_file(conn)
        self.want(conn, 0)
        conn.state = CLOSED
        conn.gen += 1
        self.conns.pop(conn.fd, None)
        self.counters[M.CONNECTIONS_CLOSED] += 1
        if conn.peer is not None:
            self.limits.closed(conn.peer)
            conn.peer = None
        self.release_socket(conn)

    def open_sockets(self):
        """Client sockets this reactor still holds open."""
        return len(self.conns)

    # -- accept-time limits --------------------------------------------------------

    def admit(self, sock, peer):
        """A new client socket: True to serve it, False when a limit refused it (answered
        503 and closed; reactor/limits.py)."""
        return self.limits.admit(sock, peer, len(self.conns))

    def register(self, conn, peer):
        self.conns[conn.fd] = conn
        self.counters[M.CONNECTIONS_ACCEPTED] += 1
        conn.peer = self.limits.opened(peer)

    def pause_accept(self):
        """Out of file descriptors (EMFILE/ENFILE): stop accepting until the next sweep,
        instead of spinning on a listener that stays readable."""
        if not self.accept_paused:
            self.accept_paused = True
            self.accept_off()
            self.log.warning("out of file descriptors; accepting again in a second",
                             open_connections=len(self.conns))

    def resume_accept(self):
        self.accept_paused = False
        self.accept_on()

    def sweep(self):
        """Close idle, stalled and slow-header connections; resume a paused accept.
        last_active is when the current head began (or the last response ended) for a
        connection that reads, and the last time its socket took bytes for one that sends."""
        if self.accept_paused:
            self.resume_accept()
        self.index.refresh()       # no old read snapshot pinned by an idle reactor
        now = self.now
        for conn in list(self.conns.values()):
            idle = now - conn.last_active
            if conn.state == READ:
                limit = self.header_timeout if conn.rend > conn.rstart else self.idle_timeout
                if idle > limit:
                    self.close(conn)
            elif conn.state == SEND and idle > self.send_timeout:
                self.close(conn)

    def stop(self):
        """Ask the loop to end; safe from any thread (the mailbox wakes it)."""
        self.stopping = True
        self.mailbox.post(lambda _: None, None)
