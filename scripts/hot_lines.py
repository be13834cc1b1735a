"""The cache lines a server's loop touches per window of its turns under real load, pulsys
against the reference server: what a reactor must take back into the caches after another
reactor ran on its core (docs/benchmarks.md, issue 18, eighteenth day).

Each server runs under `valgrind --tool=lackey --trace-mem=yes --trace-syscalls=yes`,
serves a warm 4 KiB file to the C keep-alive client at --connections, and
scripts/bench_peers/hot_lines.c reads the trace: per window of --window-enters
io_uring_enter calls (the loop's turns), the distinct 64-byte lines of instructions and of
data, every thread of the server counted. A window of 8 turns at 32 connections is ~150
requests, what one of `--listeners 2`'s reactors serves in ~2 ms on this machine. The
client's requests a window come from the server's sockets' byte counts, read while the
server stands still before the first window and after the last. One window's lines are
attributed to mappings, to functions (instruction lines: `nm` and `readelf`) and, in
pulsys, to the Python objects that cover them (a gc walk in the server after the windows:
every tracked object and the untracked objects it refers to; lines no live object covers
are "other": freed objects, dict tables, frames, malloc'd buffers).

Under lackey a server runs ~100-200x slower (pulsys takes ~25 min to start), so a turn
finds about as many requests ready as the reference finds; instruction and data lines are
counts of addresses, not timings, and do not depend on this machine's noise. Work on
wall-clock timers (pulsys's tick, its access-log writer, the log's per-second timestamp)
keeps real time meanwhile, so it lands in far more windows than natively: the quietest
windows are the closest to the loop's own lines. The gc walk of pulsys's objects under
lackey takes more than 15 minutes.

    python scripts/hot_lines.py                       # both servers
    python scripts/hot_lines.py --servers ref --windows 3

Writes results/<machine>/hot_lines_<date>.json (or --out-dir). Needs valgrind (Debian
package) and a liburing binding valgrind can run: valgrind 3.19 has no AVX-512, so set
PULSYS_BENCH_LIBURING_WHEEL to the portable wheel (scripts/build_liburing.sh); it is put
first on the servers' PYTHONPATH, the installed binding is left alone.
"""

import argparse
import bisect
import collections
import datetime
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import zipfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import bench_compare as B  # noqa: E402
import bench_warm  # noqa: E402
import provenance  # noqa: E402

ROOT = os.path.dirname(HERE)
SIZE = 4096
PATH = "/%s/resolve/main/f%d.bin" % (B.REPO, SIZE)
# pulsys under valgrind: the index's 256 GiB LMDB map is more address space than valgrind
# can reserve (a warm hit from the answer memo reads no index page), and SIGUSR1 writes the
# live objects (address, size, type, referrer's type) for the attribution.
BOOT = r"""
import gc, os, runpy, signal, sys, ctypes
import pulsys.cache.indexdb as i
i.MAP_SIZE = 1 << 30
def dump(sig, frame):
    seen, out = set(), []
    def rec(o, owner):
        if id(o) in seen:
            return
        seen.add(id(o))
        try:
            size = sys.getsizeof(o)
        except Exception:
            size = 16
        out.append("%x %d %s %s" % (id(o), size, type(o).__name__, owner))
        if isinstance(o, bytearray) and len(o):
            b = (ctypes.c_char * 1).from_buffer(o)
            out.append("%x %d bytearray-buffer %s" % (ctypes.addressof(b), len(o), owner))
            del b
    for o in gc.get_objects():
        rec(o, "-")
        for r in gc.get_referents(o):
            if not gc.is_tracked(r):
                rec(r, type(o).__name__)
    path = os.environ["HOT_LINES_OBJECTS"]
    with open(path + ".tmp", "w") as f:
        f.write("\n".join(out) + "\n")
    os.rename(path + ".tmp", path)
signal.signal(signal.SIGUSR1, dump)
sys.argv[0] = "pulsys"
runpy.run_module("pulsys", run_name="__main__", alter_sys=True)
"""


def say(msg):
    print("hot_lines: " + msg, flush=True)


def binding_path(tmp):
    """-> a directory to put first on PYTHONPATH with the portable liburing wheel, or None."""
    wheel = os.environ.get("PULSYS_BENCH_LIBURING_WHEEL")
    if not wheel:
        return None
    d = os.path.join(tmp, "binding")
    with zipfile.ZipFile(wheel) as z:
        z.extractall(d)
    return d


def check_binding(env):
    p = subprocess.run(["valgrind", "--tool=none", "-q", sys.executable, "-c",
                        "import liburing as L; r = L.Ring(); L.io_uring_queue_init(8, r, 0)"],
                       env=env, capture_output=True, text=True, timeout=600)
    if p.returncode != 0:
        raise SystemExit("hot_lines: error: the liburing binding does not run under valgrind (%s); set "
                         "PULSYS_BENCH_LIBURING_WHEEL to the portable wheel (scripts/build_liburing.sh)"
                         % (p.stderr.strip().splitlines() or ["exit %d" % p.returncode])[-1])


def request(port, path, headers):
    """One GET of `path` on a raw socket. -> the response's head length in bytes."""
    with socket.create_connection(("127.0.0.1", port), timeout=1800) as c:
        c.sendall(("GET %s HTTP/1.1\r\nHost: x\r\n%s\r\n" % (
            path, "".join("%s: %s\r\n" % kv for kv in headers.items()))).encode())
        got = b""
        while b"\r\n\r\n" not in got or len(got) - got.index(b"\r\n\r\n") - 4 < SIZE:
            d = c.recv(65536)
            if not d:
                raise SystemExit("hot_lines: error: the server closed before a whole answer: %r" % got[:200])
            got += d
    if not got.startswith(b"HTTP/1.1 200"):
        raise SystemExit("hot_lines: error: the warm GET answered %r" % got[:200])
    return got.index(b"\r\n\r\n") + 4


def bytes_sent(port):
    out = subprocess.run(["ss", "-tin", "state", "established", "( sport = :%d )" % port],
                         capture_output=True, text=True).stdout
    return sum(int(x) for x in re.findall(r"bytes_sent:(\d+)", out))


def wait_file(path, procs, timeout):
    """Wait for `path` while every process of `procs` ({name: Popen}) runs."""
    end = time.monotonic() + timeout
    while not os.path.exists(path):
        for name, proc in procs.items():
            if proc.poll() is not None:
                raise SystemExit("hot_lines: error: %s ended early (exit %s)" % (name, proc.returncode))
        if time.monotonic() > end:
            raise SystemExit("hot_lines: error: %s did not appear within %d s" % (path, timeout))
        time.sleep(0.05)


def run_server(server, a, work, hub, body, exe, reader, env):
    """One server under lackey. -> (windows, requests a window, head bytes, maps text, dumped
    lines, objects text or None)."""
    ctl = tempfile.mkdtemp(prefix="ctl-", dir=work)
    port, admin = B.free_port(), B.free_port()
    headers = {}
    if server == "pulsys":
        cache = os.path.join(work, "cache")
        headers["Authorization"] = "Bearer " + bench_warm.create_key(cache)
        args = ["--listen", "127.0.0.1:%d" % port, "--admin-listen", "127.0.0.1:%d" % admin, "--upstream", hub.url,
                "--cache-dir", cache, "--allow-upstream-host", hub.cdn_netloc, "--log-format", "json",
                "--auth", "required", "--iouring", "--listeners", "1"]
        # filled natively first: under valgrind the fill's threads wait on the reactor's sleep
        native = subprocess.Popen([sys.executable, "-m", "pulsys"] + args, cwd=ROOT, env=env,
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            for _ in range(300):
                try:
                    request(port, PATH, headers)
                    break
                except (OSError, SystemExit):
                    time.sleep(0.1)
            else:
                raise SystemExit("hot_lines: error: pulsys did not fill the file")
        finally:
            native.terminate()
            native.wait(60)
        cmd = [sys.executable, "-c", BOOT] + args
        env = dict(env, HOT_LINES_OBJECTS=os.path.join(ctl, "objects"))
    else:
        files = os.path.join(work, "files")
        os.makedirs(files, exist_ok=True)
        with open(os.path.join(files, "f%d.bin" % SIZE), "wb") as f:
            f.write(body)
        cmd = [sys.executable, os.path.join(B.REFERENCE_DIR, "uring_min_server.py"), str(port), files, "mem"]
    url = PATH if server == "pulsys" else "/files/f%d.bin" % SIZE
    r, w = os.pipe()
    filt = subprocess.Popen([reader, str(a.window_enters), str(a.windows), ctl, str(a.dump_window)],
                            stdin=r, stdout=subprocess.PIPE, text=True)
    os.close(r)
    srv = subprocess.Popen(B.pin(0) + ["valgrind", "--tool=lackey", "--trace-mem=yes", "--trace-syscalls=yes",
                                      "--log-fd=%d" % w] + cmd, cwd=ROOT, env=env, pass_fds=(w,),
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    os.close(w)
    load = None
    try:
        t0 = time.monotonic()
        while True:
            try:
                head = request(port, url, headers)
                break
            except OSError:
                if srv.poll() is not None or time.monotonic() - t0 > 3600:
                    raise SystemExit("hot_lines: error: %s did not start under valgrind" % server)
                time.sleep(2)
        say("%s up under valgrind after %.0f s; head %d bytes" % (server, time.monotonic() - t0, head))
        load = subprocess.Popen(B.pin(1) + [exe, "-a", "127.0.0.1", "-p", str(port), "-u", url, "-c",
                                str(a.connections), "-d", "3600", "-s", str(SIZE)]
                                + (["-H", "Authorization: " + headers["Authorization"]] if headers else []),
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(a.warmup)
        open(os.path.join(ctl, "arm"), "w").close()
        running = {"the trace reader": filt, "the server": srv, "the load generator": load}
        sent = []
        for n in (0, 1):
            wait_file(os.path.join(ctl, "pause.%d" % n), running, 3000)
            time.sleep(0.3)       # the pipe is full and the server stands still
            sent.append(bytes_sent(port))
            if n == 1:
                with open("/proc/%d/maps" % srv.pid) as f:
                    maps = f.read()
            open(os.path.join(ctl, "go.%d" % n), "w").close()
        objects = None
        if server == "pulsys":
            os.kill(srv.pid, signal.SIGUSR1)
            wait_file(env["HOT_LINES_OBJECTS"], running, 3000)
            with open(env["HOT_LINES_OBJECTS"]) as f:
                objects = f.read()
    finally:
        if load is not None:
            load.terminate()
            load.wait(60)
        srv.terminate()
        try:
            srv.wait(60)
        except subprocess.TimeoutExpired:
            srv.kill()
            srv.wait(60)
        out = filt.communicate(timeout=600)[0]
    windows = [dict(zip(("i", "d", "accesses"), map(int, m)))
               for m in re.findall(r"^W \d+ I (\d+) D (\d+) accesses (\d+)$", out, re.M)]
    with open(os.path.join(ctl, "lines")) as f:
        lines = f.read()
    per = (sent[1] - sent[0]) / (SIZE + head) / a.windows
    return windows, per, head, maps, lines, objects


def parse_maps(text):
    """-> sorted [(start, end, file offset, path or "[anon]", perms)]"""
    out = []
    for line in text.splitlines():
        p = line.split()
        start, end = (int(x, 16) for x in p[0].split("-"))
        out.append((start, end, int(p[2], 16), p[5] if len(p) > 5 else "[anon]", p[1]))
    out.sort()
    return out


class Symbols:
    """Function names of code addresses, from the files' symbol tables (nm) and their load
    segments (readelf: a segment's addresses are its file offsets plus p_vaddr - p_offset)."""

    def __init__(self):
        self.files = {}

    def _load(self, path):
        addrs, names, segs = [], [], []
        if os.path.exists(path):
            for flags in (["-n", "--defined-only"], ["-n", "-D", "--defined-only"]):
                out = subprocess.run(["nm"] + flags + [path], capture_output=True, text=True).stdout
                for line in out.splitlines():
                    q = line.split()
                    if len(q) == 3 and q[1] in "tTwWiI":
                        addrs.append(int(q[0], 16))
                        names.append(q[2].split("@")[0])
                if addrs:
                    break
            out = subprocess.run(["readelf", "-lW", path], capture_output=True, text=True).stdout
            for m in re.finditer(r"^\s*LOAD\s+0x([0-9a-f]+)\s+0x([0-9a-f]+)\s+0x[0-9a-f]+\s+0x([0-9a-f]+)", out, re.M):
                off, vaddr, filesz = (int(x, 16) for x in m.groups())
                segs.append((off, off + filesz, vaddr - off))
            # the PLT's stubs: calls between a library's own exported functions go through
            # them unless it was linked with -Bsymbolic or -fno-semantic-interposition
            out = subprocess.run(["readelf", "-SW", path], capture_output=True, text=True).stdout
            for m in re.finditer(r"\s(\.plt(?:\.sec|\.got)?)\s+\S+\s+([0-9a-f]+)\s+[0-9a-f]+\s+([0-9a-f]+)", out):
                start, size = int(m.group(2), 16), int(m.group(3), 16)
                addrs += [start, start + size]
                names += ["[%s]" % m.group(1), "?"]
        order = sorted(range(len(addrs)), key=addrs.__getitem__)
        self.files[path] = ([addrs[i] for i in order], [names[i] for i in order], segs)

    def name(self, path, file_offset):
        if path not in self.files:
            self._load(path)
        addrs, names, segs = self.files[path]
        vaddr = file_offset + next((d for lo, hi, d in segs if lo <= file_offset < hi), 0)
        j = bisect.bisect_right(addrs, vaddr) - 1
        return names[j] if j >= 0 else "?"


def attribute(lines_text, maps_text, objects_text=None, top=30):
    """One window's lines by mapping, instruction lines by function, and data lines in
    anonymous memory by the live object that covers them."""
    maps = parse_maps(maps_text)
    starts = [m[0] for m in maps]
    objs = []
    for line in (objects_text or "").splitlines():
        addr, size, kind, owner = line.split(" ", 3)
        label = kind if owner == "-" else "%s (in a %s)" % (kind, owner)
        objs.append((int(addr, 16), int(size), label))
    objs.sort()
    ostarts = [o[0] for o in objs]
    reach, end = [], 0       # reach[j]: the furthest end of objs[0..j] (a big buffer spans many lines)
    for o in objs:
        end = max(end, o[0] + o[1])
        reach.append(end)
    syms = Symbols()
    by_map, by_fn, by_obj = collections.Counter(), collections.Counter(), collections.Counter()
    for line in lines_text.splitlines():
        kind, addr = line.split()
        kind, addr = ("I" if kind == "0" else "D"), int(addr, 16)
        i = bisect.bisect_right(starts, addr) - 1
        if i >= 0 and addr < maps[i][1]:
            start, _, off, path, perms = maps[i]
        else:
            start, off, path, perms = addr, 0, "[unmapped]", ""
        name = path.rsplit("/", 1)[-1]
        by_map["%s %s %s" % (kind, perms, name)] += 1
        if kind == "I" and path.startswith("/"):
            by_fn["%s %s" % (name, syms.name(path, addr - start + off))] += 1
        if kind == "D" and objs and not path.startswith("/"):
            # the last-starting object, among those starting in or before the line, that
            # reaches into it; none once no earlier object reaches past the line's start
            j = bisect.bisect_right(ostarts, addr + 63) - 1
            hit = None
            while j >= 0 and reach[j] > addr:
                if objs[j][0] + objs[j][1] > addr:
                    hit = objs[j][2]
                    break
                j -= 1
            by_obj[hit or "other"] += 1
    return {"by_mapping": by_map.most_common(),
            "instruction_lines_by_function": by_fn.most_common(top),
            "functions": len(by_fn),
            "anonymous_data_lines_by_object": by_obj.most_common(top) if objs else None}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--servers", default="pulsys,ref", help="comma list of pulsys, ref (default both)")
    ap.add_argument("--connections", type=int, default=32)
    ap.add_argument("--window-enters", type=int, default=8, help="io_uring_enter calls a window (default 8)")
    ap.add_argument("--windows", type=int, default=6)
    ap.add_argument("--dump-window", type=int, default=2, help="the window whose lines are attributed")
    ap.add_argument("--warmup", type=float, default=20.0, help="seconds of load before the windows")
    ap.add_argument("--name", default="hot_lines")
    ap.add_argument("--out-dir")
    a = ap.parse_args()
    servers = [s for s in a.servers.split(",") if s]
    if not servers or any(s not in ("pulsys", "ref") for s in servers):
        ap.error("--servers: a comma list of pulsys and ref")
    if not 0 <= a.dump_window < a.windows or a.window_enters < 1 or a.connections < 1:
        ap.error("--dump-window must be one of the windows; --window-enters and --connections above 0")
    for tool in ("valgrind", "nm", "readelf", "ss"):
        if not shutil.which(tool):
            raise SystemExit("hot_lines: error: %s not found (apt-get install valgrind binutils iproute2)" % tool)
    if "ref" in servers and not os.path.isfile(os.path.join(B.REFERENCE_DIR, "uring_min_server.py")):
        raise SystemExit("hot_lines: error: the reference server is not at %s (PULSYS_REFERENCE_DIR)" % B.REFERENCE_DIR)
    work = tempfile.mkdtemp(prefix="hot_lines-")
    hub = None
    try:
        env = dict(os.environ)
        extra = binding_path(work)
        env["PYTHONPATH"] = os.pathsep.join(x for x in (extra, ROOT, env.get("PYTHONPATH")) if x)
        check_binding(env)
        exe = B.build_loadgen(work)[0]
        reader = B.build_c(work, "hot_lines", who="hot_lines")[0]
        body = os.urandom(SIZE)
        hub = B.FakeHub(record_requests=False, xet=False).start()
        hub.add_repo(B.REPO, files={"f%d.bin" % SIZE: body}, lfs={"f%d.bin" % SIZE})
        doc = {"servers": {}}
        for server in servers:
            windows, per, head, maps, lines, objects = run_server(server, a, work, hub, body, exe, reader, env)
            doc["servers"][server] = {
                "windows": windows, "requests_a_window": round(per, 1), "response_head_bytes": head,
                "dumped_window": a.dump_window, "attribution": attribute(lines, maps, objects)}
            w = windows[a.dump_window]
            say("%s: %.1f requests a window; window %d: %d instruction lines, %d data lines"
                % (server, per, a.dump_window, w["i"], w["d"]))
    finally:
        if hub is not None:
            hub.stop()
        shutil.rmtree(work, ignore_errors=True)
    doc["provenance"] = provenance.provenance(
        counter="valgrind --tool=lackey --trace-mem=yes --trace-syscalls=yes (user space, every thread)",
        connections=a.connections, window_enters=a.window_enters, size=SIZE,
        binding=os.path.basename(os.environ.get("PULSYS_BENCH_LIBURING_WHEEL", "installed")))
    path = provenance.write_result("%s_%s.json" % (a.name, datetime.date.today().isoformat()), doc, a.out_dir)
    say("wrote " + path)


if __name__ == "__main__":
    main()
