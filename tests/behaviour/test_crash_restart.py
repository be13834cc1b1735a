"""kill -9 during a fill, then a restart on the same cache directory: nothing incomplete
is ever served as complete, the client gets the right bytes, and the fake Hub is asked
again when the blob had not been committed. pulsys runs as a real process
(`python -m pulsys`, one listener, so SIGKILL takes every thread at once)."""

import hashlib
import os
import signal
import socket
import threading
import time

import pytest

from pulsys.testing.fake_hub import sha256_hex
from tests.behaviour.fillcheck import blob_files, part_files
from tests.conftest import ProcServer

BODY = os.urandom(4 * 1024 * 1024 + 3)
SHA = sha256_hex(BODY)
PATH = "/org/k/resolve/main/w.safetensors"
RATE = 8 * 1024 * 1024          # bytes/s from the fake Hub: the fill takes about 0.5 s


@pytest.fixture
def repo(hub):
    return hub.add_repo("org/k", files={"w.safetensors": BODY, "cfg.json": b'{"k": 1}\n'})


def start(hub, cache, tmp_path, n=[0]):
    n[0] += 1
    return ProcServer({"upstream": hub.url, "cache_dir": cache, "listeners": "1", "auth": "off",
                       "allow_upstream_host": [hub.cdn_netloc], "access_log": False},
                      str(tmp_path / ("pulsys-%d.log" % n[0])))


def blob(cache):
    return os.path.join(cache, "v1", "blobs", "sha256", SHA[:2], SHA)


def open_get(address, path=PATH):
    s = socket.create_connection(address, timeout=30)
    s.sendall(("GET %s HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n" % path).encode())
    return s


def read_body(s, stop_after=None):
    """Read head and body; return (content_length, body) at EOF or once stop_after body
    bytes have arrived."""
    data = bytearray()
    while b"\r\n\r\n" not in data:
        chunk = s.recv(65536)
        if not chunk:
            raise AssertionError("no response head: %r" % bytes(data))
        data += chunk
    head, _, rest = bytes(data).partition(b"\r\n\r\n")
    length = int([ln.split(b":")[1] for ln in head.split(b"\r\n") if ln.lower().startswith(b"content-length")][0])
    body = bytearray(rest)
    while stop_after is None or len(body) < stop_after:
        try:
            chunk = s.recv(1 << 20)
        except (ConnectionResetError, socket.timeout):
            break
        if not chunk:
            break
        body += chunk
    return length, bytes(body)


def restart_and_check(hub, cache, tmp_path):
    """Restart on the cache; every blob on disk hashes to its name; the file comes out
    right. -> (blob was on disk at restart, upstream body fetches during the check)."""
    committed = os.path.exists(blob(cache))
    assert all(blob_files(cache).values()), blob_files(cache)
    hub.faults.clear()
    hub.reset_counters()
    srv = start(hub, cache, tmp_path)
    try:
        assert srv.load_stats["from"] == "index"         # LMDB: opened as the kill left it
        assert part_files(cache) == []
        s = open_get(srv.address)
        length, body = read_body(s)
        s.close()
        assert length == len(BODY) and hashlib.sha256(body).hexdigest() == SHA
        return committed, hub.body_fetches(SHA)
    finally:
        srv.stop()
        srv.shutdown()


def test_kill_mid_fill_then_restart_refetches_and_serves_correct_bytes(hub, repo, tmp_path):
    cache = str(tmp_path / "c")
    hub.faults.throttle(RATE)
    srv = start(hub, cache, tmp_path)
    s = open_get(srv.address)
    length, got = read_body(s, stop_after=len(BODY) // 4)
    assert length == len(BODY) and len(got) >= len(BODY) // 4
    os.kill(srv.pid, signal.SIGKILL)
    assert srv.shutdown() == -signal.SIGKILL
    _, got = read_body_rest(s, got)
    assert len(got) < len(BODY)                          # the client saw a short body
    assert part_files(cache) and not os.path.exists(blob(cache))
    committed, fetches = restart_and_check(hub, cache, tmp_path)
    assert not committed and fetches >= 1                # the fake Hub was asked again


def read_body_rest(s, got):
    rest = bytearray(got)
    while True:
        try:
            chunk = s.recv(1 << 20)
        except (ConnectionResetError, socket.timeout):
            break
        if not chunk:
            break
        rest += chunk
    s.close()
    return None, bytes(rest)


@pytest.mark.parametrize("when", ["last-byte-held", "blob-renamed"])
def test_kill_around_the_commit_never_leaves_a_blob_that_is_wrong(hub, repo, tmp_path, when):
    """last-byte-held: the client has every byte but the last, which waits for verify,
    fsync and rename; the kill lands somewhere in there. blob-renamed: a watcher kills
    the moment the blob appears under blobs/ (before or just after its entry is saved)."""
    cache = str(tmp_path / "c")
    hub.faults.throttle(RATE)
    srv = start(hub, cache, tmp_path)
    killed = threading.Event()

    def watch():
        deadline = time.monotonic() + 30
        while not killed.is_set() and time.monotonic() < deadline:
            if os.path.exists(blob(cache)):
                os.kill(srv.pid, signal.SIGKILL)
                killed.set()
                return
            time.sleep(0.0005)
    s = open_get(srv.address)
    if when == "blob-renamed":
        t = threading.Thread(target=watch, daemon=True)
        t.start()
        read_body_rest(s, b"")
        t.join(31)
        assert killed.is_set(), "the blob never appeared"
    else:
        length, got = read_body(s, stop_after=len(BODY) - 1)
        assert len(got) >= len(BODY) - 1       # the last byte may have followed already
        os.kill(srv.pid, signal.SIGKILL)
        killed.set()
        read_body_rest(s, got)
    assert srv.shutdown() == -signal.SIGKILL
    committed, fetches = restart_and_check(hub, cache, tmp_path)
    assert committed or fetches >= 1                     # from a verified blob, or asked again
    if when == "blob-renamed":
        assert committed and fetches == 0                # renamed = verified: kept and served


def test_a_blob_changed_behind_pulsys_is_never_served_and_is_fetched_again(hub, repo, tmp_path):
    """The index trusts blobs/ (no walk at start); a blob truncated by something else is
    caught when a reactor opens it (its size is not the entry's), and the GET becomes a
    miss that refetches it, instead of a short body under a full Content-Length."""
    cache = str(tmp_path / "c")
    srv = start(hub, cache, tmp_path)
    s = open_get(srv.address)
    assert read_body(s)[1] == BODY
    s.close()
    os.kill(srv.pid, signal.SIGKILL)
    srv.shutdown()
    with open(blob(cache), "r+b") as f:
        f.truncate(len(BODY) // 2)
    hub.reset_counters()
    srv = start(hub, cache, tmp_path)
    try:
        s = open_get(srv.address)
        length, body = read_body(s)
        s.close()
        assert length == len(BODY) and body == BODY and hub.body_fetches(SHA) >= 1
        assert os.path.getsize(blob(cache)) == len(BODY)
        assert '"blob missing from blobs/ or of the wrong size; entries of it become metadata only"' in srv.log_text()
    finally:
        srv.stop()
        srv.shutdown()
