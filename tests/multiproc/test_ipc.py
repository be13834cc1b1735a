"""The parent <-> worker protocol without processes: frames over a socketpair, the fill
progress relay, the parent's reader (serve_worker) and the worker-side client that feeds
local Fills."""

import os
import pickle
import socket
import struct
import threading

import pytest
from structlog.testing import capture_logs

from pulsys import ipc
from pulsys.cache.inflight import DONE, FAILED, RUNNING, Inflight
from pulsys.http1.heads import prepare
from pulsys.model import target as T
from pulsys.model.entry import FILE, Entry
from pulsys.model.job import Job, Reply


def pair():
    a, b = socket.socketpair()
    return ipc.Link(a, timeout=5), ipc.Link(b, timeout=5)


def file_entry(key="k", blob_path=None):
    e = Entry(FILE, key, 10, "ab" * 32, "c" * 40, True, "sha256/" + "ab" * 32, blob_path,
              "application/octet-stream")
    return prepare(e)


def raw_frame(wire):
    """A frame built by hand from the wire format (length prefix + pickle of a tuple)."""
    data = pickle.dumps(wire, 5)
    return struct.pack("!Q", len(data)) + data


def target():
    return T.Target(T.RESOLVE, "model", "o/r", "main", "f")


SAMPLES = {
    ipc.Op.HELLO: ipc.HelloFrame(3, {"cache_dir": "/c"}, {"kernel": (6, 1)}),
    ipc.Op.KEYS: ipc.KeysFrame({"k1": ("d" * 64, "read")}, 4),
    ipc.Op.KEYS_APPLIED: ipc.KeysAppliedFrame(4),
    ipc.Op.READY: ipc.ReadyFrame(1234, "epoll", "sendfile", 17),
    ipc.Op.JOB: ipc.JobFrame(5, target(), "POST", "hub.local", b"{}", "application/json", "Bearer hf_x"),
    ipc.Op.REPLY: ipc.ReplyFrame(5, None, "fill", ipc.FillSnapshot(
        7, "sha256/aa", 10, "/p.part", ((0, 4),), ((4, 6),), RUNNING, None, None),
        (False, "model", "o/r", 12.5)),
    ipc.Op.PROGRESS: ipc.ProgressFrame(7, ((0, 10),), (), FAILED, None, "bad hash"),
    ipc.Op.DEMAND: ipc.DemandFrame(7, 8),
    ipc.Op.SERVED: ipc.ServedFrame([("sha256/aa", 12.5)]),
    ipc.Op.DOWNLOADS: ipc.DownloadsFrame([("model/o/r", 3)]),
    ipc.Op.DROP_FDS: ipc.DropFdsFrame(["/blobs/x"]),
}


def comparable(msg):
    """`msg` with a Target (which has no __eq__) as the tuple of its fields."""
    return tuple(tuple(getattr(v, n, None) for n in T.Target.__slots__)
                 if isinstance(v, T.Target) else v for v in msg)


def test_every_op_has_exactly_one_frame_type_and_round_trips_through_a_link():
    assert set(ipc.FRAMES) == set(ipc.Op) == set(SAMPLES)
    assert len(set(ipc.FRAMES.values())) == len(ipc.Op)
    assert [int(op) for op in ipc.Op] == [0, 1, 2, 3, 7, 8, 100, 101, 102, 110, 111]
    parent, worker = pair()
    for op, msg in SAMPLES.items():
        kind = ipc.FRAMES[op]
        assert type(msg) is kind and kind.op is op
        wire = pickle.loads(ipc.encode(msg)[8:])
        # on the wire: a plain tuple of plain values, the opcode as an int
        assert type(wire) is tuple and type(wire[0]) is int and wire[0] == op
        assert len(wire) == 1 + len(kind._fields)
        assert all(type(v) is not ipc.FillSnapshot for v in wire)
        assert parent.send(msg)
        got = worker.recv()
        assert type(got) is kind and comparable(got) == comparable(msg)
    parent.send(ipc.ReplyFrame(6, None, "miss", None, None))
    assert worker.recv() == ipc.ReplyFrame(6, None, "miss", None, None)
    assert type(SAMPLES[ipc.Op.REPLY].fill) is ipc.FillSnapshot
    parent.close()
    assert worker.recv() is None


def test_only_frame_objects_are_sent_and_malformed_frames_are_refused():
    with pytest.raises(TypeError):
        ipc.encode((ipc.Op.DEMAND, 7, 8))             # a bare tuple is not a frame
    with pytest.raises(ipc.FrameError):
        ipc.parse((int(ipc.Op.DEMAND), 7))           # a field missing
    with pytest.raises(ipc.FrameError):
        ipc.parse((int(ipc.Op.REPLY), 1, None, "fill", (7, "b")))   # a short snapshot
    with pytest.raises(ipc.FrameError):
        ipc.parse(("DEMAND", 7, 8))
    with pytest.raises(ipc.FrameError):
        ipc.parse([int(ipc.Op.DEMAND), 7, 8])
    assert ipc.parse((99, "x", 1)) == ipc.UnknownFrame(99, ("x", 1))


def test_frames_carry_entries_without_their_rendered_heads():
    parent, worker = pair()
    e = file_entry(blob_path="/b")
    e.body_mem, e.restart_resumes, e.expires = b"0123456789", True, 123.5
    assert e.heads is not None
    big = b"x" * (3 << 20)                      # larger than the socket buffer: sent while read
    msgs = []
    reader = threading.Thread(target=lambda: msgs.extend(worker.recv() for _ in range(4)))
    reader.start()
    parent.send(ipc.ReplyFrame(1, e, "fill", ipc.FillSnapshot(
        7, e.blob_id, 10, "/p.part", ((0, 10),), (), DONE, e, None), None))
    parent.send(ipc.ReplyFrame(2, e, "hit", None, None))
    parent.send(ipc.ProgressFrame(7, ((0, 10),), (), DONE, e, None))
    parent.send(ipc.JobFrame(1, target(), "GET", "h", big, None, None))
    reader.join(5)
    assert e.heads is not None                  # the sender's entry is left as it was
    reply, plain, progress, job = msgs
    for got in (reply.entry, reply.fill.entry, plain.entry, progress.entry):
        assert type(got) is Entry and got is not e and got.heads is None
        assert all(getattr(got, n) == getattr(e, n) for n in Entry.__slots__ if n != "heads")
    assert (reply.job_id, reply.outcome, reply.fill.state) == (1, "fill", DONE)
    assert (plain.job_id, plain.outcome, plain.fill) == (2, "hit", None)
    assert (progress.token, progress.state, progress.error) == (7, DONE, None)
    assert type(job) is ipc.JobFrame and job.target.repo == "o/r" and job.body == big
    parent.close()
    assert worker.recv() is None and worker.broken


def test_a_broken_link_refuses_sends():
    parent, worker = pair()
    worker.close()
    assert parent.send(ipc.DropFdsFrame(["/b"])) is False and parent.broken
    assert parent.send(ipc.DropFdsFrame(["/b"])) is False


def test_fill_listeners_see_every_change_and_none_after_the_end():
    f, _ = Inflight().join_or_create("b", 10, lambda: "/p")
    seen = []
    assert f.add_listener(lambda fill: seen.append((fill.snapshot(), fill.readable(0), fill.state)))
    piece = f.claim(None, 0, 10, 10)
    f.wrote(piece, 4)
    f.wrote(piece, 6)
    f.finish(file_entry())
    assert seen == [(((), ((0, 10),)), 0, RUNNING), ((((0, 4),), ((4, 10),)), 4, RUNNING),
                    ((((0, 10),), ((10, 10),)), 9, RUNNING),     # last byte held back until done
                    ((((0, 10),), ()), 10, DONE)]
    assert f.add_listener(lambda fill: None) is False


def drain(parent, worker):
    """Every frame `worker` received before `parent` was closed."""
    parent.close()
    out = []
    while (m := worker.recv()) is not None:
        out.append(m)
    return out


def test_the_relay_sends_the_reply_snapshot_before_progress_and_stops_at_the_end():
    relays = ipc.FillRelays()
    f, _ = Inflight().join_or_create("b", 10, lambda: "/p")
    piece = f.claim(None, 0, 10, 10)
    (a, a_worker), (b, b_worker) = pair(), pair()
    f.wrote(piece, 3)
    relays.reply(a, 1, Reply(file_entry(), f, "fill"))
    f.wrote(piece, 3)
    relays.reply(b, 2, Reply(file_entry(), f, "fill-join"))
    assert relays.count() == 1
    f.fail(RuntimeError("bad hash"))
    relays.reply(a, 3, Reply(file_entry(), f, "fill-join"))
    frames = drain(a, a_worker)
    ops = [(m.op, m.fill.spans if m.op == ipc.Op.REPLY else m.spans) for m in frames]
    assert ops == [(ipc.Op.REPLY, ((0, 3),)), (ipc.Op.PROGRESS, ((0, 6),)),
                   (ipc.Op.PROGRESS, ((0, 6),)), (ipc.Op.REPLY, ((0, 6),))]
    assert frames[0].job_id == 1 and frames[0].outcome == "fill" and frames[0].fill.state == RUNNING
    assert (frames[2].state, frames[2].error) == (FAILED, "bad hash")
    assert (frames[3].job_id, frames[3].fill.state, frames[3].fill.error) == (3, FAILED, "bad hash")
    assert [m.op for m in drain(b, b_worker)] == [ipc.Op.REPLY, ipc.Op.PROGRESS]
    assert relays.count() == 0


def test_a_demand_frame_reaches_the_fill_it_names_and_nothing_else():
    relays = ipc.FillRelays()
    f, _ = Inflight().join_or_create("b", 100, lambda: "/p")
    asked = []
    f.on_demand = lambda fill, off: asked.append(off)
    f.claim(None, 0, 10, 10)
    parent, worker = pair()
    relays.reply(parent, 1, Reply(file_entry(), f, "fill"))
    token = worker.recv().fill.token
    served = threading.Thread(target=ipc.serve_worker,
                              args=(parent, None, relays, lambda m: None), daemon=True)
    served.start()
    worker.send(ipc.DemandFrame(token, 70))
    worker.send(ipc.DemandFrame(token + 1, 80))      # unknown token: ignored
    worker.send(ipc.DemandFrame(token, -1))          # nonsense offset: ignored
    worker.close()
    served.join(5)
    assert not served.is_alive() and asked == [70]
    f.fail(RuntimeError("x"))
    relays.demand(token, 90)                          # ended fills are forgotten
    assert asked == [70] and relays.count() == 0


def test_serve_worker_ignores_unknown_opcodes_and_handles_the_next_frame():
    parent, worker = pair()
    jobs, ready, served, downloads = [], [], [], []
    with capture_logs() as logs:
        t = threading.Thread(target=ipc.serve_worker,
                             args=(parent, jobs.append, ipc.FillRelays(), ready.append,
                                   served.extend, downloads.extend), daemon=True)
        t.start()
        worker.send_frame(raw_frame((99, "from", "a newer worker")))
        worker.send_frame(raw_frame((99,)))
        worker.send(ipc.ReadyFrame(42, "epoll", "sendfile", 3))
        worker.send(ipc.KeysFrame(None))             # a parent -> worker frame: no handler here
        worker.send(ipc.JobFrame(1, target(), "GET", "h", b"", None, None))
        worker.send(ipc.ServedFrame([("sha256/aa", 1.0)]))
        worker.send(ipc.DownloadsFrame([("model/o/r", 2)]))
        worker.close()
        t.join(5)
    assert not t.is_alive()
    assert ready == [ipc.ReadyFrame(42, "epoll", "sendfile", 3)]
    assert len(jobs) == 1 and jobs[0].target.repo == "o/r" and jobs[0].method == "GET"
    assert isinstance(jobs[0].reply, ipc.RemoteReply) and jobs[0].reply.job_id == 1
    assert served == [("sha256/aa", 1.0)] and downloads == [("model/o/r", 2)]
    ignored = [e["op"] for e in logs if e.get("reader") == "parent"]
    assert ignored == ["99", repr(ipc.Op.KEYS)]      # each opcode logged once


def run_client(blob_dir=None, on_drop=None, on_keys=None):
    parent, worker = pair()
    eof = threading.Event()
    blob_path = (lambda blob_id: os.path.join(blob_dir, blob_id)) if blob_dir else None
    client = ipc.ParentClient(worker, eof.set, blob_path, on_drop, on_keys)
    return parent, client, eof


def submit(client, replies):
    got = threading.Event()

    def reply(r):
        replies.append(r)
        got.set()
    client.submit(Job(target(), "GET", "h", b"", None, reply))
    return got


def test_a_worker_ignores_unknown_opcodes_and_handles_the_next_frame():
    with capture_logs() as logs:
        dropped, keys = [], []
        parent, client, eof = run_client(on_drop=dropped.append, on_keys=keys.append)
        client.start()
        parent.send_frame(raw_frame((250, "x")))
        parent.send_frame(raw_frame((250, "y")))
        parent.send(ipc.DemandFrame(1, 2))            # a worker -> parent frame: no handler here
        parent.send(ipc.KeysFrame(None))              # --auth off: nothing to load
        parent.send(ipc.KeysFrame({"k": ("d", "read")}, 3))
        parent.send(ipc.DropFdsFrame(["/b1", "/b2"]))
        assert parent.recv() == ipc.KeysAppliedFrame(3)   # only the table that was loaded
        replies = []
        got = submit(client, replies)
        job = parent.recv()
        assert type(job) is ipc.JobFrame and job.target.repo == "o/r"
        parent.send(ipc.ReplyFrame(job.job_id, file_entry(), "hit", None, None))
        assert got.wait(5)
    assert not eof.is_set() and client.reader.is_alive()
    assert keys == [{"k": ("d", "read")}] and dropped == [["/b1", "/b2"]]
    assert replies[0].fill is None and replies[0].outcome == "hit" and replies[0].entry.heads is None
    ignored = [e["op"] for e in logs if e.get("reader") == "worker"]
    assert ignored == ["250", repr(ipc.Op.DEMAND)]
    parent.close()
    assert eof.wait(5)


def test_a_worker_streams_from_a_local_fill_fed_by_progress_frames(tmp_path):
    parent, client, eof = run_client(str(tmp_path))
    client.start()
    replies = []
    got = submit(client, replies)
    job = parent.recv()
    assert type(job) is ipc.JobFrame
    part = str(tmp_path / "x.part")
    parent.send(ipc.ReplyFrame(job.job_id, file_entry(), "fill",
                               ipc.FillSnapshot(7, "b", 10, part, ((0, 4),), ((4, 6),), RUNNING,
                                                None, None), None))
    assert got.wait(5)
    f = replies[0].fill
    assert (f.part_path, f.readable(0), f.state) == (part, 4, RUNNING)
    # the parent renames the verified part file to the blob before DONE can arrive
    assert f.final_path == str(tmp_path / "b")
    woke = threading.Event()
    assert f.wait(4, lambda fn, arg: fn(arg), lambda _: woke.set(), None)
    parent.send(ipc.ProgressFrame(7, ((0, 10),), ((10, 10),), RUNNING, None, None))
    assert woke.wait(5) and f.readable(4) == 5
    # a reader that waits where no fetcher is headed asks the parent for one
    f.apply(((0, 4),), ((4, 6),))
    assert f.wait(8, lambda fn, arg: fn(arg), lambda _: None, None)
    assert parent.recv() == ipc.DemandFrame(7, 8)
    done = file_entry(blob_path=str(tmp_path / "b"))
    woke.clear()
    assert f.wait(9, lambda fn, arg: fn(arg), lambda _: woke.set(), None)
    parent.send(ipc.ProgressFrame(7, ((0, 10),), (), DONE, done, None))
    assert woke.wait(5) and f.state == DONE and f.readable(0) == 10
    assert f.entry.blob_path == done.blob_path and f.entry.heads is None and client.proxies == {}
    parent.close()
    assert eof.wait(5)


def test_a_reply_for_a_fill_that_already_ended_carries_its_final_state(tmp_path):
    parent, client, eof = run_client(str(tmp_path))
    client.start()
    replies = []
    got = submit(client, replies)
    job = parent.recv()
    parent.send(ipc.ReplyFrame(job.job_id, file_entry(), "fill-join",
                               ipc.FillSnapshot(9, "b", 10, str(tmp_path / "gone.part"), ((0, 9),),
                                                (), FAILED, None, "bad hash"), None))
    assert got.wait(5) and replies[0].fill.state == FAILED and replies[0].fill.error == "bad hash"
    assert replies[0].fill.readable(0) == 0 and client.proxies == {}
    parent.close()
    assert eof.wait(5)
