"""Portable reactor: one thread, non-blocking sockets on selectors (epoll / kqueue).

Optimistic I/O: a connection tries recv/send first and registers interest only when
the kernel says EAGAIN; accept runs until EAGAIN. The loop, in order: wait, dispatch
ready sockets, drain the mailbox, sweep timeouts once a second.
"""

import errno
import selectors
import socket
import time

from pulsys.reactor.base import ReactorBase
from pulsys.reactor.conn import Conn

_LISTEN = object()
_WAKE = object()
_EV = {1: selectors.EVENT_READ, 2: selectors.EVENT_WRITE}


class SelectorConn(Conn):
    __slots__ = ("events",)     # what the selector watches for this connection (1 read, 2 write)

    def __init__(self, sock, now):
        super().__init__(sock, now)
        self.events = 0


class SelectorReactor(ReactorBase):
    name = "selector"

    def __init__(self, *args, **kw):
        super().__init__(*args, **kw)
        self.sel = selectors.DefaultSelector()

    def want(self, conn, events):
        cur = conn.events
        if cur == events:
            return
        sock = conn.sock
        if cur == 0:
            self.sel.register(sock, _EV[events], conn)
        elif events == 0:
            self.sel.unregister(sock)
        else:
            self.sel.modify(sock, _EV[events], conn)
        conn.events = events

    def _accept(self):
        accept = self.listener.accept
        while True:
            try:
                sock, addr = accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as e:
                if e.errno in (errno.EMFILE, errno.ENFILE):
                    self.pause_accept()
                return  # ECONNABORTED and the like: the next readiness event tries again
            peer = addr[0] if type(addr) is tuple else ""
            if not self.admit(sock, peer):
                continue
            sock.setblocking(False)
            if sock.family != socket.AF_UNIX:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            conn = SelectorConn(sock, self.now)
            self.register(conn, peer)
            self.advance(conn)

    def pause_accept(self):
        if not self.accept_paused:
            self.sel.unregister(self.listener)
        ReactorBase.pause_accept(self)

    def resume_accept(self):
        self.sel.register(self.listener, selectors.EVENT_READ, _LISTEN)
        ReactorBase.resume_accept(self)

    def run(self):
        sel = self.sel
        sel.register(self.listener, selectors.EVENT_READ, _LISTEN)
        sel.register(self.mailbox.rsock, selectors.EVENT_READ, _WAKE)
        select, drain, advance = sel.select, self.mailbox.drain, self.advance
        monotonic = time.monotonic
        next_sweep = monotonic() + 1.0
        try:
            while not self.stopping:
                events = select(1.0)
                self.now = now = monotonic()
                for key, _mask in events:
                    d = key.data
                    if d is _LISTEN:
                        self._accept()
                    elif d is _WAKE:
                        drain()
                    else:
                        try:
                            advance(d)
                        except Exception:
                            self.internal_error(d)
                # let go of this batch: it may hold the last references to closed
                # connections (and their 64 KiB buffers) until select returns again
                events = key = d = None
                if now >= next_sweep:
                    self.sweep()
                    next_sweep = now + 1.0
        finally:
            for conn in list(self.conns.values()):
                self.close(conn)
            sel.close()
            self.fdcache.close_all()
