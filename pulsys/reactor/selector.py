"""Portable reactor backend: non-blocking sockets on selectors (epoll / kqueue).

Optimistic I/O: a connection tries recv/send first and registers interest only when
the kernel says EAGAIN; accept runs until EAGAIN. One I/O turn: wait up to a second
(ReactorBase.idle_wait: less while a tick hook wants its tick), then dispatch what is
ready (the loop itself is ReactorBase.run). Bodies go out with the platform's sender
(sendfile with MSG_MORE or TCP_CORK; Darwin's sendfile with the head in sf_hdtr, one
syscall for both).
"""

import errno
import selectors
import socket
import time

from pulsys import metrics as M
from pulsys.reactor.base import ReactorBase
from pulsys.reactor.conn import Conn, close_socket

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

    # -- the I/O turn ------------------------------------------------------------------

    def io_open(self):
        self.accept_on()
        self.sel.register(self.mailbox.rsock, selectors.EVENT_READ, _WAKE)
        # the turn runs once per loop pass: what it uses is bound here, once
        select, drain, advance, monotonic = self.sel.select, self.mailbox.drain, self.advance, time.monotonic
        posts, log = self.mailbox.queue, self.log_formatter() or (lambda: None)

        def turn():
            events = select(self.idle_wait)
            now = self.now = monotonic()
            for key, _mask in events:
                d = key.data
                if d is _LISTEN:
                    self._accept()
                elif d is _WAKE:
                    drain()           # consumes the wake-up bytes too
                else:
                    try:
                        advance(d)
                    except Exception:
                        self.internal_error(d)
            if posts:                 # (more than one drain's cap, or posted by this thread)
                drain()
            log()
            # returning lets go of this batch, which may hold the last references to
            # closed connections (and their 64 KiB buffers)
            return now
        self.io_turn = turn

    def io_close(self):
        self.sel.close()

    # -- connections -------------------------------------------------------------------

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

    def recv(self, conn):
        """Read what the socket holds into conn's buffer. -> True when bytes came."""
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

    release_socket = staticmethod(close_socket)

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

    def accept_on(self):
        self.sel.register(self.listener, selectors.EVENT_READ, _LISTEN)

    def accept_off(self):
        self.sel.unregister(self.listener)
