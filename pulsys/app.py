"""Composition root: builds the index, store, fill pool, listeners and reactors, and
owns start order, signals and shutdown order. The only module that wires planes
together; `cli` is the only module that imports it.

--listeners 1 runs everything in this process (Server). --listeners N > 1 runs one
reactor per worker process and keeps the upstream plane here (ProcessServer, with
the process and IPC glue in pulsys.workers and pulsys.ipc)."""

import os
import signal
import sys
import threading
import time

from pulsys import __version__
from pulsys import metrics as M
from pulsys.admin.server import AdminServer
from pulsys.cache.index import Index
from pulsys.cache.inflight import Inflight
from pulsys.cache.store import Store
from pulsys.errors import BackendUnavailable
from pulsys.ipc import FillRelays, ReplicatingIndex, Replicas
from pulsys.log import AccessLog, AccessLogWriter, configure, get_logger
from pulsys.platform import PlatformFacts, load_sender
from pulsys.reactor import backend_class, select_backend
from pulsys.reactor.fdcache import FdCache
from pulsys.reactor.listener import create_listeners
from pulsys.reactor.mailbox import Mailbox
from pulsys.upstream.pool import FillPool
from pulsys.upstream.service import Upstream
from pulsys.upstream.session import make_session
from pulsys.workers import Supervisor, WorkerError


def _fail(msg):
    sys.stderr.write("pulsys: error: %s\n" % msg)
    return 1


class _Base:
    """What both process layouts share: the upstream plane, the index it publishes to,
    the listening sockets, the admin listener, start/stop signalling."""

    def _build(self, config, index):
        self.config = config
        self.log = get_logger("app")
        self.facts = PlatformFacts.probe()
        self.started = time.time()
        self.store = Store(config.cache_dir)
        self.index = index
        t0 = time.monotonic()
        n_entries, n_revs, skipped = self.store.load(self.index, config.revision_ttl, t0)
        removed = self.store.clean_tmp()
        self.load_stats = {"entries": n_entries, "revisions": n_revs, "skipped": skipped,
                           "partials_removed": removed, "seconds": round(time.monotonic() - t0, 3)}
        self.inflight = Inflight()
        self.pool_counters = M.new()
        self.service = Upstream(config, make_session(config.fill_threads), self.index, self.store,
                                self.inflight, self.pool_counters)
        self.pool = FillPool(self.service, config.fill_threads)
        host, port = config.listen
        self.listeners = create_listeners(host, port, config.listeners)
        self.address = self.listeners[0].getsockname()[:2]
        self.sender_name, self.sender = load_sender(
            self.facts, None if config.sendfile == "auto" else config.sendfile)
        self.backend = select_backend(self.facts, config.iouring)
        self.admin = None
        if config.admin_listen:
            self.admin = AdminServer(config.admin_listen[0], config.admin_listen[1], self.vars)
        self._stop = threading.Event()
        self.failed = False
        self.fail_message = None

    def _common_vars(self):
        return {"version": __version__, "backend": self.backend, "sender": self.sender_name,
                "listeners": len(self.listeners), "pid": os.getpid(),
                "uptime_seconds": round(time.time() - self.started, 3),
                "index_entries": len(self.index), "index_revisions": len(self.index.revs),
                "fills_in_flight": self.inflight.count(), "startup_index_load": self.load_stats}

    def _log_started(self, **extra):
        c = self.config
        self.log.info("pulsys started", version=__version__,
                      listen="http://%s:%d" % (self.address[0], self.address[1]),
                      admin=("http://%s:%d" % self.admin.address[:2]) if self.admin else None,
                      backend=self.backend, sender=self.sender_name, listeners=len(self.listeners),
                      upstream=c.upstream, cache_dir=c.cache_dir, offline=c.offline,
                      revision_ttl=c.revision_ttl, index=self.load_stats, **extra)

    def stop(self):
        self._stop.set()


class Server(_Base):
    """One process: a reactor thread per listener and the fill pool threads (the layout
    for --listeners 1, and for in-process tests). `run()` blocks until stop() or a signal."""

    def __init__(self, config):
        self._build(config, Index())
        cls = backend_class(self.backend)
        self.reactors, self.access_buffers = [], []
        for lst in self.listeners:
            access = AccessLog() if config.access_log and config.log_level in ("debug", "info") else None
            if access is not None:
                self.access_buffers.append(access)
            self.reactors.append(cls(lst, self.index, self.pool.submit, Mailbox(), self.sender, FdCache(),
                                     access, max_connections=config.max_connections))
        self.access_writer = (AccessLogWriter(self.access_buffers, config.log_format)
                              if self.access_buffers else None)
        self.threads = []

    def vars(self):
        d = M.merged([r.counters for r in self.reactors] + [self.pool_counters])
        d.update(self._common_vars())
        d["open_connections"] = sum(len(r.conns) for r in self.reactors)
        return d

    def _reactor_main(self, r):
        try:
            r.run()
        except BaseException:
            self.log.exception("reactor crashed", backend=r.name)
            self.failed = True
            self._stop.set()

    def start(self):
        if self.access_writer is not None:
            self.access_writer.start()
        for i, r in enumerate(self.reactors):
            t = threading.Thread(target=self._reactor_main, args=(r,), name="pulsys-reactor-%d" % i,
                                 daemon=True)
            t.start()
            self.threads.append(t)
        if self.admin is not None:
            self.admin.start()
        self._log_started()
        return self

    def wait(self):
        while not self._stop.wait(0.5):
            pass

    def shutdown(self):
        for r in self.reactors:
            r.stop()
        for t in self.threads:
            t.join(timeout=5)
        self.pool.shutdown()
        if self.admin is not None:
            self.admin.stop()
        if self.access_writer is not None:
            self.access_writer.stop()
            self.access_writer.join(timeout=2)
        for lst in self.listeners:
            lst.close()
        self.log.info("pulsys stopped")


class ProcessServer(_Base):
    """--listeners N > 1: this process keeps the upstream plane, the authoritative index,
    the admin listener and the listening sockets; one worker process per listening socket
    runs its reactor (pulsys.workers, docs/decisions/0006)."""

    def __init__(self, config):
        self.replicas = Replicas()
        self._build(config, ReplicatingIndex(self.replicas))
        self.relays = FillRelays()
        self.supervisor = Supervisor(config, self.facts, self.listeners, self.replicas, self.relays,
                                     self.pool.submit)

    def vars(self):
        sup = self.supervisor
        d = M.merged(sup.counter_lists() + [self.pool_counters])
        d.update(self._common_vars())
        backend, sender = sup.backend()
        if backend:
            d["backend"], d["sender"] = backend, sender
        d["open_connections"] = sup.open_connections()
        d["workers"] = sup.describe()
        return d

    def start(self):
        """Start the workers (raises WorkerError when they cannot start), then the admin."""
        self.supervisor.start()
        if self.admin is not None:
            self.admin.start()
        self._log_started(workers=[s.proc.pid for s in self.supervisor.slots])
        return self

    def wait(self):
        while not self._stop.wait(0.1):
            try:
                self.supervisor.check()
            except WorkerError as e:
                self.log.error("giving up", reason=str(e))
                self.failed, self.fail_message = True, str(e)
                return

    def shutdown(self):
        if self.admin is not None:
            self.admin.stop()
        self.supervisor.stop()
        self.pool.shutdown()
        for lst in self.listeners:
            lst.close()
        self.log.info("pulsys stopped")


def run(config):
    configure(config.log_format, config.log_level)
    try:
        os.makedirs(config.cache_dir, exist_ok=True)
    except OSError as e:
        return _fail("cannot create cache dir %s: %s" % (config.cache_dir, e.strerror))
    try:
        server = (ProcessServer if config.listeners > 1 else Server)(config)
    except OSError as e:
        return _fail("cannot start: %s" % (e.strerror or e))
    except BackendUnavailable as e:
        return _fail(str(e))
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: server.stop())
    try:
        server.start()
        server.wait()
    except WorkerError as e:
        server.failed, server.fail_message = True, str(e)
    finally:
        server.shutdown()
    if server.fail_message:
        _fail(server.fail_message)
    return 1 if server.failed else 0
