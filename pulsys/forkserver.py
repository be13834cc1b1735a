"""A fork server: worker processes forked from a process that imported pulsys once.

Starting a worker with fork+exec costs a new interpreter and its imports (~0.4 s per
worker on the 2-CPU VM of results/linux-x86_64-2cpu/index_scale.json; eight of them
made `--listeners 8` answer its first hit after 2.6-4 s), and each worker holds its
own copy of every module it imported (~28 MiB PSS each). A bare fork of the server
is not safe once it runs threads: a child of a threaded process may inherit locks
held by threads that do not exist in it (POSIX fork(2), "async-signal-safe functions
only"). So the server forks this process first, while it is still single-threaded,
and asks it for every worker from then on, start and restarts alike.

The fork server only forks, signals and reaps. It is the parent of the workers:
it reports each exit (status as subprocess.Popen.returncode would give it) and sends
signals only to children it has not reaped yet, so a signal never reaches a reused
pid. It calls gc.freeze() once: collections in the workers then never write to the
objects it imported, and those pages stay shared copy-on-write (the gc module docs,
gc.freeze). It exits when the server closes its end, or dies.

Messages on a socketpair are 16 bytes: kind, a 32-bit and a 64-bit number; a spawn
request carries the worker's file descriptors as SCM_RIGHTS (unix(7)).

    server -> fork server   b"S" (arg, 0) + fds     fork a worker: target(fds, arg)
                            b"K" (signal, pid)      signal a live child
    fork server -> server   b"P" (0, pid)           the worker's pid
                            b"E" (errno, 0)         fork failed
                            b"X" (returncode, pid)  a child exited
"""

import errno
import gc
import os
import select
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
import traceback

MSG = struct.Struct("=c3xiq")
MAX_FDS = 8


def _send(sock, kind, a=0, b=0, fds=()):
    data = MSG.pack(kind, a, b)
    if fds:
        socket.send_fds(sock, [data], list(fds))
    else:
        sock.sendall(data)


def _recv(sock):
    """(kind, a, b, fds), or None at EOF."""
    data, fds, _, _ = socket.recv_fds(sock, MSG.size, MAX_FDS)
    while data and len(data) < MSG.size:
        more = sock.recv(MSG.size - len(data))
        if not more:
            break
        data += more
    if len(data) < MSG.size:
        for fd in fds:
            os.close(fd)
        return None
    kind, a, b = MSG.unpack(data)
    return kind, a, b, fds


def returncode(status):
    """A wait status as subprocess.Popen.returncode: the exit code, or -signal."""
    if os.WIFSIGNALED(status):
        return -os.WTERMSIG(status)
    return os.WEXITSTATUS(status)


# -- the fork server's own process ------------------------------------------------------


def _child(target, fds, arg, ctl, wake):
    """In a new worker: drop the fork server's state, run target, never return."""
    code = 1
    try:
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        ctl.close()
        for fd in wake:
            os.close(fd)
        gc.enable()
        code = target(fds, arg)
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else 1
    except BaseException:
        traceback.print_exc()
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code if isinstance(code, int) else 1)


class _Zygote:
    def __init__(self, ctl, target):
        self.ctl = ctl
        self.target = target
        self.live = set()

    def run(self):
        signal.signal(signal.SIGINT, signal.SIG_IGN)     # ^C reaches the whole group; the server decides
        rfd, wfd = os.pipe()
        os.set_blocking(wfd, False)
        signal.set_wakeup_fd(wfd)
        signal.signal(signal.SIGCHLD, lambda *_: None)   # a handler, so the wakeup fd is written
        self.wake = (rfd, wfd)
        gc.collect()
        gc.freeze()
        while True:
            r, _, _ = select.select([self.ctl, rfd], [], [])
            if rfd in r:
                os.read(rfd, 512)
            self.reap()
            if self.ctl in r:
                try:
                    msg = _recv(self.ctl)
                except OSError:
                    msg = None
                if msg is None:
                    return
                self.handle(*msg)

    def reap(self):
        while self.live:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                self.live.clear()
                return
            if pid == 0:
                return
            self.live.discard(pid)
            _send(self.ctl, b"X", returncode(status), pid)

    def handle(self, kind, a, b, fds):
        if kind == b"S":
            self.spawn(fds, a)
        elif kind == b"K":
            if b in self.live:
                try:
                    os.kill(b, a)
                except ProcessLookupError:
                    pass
        for fd in fds:
            os.close(fd)

    def spawn(self, fds, arg):
        try:
            pid = os.fork()
        except OSError as e:
            _send(self.ctl, b"E", e.errno or errno.EAGAIN)
            return
        if pid == 0:
            _child(self.target, fds, arg, self.ctl, self.wake)
        self.live.add(pid)
        _send(self.ctl, b"P", 0, pid)


# -- the server's side ----------------------------------------------------------------


class ForkedProcess:
    """What Supervisor needs of a subprocess.Popen: pid, poll, wait, terminate, kill."""

    def __init__(self, server, pid):
        self.server = server
        self.pid = pid
        self.returncode = None
        self.done = threading.Event()

    def poll(self):
        return self.returncode

    def wait(self, timeout=None):
        if not self.done.wait(timeout):
            raise subprocess.TimeoutExpired("pulsys worker %d" % self.pid, timeout)
        return self.returncode

    def send_signal(self, sig):
        if self.returncode is not None:
            return
        if self.server.alive:
            self.server.signal(self.pid, sig)
        else:                 # an orphan (the fork server died): not reaped by us, still ours
            try:
                os.kill(self.pid, sig)
            except ProcessLookupError:
                pass

    def terminate(self):
        self.send_signal(signal.SIGTERM)

    def kill(self):
        self.send_signal(signal.SIGKILL)

    def _exited(self, rc):
        self.returncode = rc
        self.done.set()


class ForkServerError(OSError):
    pass


class ForkServer:
    """The server's handle on its fork server. Construct it while the process is
    single-threaded; `spawn(fds, arg)` then runs `target(fds, arg)` in a new process,
    forked from the fork server, whose exit code is the child's returncode."""

    REPLY_TIMEOUT = 10.0

    def __init__(self, target):
        if threading.active_count() != 1:
            raise ForkServerError(errno.EINVAL, "a fork server must be started before any thread")
        mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        sys.stdout.flush()        # else both processes would write what is still buffered
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            code = 0
            try:
                mine.close()
                _Zygote(theirs, target).run()
            except BaseException:
                traceback.print_exc()
                code = 1
            finally:
                os._exit(code)
        theirs.close()
        self.pid = pid
        self.sock = mine
        self.procs = {}
        self.lock = threading.Lock()          # one spawn at a time; its reply is the next P/E
        self.replies = []
        self.replied = threading.Condition()
        self.alive = True
        self.reader = threading.Thread(target=self._read, name="pulsys-forkserver", daemon=True)
        self.reader.start()

    def spawn(self, fds, arg):
        """A ForkedProcess running target(fds, arg). Raises ForkServerError."""
        with self.lock:
            with self.replied:
                self.replies.clear()
            try:
                _send(self.sock, b"S", arg, 0, fds)
            except OSError as e:
                raise ForkServerError(e.errno, "fork server: %s" % (e.strerror or e)) from None
            deadline = time.monotonic() + self.REPLY_TIMEOUT
            with self.replied:
                while not self.replies and self.alive and time.monotonic() < deadline:
                    self.replied.wait(0.1)
                if not self.replies:
                    raise ForkServerError(errno.ECHILD, "fork server is gone" if not self.alive
                                          else "fork server did not answer")
                kind, a, proc = self.replies.pop(0)
            if kind == b"E":
                raise ForkServerError(a, "fork: %s" % os.strerror(a))
            return proc

    def signal(self, pid, sig):
        try:
            with self.lock:
                _send(self.sock, b"K", int(sig), pid)
        except OSError:
            pass             # the fork server is gone; so are its children's parent links

    def _read(self):
        try:
            while True:
                msg = _recv(self.sock)
                if msg is None:
                    break
                self._on(*msg[:3])
        except OSError:
            pass
        finally:
            self._gone()

    def _on(self, kind, a, b):
        if kind == b"X":
            proc = self.procs.pop(b, None)
            if proc is not None:
                proc._exited(a)
            return
        proc = None
        if kind == b"P":
            proc = self.procs[b] = ForkedProcess(self, b)
        with self.replied:
            self.replies.append((kind, a, proc))
            self.replied.notify_all()

    def _gone(self):
        """The fork server died: its children went to init, which reaps them; report
        each as exited once it has (kill(pid, 0) fails), polled by a thread."""
        with self.replied:
            self.alive = False
            self.replied.notify_all()
        orphans = list(self.procs.values())
        self.procs.clear()
        if orphans:
            threading.Thread(target=_watch_orphans, args=(orphans,), name="pulsys-orphans",
                             daemon=True).start()

    def close(self):
        """Let the fork server exit (its children have been stopped) and reap it."""
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.reader.join(timeout=2)
        self.sock.close()
        try:
            os.waitpid(self.pid, 0)
        except ChildProcessError:
            pass


def _watch_orphans(procs):
    while procs:
        for p in list(procs):
            try:
                os.kill(p.pid, 0)
            except ProcessLookupError:
                p._exited(-signal.SIGKILL)
                procs.remove(p)
            except PermissionError:
                pass
        time.sleep(0.1)
