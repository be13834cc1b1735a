"""The one door from other threads into a reactor: a deque plus a wake-up socketpair.

Any thread may post(fn, arg); the reactor thread drains and calls fn(arg). deque.append
and popleft are atomic in CPython, so posting takes no lock. One byte is written to
the wake-up socket only when the reactor has not been signalled since its last drain.
"""

import collections
import socket


class Mailbox:
    def __init__(self):
        # the posts waiting: a reactor's loop tests it (`if mailbox.queue:`) where a
        # pending() call per pass would cost a Python call
        self.queue = self._q = collections.deque()
        self.rsock, self._wsock = socket.socketpair()
        self.rsock.setblocking(False)
        self._wsock.setblocking(False)
        self._signalled = False

    def post(self, fn, arg):
        self._q.append((fn, arg))
        if not self._signalled:
            self._signal()

    def _signal(self):
        self._signalled = True
        try:
            self._wsock.send(b"\0")
        except (BlockingIOError, OSError):
            pass  # a full socket is already a pending wake-up

    def pending(self):
        """True when posts are waiting (no syscall: the reactor may skip its poll)."""
        return bool(self._q)

    def drain(self, cap=1024):
        """Run up to `cap` posted calls on the calling (reactor) thread. Returns count."""
        # Consume wake-up bytes first, then clear the flag, then run the queue: a post
        # that lands after the clear signals again; one that landed before it is
        # already in the queue. (Clearing before consuming can swallow the byte of a
        # post whose flag then stays set with nothing pending: a lost wake-up.)
        try:
            while self.rsock.recv(4096):
                pass
        except (BlockingIOError, InterruptedError):
            pass
        self._signalled = False
        q = self._q
        n = 0
        while q and n < cap:
            fn, arg = q.popleft()
            fn(arg)
            n += 1
        if q:
            self._signal()  # more work: make sure the loop comes back
        return n

    def close(self):
        self.rsock.close()
        self._wsock.close()
