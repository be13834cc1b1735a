"""--cache-max-bytes and --evict against the fake Hub, with one listener (in-process) and
two (worker processes): 507 when there is no room, LRU eviction by last-served time
(which worker processes report to the parent), evicted files refetched, and a reader
that is mid-body when its blob is evicted still gets every byte (docs/decisions/0008)."""

import hashlib
import os
import socket
import sys
import time

import pytest
import requests

from pulsys.cache.recency import INTERVAL
from pulsys.platform import PlatformFacts
from pulsys.testing.fake_hub import sha256_hex
from tests.conftest import wait_until

MIB = 1 << 20
A, B, C = (os.urandom(MIB) for _ in range(3))
HUGE = os.urandom(3 * MIB)
E, F = os.urandom(8 * MIB), os.urandom(8 * MIB)


@pytest.fixture(params=[1, 2], ids=["1-listener", "2-listeners"])
def listeners(request):
    return request.param


@pytest.fixture
def repo(hub):
    return hub.add_repo("org/q", files={"a.safetensors": A, "b.safetensors": B, "c.safetensors": C,
                                        "huge.safetensors": HUGE, "e.safetensors": E,
                                        "f.safetensors": F})


def url(srv, name):
    return srv.url + "/org/q/resolve/main/%s.safetensors" % name


def get(srv, name):
    return requests.get(url(srv, name), timeout=30)


def blob_path(cache, data):
    h = sha256_hex(data)
    return os.path.join(cache, "v1", "blobs", "sha256", h[:2], h)


def reports_arrived(listeners):
    """Workers report warm hits every INTERVAL and send each batch one interval later."""
    if listeners > 1:
        time.sleep(2 * INTERVAL + 0.3)


def test_evict_none_answers_507_and_warm_hits_go_on(hub, repo, make_server, tmp_path):
    cache = str(tmp_path / "c")
    srv = make_server(hub, cache_dir=cache, cache_max_bytes=str(MIB + MIB // 2), evict="none",
                      auth="off")
    assert get(srv, "a").content == A
    hub.reset_counters()
    r = get(srv, "b")
    assert r.status_code == 507 and r.headers["X-Error-Code"] == "CacheFull"
    assert "cache is full" in r.headers["X-Error-Message"] and "cache is full" in r.json()["error"]
    assert hub.body_fetches(sha256_hex(B)) == 0 and not os.path.exists(blob_path(cache, B))
    h = requests.head(url(srv, "b"), timeout=10)          # metadata needs no room
    assert h.status_code == 200 and h.headers["X-Linked-Size"] == str(MIB)
    assert get(srv, "a").content == A and hub.body_fetches(sha256_hex(A)) == 0
    v = srv.vars()
    assert v["quota_rejects"] == 1 and v["cache_bytes"] == MIB and v["evictions"] == 0


def test_lru_evicts_the_least_recently_served_and_the_evicted_file_is_refetched(
        hub, repo, make_server, tmp_path, listeners):
    cache = str(tmp_path / "c")
    srv = make_server(hub, cache_dir=cache, cache_max_bytes=str(2 * MIB + MIB // 2), auth="off")
    assert get(srv, "a").content == A
    assert get(srv, "b").content == B
    hub.reset_counters()
    assert get(srv, "a").content == A                     # warm: a is now newer than b
    assert hub.count() == 0
    reports_arrived(listeners)
    assert get(srv, "c").content == C                     # 3 MiB > 2.5 MiB: one must go
    assert not os.path.exists(blob_path(cache, B))
    assert os.path.exists(blob_path(cache, A)) and os.path.exists(blob_path(cache, C))
    v = srv.vars()
    assert v["evictions"] == 1 and v["evicted_bytes"] == MIB
    assert v["cache_bytes"] == 2 * MIB and v["cache_bytes"] <= v["cache_max_bytes"]
    hub.reset_counters()
    assert get(srv, "a").content == A and hub.count() == 0   # still warm
    h = requests.head(url(srv, "b"), timeout=10)          # metadata stays
    assert h.status_code == 200 and h.headers["Content-Length"] == str(MIB) and hub.count() == 0
    r = get(srv, "b")                                     # a miss again: refetched, correct
    assert r.status_code == 200 and hashlib.sha256(r.content).hexdigest() == sha256_hex(B)
    assert hub.body_fetches(sha256_hex(B)) >= 1
    r = get(srv, "huge")                                  # larger than the quota: never fits
    assert r.status_code == 507 and r.headers["X-Error-Code"] == "CacheFull"
    assert srv.vars()["quota_rejects"] == 1


def _fds_on(pid, path):
    """How many of process `pid`'s descriptors point at `path` (deleted or not)."""
    n = 0
    d = "/proc/%d/fd" % pid
    for fd in os.listdir(d):
        try:
            target = os.readlink(os.path.join(d, fd))
        except OSError:
            continue
        if target == path or target == path + " (deleted)":
            n += 1
    return n


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/<pid>/fd")
def test_a_reader_mid_body_finishes_when_its_blob_is_evicted_and_the_fd_is_then_closed(
        hub, repo, make_server, tmp_path, listeners):
    cache = str(tmp_path / "c")
    srv = make_server(hub, cache_dir=cache, cache_max_bytes=str(12 * MIB), auth="off")
    assert get(srv, "e").content == E
    slow = socket.socket()
    slow.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 16384)
    slow.settimeout(30)
    slow.connect(srv.address)
    slow.sendall(b"GET /org/q/resolve/main/e.safetensors HTTP/1.1\r\nHost: t\r\n\r\n")
    got = bytearray()
    while b"\r\n\r\n" not in got:
        got += slow.recv(65536)
    head, _, got = bytes(got).partition(b"\r\n\r\n")
    got = bytearray(got)
    assert head.startswith(b"HTTP/1.1 200")
    pids = [w["pid"] for w in srv.vars()["workers"]] if listeners > 1 else [os.getpid()]
    path = blob_path(cache, E)
    assert sum(_fds_on(p, path) for p in pids) >= 1       # the server is sending from it
    assert get(srv, "f").content == F                     # 16 MiB > 12 MiB: e is evicted
    assert not os.path.exists(path) and srv.vars()["evictions"] == 1
    while len(got) < len(E):                              # POSIX keeps the unlinked inode
        chunk = slow.recv(1 << 20)
        assert chunk, "server closed after %d of %d bytes" % (len(got), len(E))
        got += chunk
    slow.close()
    assert hashlib.sha256(got).hexdigest() == sha256_hex(E)
    assert wait_until(lambda: sum(_fds_on(p, path) for p in pids) == 0, timeout=10), \
        "a descriptor keeps the evicted blob's disk space"
    hub.reset_counters()
    assert get(srv, "e").content == E and hub.body_fetches(sha256_hex(E)) >= 1


def test_a_clean_restart_keeps_the_index_and_the_lru_order(hub, repo, make_server, tmp_path):
    """Shutdown writes last-served times into the index (a worker's last hits reach the
    parent as it stops); the next start reads them back with the quota accounts."""
    cache = str(tmp_path / "c")
    srv = make_server(hub, cache_dir=cache, cache_max_bytes=str(2 * MIB + MIB // 2), auth="off")
    assert get(srv, "a").content == A
    assert get(srv, "b").content == B
    time.sleep(0.05)                     # file times tick coarsely; a must be clearly newer
    assert get(srv, "a").content == A    # warm, recorded only by the reactor that served it
    srv.stop()
    srv.shutdown()
    srv = make_server(hub, cache_dir=cache, cache_max_bytes=str(2 * MIB + MIB // 2), auth="off")
    assert srv.load_stats["from"] == "index" and srv.load_stats["entries"] >= 2
    assert get(srv, "c").content == C    # evicts b: by file times a (filled first) would go
    assert not os.path.exists(blob_path(cache, B)) and os.path.exists(blob_path(cache, A))
    hub.reset_counters()
    assert get(srv, "a").content == A and hub.count() == 0


@pytest.mark.parametrize("iouring", ["on", "off"])
def test_lru_counts_hits_on_files_answered_from_memory(hub, make_server, tmp_path, listeners, iouring):
    """Files up to 16 KiB are answered from memory (on io_uring by the fused hit path);
    their hits must count for LRU like any other."""
    if iouring == "on" and not PlatformFacts.probe().uring_ok:
        pytest.skip("io_uring not usable here")
    small = {n: os.urandom(8 << 10) for n in "abc"}
    hub.add_repo("org/s", files={n + ".safetensors": b for n, b in small.items()})
    cache = str(tmp_path / "c")
    srv = make_server(hub, cache_dir=cache, cache_max_bytes=str(20 << 10), auth="off", iouring=iouring)
    s = requests.Session()                                  # keep-alive: the same head bytes again
    u = srv.url + "/org/s/resolve/main/%s.safetensors"
    assert s.get(u % "a", timeout=30).content == small["a"]
    assert s.get(u % "b", timeout=30).content == small["b"]
    hub.reset_counters()
    for _ in range(3):
        assert s.get(u % "a", timeout=30).content == small["a"]   # warm, from memory
    assert hub.count() == 0
    reports_arrived(listeners)
    assert s.get(u % "c", timeout=30).content == small["c"]   # 24 KiB > 20 KiB: one must go
    assert not os.path.exists(blob_path(cache, small["b"]))
    assert os.path.exists(blob_path(cache, small["a"]))
