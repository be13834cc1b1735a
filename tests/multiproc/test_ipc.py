"""The parent <-> worker protocol without processes: frames over a socketpair, the fill
progress relay, and the worker-side client that feeds local Fills and the index."""

import os
import pickle
import socket
import threading
import time

from pulsys import ipc
from pulsys.cache.index import Index
from pulsys.cache.inflight import DONE, FAILED, RUNNING, Inflight
from pulsys.http1.heads import prepare
from pulsys.model import target as T
from pulsys.model.entry import FILE, Entry
from pulsys.model.job import Job, Reply


def pair():
    a, b = socket.socketpair()
    return ipc.Link(a, timeout=5), ipc.Link(b)


def file_entry(key="k", blob_path=None):
    e = Entry(FILE, key, 10, "ab" * 32, "c" * 40, True, "sha256/" + "ab" * 32, blob_path,
              "application/octet-stream")
    return prepare(e)


def test_frames_carry_entries_without_their_rendered_heads():
    parent, worker = pair()
    e = file_entry(blob_path="/b")
    assert e.heads is not None
    big = b"x" * (3 << 20)                      # larger than the socket buffer: sent while read
    msgs = []
    reader = threading.Thread(target=lambda: msgs.extend([worker.recv(), worker.recv()]))
    reader.start()
    parent.send((ipc.PUBLISH, e))
    parent.send((ipc.JOB, 1, T.Target(T.RESOLVE, "model", "o/r", "main", "f"), "GET", "h", big, None))
    reader.join(5)
    kind, got = msgs[0]
    assert kind == ipc.PUBLISH and got.heads is None
    assert all(getattr(got, n) == getattr(e, n) for n in Entry.__slots__ if n != "heads")
    msg = msgs[1]
    assert msg[0] == ipc.JOB and msg[2].repo == "o/r" and msg[5] == big
    parent.close()
    assert worker.recv() is None and worker.broken


def test_a_broken_link_refuses_sends():
    parent, worker = pair()
    worker.close()
    assert parent.send((ipc.REMOVE, "k")) is False and parent.broken
    assert parent.send((ipc.REMOVE, "k")) is False


def test_fill_listeners_see_every_change_and_none_after_the_end():
    f, _ = Inflight().join_or_create("b", 10, lambda: "/p")
    seen = []
    assert f.add_listener(lambda fill: seen.append((fill.snapshot(), fill.readable(0), fill.state)))
    f.claim(None, 0, 10, 10)
    f.wrote(0, 4, 10)
    f.wrote(4, 6, 10)
    f.finish(file_entry())
    assert seen == [(((), ((0, 10),)), 0, RUNNING), ((((0, 4),), ((4, 10),)), 4, RUNNING),
                    ((((0, 10),), ((10, 10),)), 9, RUNNING),     # last byte held back until done
                    ((((0, 10),), ()), 10, DONE)]
    assert f.add_listener(lambda fill: None) is False


class FakeLink:
    def __init__(self):
        self.frames = []

    def send(self, msg):
        self.frames.append(msg)
        return True

    def send_frame(self, data):
        self.frames.append(pickle.loads(data[8:]))
        return True


def test_the_relay_sends_the_reply_snapshot_before_progress_and_stops_at_the_end():
    relays = ipc.FillRelays()
    f, _ = Inflight().join_or_create("b", 10, lambda: "/p")
    f.claim(None, 0, 10, 10)
    a, b = FakeLink(), FakeLink()
    f.wrote(0, 3, 10)
    relays.reply(a, 1, Reply(file_entry(), f, "fill"))
    f.wrote(3, 3, 10)
    relays.reply(b, 2, Reply(file_entry(), f, "fill-join"))
    assert relays.count() == 1
    f.fail(RuntimeError("bad hash"))
    relays.reply(a, 3, Reply(file_entry(), f, "fill-join"))
    ops = [(m[0], m[4][4] if m[0] == ipc.REPLY else m[2]) for m in a.frames]
    assert ops == [(ipc.REPLY, ((0, 3),)), (ipc.PROGRESS, ((0, 6),)), (ipc.PROGRESS, ((0, 6),)),
                   (ipc.REPLY, ((0, 6),))]
    assert a.frames[2][4] == FAILED and a.frames[2][6] == "bad hash" and a.frames[3][4][6] == FAILED
    assert [m[0] for m in b.frames] == [ipc.REPLY, ipc.PROGRESS]
    assert relays.count() == 0


def test_a_demand_frame_reaches_the_fill_it_names_and_nothing_else():
    relays = ipc.FillRelays()
    f, _ = Inflight().join_or_create("b", 100, lambda: "/p")
    asked = []
    f.on_demand = lambda fill, off: asked.append(off)
    f.claim(None, 0, 10, 10)
    relays.reply(FakeLink(), 1, Reply(file_entry(), f, "fill"))
    token = next(iter(relays._tokens))
    relays.demand(token, 70)
    relays.demand(token + 1, 80)         # unknown token: ignored
    relays.demand(token, -1)             # nonsense offset: ignored
    assert asked == [70]
    f.fail(RuntimeError("x"))
    relays.demand(token, 90)             # ended fills are forgotten
    assert asked == [70] and relays.count() == 0


def run_client(blob_dir):
    parent, worker = pair()
    index = Index()
    eof = threading.Event()
    client = ipc.ParentClient(worker, index, eof.set, lambda blob_id: os.path.join(blob_dir, blob_id))
    client.start()
    client.loaded()
    return parent, client, index, eof


def submit(client, replies):
    got = threading.Event()

    def reply(r):
        replies.append(r)
        got.set()
    client.submit(Job(T.Target(T.RESOLVE, "model", "o/r", "main", "f"), "GET", "h", b"", None, reply))
    return got


def test_a_worker_streams_from_a_local_fill_fed_by_progress_frames(tmp_path):
    parent, client, index, eof = run_client(str(tmp_path))
    replies = []
    got = submit(client, replies)
    job = parent.recv()
    assert job[0] == ipc.JOB
    part = str(tmp_path / "x.part")
    parent.send((ipc.REPLY, job[1], file_entry(), "fill",
                 (7, "b", 10, part, ((0, 4),), ((4, 6),), RUNNING, None, None)))
    assert got.wait(5)
    f = replies[0].fill
    assert (f.part_path, f.readable(0), f.state) == (part, 4, RUNNING)
    # the parent renames the verified part file to the blob before DONE can arrive
    assert f.final_path == str(tmp_path / "b")
    woke = threading.Event()
    assert f.wait(4, lambda fn, arg: fn(arg), lambda _: woke.set(), None)
    parent.send((ipc.PROGRESS, 7, ((0, 10),), ((10, 10),), RUNNING, None, None))
    assert woke.wait(5) and f.readable(4) == 5
    # a reader that waits where no fetcher is headed asks the parent for one
    f.apply(((0, 4),), ((4, 6),))
    assert f.wait(8, lambda fn, arg: fn(arg), lambda _: None, None)
    assert parent.recv() == (ipc.DEMAND, 7, 8)
    done = file_entry(blob_path=str(tmp_path / "b"))
    woke.clear()
    assert f.wait(9, lambda fn, arg: fn(arg), lambda _: woke.set(), None)
    parent.send((ipc.PROGRESS, 7, ((0, 10),), (), DONE, done, None))
    assert woke.wait(5) and f.state == DONE and f.readable(0) == 10
    assert f.entry.blob_path == done.blob_path and client.proxies == {}
    parent.close()
    assert eof.wait(5)


def test_a_reply_for_a_fill_that_already_ended_carries_its_final_state(tmp_path):
    parent, client, index, eof = run_client(str(tmp_path))
    replies = []
    got = submit(client, replies)
    job = parent.recv()
    parent.send((ipc.REPLY, job[1], file_entry(), "fill-join",
                 (9, "b", 10, str(tmp_path / "gone.part"), ((0, 9),), (), FAILED, None, "bad hash")))
    assert got.wait(5) and replies[0].fill.state == FAILED and replies[0].fill.error == "bad hash"
    assert replies[0].fill.readable(0) == 0 and client.proxies == {}
    parent.close()


def test_index_broadcasts_that_arrive_while_the_disk_index_loads_are_applied_after_it():
    parent, worker = pair()
    index = Index()
    client = ipc.ParentClient(worker, index, lambda: None)
    client.start()
    newer = file_entry("k", blob_path="/new")
    parent.send((ipc.PUBLISH, newer))
    parent.send((ipc.SET_REV, "model", "o/r", "main", "c" * 40, 1e18, 0.0))
    parent.send((ipc.PUBLISH, file_entry("gone")))
    parent.send((ipc.REMOVE, "gone"))
    time.sleep(0.2)
    index.publish(file_entry("k", blob_path="/old-from-disk"))     # what the disk load found
    assert index.get("k").blob_path == "/old-from-disk"
    client.loaded()
    assert index.get("k").blob_path == "/new" and index.get("gone") is None
    assert index.rev("model", "o/r", "main").commit == "c" * 40
    parent.send((ipc.PUBLISH, file_entry("later")))
    deadline = time.monotonic() + 5
    while index.get("later") is None and time.monotonic() < deadline:
        time.sleep(0.01)
    assert index.get("later") is not None
    parent.close()
