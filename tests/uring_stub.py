"""An io_uring reactor that runs its own Python against a ring that only records what it
is asked to do, with one warm 4 KiB file (body in memory) in its index: for checking and
timing the fused warm hit (UringReactor.make_dispatch) without the kernel."""

import os
import socket
import time

from pulsys.http1.parse import parse_request_head
from pulsys.model.entry import FILE, Entry
from pulsys.model.key import target_key
from pulsys.route import route
from tests.indexes import new_index, view_of


class RecordingRing:
    """Records the data of each send the reactor prepares instead of submitting it."""
    enters = 0

    def __init__(self):
        self.sent = []

    def prep_send(self, fd, data, tag, flags=0, sqe_flags=0):
        self.sent.append(data)
        return data

    def prep_recv(self, fd, buf, tag):
        pass

    def fused_conn(self, fd, buf, send_tag, recv_tag):
        return fd, buf, send_tag, recv_tag

    def fused_data(self, data):
        return data

    def prep_fused_recv(self, conn):
        pass

    def prep_fused(self, data, conn):
        self.sent.append(data)

    def prep_poll_out(self, fd, tag):
        raise AssertionError("an in-memory answer never waits for POLLOUT")


class FusedHitRig:
    """`req` is the request head; `commit` the commit `main` of its repo maps to and `sha`
    the file's sha256. `deliver()` hands the reactor one recv completion carrying `req`."""

    def __init__(self, tmp_path, req, commit, sha, gate=None):
        from pulsys.platform import PlatformFacts, load_sender
        from pulsys.reactor.uring import UringConn
        from pulsys.reactor.fdcache import FdCache
        from pulsys.reactor.mailbox import Mailbox
        from pulsys.reactor.uring import OP_RECV, UringReactor

        self.req, self.tmp_path, self.sha, self.commit = req, tmp_path, sha, commit
        self.index = ix = new_index(str(tmp_path / "index"))
        self.target = t = route(parse_request_head(req, 0, len(req)))
        self.key = target_key(t, commit)
        self.view = None
        self.publish(os.urandom(4096))
        ix.set_rev(t.rtype, t.repo, t.rev, commit, expires=1e18, fetched_at=0)
        self.sockets = [socket.socket()] + list(socket.socketpair())
        sender = load_sender(PlatformFacts.probe(), None)[1]
        self.jobs = []        # misses the reactor hands to the fill pool
        self.view = view_of(ix)
        self.warm()
        self.reactor = r = UringReactor(self.sockets[0], self.view, self.jobs.append, Mailbox(), sender, FdCache(),
                                        gate=gate)
        r.ring = self.ring = RecordingRing()
        self.dispatch = r.make_dispatch()     # the completion handler the ring's reap calls
        self.conn = UringConn(self.sockets[1], time.monotonic())
        r.conns[self.conn.fd] = self.conn
        self.tag = (self.conn.fd << 3) | OP_RECV

    def publish(self, body, in_memory=True):
        """Put a new Entry with this body (on disk, and in memory unless told: the
        reactor's IndexView reads small bodies when it decodes) under the file's key."""
        self.body = body
        blob_id = "sha256/" + self.sha
        path = self.index.blob_path(blob_id)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path + ".new", "wb") as f:
            f.write(body)
        os.replace(path + ".new", path)
        if self.view is not None:
            self.view.small_max = 16 << 10 if in_memory else 0
        self.index.publish(Entry(FILE, self.key, len(body), self.sha, self.commit, True, blob_id, path))
        if self.view is not None:
            self.warm()

    def warm(self):
        """Look the file up twice, as a file asked for before: the view then holds its
        small body (IndexView reads it at a key's second lookup)."""
        for _ in range(2):
            self.target.seen = None
            self.view.lookup(self.target, time.monotonic())

    def deliver(self):
        """One recv completion, then the end of its turn (as UringReactor's turn) and a
        tick (its histogram and log text, UringReactor.turn_work)."""
        n = len(self.req)
        self.conn.rbuf[0:n] = self.req
        self.conn.inflight += 1
        r = self.reactor
        r.now = time.monotonic()
        self.dispatch(self.tag, n, 0)
        if r._turn_hits:
            r.fold_hits()
        r.turn_work()

    def close(self):
        for s in self.sockets:
            s.close()
