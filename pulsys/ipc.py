"""Messages between the parent and its worker processes (`--listeners N`, N > 1).

One AF_UNIX SOCK_STREAM socketpair per worker carries frames: an 8-byte big-endian
length, then a pickle (protocol 5) of a tuple whose first item is the opcode. Entries
travel without their pre-rendered heads (the receiver renders them off the reactor
thread, in Index.publish or the reactor's reply path).

    parent -> worker
      (HELLO, worker_no, config, facts)                     first frame, once
      (PUBLISH, entry)                                      broadcast on every index change
      (SET_REV, rtype, repo, rev, commit, expires, fetched_at)      broadcast
      (REMOVE, key)                                                 broadcast
      (DROP_FDS, paths)        broadcast after an eviction unlinked these blobs
      (KEYS, table)            the active API keys {id: (digest, scope)}, or None with
                               --auth off: right after HELLO, then on every change (ADR 0009)
      (REPLY, job_id, entry, outcome, fill)                 fill is None or
          (token, blob_id, size, part_path, spans, busy, state, entry, error)
      (PROGRESS, token, spans, busy, state, entry, error)   to every worker streaming it
    worker -> parent
      (READY, pid, backend, sender, index_entries)
      (JOB, job_id, target, method, host, body, content_type)
      (SERVED, [(blob_id, monotonic time), ...])    warm hits since the last report
      (DOWNLOADS, [(cache key, packed), ...])      GETs answered with a file, per key
      (DEMAND, token, offset)       a reader waits where no fetcher is headed (Fill.demand)

`spans` and `busy` are a Fill's byte spans on disk and pieces being fetched
(cache.inflight); the worker's copy of the Fill takes them whole.

Parent side: ReplicatingIndex (an Index that broadcasts), FillRelays (fill progress to
the workers that stream from a fill) and serve_worker (JOB frames -> pool Jobs).
Worker side: ParentClient (the reactor's `submit`, and a reader thread that turns
parent frames into index updates and mailbox posts). Expiry deadlines are sent as
monotonic times: CLOCK_MONOTONIC is one clock for every process of a boot.
"""

import io
import itertools
import pickle
import queue
import struct
import threading

from pulsys.cache.index import Index
from pulsys.cache.inflight import DONE, FAILED, RUNNING, Fill
from pulsys.errors import Refetching
from pulsys.log import get_logger
from pulsys.model.entry import Entry
from pulsys.model.job import Job, Reply

HELLO, READY, JOB, REPLY, PUBLISH, SET_REV, REMOVE, PROGRESS, DEMAND = range(9)
SERVED, DROP_FDS = 100, 101       # last-served reports and evictions (docs/decisions/0008)
DOWNLOADS = 102                   # per-repo downloads since the last report (cache/downloads.py)
KEYS = 110                        # API keys for the worker's Gate (docs/decisions/0009)

_LEN = struct.Struct("!Q")
_PROTOCOL = 5


_ENTRY_FIELDS = tuple(n for n in Entry.__slots__ if n != "heads")


def _entry(values):
    e = Entry.__new__(Entry)
    for name, v in zip(_ENTRY_FIELDS, values):
        setattr(e, name, v)
    e.heads = None
    return e


class _Pickler(pickle.Pickler):
    def reducer_override(self, obj):
        if type(obj) is Entry:
            return _entry, (tuple(getattr(obj, n, None) for n in _ENTRY_FIELDS),)
        return NotImplemented


def encode(msg):
    """One frame (length prefix + pickle) for `msg`."""
    buf = io.BytesIO()
    buf.write(b"\0" * _LEN.size)
    _Pickler(buf, _PROTOCOL).dump(msg)
    data = buf.getbuffer()
    _LEN.pack_into(data, 0, len(data) - _LEN.size)
    out = bytes(data)
    del data
    return out


class Link:
    """One end of a worker socketpair: thread-safe whole-frame sends, one reader.

    `timeout` (parent side) bounds a send: a peer that stops reading for that long is
    treated as gone (the link is shut down and the worker restarted)."""

    def __init__(self, sock, timeout=None):
        self.sock = sock
        self.lock = threading.Lock()
        self.broken = False
        self._buf = bytearray()
        sock.settimeout(timeout)

    def send(self, msg):
        return self.send_frame(encode(msg))

    def send_frame(self, data):
        with self.lock:
            return self.send_frame_locked(data)

    def send_frame_locked(self, data):
        """Caller holds self.lock. False when the link is (now) broken."""
        if self.broken:
            return False
        try:
            self.sock.sendall(data)
            return True
        except OSError:
            self.shutdown()
            return False

    def recv(self):
        """Next message, or None at EOF or when the link broke. One reader thread only."""
        buf, need = self._buf, _LEN.size
        msg_len = None
        while True:
            if msg_len is None and len(buf) >= need:
                msg_len = _LEN.unpack_from(buf, 0)[0]
                need = _LEN.size + msg_len
            if msg_len is not None and len(buf) >= need:
                msg = pickle.loads(memoryview(buf)[_LEN.size:need])
                del buf[:need]
                return msg
            try:
                chunk = self.sock.recv(max(1 << 16, min(need - len(buf), 1 << 24)))
            except TimeoutError:
                if self.broken:
                    return None
                continue
            except OSError:
                self.broken = True
                return None
            if not chunk:
                self.broken = True
                return None
            buf += chunk

    def shutdown(self):
        """Break the link in both directions (the peer's reader sees EOF)."""
        self.broken = True
        try:
            self.sock.shutdown(2)
        except OSError:
            pass

    def close(self):
        self.shutdown()
        try:
            self.sock.close()
        except OSError:
            pass


# -- parent side ------------------------------------------------------------------


class Replicas:
    """The links of the live workers; broadcast() sends one frame to each."""

    def __init__(self):
        self.links = ()
        self._lock = threading.Lock()

    def add(self, link):
        with self._lock:
            self.links = self.links + (link,)

    def remove(self, link):
        with self._lock:
            self.links = tuple(x for x in self.links if x is not link)

    def broadcast(self, msg):
        links = self.links
        if links:
            data = encode(msg)
            for link in links:
                link.send_frame(data)


class ReplicatingIndex(Index):
    """The parent's authoritative index: every change is also sent to every worker's
    replica, so a file filled through one worker is a warm hit in all of them."""

    def __init__(self, replicas):
        super().__init__()
        self.replicas = replicas

    def publish(self, entry):
        super().publish(entry)
        self.replicas.broadcast((PUBLISH, entry))

    def remove(self, key):
        super().remove(key)
        self.replicas.broadcast((REMOVE, key))

    def set_rev(self, rtype, repo, rev, commit, expires, fetched_at):
        super().set_rev(rtype, repo, rev, commit, expires, fetched_at)
        self.replicas.broadcast((SET_REV, rtype, repo, rev, commit, expires, fetched_at))


def _error_text(fill):
    """What a worker's copy of a failed Fill is failed with: a Refetching error as it is
    (its readers go on from the refetch, ADR 0012), anything else as text."""
    e = fill.error
    if e is None or isinstance(e, Refetching):
        return e
    return str(e) or type(e).__name__


class _Relay:
    """Progress of one running Fill, sent to the links that stream from it.

    Sends happen under self.lock, so a link gets its REPLY (with a snapshot of the fill)
    before any PROGRESS for that token, and snapshots reach it in order."""

    __slots__ = ("token", "fill", "links", "lock", "owner")

    def __init__(self, token, fill, owner):
        self.token, self.fill, self.owner = token, fill, owner
        self.links = []
        self.lock = threading.Lock()

    def reply(self, link, job_id, r):
        f = self.fill
        with self.lock:
            state = f.state
            if state == RUNNING and link not in self.links:
                self.links.append(link)
            spans, busy = f.snapshot()
            snap = (self.token, f.blob_id, f.size, f.part_path, spans, busy, state,
                    f.entry if state == DONE else None, _error_text(f) if state == FAILED else None)
            link.send((REPLY, job_id, r.entry, r.outcome, snap))

    def on_change(self, f):
        """Fill listener (fill thread). Never raises into the fill."""
        try:
            with self.lock:
                state = f.state
                spans, busy = f.snapshot()
                data = encode((PROGRESS, self.token, spans, busy, state,
                               f.entry if state == DONE else None,
                               _error_text(f) if state == FAILED else None))
                for link in self.links:
                    link.send_frame(data)
                if state != RUNNING:
                    self.links = []
            if state != RUNNING:
                self.owner.forget(f)
        except Exception:
            self.owner.log.exception("relaying fill progress failed", blob=f.blob_id)


class FillRelays:
    """Running fills that workers stream from, each with a token workers know it by."""

    def __init__(self):
        self._lock = threading.Lock()
        self._relays = {}
        self._tokens = {}          # token -> relay, for DEMAND frames
        self._ids = itertools.count(1)
        self.log = get_logger("ipc")

    def reply(self, link, job_id, r):
        f = r.fill
        if f is None:
            link.send((REPLY, job_id, r.entry, r.outcome, None))
            return
        with self._lock:
            relay = self._relays.get(f)
            if relay is None:
                relay = _Relay(next(self._ids), f, self)
                if f.add_listener(relay.on_change):
                    self._relays[f] = relay
                    self._tokens[relay.token] = relay
        relay.reply(link, job_id, r)

    def forget(self, fill):
        with self._lock:
            relay = self._relays.pop(fill, None)
            if relay is not None:
                self._tokens.pop(relay.token, None)

    def demand(self, token, offset):
        """A worker's reader waits at `offset` of the fill it knows as `token`."""
        relay = self._tokens.get(token)
        if relay is not None and isinstance(offset, int) and offset >= 0:
            relay.fill.demand(offset)

    def count(self):
        return len(self._relays)


class RemoteReply:
    """job.reply for a Job that came from a worker: answers over that worker's link."""

    __slots__ = ("relays", "link", "job_id")

    def __init__(self, relays, link, job_id):
        self.relays, self.link, self.job_id = relays, link, job_id

    def __call__(self, r):
        self.relays.reply(self.link, self.job_id, r)


def serve_worker(link, submit, relays, on_ready, on_served=None, on_downloads=None):
    """Parent reader loop for one worker link: JOB frames become pool Jobs; SERVED
    reports go to on_served(items). Returns at EOF."""
    while True:
        msg = link.recv()
        if msg is None:
            return
        op = msg[0]
        if op == JOB:
            _, job_id, target, method, host, body, ctype = msg
            submit(Job(target, method, host, body, ctype, RemoteReply(relays, link, job_id)))
        elif op == DEMAND:
            relays.demand(msg[1], msg[2])
        elif op == SERVED:
            if on_served is not None:
                on_served(msg[1])
        elif op == DOWNLOADS:
            if on_downloads is not None:
                on_downloads(msg[1])
        elif op == READY:
            on_ready(msg)


# -- worker side --------------------------------------------------------------------


class ParentClient:
    """A worker's view of the parent: `submit(job)` for its reactor, and a reader thread
    that applies index broadcasts and turns replies and fill progress into mailbox posts
    (through the reply callables and Fill wake-ups the reactor set up)."""

    on_drop = None       # fn(paths): evicted blobs; the worker posts them to its reactor
    on_keys = None       # fn(table): new API keys; the worker's Gate.load

    def __init__(self, link, index, on_eof, blob_path=None):
        self.link = link
        self.blob_path = blob_path      # blob id -> path of the committed blob (Store.blob_path)
        self.index = index
        self.on_eof = on_eof
        self.pending = {}               # job id -> the reactor's reply callable
        self.proxies = {}               # fill token -> local Fill fed by PROGRESS frames
        self._ids = itertools.count(1)
        self._out = queue.SimpleQueue()
        self._held = []                 # index frames that arrive while the disk index loads
        self._loading = True
        self._load_lock = threading.Lock()
        self.log = get_logger("ipc")
        self.reader = threading.Thread(target=self._read, name="pulsys-ipc-reader", daemon=True)
        self.writer = threading.Thread(target=self._write, name="pulsys-ipc-writer", daemon=True)

    def start(self):
        self.reader.start()
        self.writer.start()

    def submit(self, job):
        """Reactor thread: never blocks (the writer thread does the socket send)."""
        job_id = next(self._ids)
        self.pending[job_id] = job.reply
        self._out.put(encode((JOB, job_id, job.target, job.method, job.host, job.body,
                              job.content_type)))

    def send(self, msg):
        self._out.put(encode(msg))

    def loaded(self):
        """The disk index is in: apply what arrived meanwhile, then apply directly."""
        with self._load_lock:
            for msg in self._held:
                self._apply_index(msg)
            self._held = []
            self._loading = False

    def stop(self):
        self._out.put(None)

    def _write(self):
        get, send = self._out.get, self.link.send_frame
        while True:
            data = get()
            if data is None or not send(data):
                return

    def _read(self):
        try:
            while True:
                msg = self.link.recv()
                if msg is None:
                    break
                self._dispatch(msg)
        except Exception:
            self.log.exception("worker link reader failed")
        self.on_eof()

    def _dispatch(self, msg):
        op = msg[0]
        if op == PROGRESS:
            _, token, spans, busy, state, entry, error = msg
            f = self.proxies.get(token)
            if f is not None:
                self._advance(token, f, spans, busy, state, entry, error)
        elif op == REPLY:
            _, job_id, entry, outcome, snap = msg
            reply = self.pending.pop(job_id, None)
            if snap is None:
                if reply is not None:
                    reply(Reply(entry, None, outcome))
                return
            token, blob_id, size, part_path, spans, busy, state, fentry, error = snap
            f = self.proxies.get(token)
            if f is None:
                f = Fill(blob_id, size, part_path)
                if self.blob_path is not None:
                    # where the parent renames the verified part file: a reactor that finds
                    # the part file gone before the DONE frame arrives reads the blob
                    f.final_path = self.blob_path(blob_id)
                f.on_demand = self._demander(token)
                if state == RUNNING:
                    self.proxies[token] = f
            self._advance(token, f, spans, busy, state, fentry, error)
            if reply is not None:
                reply(Reply(entry, f, outcome))
        elif op == DROP_FDS:
            if self.on_drop is not None:
                self.on_drop(msg[1])
        elif op == KEYS:
            if self.on_keys is not None and msg[1] is not None:
                self.on_keys(msg[1])
        elif op in (PUBLISH, SET_REV, REMOVE):
            if self._loading:
                with self._load_lock:
                    if self._loading:
                        self._held.append(msg)
                        return
            self._apply_index(msg)

    def _demander(self, token):
        def on_demand(_fill, offset):
            self.send((DEMAND, token, offset))   # a queue put: the reactor never blocks
        return on_demand

    def _advance(self, token, f, spans, busy, state, entry, error):
        if state == RUNNING:
            f.apply(spans, busy)
            return
        if f.state == RUNNING:
            if state == DONE:
                f.finish(entry)
            else:
                f.fail(error or "fill failed")
        self.proxies.pop(token, None)

    def _apply_index(self, msg):
        op = msg[0]
        if op == PUBLISH:
            self.index.publish(msg[1])
        elif op == SET_REV:
            self.index.set_rev(*msg[1:])
        else:
            self.index.remove(msg[1])
