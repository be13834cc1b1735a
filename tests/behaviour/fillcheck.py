"""What fill tests look at from outside: raw responses read to EOF, the blobs on disk
checked against their names, part files left behind, and CPU time of a thread or
process (Linux /proc)."""

import hashlib
import os
import socket
import time


def raw_get(address, path, headers=(), timeout=30):
    """One GET on a new connection (Connection: close), read to EOF.
    -> (status, headers lower-case, body, complete): complete means the body reached
    Content-Length before the server closed."""
    extra = "".join("%s: %s\r\n" % h for h in headers)
    data = bytearray()
    with socket.create_connection(address, timeout=timeout) as s:
        s.sendall(("GET %s HTTP/1.1\r\nHost: t\r\nConnection: close\r\n%s\r\n" % (path, extra)).encode())
        while True:
            try:
                chunk = s.recv(1 << 20)
            except ConnectionResetError:
                break
            if not chunk:
                break
            data += chunk
    head, _, body = bytes(data).partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    hdrs = {}
    for line in lines[1:]:
        k, _, v = line.partition(":")
        hdrs[k.strip().lower()] = v.strip()
    want = hdrs.get("content-length")
    return int(lines[0].split(" ")[1]), hdrs, body, want is not None and len(body) == int(want)


def timed_get(address, path, headers=(), timeout=30):
    """One GET on a new connection, read to EOF, timed. -> (status, body, complete,
    seconds to the first body byte, seconds to the end)."""
    extra = "".join("%s: %s\r\n" % h for h in headers)
    t0 = time.monotonic()
    data, t_first = bytearray(), None
    with socket.create_connection(address, timeout=timeout) as s:
        s.sendall(("GET %s HTTP/1.1\r\nHost: t\r\nConnection: close\r\n%s\r\n" % (path, extra)).encode())
        while True:
            chunk = s.recv(1 << 20)
            if not chunk:
                break
            data += chunk
            if t_first is None and b"\r\n\r\n" in data and not data.endswith(b"\r\n\r\n"):
                t_first = time.monotonic() - t0
    head, _, body = bytes(data).partition(b"\r\n\r\n")
    lines = head.split(b"\r\n")
    length = [ln.split(b":")[1] for ln in lines if ln.lower().startswith(b"content-length")]
    complete = bool(length) and len(body) == int(length[0])
    return int(lines[0].split(b" ")[1]), body, complete, t_first, time.monotonic() - t0


def blob_files(cache_dir):
    """{blob id: True if its bytes hash to its name} for every file under blobs/."""
    root = os.path.join(cache_dir, "v1", "blobs")
    out = {}
    for dirpath, _, names in os.walk(root):
        algo = os.path.relpath(dirpath, root).split(os.sep)[0]
        for name in names:
            with open(os.path.join(dirpath, name), "rb") as f:
                data = f.read()
            if algo == "sha256":
                got = hashlib.sha256(data).hexdigest()
            elif algo == "sha1":
                got = hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()
            else:
                got = name
            out["%s/%s" % (algo, name)] = got == name
    return out


def part_files(cache_dir):
    tmp = os.path.join(cache_dir, "v1", "tmp")
    return [n for n in os.listdir(tmp) if n.endswith(".part")] if os.path.isdir(tmp) else []


def cpu_seconds(stat_path):
    """utime + stime of a /proc/<pid>[/task/<tid>]/stat file, in seconds."""
    with open(stat_path) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
