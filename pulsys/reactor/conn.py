"""Per-connection state (one object per client connection, reused for every request).

Conn holds what the shared request step (reactor/base.py) uses; a backend that needs
more per connection subclasses it (selector.SelectorConn, uring.UringConn)."""

from pulsys.warm import WarmPlan

READ, SEND, WAIT_JOB, WAIT_FILL, CLOSED = range(5)

RBUF_SIZE = 64 * 1024


class Conn:
    __slots__ = (
        "sock", "fd", "rbuf", "rview", "rstart", "rend", "state", "gen",
        "head", "plan", "out", "out_off", "file_fd", "file_path", "file_off", "file_left",
        "fill", "close_after", "t0", "outcome", "status", "sent", "last_active",
        "peer",        # key counted by --max-connections-per-ip, or None
        "hbase",       # latency histogram of this request (metrics.H_WARM/H_COLD/H_API), or -1
        "check",       # (fd, from, to): sent bytes of a failed fill to compare with the refetch
        "rop",         # a backend's made-up read into rbuf (uring: its RECV SQE), None when rbuf changes
    )

    def __init__(self, sock, now):
        self.sock = sock
        self.fd = sock.fileno()
        self.rbuf = bytearray(RBUF_SIZE)
        self.rview = memoryview(self.rbuf)
        self.rop = None
        self.rstart = 0
        self.rend = 0
        self.state = READ
        self.gen = 0
        self.head = None
        self.plan = WarmPlan()
        self.out = b""
        self.out_off = 0
        self.file_fd = -1
        self.file_path = None     # blob path (fd from the FdCache) or None (own fd of a part file)
        self.file_off = 0
        self.file_left = 0
        self.fill = None
        self.close_after = False
        self.t0 = now
        self.outcome = ""
        self.status = 0
        self.sent = 0
        self.last_active = now
        self.peer = None
        self.hbase = -1
        self.check = None


def respond(conn, head, status, data, close):
    """Set conn up to send `data`, a whole answer in memory (a refusal, a local answer);
    `close` ends the connection after it (always, when the head could not be parsed)."""
    conn.out, conn.out_off, conn.file_left, conn.fill = data, 0, 0, None
    conn.status, conn.outcome, conn.state = status, "error" if status >= 400 else "local", SEND
    if close or head is None:
        conn.close_after = True
    if head is not None:
        conn.head = head


def close_socket(conn):
    try:
        conn.sock.close()
    except OSError:
        pass
