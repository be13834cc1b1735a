"""The HTTP step every reactor backend shares: the bytes in a connection's buffer to a
verdict. No socket call, no file open, nothing that blocks; it reads the clock and the
index, and sets the connection's request state.

    conn.rbuf --read()--> NEED      the buffer holds no whole request yet
                          ANSWERED  malformed or too large: conn holds the refusal
                          REQUEST   self.head, self.target, self.body are the request
    request --decide()--> ANSWERED  conn holds the answer (refusal, local, reject)
                          HIT       self.entry is cached and conn.plan is planned from it
                          MISS      the fill pool must answer (a Job of self.body)

Heads are remembered by their exact bytes (parsing is pure, so equal bytes give an
equal head and the same route). Parsing a 250-byte hf client head costs ~5 us and
routing it ~6 us; a whole remembered warm hit on io_uring ~2.6 us
(tests/bench/test_bench_micro.py). The io_uring fused hit also remembers a whole
Answer per head (`answers`, `remember`).
"""

import time

from pulsys import metrics as M
from pulsys.auth.gate import not_this_repo, refusal
from pulsys.auth.repos import allows
from pulsys.cache.downloads import ONE
from pulsys.cache.index import FOREVER
from pulsys.errors import ProtocolError
from pulsys.http1.heads import error_response, render_canned
from pulsys.http1.parse import parse_request_head
from pulsys.model import target as T
from pulsys.reactor.conn import RBUF_SIZE, respond
from pulsys.route import route
from pulsys.warm import Answer, plan_warm, remember_answer

# Distinct GET/HEAD heads remembered per reactor (and io_uring answers). With the index
# memo's keys (cache/index_view.py MEMO_MAX) a remembered random key costs ~3 KB
# (tracemalloc, 100k-entry cache): 2048 keep a worker's memos near 6 MiB, so 48 workers
# hold ~300 MiB of them, not 600 (docs/benchmarks.md, "The index at scale").
HEAD_MEMO = 2048
HEAD_MEMO_MAX = 2048       # longer heads are parsed every time
MAX_BODY = 1 << 20          # POST paths-info bodies are a few KiB; refuse more than 1 MiB

NEED, REQUEST, ANSWERED, HIT, MISS = range(5)

_LOCAL = {
    "healthz": ((("Content-Type", "text/plain"),), b"ok\n"),
    # huggingface_hub 2.x asks once a day; the `hf` CLI (2.4) reads it as a dict at import
    # and crashes on anything else, so answer locally with an empty document
    "agent-harnesses": ((("Content-Type", "application/json"),),
                        b'{"standardEnvVars":[],"harnesses":{}}'),
}


class HttpStep:
    """One per reactor (its memos are not shared between threads)."""

    def __init__(self, index, gate, counters, grants=None):
        self.index = index
        self.gate = gate          # auth.gate.Gate when API keys are required, else None
        self.grants = grants      # auth.access.Grants with --upstream-auth client, else None
        self.counters = counters
        self.heads = {}           # exact head bytes -> (RequestHead, Target), GET/HEAD without body
        self.answers = {}         # exact head bytes -> warm.Answer (the io_uring fused hit)
        # the request read() found and the entry decide() found: results, not state
        self.head = self.target = self.entry = None
        self.body = b""

    def read(self, conn):
        """Find the next request in conn's buffer (see the module docstring)."""
        rs, re_ = conn.rstart, conn.rend
        if rs == re_:
            return NEED
        end = conn.rbuf.find(b"\r\n\r\n", rs, re_)
        if end >= 0:
            key = bytes(conn.rview[rs:end + 4])
            known = self.heads.get(key)
            if known is not None:
                conn.rstart = end + 4
                self.head, self.target = known
                self.body = b""
                return REQUEST
        try:
            head = parse_request_head(conn.rbuf, rs, re_)
        except ProtocolError as e:
            self.counters[M.PROTOCOL_ERRORS] += 1
            respond(conn, None, e.status_hint, error_response(e.status_hint, e.reason), True)
            return ANSWERED
        if head is None:
            return NEED
        total = head.head_len + head.content_length
        body = b""
        if head.content_length:
            if head.content_length > MAX_BODY:
                respond(conn, head, 413, error_response(413, "request body too large"), True)
                return ANSWERED
            if conn.rend - conn.rstart < total:
                if len(conn.rbuf) - conn.rstart < total:
                    grow(conn, total)
                return NEED
            body = bytes(conn.rbuf[rs + head.head_len:rs + total])
        t = route(head)
        if not head.content_length and end >= 0 and (head.method == "GET" or head.method == "HEAD") \
                and head.head_len <= HEAD_MEMO_MAX and rs + head.head_len == end + 4:
            if len(self.heads) >= HEAD_MEMO:
                self.heads.clear()
            self.heads[key] = (head, t)
        conn.rstart = rs + total
        self.head, self.target, self.body = head, t, body
        return REQUEST

    def decide(self, conn, head, t):
        """What answers this request (see the module docstring). A HIT is not counted
        here: the reactor counts it once the body is open (Reactor.serve_hit), or makes
        it a miss."""
        c = self.counters
        c[M.REQUESTS] += 1
        conn.head = head
        conn.t0 = time.monotonic()
        conn.close_after = not head.keep_alive
        kind = t.kind
        conn.hbase = M.H_COLD if kind == T.RESOLVE else M.H_API if kind < T.LOCAL else -1
        gate = self.gate
        # the CAS routes of --xet facade carry their own proof (a CAS token, a signed URL):
        # hf_xet sends pulsys's API key to neither (upstream/xet_tokens.py)
        if gate is not None and kind != T.LOCAL and kind <= T.XET_TOKEN \
                and head.authorization not in gate.verdicts:
            found = gate.check(head.authorization)
            if found is None:
                c[M.AUTH_REFUSALS] += 1
                conn.hbase = -1
                respond(conn, head, 401, refusal(gate.reason(head.authorization), head.keep_alive,
                                                 head.method == "HEAD"), not head.keep_alive)
                return ANSWERED
            if found[1] is not None and kind != T.REJECT \
                    and not ((kind < T.API_OTHER or kind == T.XET_TOKEN) and allows(found[1], t.rtype, t.repo)):
                # a key limited to some repos (auth/repos.py): what the Hub answers for a
                # repo the caller cannot see, so the key learns nothing of what exists
                c[M.REPO_REFUSALS] += 1
                conn.hbase = -1
                has_repo = kind < T.API_OTHER or kind == T.XET_TOKEN
                respond(conn, head, 404 if has_repo else 403,
                        not_this_repo(has_repo, head.keep_alive, head.method == "HEAD"), not head.keep_alive)
                return ANSWERED
        if kind == T.RESOLVE:
            e = self.index.lookup(t, conn.t0)
            if e is not None and plan_warm(head, e, conn.plan):
                grants = self.grants
                if grants is None or grants.until(head.authorization, t.rtype, t.repo, conn.t0):
                    self.entry = e
                    return HIT
                # --upstream-auth client: cached, but the Hub has not said (lately) that
                # this client may read the repo; the upstream plane asks it (auth/access.py)
                c[M.ACCESS_CHECKS] += 1
                return MISS
            c[M.CACHE_MISSES] += 1
            return MISS
        if kind == T.REJECT:
            # A refusal of the request itself (400 bad target, 501 unknown method) ends the
            # connection, as the parser's refusals do: bytes after a request pulsys did not
            # take are not trusted to start the next one (docs/security.md, "Request
            # rejection and Host"). A 404 or 405 answers a well-formed request whose body,
            # if any, has been read above (Content-Length only; the parser refuses
            # Transfer-Encoding), so the next request starts where this one ended.
            close = t.status != 404 and t.status != 405
            respond(conn, head, t.status, error_response(t.status, t.message, head.keep_alive and not close,
                                                         head.method == "HEAD", t.allow), close)
            return ANSWERED
        if kind == T.LOCAL:
            headers, payload = _LOCAL[t.path]
            out = render_canned(200, headers, len(payload), head.keep_alive)
            respond(conn, head, 200, out if head.method == "HEAD" else out + payload, False)
            conn.outcome = "local"
            return ANSWERED
        return MISS

    def remember(self, key, now):
        """The Answer for a head seen before (None if it was not, or if its file is not
        cached), remembered for the fused hit."""
        known = self.heads.get(key)
        if known is None:
            return None       # the general step parses it, and remembers the head
        head, t = known
        index = self.index
        gen = index.gen       # read before the lookup: a change after it makes gen differ
        if t.kind != T.RESOLVE:
            a = Answer(gen, FOREVER)
        else:
            grants = self.grants
            if grants is not None:
                allowed = grants.until(head.authorization, t.rtype, t.repo, now)
                if not allowed:
                    return None   # the general step sends it to the Hub for a verdict
            e, until = index.lookup_until(t, now, body=True)
            if e is None:
                return None   # a miss: not remembered, the fill publishes a new gen anyway
            if grants is not None and allowed < until:
                until = allowed   # remembered no longer than the Hub's yes
            a = remember_answer(head, e, gen, until)
            if a.dkey is not None:
                a.dcount += ONE
        answers = self.answers
        if len(answers) >= HEAD_MEMO:
            answers.clear()
        answers[key] = a
        return a


def grow(conn, need):
    """Give conn a read buffer of at least `need` bytes that keeps its unread bytes."""
    buf = bytearray(max(need, RBUF_SIZE))
    n = conn.rend - conn.rstart
    buf[:n] = conn.rbuf[conn.rstart:conn.rend]
    conn.rbuf, conn.rview, conn.rstart, conn.rend = buf, memoryview(buf), 0, n
    conn.rop = None
