"""Composition root: builds the index, store, fill pool, listeners and reactors, and
owns start order, signals and shutdown order. The only module that wires planes
together; `cli` is the only module that imports it.

--listeners 1 runs everything in this process (Server). --listeners N > 1 runs one
reactor per worker process and keeps the upstream plane here (ProcessServer, with
the process and IPC glue in pulsys.workers and pulsys.ipc)."""

import errno
import os
import signal
import socket
import sys
import threading
import time

from pulsys import __version__
from pulsys import doctor
from pulsys import metrics as M
from pulsys.admin.api import AdminApi
from pulsys.admin.plane import AdminPlane, CachePlane, first_start_banner
from pulsys.admin.readiness import readiness
from pulsys.admin.server import AdminServer
from pulsys.admin.token_secret import read_secret
from pulsys.cache import space as SP
from pulsys.cache.index_import import open_index
from pulsys.cache.index_view import IndexView
from pulsys.cache.indexdb import IndexUnusable
from pulsys.cache.inflight import Inflight
from pulsys.cache.recency import LocalReactors
from pulsys.cache.store import Store
from pulsys.db.database import DatabaseError
from pulsys.errors import BackendUnavailable, ConfigError
from pulsys.ipc import DropFdsFrame, FillRelays, KeysFrame, WorkerLinks
from pulsys.log import AccessLogWriter, configure, get_logger, stderr_stream
from pulsys.platform import PlatformFacts, heap, load_sender, probe_soon
from pulsys.reactor import build_reactor, select_backend
from pulsys.reactor.listener import create_listeners
from pulsys.upstream.guard import UpstreamGuard
from pulsys.upstream.key_tokens import KeyTokens
from pulsys.upstream.pool import FillPool, PoolThreads
from pulsys.upstream.service import Upstream
from pulsys.upstream.session import make_session
from pulsys.upstream.xet_tokens import XetTokens, derive_key
from pulsys.upstream.shared_tier import SharedStoreError, open_tier
from pulsys.workers import CHECK_IDLE, CHECK_SOON, Supervisor, WorkerError

# How long a key change waits for every worker to apply it (WorkerLinks.wait_keys): a
# worker applies a table in well under a millisecond when idle; a worker still behind
# after this is stuck or dying, and the supervisor's health checks deal with it.
KEYS_WAIT = 1.0


def _fail(msg):
    sys.stderr.write("pulsys: error: %s\n" % msg)
    return 1


class _Base:
    """What both process layouts share: the upstream plane, the index it publishes to,
    the listening sockets, the admin listener, start/stop signalling."""

    def _build(self, config):
        self.config = config
        self.log = get_logger("app")
        probe_soon()               # the io_uring probe's child process runs meanwhile
        self.started = time.time()
        self.store = Store(config.cache_dir)
        try:
            self.store.lock()      # shared; `pulsys verify` takes it exclusively
        except BlockingIOError:
            raise OSError(errno.EBUSY, "`pulsys verify` is checking %s; start when it is done"
                          % config.cache_dir) from None
        # keys, audit log, jobs: opened (and migrated) before anything listens
        self.plane = AdminPlane(config)
        # part files first: a fill a crash interrupted may have streamed unverified bytes,
        # and entries of its blob must say so from now on (ADR 0012)
        suspects = self.store.suspects
        removed = self.store.clean_tmp()
        self.index, self.load_stats = open_index(self.store, config.revision_ttl, get_logger("index"))
        self.load_stats["partials_removed"] = removed
        for blob_id in self.store.suspects - suspects:
            self.index.publish_many([self.store.flag_suspect(e) for e in self.index.entries_of_blob(blob_id)])
        self.inflight = Inflight()
        self.pool_counters = M.PerThread()     # pool, admin and pre-warm threads each count apart
        self.local = LocalReactors()    # the in-process reactors (Server): served times, downloads
        self.space = SP.for_store(self.store, self.index, self.inflight, config.cache_max_bytes,
                                  config.evict, self.pool_counters, self._drop_fds, get_logger("space"),
                                  served=self.local.served)
        self.guard = UpstreamGuard(config.upstream, config.allow_upstream_host, self.pool_counters,
                                   log=get_logger("upstream"))
        self.node_id = config.node_id or socket.gethostname()
        self.shared = None
        # a connection per pool thread and per extra fetcher, kept for reuse
        session = make_session(config.fill_threads + config.extra_fetchers(), self.guard)
        if config.shared_store:     # the fleet's bucket (docs/fleet.md): its endpoint is always allowed
            self.shared = open_tier(config, self.store, self.pool_counters, self.node_id, get_logger("shared"),
                                    session)
            self.guard.trust(self.shared.endpoint)
        threads = PoolThreads(config.fill_threads)      # extra fetchers of a fill run beside them
        self.service = Upstream(config, session, self.index,
                                self.store, self.inflight, self.pool_counters, guard=self.guard,
                                space=self.space, shared=self.shared, spawn=threads.own_thread,
                                key_tokens=KeyTokens(self.plane.keys.hub_token_of, config.access_ttl, get_logger("access"))
                                if self.plane.keys_carry_tokens else None,
                                xet_tokens=self._xet_tokens(config))
        self.pool = FillPool(self.service.handle, threads)
        # file lists and negative entries, learned from the index while the server serves
        threading.Thread(target=self.service.learn_index, name="pulsys-learn-index", daemon=True).start()
        self.facts = PlatformFacts.probe()
        host, port = config.listen
        self.listeners = create_listeners(host, port, config.listeners)
        self.address = self.listeners[0].getsockname()[:2]
        self.sender_name, self.sender = load_sender(
            self.facts, None if config.sendfile == "auto" else config.sendfile)
        self.backend = select_backend(self.facts, config.iouring)
        # stats, repos, purge and pre-warm jobs (admin/plane.py); jobs run through the pool
        # like client GETs, at most half of it at a time so clients keep threads
        self.cache_plane = CachePlane(
            self.plane.db, self.index, self.store, self.space, self._drop_fds, self.pool.submit,
            self.node_id, max(1, min(4, config.fill_threads // 2)), get_logger("admin"),
            self.local.downloads, self.counter_lists, config.history_interval)
        self.downloads = self.cache_plane.downloads
        self.api = AdminApi(self.plane.keys, self.plane.gate, self.plane.sync, self.cache_plane, self.vars)
        self.admin = None
        if config.admin_listen:
            self.admin = AdminServer(config.admin_listen[0], config.admin_listen[1], self.vars,
                                     self.api, ready_fn=self.ready)
        self._stop = threading.Event()
        self.failed = False
        self.fail_message = None
        # every socket is bound now: a first start that got this far shows its key (and
        # one that failed before made none, so the next start is a first start again);
        # before anything serves, so /healthz never answers ahead of the banner
        self._announce_first_key()

    @staticmethod
    def _xet_tokens(config):
        """--xet facade: what signs its CAS tokens and xorb URLs, keyed from the
        --token-secret-file every node of a fleet shares (made when absent)."""
        if config.xet != "facade":
            return None
        return XetTokens(derive_key(read_secret(config.token_secret_file, True)), time.time)

    def _common_vars(self):
        return {"version": __version__, "backend": self.backend, "sender": self.sender_name,
                "listeners": len(self.listeners), "pid": os.getpid(),
                "uptime_seconds": round(time.time() - self.started, 3),
                "index_entries": len(self.index), "index_revisions": self.index.rev_count(),
                "negative_entries": len(self.service.negatives),
                **self.service.access_stats(),
                "fills_in_flight": self.inflight.count(), "startup_index_load": self.load_stats,
                "node_id": self.node_id, **(self.shared.stats() if self.shared else {}),
                **self.space.stats()}

    def ready(self):
        """/readyz (admin/readiness.py): index loaded, reactors or workers up, store answers."""
        return readiness(self.load_stats is not None, self._serving(), self.plane.db)

    def _close_store(self):
        """Last step of shutdown: last-served times into the index, close it, unlock."""
        if self.shared is not None:
            self.shared.close()
        self.space.collect()
        self.space.flush()
        self.index.db.close()
        self.store.unlock()

    def view(self):
        """An IndexView of the index for one in-process reactor."""
        return IndexView(self.index.db, self.store.blob_path, self.config.revision_ttl)

    def endpoint(self):
        """The URL clients should use as HF_ENDPOINT."""
        if self.config.public_base_url:
            return self.config.public_base_url
        host, port = self.address
        if host in ("0.0.0.0", "::", ""):
            host = socket.gethostname()
        return "http://%s:%d" % ("[%s]" % host if ":" in host else host, port)

    def _announce_first_key(self):
        """A first start with --auth required: the new admin key, made now that every
        socket is bound, once, on stdout."""
        if self.plane.make_first_key():
            sys.stdout.write(first_start_banner(self.plane.first_key, self.endpoint()))
            sys.stdout.flush()

    def _log_started(self, **extra):
        c = self.config
        self.log.info("pulsys started", version=__version__,
                      listen="http://%s:%d" % (self.address[0], self.address[1]),
                      admin=("http://%s:%d" % self.admin.address[:2]) if self.admin else None,
                      backend=self.backend, sender=self.sender_name, listeners=len(self.listeners),
                      upstream=c.upstream, cache_dir=c.cache_dir, offline=c.offline,
                      revision_ttl=c.revision_ttl, index=self.load_stats, node_id=self.node_id,
                      shared_store=self.shared.where if self.shared else None, auth=c.auth,
                      store=self.plane.db_description, heap=heap.state, **extra)
        threading.Thread(target=self._check_write_ceiling, name="pulsys-write-check", daemon=True).start()

    def _check_write_ceiling(self):
        """Warn when the cache volume cannot keep up with the network (pulsys doctor)."""
        net = self.config.network_mbps
        net = doctor.network_MBps() if net < 0 else net
        if not net:
            return
        path = os.path.join(self.config.cache_dir, ".pulsys-write-check")
        try:
            _, write = doctor.measure_write(path, 64 << 20, 2.0)
        except OSError as e:
            self.log.warning("cache dir write check failed", error=str(e))
            return
        finally:
            try:
                os.unlink(path)
            except OSError:
                pass
        warning = doctor.write_ceiling_warning(write, net)
        if warning:
            self.log.warning(warning, write_MBps=write, network_MBps=net)

    def stop(self):
        self._stop.set()


class Server(_Base):
    """One process: a reactor thread per listener and the fill pool threads (the layout
    for --listeners 1, and for in-process tests). `run()` blocks until stop() or a signal."""

    def __init__(self, config):
        self._build(config)
        self.reactors = [build_reactor(self.backend, lst, self.view(), self.pool.submit, self.sender,
                                       config, self.plane.data_gate) for lst in self.listeners]
        self.access_buffers = [r.access_log for r in self.reactors if r.access_log is not None]
        self.access_writer = (AccessLogWriter(self.access_buffers, config.log_format, stderr_stream())
                              if self.access_buffers else None)
        for r in self.reactors:
            if r.access_log is not None:
                r.tick_hooks.append(self.access_writer.nudge_hook(r.access_log))
        self.threads = []
        for r in self.reactors:
            self.local.join(r)

    def _drop_fds(self, paths):
        for r in self.reactors:
            r.mailbox.post(r.fdcache.forget, paths)

    def counter_lists(self):
        """Every counter list of this server: its reactors' and the pool threads'."""
        return [r.counters for r in self.reactors] + self.pool_counters.lists()

    def vars(self):
        d = M.merged(self.counter_lists())
        d.update(self._common_vars())
        d["open_connections"] = sum(r.open_sockets() for r in self.reactors)
        return d

    def _serving(self):
        return bool(self.threads) and all(t.is_alive() for t in self.threads)

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
        self.plane.start()
        self.cache_plane.start()
        if self.shared is not None:
            self.shared.start()
        if self.admin is not None:
            self.admin.start()
        self._log_started()
        return self

    def wait(self):
        # no timeout: a signal's handler (stop) still runs in this thread, the Event's
        # wait being a lock acquire that signals interrupt on POSIX (threading docs)
        self._stop.wait()

    def shutdown(self):
        for r in self.reactors:
            r.stop()
        for t in self.threads:
            t.join(timeout=5)
        self.cache_plane.history.stop()
        self.cache_plane.stop_jobs()
        self.pool.shutdown()
        self._close_store()
        if self.admin is not None:
            self.admin.stop()
        if self.access_writer is not None:
            self.access_writer.stop()
            self.access_writer.join(timeout=2)
        for lst in self.listeners:
            lst.close()
        self.cache_plane.stop()
        self.plane.stop()
        self.log.info("pulsys stopped")


class ProcessServer(_Base):
    """--listeners N > 1: this process keeps the upstream plane, the authoritative index,
    the admin listener and the listening sockets; one worker process per listening socket
    runs its reactor (pulsys.workers, docs/decisions/0006)."""

    def __init__(self, config, forks=None):
        self.links = WorkerLinks()
        self._build(config)
        self.relays = FillRelays()
        self.supervisor = Supervisor(config, self.facts, self.listeners, self.links, self.relays,
                                     self.pool.submit, on_served=self.space.touch_many,
                                     on_downloads=self.downloads.add,
                                     key_table=self._key_table if self.plane.data_gate else None,
                                     forks=forks)

    def _key_table(self):
        """-> (generation, table): the keys a new worker loads before it serves."""
        gen = self.plane.sync.generation      # read before the table: never newer than it
        return gen, self.plane.gate.table

    def _publish_keys(self, table, generation):
        """Send a new key table to every worker and wait until each enforces it (bounded
        by KEYS_WAIT), so a key the admin API created or revoked is in force on every
        listener when the API answers (docs/decisions/0009)."""
        self.links.broadcast(KeysFrame(table, generation))
        if generation is not None:
            behind = self.links.wait_keys(generation, KEYS_WAIT)
            if behind:
                self.log.warning("workers have not applied the new keys yet", workers=behind,
                                 generation=generation, waited=KEYS_WAIT)

    def _drop_fds(self, paths):
        self.links.broadcast(DropFdsFrame(paths))

    def _serving(self):
        return all(s.ready.is_set() and s.proc is not None and s.proc.poll() is None
                   for s in self.supervisor.slots)

    def counter_lists(self):
        """Every counter list of this server: its workers' rows and the pool threads'."""
        return self.supervisor.counter_lists() + self.pool_counters.lists()

    def vars(self):
        sup = self.supervisor
        d = M.merged(self.counter_lists())
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
        self.plane.start(self._publish_keys if self.plane.data_gate else None)
        self.cache_plane.start()
        if self.shared is not None:
            self.shared.start()
        if self.admin is not None:
            self.admin.start()
        self._log_started(workers=[s.proc.pid for s in self.supervisor.slots])
        return self

    def stop(self):
        self._stop.set()
        self.supervisor.wake.set()

    def wait(self):
        """Supervise until stop(): a check when a worker's link ends (Supervisor.wake),
        again soon while one is being reaped, and every CHECK_IDLE whatever happens."""
        restarts, sup = 0, self.supervisor
        while True:
            sup.wake.clear()
            if self._stop.is_set():
                return
            try:
                soon = sup.check()
                n = sum(s.restarts for s in self.supervisor.slots)
                if n != restarts:
                    # a worker killed inside a read transaction left its reader slot
                    # taken; freed, so old index pages can be reused (indexdb.py)
                    restarts = n
                    self.index.db.env.reader_check()
            except WorkerError as e:
                self.log.error("giving up", reason=str(e))
                self.failed, self.fail_message = True, str(e)
                return
            sup.wake.wait(CHECK_SOON if soon else CHECK_IDLE)

    def shutdown(self):
        if self.admin is not None:
            self.admin.stop()
        self.cache_plane.history.stop()     # the workers' counter rows go with them
        self.supervisor.stop()
        self.cache_plane.stop_jobs()
        self.pool.shutdown()
        self._close_store()
        for lst in self.listeners:
            lst.close()
        self.cache_plane.stop()
        self.plane.stop()
        self.log.info("pulsys stopped")


def run(config, forks=None):
    """Serve until stopped; the exit code. `forks`: the ForkServer the caller started
    for the workers of --listeners N > 1 (workers.start_fork_server), closed here."""
    configure(config.log_format, config.log_level)
    try:
        os.makedirs(config.cache_dir, exist_ok=True)
    except OSError as e:
        return _fail("cannot create cache dir %s: %s" % (config.cache_dir, e.strerror))
    try:
        return _run(config, forks)
    finally:
        if forks is not None:
            forks.close()


def _run(config, forks):
    try:
        server = ProcessServer(config, forks) if config.listeners > 1 else Server(config)
    except OSError as e:
        return _fail("cannot start: %s" % (e.strerror or e))
    except (BackendUnavailable, DatabaseError, SharedStoreError, IndexUnusable, ConfigError) as e:
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
