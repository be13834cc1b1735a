"""Composition root: builds the index, store, fill pool, listeners and reactors, and
owns start order, signals and shutdown order. The only module that wires planes
together; `cli` is the only module that imports it."""

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
from pulsys.log import AccessLog, AccessLogWriter, configure, get_logger
from pulsys.platform import PlatformFacts, load_sender
from pulsys.reactor import backend_class, select_backend
from pulsys.reactor.fdcache import FdCache
from pulsys.reactor.listener import create_listeners
from pulsys.reactor.mailbox import Mailbox
from pulsys.upstream.pool import FillPool
from pulsys.upstream.service import Upstream
from pulsys.upstream.session import make_session


def _fail(msg):
    sys.stderr.write("pulsys: error: %s\n" % msg)
    return 1


class Server:
    """A running pulsys; `run()` blocks until stop() or a signal."""

    def __init__(self, config):
        self.config = config
        self.log = get_logger("app")
        self.facts = PlatformFacts.probe()
        self.started = time.time()
        self.store = Store(config.cache_dir)
        self.index = Index()
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
        self.sender_name, sender = load_sender(
            self.facts, None if config.sendfile == "auto" else config.sendfile)
        self.backend = select_backend(self.facts, config.iouring)
        cls = backend_class(self.backend)
        self.reactors, self.access_buffers = [], []
        for lst in self.listeners:
            access = AccessLog() if config.access_log and config.log_level in ("debug", "info") else None
            if access is not None:
                self.access_buffers.append(access)
            self.reactors.append(cls(lst, self.index, self.pool.submit, Mailbox(), sender, FdCache(),
                                     access, max_connections=config.max_connections))
        self.admin = None
        if config.admin_listen:
            self.admin = AdminServer(config.admin_listen[0], config.admin_listen[1], self.vars)
        self.access_writer = (AccessLogWriter(self.access_buffers, config.log_format)
                              if self.access_buffers else None)
        self._stop = threading.Event()
        self.failed = False
        self.threads = []

    def vars(self):
        d = M.merged([r.counters for r in self.reactors] + [self.pool_counters])
        d.update({"version": __version__, "backend": self.backend, "sender": self.sender_name,
                  "listeners": len(self.reactors), "uptime_seconds": round(time.time() - self.started, 3),
                  "index_entries": len(self.index), "index_revisions": len(self.index.revs),
                  "fills_in_flight": self.inflight.count(),
                  "open_connections": sum(len(r.conns) for r in self.reactors),
                  "startup_index_load": self.load_stats})
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
        c = self.config
        self.log.info("pulsys started", version=__version__,
                      listen="http://%s:%d" % (self.address[0], self.address[1]),
                      admin=("http://%s:%d" % self.admin.address[:2]) if self.admin else None,
                      backend=self.backend, sender=self.sender_name, listeners=len(self.reactors),
                      upstream=c.upstream, cache_dir=c.cache_dir, offline=c.offline,
                      revision_ttl=c.revision_ttl, index=self.load_stats)
        return self

    def stop(self):
        self._stop.set()

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


def run(config):
    configure(config.log_format, config.log_level)
    try:
        os.makedirs(config.cache_dir, exist_ok=True)
    except OSError as e:
        return _fail("cannot create cache dir %s: %s" % (config.cache_dir, e.strerror))
    try:
        server = Server(config)
    except OSError as e:
        return _fail("cannot start: %s" % (e.strerror or e))
    except BackendUnavailable as e:
        return _fail(str(e))
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: server.stop())
    server.start()
    try:
        server.wait()
    finally:
        server.shutdown()
    return 1 if server.failed else 0
