"""The request step every reactor backend shares.

    bytes -> http1.parse -> route -> cache index -> warm.plan_warm -> backend sends
                                        | miss
                                        v
                             submit(Job) to the fill pool; the Reply comes back
                             through this reactor's Mailbox and is planned the same way

A backend subclass owns the event loop and the socket calls; it calls on_bytes_ready /
on_writable and implements want(conn, events) and the send primitives. Nothing here
blocks: no upstream, DNS, fsync or database call happens on a reactor thread.
"""

import os
import time

from pulsys import metrics as M
from pulsys.auth.gate import refusal
from pulsys.cache.downloads import ONE
from pulsys.cache.inflight import DONE, FAILED
from pulsys.errors import ProtocolError, Refetching
from pulsys.http1.heads import error_response, prepare, render_canned
from pulsys.log import get_logger
from pulsys.http1.parse import parse_request_head
from pulsys.model import target as T
from pulsys.model.entry import FILE
from pulsys.model.job import Job
from pulsys.reactor.conn import CLOSED, READ, RBUF_SIZE, SEND, WAIT_FILL, WAIT_JOB
from pulsys.reactor.limits import ConnectionLimits
from pulsys.route import route
from pulsys.warm import plan_warm

# Heads seen before, by their exact bytes: parsing is pure, so equal bytes give an equal
# head and the same route. Parsing a 250-byte hf client head costs ~5 us and routing it
# ~6 us; a whole remembered warm hit on io_uring ~2.6 us (tests/bench/test_bench_micro.py).
# Distinct GET/HEAD heads remembered per reactor (and io_uring answers). With the index
# memo's keys (cache/index_view.py MEMO_MAX) a remembered random key costs ~3 KB
# (tracemalloc, 100k-entry cache): 2048 keep a worker's memos near 6 MiB, so 48 workers
# hold ~300 MiB of them, not 600 (docs/benchmarks.md, "The index at scale").
HEAD_MEMO = 2048
HEAD_MEMO_MAX = 2048       # longer heads are parsed every time
MAX_BODY = 1 << 20          # POST paths-info bodies are a few KiB; refuse more than 1 MiB
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

_LOCAL = {
    "healthz": ((("Content-Type", "text/plain"),), b"ok\n"),
    # huggingface_hub 2.x asks once a day; the `hf` CLI (2.4) reads it as a dict at import
    # and crashes on anything else, so answer locally with an empty document
    "agent-harnesses": ((("Content-Type", "application/json"),),
                        b'{"standardEnvVars":[],"harnesses":{}}'),
}


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
                 max_per_ip=0, gate=None):
        self.listener = listener
        self.gate = gate          # auth.gate.Gate when API keys are required, else None
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
        self.heads = {}    # exact head bytes -> (RequestHead, Target), GET/HEAD without body
        self.served = {}   # blob id -> monotonic time of its last warm hit (cache/recency.py)
        self.downloads = {}   # cache key -> GETs answered and bytes, packed (cache/downloads.py)
        self.now = time.monotonic()
        self.log = get_logger("reactor")

    # -- state machine -------------------------------------------------------

    def advance(self, conn):
        """Run the connection as far as it goes without blocking."""
        while True:
            st = conn.state
            if st == SEND:
                r = self._send(conn)
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
                if not self._read_request(conn):
                    return
            else:
                self.want(conn, 0)
                return

    def _read_request(self, conn):
        """Parse and dispatch one request. False when the connection must wait or closed."""
        rs, re_ = conn.rstart, conn.rend
        if rs == re_:
            return self._recv(conn)
        end = conn.rbuf.find(b"\r\n\r\n", rs, re_)
        if end >= 0:
            key = bytes(conn.rview[rs:end + 4])
            known = self.heads.get(key)
            if known is not None:
                conn.rstart = end + 4
                self.on_request(conn, known[0], b"", known[1])
                return True
        try:
            head = parse_request_head(conn.rbuf, rs, re_)
        except ProtocolError as e:
            self.counters[M.PROTOCOL_ERRORS] += 1
            self._respond(conn, None, e.status_hint, error_response(e.status_hint, e.reason), True)
            return True
        if head is None:
            return self._recv(conn)
        total = head.head_len + head.content_length
        body = b""
        if head.content_length:
            if head.content_length > MAX_BODY:
                self._respond(conn, head, 413, error_response(413, "request body too large"), True)
                return True
            if conn.rend - conn.rstart < total:
                if len(conn.rbuf) - conn.rstart < total:
                    self._grow(conn, total)
                return self._recv(conn)
            body = bytes(conn.rbuf[rs + head.head_len:rs + total])
        t = route(head)
        if not head.content_length and end >= 0 and (head.method == "GET" or head.method == "HEAD") \
                and head.head_len <= HEAD_MEMO_MAX and rs + head.head_len == end + 4:
            if len(self.heads) >= HEAD_MEMO:
                self.heads.clear()
            self.heads[key] = (head, t)
        conn.rstart = rs + total
        self.on_request(conn, head, body, t)
        return True

    def _grow(self, conn, need):
        buf = bytearray(max(need, RBUF_SIZE))
        n = conn.rend - conn.rstart
        buf[:n] = conn.rbuf[conn.rstart:conn.rend]
        conn.rbuf, conn.rview, conn.rstart, conn.rend = buf, memoryview(buf), 0, n

    def _recv(self, conn):
        if conn.rstart == conn.rend:
            conn.rstart = conn.rend = 0
            # a new head starts with whatever this recv brings: --header-timeout runs from
            # here, and bytes dripping in later do not restart it (sweep)
            conn.last_active = self.now
        elif conn.rend == len(conn.rbuf):
            n = conn.rend - conn.rstart
            conn.rbuf[:n] = conn.rbuf[conn.rstart:conn.rend]
            conn.rstart, conn.rend = 0, n
        try:
            n = conn.sock.recv_into(conn.rview[conn.rend:])
        except (BlockingIOError, InterruptedError):
            self.want(conn, 1)
            return False
        except OSError:
            self.counters[M.PEER_RESETS] += 1
            self.close(conn)
            return False
        if n == 0:
            self.close(conn)
            return False
        conn.rend += n
        return True

    # -- requests --------------------------------------------------------------

    def on_request(self, conn, head, body, t):
        c = self.counters
        c[M.REQUESTS] += 1
        conn.head = head
        conn.t0 = time.monotonic()
        conn.close_after = not head.keep_alive
        kind = t.kind
        conn.hbase = M.H_COLD if kind == T.RESOLVE else M.H_API if kind < T.LOCAL else -1
        gate = self.gate
        if gate is not None and kind != T.LOCAL and head.authorization not in gate.verdicts \
                and gate.scope(head.authorization) is None:
            c[M.AUTH_REFUSALS] += 1
            conn.hbase = -1
            self._respond(conn, head, 401, refusal(gate.reason(head.authorization), head.keep_alive,
                                                   head.method == "HEAD"), not head.keep_alive)
            return
        if kind == T.RESOLVE:
            e = self.index.lookup(t, conn.t0)
            # a blob the index names but that cannot be opened with its size is a miss: the
            # upstream plane finds out why and repairs the entry (service._blob_gone)
            if e is not None and plan_warm(head, e, conn.plan) and self._start(conn, e, None, "hit", warm=True):
                c[M.CACHE_HITS] += 1
                conn.hbase = M.H_WARM
                self.served[e.blob_id] = conn.t0    # for LRU eviction; "" for CANNED entries
                if e.kind == FILE and head.method == "GET":    # per-repo stats: one dict store
                    d = self.downloads
                    d[e.key] = d.get(e.key, 0) + (ONE + (conn.plan.count or len(conn.plan.head)))
                return
            c[M.CACHE_MISSES] += 1
        elif kind == T.REJECT:
            # A refusal of the request itself (400 bad target, 501 unknown method) ends the
            # connection, as the parser's refusals do: bytes after a request pulsys did not
            # take are not trusted to start the next one (docs/security.md, "Request
            # rejection and Host"). A 404 or 405 answers a well-formed request whose body,
            # if any, has been read above (Content-Length only; the parser refuses
            # Transfer-Encoding), so the next request starts where this one ended.
            close = t.status != 404 and t.status != 405
            self._respond(conn, head, t.status,
                          error_response(t.status, t.message, head.keep_alive and not close,
                                         head.method == "HEAD", t.allow), close)
            return
        elif kind == T.LOCAL:
            headers, payload = _LOCAL[t.path]
            out = render_canned(200, headers, len(payload), head.keep_alive)
            self._respond(conn, head, 200, out if head.method == "HEAD" else out + payload, False)
            conn.outcome = "local"
            return
        conn.state = WAIT_JOB
        conn.gen += 1
        gen = conn.gen
        post, on_reply = self.mailbox.post, self._on_reply

        def reply(r):
            post(on_reply, (conn, gen, r))
        self.submit(Job(t, head.method, head.host, body, head.content_type, reply))

    def _on_reply(self, arg):
        conn, gen, r = arg
        if conn.gen != gen or conn.state != WAIT_JOB:
            return
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
            d = self.downloads      # a cold download, for per-repo stats (cache/downloads.py)
            d[r.entry.key] = d.get(r.entry.key, 0) + (ONE + (conn.plan.count or len(conn.plan.head)))
        if not ok and r.fill is None:
            self._respond(conn, head, 503, error_response(503, "cached body vanished; retry", False), True)
        else:
            self._start(conn, r.entry, r.fill if not ok else None, r.outcome)
        self.advance(conn)

    def _respond(self, conn, head, status, data, close):
        conn.out, conn.out_off, conn.file_left, conn.fill = data, 0, 0, None
        conn.status, conn.outcome, conn.state = status, "error" if status >= 400 else "local", SEND
        if close or head is None:
            conn.close_after = True
        if head is not None:
            conn.head = head

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
        self._respond(conn, conn.head, 503, error_response(503, why), True)
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
        self.submit(Job(route(head), "GET", head.host, b"", None, reply))
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

    def _send(self, conn):
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

    def release_socket(self, conn):
        try:
            conn.sock.close()
        except OSError:
            pass

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
            self.log.warning("out of file descriptors; accepting again in a second",
                             open_connections=len(self.conns))

    def resume_accept(self):
        self.accept_paused = False

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

    def want(self, conn, events):
        raise NotImplementedError

    def stop(self):
        """Ask the loop to end; safe from any thread (the mailbox wakes it)."""
        self.stopping = True
        self.mailbox.post(lambda _: None, None)
