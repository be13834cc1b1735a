"""Worker processes for `--listeners N` with N > 1 (docs/decisions/0006).

Under the GIL, reactor threads in one process take turns; reactors in separate
processes do not. So with N > 1 the parent keeps the upstream plane (fill pool,
authoritative index, in-flight fills), the admin listener and the N listening sockets,
and runs one worker process per listening socket. A worker is one reactor thread (the
process's main thread) plus two IPC threads and the access-log writer; it serves warm hits
from the index the parent writes (one LMDB file every process maps, read-only here:
cache/index_view.py) and sends everything else to the parent as a Job.

Workers are forked by a fork server (pulsys/forkserver.py) that the parent forks
while it is still single-threaded, with every module imported: a worker starts in
milliseconds and shares those pages with every other. Never a bare fork of the parent:
it is multi-threaded by the time it must restart a worker, and a fork of a threaded
process may inherit locks held by threads that do not exist in the child. Without a
fork server (it could not be started, or died) a worker is a new interpreter
(subprocess, fork+exec). Either way the worker gets its listening socket, its end of
the socketpair and the counter table as file descriptors.

Counters: each worker's reactor copies its counter list into its row of a shared int64
table (an mmap of an unlinked temporary file, also inherited), on its own thread every
0.1 s while they change (CounterPublisher, a tick hook: docs/decisions/0023); the parent
sums the rows with its own pool counters. A dead worker's last row is folded into a
`retired` row so totals never go backwards.
"""

import array
import collections
import mmap
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

from pulsys import ipc
from pulsys import metrics as M
from pulsys.forkserver import ForkServer, ForkServerError
from pulsys.auth.gate import Gate
from pulsys.cache.index_view import IndexView
from pulsys.cache.indexdb import IndexDB
from pulsys.cache.recency import RecencyReporter
from pulsys.cache.store import Store
from pulsys.log import AccessLogWriter, LineStream, configure, get_logger
from pulsys.platform import load_sender
from pulsys.platform.heap import steady_heap
from pulsys.reactor import backend_class, build_reactor, select_backend
from pulsys.reactor.fdcache import FdCache
from pulsys.reactor.mailbox import Mailbox

ROW = M.WIDTH + 1                 # the reactor's counters and histograms, then its open connections
OPEN_CONNECTIONS = M.WIDTH
_ENTER = M.URING_ENTER
LINK_TIMEOUT = 10.0               # a worker that reads nothing for this long is restarted
START_TIMEOUT = 30.0              # every worker must be ready within this at startup
STOP_GRACE = 5.0                  # SIGTERM, then SIGKILL after this many seconds
CRASH_LOOP = (5, 10.0)            # more than 5 restarts within 10 s: give up, exit 1
# The parent checks its workers when a link ends (a worker's exit closes its socket),
# CHECK_SOON later while a worker whose link ended is not reaped yet (its files close
# before it becomes a zombie), and every CHECK_IDLE in any case.
CHECK_SOON = 0.05
CHECK_IDLE = 5.0


class WorkerError(Exception):
    """The workers cannot be kept running; the message is for the operator."""


# -- counters -----------------------------------------------------------------------


class CounterTable:
    """Parent side: one int64 row of ROW values per worker, shared with the workers."""

    def __init__(self, rows):
        self.rows = rows
        self.file = tempfile.TemporaryFile(prefix="pulsys-counters-")
        self.file.truncate(max(rows * ROW * 8, mmap.PAGESIZE))
        self.mm = mmap.mmap(self.file.fileno(), rows * ROW * 8)
        self.view = memoryview(self.mm).cast("q")
        self.retired = [0] * M.WIDTH

    def fileno(self):
        return self.file.fileno()

    def row(self, i):
        return self.view[i * ROW:(i + 1) * ROW].tolist()

    def retire(self, i):
        """Worker i is dead: keep its counts, clear its row for the next one."""
        r = self.row(i)
        for k in range(M.WIDTH):
            self.retired[k] += r[k]
        self.view[i * ROW:(i + 1) * ROW] = array.array("q", bytes(ROW * 8))

    def close(self):
        self.view.release()
        self.mm.close()
        self.file.close()


class CounterPublisher:
    """Worker side: copies the reactor's counters into this worker's row. A tick hook
    (ReactorBase.tick_hooks): on the reactor's thread, every TICK while they change, so
    an idle worker copies nothing and wakes nobody. The io_uring enter count alone does
    not count as a change: an idle loop's own wake-up enters the ring."""

    def __init__(self, fd, row, reactor):
        self.mm = mmap.mmap(fd, (row + 1) * ROW * 8)
        self.view = memoryview(self.mm).cast("q")[row * ROW:(row + 1) * ROW]
        self.reactor = reactor
        self.last = array.array("q")

    def __call__(self, now=None):
        """Copy the counters when they changed. -> True when they did."""
        vals = array.array("q", self.reactor.counters)
        vals.append(self.reactor.open_sockets())
        last = self.last
        if len(last) == len(vals) and vals[:_ENTER] == last[:_ENTER] and vals[_ENTER + 1:] == last[_ENTER + 1:]:
            return False
        self.view[:] = vals
        self.last = vals
        return True

    def flush(self):
        """Copy them whatever changed (the worker's last copy, after its loop ended)."""
        self.last = array.array("q")
        self()


# -- worker process -----------------------------------------------------------------


def worker_main(ipc_fd, listener_fd, counters_fd, row):
    """Entry point of a worker process (started by Supervisor). Returns the exit code."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)     # the parent decides when workers stop
    steady_heap()      # inherited from a fork; a worker started by fork+exec sets it here
    link = ipc.Link(socket.socket(fileno=ipc_fd))
    hello = link.recv()
    if type(hello) is not ipc.HelloFrame:
        return 2
    worker_no, config, facts = hello
    keys = link.recv()          # always the second frame (Supervisor._spawn)
    if type(keys) is not ipc.KeysFrame:
        return 2
    gate = Gate(keys.table) if keys.table is not None else None
    configure(config.log_format, config.log_level)
    log = get_logger("worker").bind(worker=worker_no)
    listener = socket.socket(fileno=listener_fd)
    listener.setblocking(False)
    store = Store(config.cache_dir)
    db = IndexDB(store.root, writer=False)
    index = IndexView(db, store.blob_path, config.revision_ttl)
    box = {}

    def on_eof():
        r = box.get("reactor")
        if r is not None:
            r.stop()
        else:
            os._exit(0)
    # the reactor's mailbox and fd cache come first: the link posts evicted blobs to them
    mailbox, fdcache = Mailbox(), FdCache()
    client = ipc.ParentClient(link, on_eof, store.blob_path,
                              on_drop=lambda paths: mailbox.post(fdcache.forget, paths),
                              on_keys=gate.load if gate is not None else None)
    client.start()
    sender_name, sender = load_sender(facts, None if config.sendfile == "auto" else config.sendfile)
    backend = select_backend(facts, config.iouring)
    reactor = build_reactor(backend, listener, index, client.submit, sender, config, gate, mailbox, fdcache)
    box["reactor"] = reactor
    signal.signal(signal.SIGTERM, lambda *_: reactor.stop())
    counters = CounterPublisher(counters_fd, row, reactor)
    recency = RecencyReporter(reactor, lambda items: client.send(ipc.ServedFrame(items)),
                              send_downloads=lambda items: client.send(ipc.DownloadsFrame(items)))
    reactor.tick_hooks += (counters, recency)
    writer = None
    if reactor.access_log is not None:
        writer = AccessLogWriter([reactor.access_log], config.log_format, stream=LineStream(2))
        reactor.tick_hooks.append(writer.nudge_hook(reactor.access_log))
        writer.start()
    client.send(ipc.ReadyFrame(os.getpid(), backend, sender_name, db.count()[0]))
    code = 0
    try:
        reactor.run()
    except BaseException:
        log.exception("reactor crashed", backend=reactor.name)
        code = 1
    finally:
        counters.flush()          # the loop has ended: its thread is this one
        recency.flush()
        if writer is not None:
            writer.stop()
            writer.join(timeout=2)
        client.stop()
        client.writer.join(timeout=2)   # queued frames (the last SERVED report) go out first
        index.close()
    return code


def start_fork_server():
    """A ForkServer for worker processes, or None when this process already runs threads.
    Call it before importing the upstream and admin planes: the workers then hold only
    the modules they use, shared copy-on-write with the fork server."""
    backend_class("selector")               # what every worker imports; io_uring's is per worker
    try:
        return ForkServer(forked_worker)
    except ForkServerError:
        return None


def forked_worker(fds, row):
    """worker_main in a process forked by the fork server (ForkServer's target)."""
    ipc_fd, listener_fd, counters_fd = fds
    return worker_main(ipc_fd, listener_fd, counters_fd, row)


# -- parent side ------------------------------------------------------------------------


class _Slot:
    __slots__ = ("no", "listener", "proc", "link", "reader", "ready", "info", "restarts",
                 "started")

    def __init__(self, no, listener):
        self.no = no
        self.listener = listener
        self.proc = None
        self.link = None
        self.reader = None
        self.ready = threading.Event()
        self.info = {}
        self.restarts = 0
        self.started = 0.0


def _exit_text(rc):
    if rc < 0:
        try:
            return "killed by %s" % signal.Signals(-rc).name
        except ValueError:
            return "killed by signal %d" % -rc
    return "exit code %d" % rc


class Supervisor:
    """Starts one worker per listening socket, restarts the ones that die, stops them.

    `submit` is the fill pool's submit; `links` and `relays` are the parent's ends of
    the broadcasts (API keys, evicted blobs) and the fill progress relay (pulsys.ipc);
    `forks` the ForkServer whose target is forked_worker, or None: fork+exec."""

    def __init__(self, config, facts, listeners, links, relays, submit, on_served=None,
                 on_downloads=None, key_table=None, forks=None):
        self.forks = forks
        self.on_served = on_served        # fn([(blob id, time)]): workers' warm hits (Space)
        self.on_downloads = on_downloads  # fn([(cache key, packed)]): per-repo stats (Downloads)
        self.key_table = key_table        # fn() -> (generation, active API keys), or None: --auth off
        self.config = config
        self.facts = facts
        self.links = links
        self.relays = relays
        self.submit = submit
        self.slots = [_Slot(i, lst) for i, lst in enumerate(listeners)]
        self.table = CounterTable(len(self.slots))
        self.deaths = collections.deque()
        self.stopping = False
        self.wake = threading.Event()     # set when a worker's link ends: check() is due
        self.log = get_logger("supervisor")
        pkg_dir = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        # sys.modules["rich"] = None: structlog imports rich, when installed (import-linter
        # brings it into test venvs), for pretty tracebacks only; that import was 0.15 s of
        # a worker's 0.55 s start here, and `--listeners 8` starts eight at once
        self._code = ("import signal; signal.signal(signal.SIGINT, signal.SIG_IGN); import sys; "
                      "sys.modules.setdefault('rich', None); "
                      "sys.path.insert(0, %r); from pulsys.workers import worker_main; "
                      "raise SystemExit(worker_main(%%d, %%d, %%d, %%d))" % pkg_dir)

    # -- start ---------------------------------------------------------------------

    def _spawn(self, slot):
        psock, csock = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        link = ipc.Link(psock, timeout=LINK_TIMEOUT)
        # HELLO is the first frame; registering under the link's lock makes every
        # broadcast (keys, evicted blobs) from now on follow it, so the worker misses none.
        with link.lock:
            # the keys in force now (the worker loads them before it serves); later
            # changes are broadcast to every link (ADR 0009)
            gen, keys = self.key_table() if self.key_table is not None else (None, None)
            self.links.add(link, gen)
            link.send_frame_locked(ipc.encode(ipc.HelloFrame(slot.no, self.config, self.facts)))
            link.send_frame_locked(ipc.encode(ipc.KeysFrame(keys, gen)))
        fds = (csock.fileno(), slot.listener.fileno(), self.table.fileno())
        try:
            proc = self._start_process(fds, slot.no)
        except BaseException:
            self.links.remove(link)
            link.close()
            raise
        finally:
            csock.close()
        slot.proc, slot.link, slot.started = proc, link, time.monotonic()
        slot.ready.clear()
        slot.info = {}
        slot.reader = threading.Thread(target=self._serve, args=(slot, link),
                                       name="pulsys-worker-%d" % slot.no, daemon=True)
        slot.reader.start()

    def _start_process(self, fds, no):
        if self.forks is not None:
            try:
                return self.forks.spawn(fds, no)
            except ForkServerError as e:
                self.log.warning("fork server failed; workers start as new interpreters from now on",
                                 error=str(e))
                self.forks = None
        return subprocess.Popen([sys.executable, "-c", self._code % (fds + (no,))],
                                pass_fds=fds, stdin=subprocess.DEVNULL, close_fds=True)

    def _serve(self, slot, link):
        def on_ready(msg):          # an ipc.ReadyFrame
            slot.info = {"pid": msg.pid, "backend": msg.backend, "sender": msg.sender,
                         "index_entries_at_start": msg.index_entries}
            slot.ready.set()
        try:
            ipc.serve_worker(link, self.submit, self.relays, on_ready, self.on_served, self.on_downloads,
                             on_keys_applied=lambda gen: self.links.keys_applied(link, gen))
        except Exception:
            self.log.exception("worker link failed", worker=slot.no)
        finally:
            self.links.remove(link)
            link.shutdown()
            self.wake.set()

    def start(self):
        """Start every worker and wait until each is ready. Raises WorkerError."""
        for slot in self.slots:
            try:
                self._spawn(slot)
            except OSError as e:
                raise WorkerError("cannot start worker %d: %s" % (slot.no, e.strerror or e)) from None
        deadline = time.monotonic() + START_TIMEOUT
        for slot in self.slots:
            while not slot.ready.wait(0.05):
                rc = slot.proc.poll()
                if rc is not None:
                    raise WorkerError("worker %d exited during startup (%s)" % (slot.no, _exit_text(rc)))
                if time.monotonic() > deadline:
                    raise WorkerError("worker %d not ready after %.0f s" % (slot.no, START_TIMEOUT))
        return self

    # -- supervise --------------------------------------------------------------------

    def check(self):
        """Restart dead workers. Raises WorkerError on a crash loop. Call when `wake` is
        set, and now and then. -> True when a worker whose link ended is still to be
        reaped (check again soon)."""
        soon = False
        for slot in self.slots:
            if self.stopping:
                return False
            rc = slot.proc.poll()
            if rc is None:
                if not slot.reader.is_alive():
                    if slot.link.broken:
                        slot.proc.kill()      # the link is gone: a worker cannot serve without it
                    soon = True
                continue
            self._restart(slot, rc)
        return soon

    def _restart(self, slot, rc):
        # the dead worker is not ready, and its ready frame (pid, backend) no longer says
        # who serves: describe() showed it ready, with the new restart count, until the
        # new one was forked (tests/multiproc/test_listeners.py)
        slot.ready.clear()
        slot.info = {}
        now = time.monotonic()
        self.deaths.append(now)
        while self.deaths and self.deaths[0] < now - CRASH_LOOP[1]:
            self.deaths.popleft()
        self.log.warning("worker exited; restarting it", worker=slot.no, pid=slot.proc.pid,
                         status=_exit_text(rc), uptime_seconds=round(now - slot.started, 3))
        slot.link.close()
        slot.reader.join(timeout=2)
        self.table.retire(slot.no)
        if len(self.deaths) > CRASH_LOOP[0]:
            raise WorkerError("workers keep dying: %d restarts within %.0f s (last: worker %d, %s)"
                              % (len(self.deaths), CRASH_LOOP[1], slot.no, _exit_text(rc)))
        slot.restarts += 1
        try:
            self._spawn(slot)
        except OSError as e:
            raise WorkerError("cannot restart worker %d: %s" % (slot.no, e.strerror or e)) from None

    # -- stop -------------------------------------------------------------------------

    def stop(self):
        """SIGTERM every worker by PID, SIGKILL those still alive after STOP_GRACE."""
        self.stopping = True
        procs = [s.proc for s in self.slots if s.proc is not None]
        for p in procs:
            if p.poll() is None:
                p.terminate()
        deadline = time.monotonic() + STOP_GRACE
        for p in procs:
            try:
                p.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        # the workers are gone: each reader reaches EOF after the frames they sent last
        # (their final SERVED report), so let the readers drain before closing the links
        deadline = time.monotonic() + 2.0
        for s in self.slots:
            if s.reader is not None:
                s.reader.join(timeout=max(0.0, deadline - time.monotonic()))
        for s in self.slots:
            if s.link is not None:
                s.link.close()
        for s in self.slots:
            if s.reader is not None:
                s.reader.join(timeout=2)
        self.table.close()

    # -- reporting ----------------------------------------------------------------------

    def counter_lists(self):
        """Every worker's counters (live rows and the dead ones' totals)."""
        return [self.table.retired] + [self.table.row(s.no)[:M.WIDTH] for s in self.slots]

    def open_connections(self):
        return sum(self.table.row(s.no)[OPEN_CONNECTIONS] for s in self.slots)

    def describe(self):
        out = []
        for s in self.slots:
            row = self.table.row(s.no)
            d = {"worker": s.no, "pid": s.proc.pid if s.proc else None,
                 "alive": s.proc is not None and s.proc.poll() is None,
                 "ready": s.ready.is_set(), "restarts": s.restarts,
                 "started_by": "exec" if isinstance(s.proc, subprocess.Popen) else "fork server",
                 "frames_sent": s.link.frames if s.link is not None else 0,
                 "open_connections": row[OPEN_CONNECTIONS],
                 "counters": dict(zip(M.NAMES, row))}
            d.update(s.info)
            out.append(d)
        return out

    def backend(self):
        for s in self.slots:
            if s.info.get("backend"):
                return s.info["backend"], s.info["sender"]
        return None, None
