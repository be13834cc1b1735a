"""Messages between the parent and its worker processes (`--listeners N`, N > 1).

One AF_UNIX SOCK_STREAM socketpair per worker carries frames: an 8-byte big-endian
length, then a pickle (protocol 5) of a plain tuple `(op, *fields)`: `op` is the int
value of an `Op`, the fields are those of the frame's named type (FRAMES maps each Op
to its type; `frame` and `parse` convert, `encode` and `Link.recv` go through them).
Entries travel without their pre-rendered heads (the receiver renders them off the
reactor thread, in the reactor's reply path).

    op            type            fields
    parent -> worker
      HELLO 0     HelloFrame      worker_no, config, facts       first frame, once
      KEYS 110    KeysFrame       table, generation: the active API keys {id: (digest, scope)},
                                  or None with --auth off, and the store's key generation they
                                  are: right after HELLO, then on every change (ADR 0009)
      DROP_FDS 101 DropFdsFrame   paths: broadcast after an eviction unlinked these blobs
      REPLY 3     ReplyFrame      job_id, entry, outcome, fill: None or a FillSnapshot
                                  (token, blob_id, size, part_path, spans, busy, state,
                                  entry, error), a plain tuple on the wire
      PROGRESS 7  ProgressFrame   token, spans, busy, state, entry, error: to every worker
                                  streaming that fill
    worker -> parent
      READY 1     ReadyFrame      pid, backend, sender, index_entries
      JOB 2       JobFrame        job_id, target, method, host, body, content_type, auth, xet
      SERVED 100  ServedFrame     items: [(blob_id, monotonic time), ...], warm hits since
                                  the last report (docs/decisions/0008)
      DOWNLOADS 102 DownloadsFrame items: [(cache key, packed), ...], GETs answered with a
                                  file, per key (cache/downloads.py)
      DEMAND 8    DemandFrame     token, offset: a reader waits where no fetcher is headed
                                  (Fill.demand)
      KEYS_APPLIED 111 KeysAppliedFrame generation: the worker's Gate now holds that KEYS
                                  table (the parent's key change waits for it: ADR 0009)

`spans` and `busy` are a Fill's byte spans on disk and pieces being fetched
(cache.inflight); the worker's copy of the Fill takes them whole. `entry` is set when
`state` is DONE, `error` when it is FAILED.

Both readers (serve_worker in the parent, ParentClient._dispatch in a worker) dispatch
by a table {Op: handler}. A frame whose opcode a reader has no handler for (an opcode
this code does not know arrives as an UnknownFrame) is logged once per opcode and
dropped; the reader goes on with the next frame. A frame with a known opcode but the
wrong fields is a FrameError (the link is torn down, the worker restarted).

The index is not sent: every process reads the same LMDB file (cache/indexdb.py).

Parent side: FillRelays (fill progress to
the workers that stream from a fill) and serve_worker (JOB frames -> pool Jobs).
Worker side: ParentClient (the reactor's `submit`, and a reader thread that turns
parent frames into mailbox posts). Expiry deadlines are sent as
monotonic times: CLOCK_MONOTONIC is one clock for every process of a boot.
"""

import enum
import io
import itertools
import pickle
import queue
import struct
import threading
from typing import Any, NamedTuple

from pulsys.cache.inflight import DONE, FAILED, RUNNING, Fill
from pulsys.errors import Refetching
from pulsys.log import get_logger
from pulsys.model.entry import Entry
from pulsys.model.job import Job, Reply


class Op(enum.IntEnum):
    """Opcodes: the first item of every frame (sent as its int value)."""

    HELLO = 0
    READY = 1
    JOB = 2
    REPLY = 3
    PROGRESS = 7
    DEMAND = 8
    SERVED = 100        # last-served reports (docs/decisions/0008)
    DROP_FDS = 101      # evictions (docs/decisions/0008)
    DOWNLOADS = 102     # per-repo downloads since the last report (cache/downloads.py)
    KEYS = 110          # API keys for the worker's Gate (docs/decisions/0009)
    KEYS_APPLIED = 111  # the worker loaded a KEYS table (docs/decisions/0009)


# -- frames ---------------------------------------------------------------------------
# One NamedTuple per Op; `op` is a class attribute, not a field.


class HelloFrame(NamedTuple):
    """parent -> worker, the first frame: the worker's number, Config and host facts."""
    worker_no: int
    config: Any
    facts: Any
    op = Op.HELLO


class KeysFrame(NamedTuple):
    """parent -> worker, the second frame and on every change: {id: (digest, scope)},
    or None with --auth off; `generation` the store's key generation of that table."""
    table: Any
    generation: Any = None
    op = Op.KEYS


class KeysAppliedFrame(NamedTuple):
    """worker -> parent: its Gate has loaded the KEYS table of `generation`."""
    generation: Any
    op = Op.KEYS_APPLIED


class ReadyFrame(NamedTuple):
    """worker -> parent, once its reactor is built."""
    pid: int
    backend: str
    sender: str
    index_entries: int
    op = Op.READY


class JobFrame(NamedTuple):
    """worker -> parent: a request the worker cannot answer from the index."""
    job_id: int
    target: Any
    method: str
    host: Any
    body: Any
    content_type: Any
    auth: Any           # Job.auth: the client's Authorization with --upstream-auth client
    xet: Any = None     # Job.xet: a CAS request's (Authorization, Range), else None
    op = Op.JOB


class FillSnapshot(NamedTuple):
    """A running or ended Fill as a worker first sees it (inside a ReplyFrame)."""
    token: int
    blob_id: str
    size: int
    part_path: str
    spans: tuple
    busy: tuple
    state: Any
    entry: Any          # the Fill's entry when state is DONE, else None
    error: Any          # text (or a Refetching error) when state is FAILED, else None


class ReplyFrame(NamedTuple):
    """parent -> worker: the answer to JobFrame `job_id`; `fill` a FillSnapshot or None;
    `grant` Reply.grant."""
    job_id: int
    entry: Any
    outcome: Any
    fill: Any
    grant: Any
    op = Op.REPLY


class ProgressFrame(NamedTuple):
    """parent -> worker: a change of the fill the worker knows as `token`."""
    token: int
    spans: tuple
    busy: tuple
    state: Any
    entry: Any
    error: Any
    op = Op.PROGRESS


class DemandFrame(NamedTuple):
    """worker -> parent: a reader waits at `offset` of fill `token` (Fill.demand)."""
    token: int
    offset: int
    op = Op.DEMAND


class ServedFrame(NamedTuple):
    """worker -> parent: [(blob_id, monotonic time), ...] warm hits since the last one."""
    items: Any
    op = Op.SERVED


class DownloadsFrame(NamedTuple):
    """worker -> parent: [(cache key, packed), ...] downloads since the last one."""
    items: Any
    op = Op.DOWNLOADS


class DropFdsFrame(NamedTuple):
    """parent -> worker: blobs an eviction unlinked (close cached fds of these paths)."""
    paths: Any
    op = Op.DROP_FDS


class UnknownFrame(NamedTuple):
    """What Link.recv returns for an opcode that is not an Op (never sent by this code)."""
    op: int
    fields: tuple


FRAMES = {t.op: t for t in (HelloFrame, KeysFrame, KeysAppliedFrame, ReadyFrame, JobFrame,
                            ReplyFrame, ProgressFrame, DemandFrame, ServedFrame,
                            DownloadsFrame, DropFdsFrame)}
assert set(FRAMES) == set(Op), "every Op needs exactly one frame type"
_FRAME_TYPES = frozenset(FRAMES.values())


class FrameError(ValueError):
    """A frame that cannot be read: not a tuple, or a known opcode with the wrong fields."""


def frame(msg):
    """The wire tuple `(int(op), *fields)` for a frame object (one of FRAMES' types)."""
    kind = type(msg)
    if kind not in _FRAME_TYPES:
        raise TypeError("not an IPC frame: %r" % (kind,))
    if kind is ReplyFrame and msg.fill is not None:
        return (int(Op.REPLY), msg.job_id, msg.entry, msg.outcome, tuple(msg.fill), msg.grant)
    return (int(msg.op), *msg)


def parse(wire):
    """The frame object for a wire tuple; an UnknownFrame for an int opcode not in Op.
    Raises FrameError for anything else (not a tuple, an opcode that is not an int, a
    known opcode with the wrong number of fields)."""
    if type(wire) is not tuple or not wire:
        raise FrameError("not a frame: %r" % (type(wire),))
    op = wire[0]
    if type(op) not in (int, Op):
        raise FrameError("opcode %r is not an int" % (op,))
    kind = FRAMES.get(op)
    if kind is None:
        return UnknownFrame(op, wire[1:])
    if len(wire) - 1 != len(kind._fields):
        raise FrameError("%s frame with %d fields, expected %d"
                         % (Op(op).name, len(wire) - 1, len(kind._fields)))
    msg = kind._make(wire[1:])
    if kind is ReplyFrame and msg.fill is not None:
        snap = msg.fill
        if type(snap) is not tuple or len(snap) != len(FillSnapshot._fields):
            raise FrameError("REPLY frame with a malformed fill snapshot")
        msg = msg._replace(fill=FillSnapshot._make(snap))
    return msg


class _Unhandled:
    """A reader's fallback handler: logs each opcode it has no handler for once."""

    def __init__(self, log, reader):
        self.log, self.reader = log, reader
        self.seen = set()

    def __call__(self, msg):
        key = repr(msg.op)
        if key not in self.seen:
            self.seen.add(key)
            self.log.warning("ignoring IPC frames this reader has no handler for",
                             op=key, frame=type(msg).__name__, reader=self.reader)


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
    """One frame (length prefix + pickle of its wire tuple) for the frame object `msg`."""
    buf = io.BytesIO()
    buf.write(b"\0" * _LEN.size)
    _Pickler(buf, _PROTOCOL).dump(frame(msg))
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
        self.frames = 0           # frames sent (/debug/vars: a worker's frames_sent)
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
            self.frames += 1
            return True
        except OSError:
            self.shutdown()
            return False

    def recv(self):
        """Next frame object (parse), or None at EOF or when the link broke. One reader
        thread only. Raises FrameError for a frame that cannot be read."""
        buf, need = self._buf, _LEN.size
        msg_len = None
        while True:
            if msg_len is None and len(buf) >= need:
                msg_len = _LEN.unpack_from(buf, 0)[0]
                need = _LEN.size + msg_len
            if msg_len is not None and len(buf) >= need:
                wire = pickle.loads(memoryview(buf)[_LEN.size:need])
                del buf[:need]
                return parse(wire)
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


class WorkerLinks:
    """The links of the live workers; broadcast() sends one frame to each. Each link
    also has the key generation its worker has applied (KEYS_APPLIED frames), so a key
    change can wait until every live worker enforces it (wait_keys)."""

    def __init__(self):
        self.links = ()
        self._lock = threading.Lock()
        self._keys = {}                     # link -> key generation its worker applied
        self._applied = threading.Condition(self._lock)

    def add(self, link, generation=None):
        """`generation`: the keys the worker loads before it serves (its second frame)."""
        with self._lock:
            self.links = self.links + (link,)
            self._keys[link] = generation

    def remove(self, link):
        with self._lock:
            self.links = tuple(x for x in self.links if x is not link)
            self._keys.pop(link, None)
            self._applied.notify_all()

    def keys_applied(self, link, generation):
        """A worker's KEYS_APPLIED: it now enforces the keys of `generation`."""
        with self._lock:
            if link in self._keys:
                self._keys[link] = generation
                self._applied.notify_all()

    def wait_keys(self, generation, timeout):
        """Wait until every live worker has applied key generation `generation` (or a
        later one), at most `timeout` seconds. -> the number of workers still behind."""
        def behind():
            return sum(1 for link, g in self._keys.items()
                       if not link.broken and (g is None or g < generation))
        with self._lock:
            self._applied.wait_for(lambda: behind() == 0, timeout)
            return behind()

    def broadcast(self, msg):
        """`msg` is a frame object (KeysFrame, DropFdsFrame)."""
        links = self.links
        if links:
            data = encode(msg)
            for link in links:
                link.send_frame(data)


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
            snap = FillSnapshot(self.token, f.blob_id, f.size, f.part_path, spans, busy, state,
                                f.entry if state == DONE else None,
                                _error_text(f) if state == FAILED else None)
            link.send(ReplyFrame(job_id, r.entry, r.outcome, snap, r.grant))

    def on_change(self, f):
        """Fill listener (fill thread). Never raises into the fill."""
        try:
            with self.lock:
                state = f.state
                spans, busy = f.snapshot()
                data = encode(ProgressFrame(self.token, spans, busy, state,
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
            link.send(ReplyFrame(job_id, r.entry, r.outcome, None, r.grant))
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


def _drop(msg):
    pass


def serve_worker(link, submit, relays, on_ready, on_served=None, on_downloads=None,
                 on_keys_applied=None):
    """Parent reader loop for one worker link: JOB frames become pool Jobs, DEMAND frames
    go to the relays, READY to on_ready(ReadyFrame), SERVED and DOWNLOADS reports to
    on_served(items) and on_downloads(items), KEYS_APPLIED to on_keys_applied(generation).
    Returns at EOF."""
    def job(m):
        j = Job(m.target, m.method, m.host, m.body, m.content_type,
                RemoteReply(relays, link, m.job_id), m.auth)
        j.xet = m.xet
        submit(j)

    handlers = {
        Op.JOB: job,
        Op.DEMAND: lambda m: relays.demand(m.token, m.offset),
        Op.READY: on_ready,
        Op.SERVED: (lambda m: on_served(m.items)) if on_served is not None else _drop,
        Op.DOWNLOADS: (lambda m: on_downloads(m.items)) if on_downloads is not None else _drop,
        Op.KEYS_APPLIED: ((lambda m: on_keys_applied(m.generation)) if on_keys_applied is not None
                          else _drop),
    }
    unhandled = _Unhandled(get_logger("ipc"), "parent")
    while True:
        msg = link.recv()
        if msg is None:
            return
        handlers.get(msg.op, unhandled)(msg)


# -- worker side --------------------------------------------------------------------


class ParentClient:
    """A worker's view of the parent: `submit(job)` for its reactor, and a reader thread
    that turns replies and fill progress into mailbox posts (through the reply callables
    and Fill wake-ups the reactor set up)."""

    def __init__(self, link, on_eof, blob_path=None, on_drop=None, on_keys=None):
        """on_drop(paths): evicted blobs (the worker posts them to its reactor); on_keys(table):
        new API keys (the worker's Gate.load)."""
        self.link = link
        self.blob_path = blob_path      # blob id -> path of the committed blob (Store.blob_path)
        self.on_eof = on_eof
        self.on_drop = on_drop
        self.on_keys = on_keys
        self.pending = {}               # job id -> the reactor's reply callable
        self.proxies = {}               # fill token -> local Fill fed by PROGRESS frames
        self._ids = itertools.count(1)
        self._out = queue.SimpleQueue()
        self.log = get_logger("ipc")
        self._handlers = {Op.REPLY: self._on_reply, Op.PROGRESS: self._on_progress,
                          Op.DROP_FDS: self._on_drop_fds, Op.KEYS: self._on_keys}
        self._unhandled = _Unhandled(self.log, "worker")
        self.reader = threading.Thread(target=self._read, name="pulsys-ipc-reader", daemon=True)
        self.writer = threading.Thread(target=self._write, name="pulsys-ipc-writer", daemon=True)

    def start(self):
        self.reader.start()
        self.writer.start()

    def submit(self, job):
        """Reactor thread: never blocks (the writer thread does the socket send)."""
        job_id = next(self._ids)
        self.pending[job_id] = job.reply
        self._out.put(encode(JobFrame(job_id, job.target, job.method, job.host, job.body,
                                      job.content_type, job.auth, job.xet)))

    def send(self, msg):
        """Queue the frame object `msg` (ReadyFrame, ServedFrame, ...) for the writer."""
        self._out.put(encode(msg))

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
        self._handlers.get(msg.op, self._unhandled)(msg)

    def _on_progress(self, m):
        f = self.proxies.get(m.token)
        if f is not None:
            self._advance(m.token, f, m.spans, m.busy, m.state, m.entry, m.error)

    def _on_reply(self, m):
        reply = self.pending.pop(m.job_id, None)
        snap = m.fill
        if snap is None:
            if reply is not None:
                reply(Reply(m.entry, None, m.outcome, m.grant))
            return
        token = snap.token
        f = self.proxies.get(token)
        if f is None:
            f = Fill(snap.blob_id, snap.size, snap.part_path)
            if self.blob_path is not None:
                # where the parent renames the verified part file: a reactor that finds
                # the part file gone before the DONE frame arrives reads the blob
                f.final_path = self.blob_path(snap.blob_id)
            f.on_demand = self._demander(token)
            if snap.state == RUNNING:
                self.proxies[token] = f
        self._advance(token, f, snap.spans, snap.busy, snap.state, snap.entry, snap.error)
        if reply is not None:
            reply(Reply(m.entry, f, m.outcome, m.grant))

    def _on_drop_fds(self, m):
        if self.on_drop is not None:
            self.on_drop(m.paths)

    def _on_keys(self, m):
        if self.on_keys is not None and m.table is not None:
            self.on_keys(m.table)
            # straight to the link, not behind queued JOB frames: the parent's key change
            # is waiting for this (WorkerLinks.wait_keys)
            self.link.send(KeysAppliedFrame(m.generation))

    def _demander(self, token):
        def on_demand(_fill, offset):
            self.send(DemandFrame(token, offset))   # a queue put: the reactor never blocks
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
