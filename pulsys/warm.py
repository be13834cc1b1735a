"""plan_warm: the one decision every reactor backend runs for a cached answer. Pure.

Given the request head and a cache Entry, choose status and head bytes and the body
span to send. Backends execute plans; they never decide. No I/O, no clock.
"""

from pulsys.http1 import heads as H
from pulsys.http1.ranges import UNSATISFIABLE, etag_matches, if_range_matches, parse_range
from pulsys.model.entry import CANNED, FILE


RESTART_MESSAGE = ("a copy of this file failed verification while it was being served, so a "
                   "partial download of it may hold wrong bytes: download it again from the start")


class WarmPlan:
    """Filled in place by plan_warm (one per connection, reused)."""
    __slots__ = ("status", "head", "body", "offset", "count")

    def __init__(self):
        self.status = 0
        self.head = b""       # bytes of the response head
        self.body = b""       # in-memory body (CANNED), sent after head
        self.offset = 0       # file body: first byte
        self.count = 0        # file body: number of bytes (0 = none)


def plan_warm(head, entry, plan):
    """Fill `plan` for `entry`. Returns False when the body is needed but not on disk."""
    ka = head.keep_alive
    is_head = head.method == "HEAD"
    if entry.kind == CANNED:
        if entry.head_only and not is_head:
            return False          # a HEAD's answer: the body a GET needs was never seen
        plan.status = entry.status
        plan.head = H.render_canned(entry.status, entry.headers, len(entry.body), ka)
        plan.body = b"" if is_head else entry.body
        plan.offset = plan.count = 0
        return True
    fh = entry.heads
    plan.body = b""
    plan.offset = 0
    if head.if_none_match is not None and etag_matches(head.if_none_match, entry.etag):
        plan.status, plan.head, plan.count = 304, fh.nm_ka if ka else fh.nm_close, 0
        return True
    r = parse_range(head.range, entry.size) if head.range is not None else None
    if r is not None and head.if_range is not None and not if_range_matches(head.if_range, entry.etag):
        r = None    # the client's copy is another representation: send all of this one
    if entry.restart_resumes and r is not None and r != UNSATISFIABLE and r[0] > 0 \
            and head.range.rstrip().endswith("-"):
        # `bytes=N-` is how huggingface_hub, curl -C and wget -c resume; this blob once
        # streamed bytes that failed verification, so the client's first N bytes may be
        # wrong: a 200 makes it start over (ADR 0012). Closed ranges (hf_transfer's
        # chunks, which must never get a 200) are refetched whole by their clients.
        r = None
        if head.user_agent is not None and head.user_agent.startswith("Wget/"):
            # wget -c takes a 200 to a resume as "skip what I have" and keeps its own
            # first N bytes (seen with wget 1.21.3): only a refusal keeps it honest
            out = H.error_response(409, RESTART_MESSAGE, ka, is_head)
            plan.status, plan.head, plan.count = 409, out, 0
            return True
    if r is None:
        plan.status = 200
        if is_head:
            plan.head, plan.count = fh.ok_ka if ka else fh.ok_close, 0
        elif fh.full_ka is not None:
            plan.head, plan.count = fh.full_ka if ka else fh.full_close, 0
        else:
            plan.head, plan.count = fh.ok_ka if ka else fh.ok_close, entry.size
    elif r is UNSATISFIABLE or r == UNSATISFIABLE:
        plan.status, plan.head, plan.count = 416, H.render_unsatisfiable(entry.size, ka), 0
        return True
    else:
        first, last = r
        plan.status, plan.head = 206, H.render_partial(fh, first, last, ka)
        plan.offset = first
        if is_head:
            plan.count = 0
        elif entry.body_mem is not None:
            plan.body, plan.count = entry.body_mem[first:last + 1], 0
        else:
            plan.count = last - first + 1
    return plan.count == 0 or entry.blob_path is not None


class Answer:
    """A keep-alive answer remembered for one exact request head (io_uring fused hit):
    valid while the index generation is `gen` and the clock is before `until`. Either
    `out` (head and body, all in memory) or `file` ((head, entry, plan) for a body read
    from the blob file) is set; neither means: take the general step."""
    __slots__ = ("out", "size", "sqes", "file", "gen", "until", "auth", "blob", "dkey", "dcount", "fused",
                 "log", "logpart", "ref")

    def __init__(self, gen, until):
        self.gen = gen
        self.until = until
        self.out = None
        self.file = None
        self.dkey = None
        self.logpart = None   # its access-log line's fixed text (log.AccessLogWriter.turn)
        self.ref = None       # `out` as the ring's fused send takes it (Ring.fused_data), once


def remember_answer(head, entry, gen, until):
    """An Answer for `head` on `entry`, planned by plan_warm into a plan of its own."""
    a = Answer(gen, until)
    plan = WarmPlan()
    if not head.keep_alive or not plan_warm(head, entry, plan):
        return a
    a.auth = head.authorization
    a.blob = entry.blob_id
    a.fused = plan.status == 200 or plan.status == 206
    # per-repo download stats count GETs of files (cache/downloads.py)
    a.dkey = entry.key if entry.kind == FILE and head.method == "GET" else None
    if plan.count:
        a.file = (head, entry, plan)
        a.dcount = plan.count   # body bytes of one answer, as the general step counts them
        a.size = len(plan.head) + plan.count
        a.sqes = 1              # the next recv (the answer goes out by send + sendfile)
        a.log = (head.method, head.target, plan.status, a.size, "hit")
        return a
    # exactly bytes: the io_uring backend hands the kernel its address (platform/uring.py)
    a.out = out = bytes(plan.head + plan.body if plan.body else plan.head)
    a.size = n = len(out)
    a.sqes = 2              # its send and the next recv
    a.dcount = n            # bytes of one answer
    a.log = (head.method, head.target, plan.status, n, "hit")
    return a
