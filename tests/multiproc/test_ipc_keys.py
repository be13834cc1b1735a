"""A key change waits for the workers: the parent broadcasts a KEYS table, each worker's
ParentClient loads it and answers KEYS_APPLIED, and WorkerLinks.wait_keys returns once
every live worker enforces it (ADR 0009). Real links over socketpairs, the real
worker-side client and the parent's reader loop; no processes."""

import socket
import threading
import time

from pulsys import ipc


def worker(links, generation, on_keys):
    """A worker end (ParentClient, calling on_keys) and the parent's reader of its link,
    registered in `links` as having applied `generation`."""
    a, b = socket.socketpair()
    parent, child = ipc.Link(a, timeout=5), ipc.Link(b, timeout=5)
    links.add(parent, generation)
    client = ipc.ParentClient(child, lambda: None, on_keys=on_keys)
    client.start()
    reader = threading.Thread(target=ipc.serve_worker, daemon=True,
                              args=(parent, None, ipc.FillRelays(), None),
                              kwargs={"on_keys_applied": lambda gen: links.keys_applied(parent, gen)})
    reader.start()
    return parent, child


def test_a_key_change_returns_once_every_worker_has_loaded_it():
    links = ipc.WorkerLinks()
    loaded = {"fast": [], "slow": []}

    def slow(table):
        time.sleep(0.3)                   # a worker busy when the table arrives
        loaded["slow"].append(table)
    worker(links, 1, loaded["fast"].append)
    worker(links, 1, slow)
    table = {"k": ("d" * 64, "read")}
    t0 = time.monotonic()
    links.broadcast(ipc.KeysFrame(table, 2))
    assert links.wait_keys(2, 5) == 0
    took = time.monotonic() - t0
    assert loaded == {"fast": [table], "slow": [table]}    # both enforce it when the wait ends
    assert 0.3 <= took < 3
    assert links.wait_keys(1, 0) == 0                      # an older generation: nothing to wait for


def test_a_worker_that_does_not_answer_is_waited_for_only_until_the_bound():
    links = ipc.WorkerLinks()
    worker(links, 1, lambda table: None)
    a, b = socket.socketpair()                             # a worker that never reads its link
    silent = ipc.Link(a, timeout=5)
    links.add(silent, 1)
    links.broadcast(ipc.KeysFrame({}, 2))
    t0 = time.monotonic()
    assert links.wait_keys(2, 0.3) == 1
    assert 0.3 <= time.monotonic() - t0 < 2
    silent.shutdown()                                      # broken: no longer waited for
    assert links.wait_keys(2, 5) == 0
    links.remove(silent)
    assert links.wait_keys(2, 0) == 0
    b.close()


def test_a_worker_gone_during_the_wait_ends_it():
    links = ipc.WorkerLinks()
    a, b = socket.socketpair()
    silent = ipc.Link(a, timeout=5)
    links.add(silent, 1)
    threading.Timer(0.2, links.remove, args=(silent,)).start()   # the supervisor saw it die
    t0 = time.monotonic()
    assert links.wait_keys(2, 5) == 0
    assert time.monotonic() - t0 < 2
    b.close()
