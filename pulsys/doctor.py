"""`pulsys doctor`: measure the ceilings of this node and say which one binds.

A pull-through cache lands a model at the speed of its slowest stage:

    upstream ──► fill ──► write to the cache dir ──► read back ──► serve on loopback/NIC
   (network)   (pulsys's   (fdatasync'd, sustained)  (cold: pages   (sendfile to a socket,
               own work:                               evicted)       the path reactors use)
               receive, hash, write; a real fill
               from a local origin, upstream/fill_ceiling.py)

A node whose cache volume writes at 125 MB/s never pulls faster than that, however
fast its network. Each stage is measured for a bounded number of bytes and seconds;
`binding` is the slowest measured stage and `expected_seconds` the time to move
`model_bytes` through it. Nothing here runs on a reactor thread.
"""

import os
import socket
import tempfile
import threading
import time

CHUNK = 4 << 20
STAGES = (("write_MBps", "disk_write"), ("read_cold_MBps", "disk_read"), ("serve_MBps", "serve"),
          ("upstream_MBps", "upstream"), ("fill_MBps", "fill"))


def _mbps(nbytes, seconds):
    return round(nbytes / max(seconds, 1e-9) / 1e6, 1)


def measure_write(path, size, seconds):
    """Sequential writes with fdatasync every 64 MiB and at the end: what a fill sustains
    (a fill fsyncs before it commits, so the page cache cannot hide a slow volume)."""
    block = os.urandom(CHUNK)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
    written, t0 = 0, time.monotonic()
    try:
        while written < size:
            written += os.write(fd, block)
            if written % (64 << 20) == 0:
                os.fdatasync(fd)
                if time.monotonic() - t0 > seconds:
                    break
        os.fdatasync(fd)
    finally:
        os.close(fd)
    return written, _mbps(written, time.monotonic() - t0)


def drop_pages(path):
    """Ask the kernel to evict the file's clean pages (posix_fadvise(2) DONTNEED);
    False where that is not available."""
    if not hasattr(os, "posix_fadvise"):
        return False
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        os.fdatasync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        return True
    finally:
        os.close(fd)


def measure_read(path, seconds):
    buf = bytearray(CHUNK)
    total, t0 = 0, time.monotonic()
    with open(path, "rb", buffering=0) as f:
        while True:
            n = f.readinto(buf)
            if not n:
                break
            total += n
            if time.monotonic() - t0 > seconds:
                break
    return _mbps(total, time.monotonic() - t0)


def measure_serve(path, nbytes, seconds, send_body):
    """sendfile from the file to a loopback TCP socket drained by a reader thread: the
    path every warm file body takes (pulsys.platform sender's send_body)."""
    lst = socket.socket()
    lst.bind(("127.0.0.1", 0))
    lst.listen(1)
    cli = socket.create_connection(lst.getsockname())
    srv, _ = lst.accept()
    lst.close()
    got = [0]

    def drain():
        buf = bytearray(1 << 20)
        while True:
            n = cli.recv_into(buf)
            if not n:
                break
            got[0] += n
    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    size = os.path.getsize(path)
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    sent, t0 = 0, time.monotonic()
    try:
        while sent < nbytes and time.monotonic() - t0 < seconds:
            off = sent % size
            n = send_body(srv.fileno(), fd, off, min(size - off, nbytes - sent))
            if n < 0:
                break
            sent += n
        srv.shutdown(socket.SHUT_WR)
        reader.join(30)
    finally:
        os.close(fd)
        srv.close()
        cli.close()
    return _mbps(got[0], time.monotonic() - t0)


def measure_upstream(session, url, nbytes, seconds, headers=None):
    """Stream one large upstream file (following its CDN redirect) for at most nbytes
    or seconds."""
    total, t0 = 0, time.monotonic()
    with session.get(url, stream=True, timeout=(10, 30), headers=headers or {}) as r:
        if r.status_code != 200:
            raise OSError("upstream answered %d for %s" % (r.status_code, url))
        for chunk in r.iter_content(1 << 20):
            total += len(chunk)
            if total >= nbytes or time.monotonic() - t0 > seconds:
                break
    return _mbps(total, time.monotonic() - t0)


def network_MBps(sys_class_net="/sys/class/net"):
    """The fastest non-loopback interface's link speed in MB/s (sysfs reports Mbit/s), or
    None when no interface reports one (common on VMs and containers)."""
    best = None
    try:
        names = os.listdir(sys_class_net)
    except OSError:
        return None
    for name in names:
        if name == "lo":
            continue
        try:
            with open(os.path.join(sys_class_net, name, "speed")) as f:
                mbit = int(f.read().strip())
        except (OSError, ValueError):
            continue
        if mbit > 0 and (best is None or mbit > best):
            best = mbit
    return None if best is None else best / 8.0


def verdict(results, model_bytes):
    """Adds binding and expected_seconds: the slowest measured stage moves the model."""
    measured = [(results[k], name) for k, name in STAGES if results.get(k)]
    if not measured:
        return dict(results, binding=None, model_bytes=model_bytes, expected_seconds=None)
    rate, binding = min(measured)
    return dict(results, binding=binding, model_bytes=model_bytes,
                expected_seconds=round(model_bytes / (rate * 1e6), 1))


def run(cache_dir, send_body, model_bytes, size=256 << 20, seconds=10.0, upstream=None, fill=None):
    """All measurements on a temp file under cache_dir (removed after). `upstream`:
    None, or (session, url, headers). `fill(cache_dir)`: the fill engine's MB/s (the
    caller's: this module does not import the upstream plane), or None."""
    os.makedirs(cache_dir, exist_ok=True)
    fd, path = tempfile.mkstemp(prefix=".pulsys-doctor-", dir=cache_dir)
    os.close(fd)
    notes = []
    try:
        written, write = measure_write(path, size, seconds)
        evicted = drop_pages(path)
        cold = measure_read(path, seconds)
        warm = measure_read(path, seconds)
        if not evicted:
            notes.append("could not evict the test file from the page cache: read_cold is a warm read")
        elif cold > 0.8 * warm:
            notes.append("read_cold is close to read_warm: the volume may be memory-backed (tmpfs) "
                         "or the kernel kept the pages")
        serve = measure_serve(path, max(written, 1 << 30), seconds, send_body)
        up = None
        if upstream is not None:
            session, url, headers = upstream
            up = measure_upstream(session, url, 1 << 30, seconds, headers)
    finally:
        os.unlink(path)
    filled = fill(cache_dir) if fill is not None else None
    res = {"cache_dir": cache_dir, "test_bytes": written, "write_MBps": write, "read_cold_MBps": cold,
           "read_warm_MBps": warm, "serve_MBps": serve, "upstream_MBps": up, "fill_MBps": filled,
           "network_MBps": network_MBps(), "notes": notes}
    return verdict(res, model_bytes)


def write_ceiling_warning(write_MBps, net_MBps, ratio=0.5):
    """The start-up warning text when the cache volume writes far slower than the
    network delivers, else None."""
    if not write_MBps or not net_MBps or write_MBps >= ratio * net_MBps:
        return None
    return ("the cache dir sustains %.0f MB/s of fsync'd writes but the network delivers up to %.0f MB/s: "
            "cold pulls will run at disk speed (run `pulsys doctor` for details)" % (write_MBps, net_MBps))
