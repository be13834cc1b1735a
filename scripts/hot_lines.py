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
pulsys, to the Python objects that cover them (a walk in the server after the windows of
what its reactors reach, not through modules or types; lines no such object covers are
"other": freed objects, dict tables, frames, malloc'd buffers, what only modules hold).

Under lackey a server runs ~100-200x slower (pulsys takes ~25 min to start), so a turn
finds about as many requests ready as the reference finds; instruction and data lines are
counts of addresses, not timings, and do not depend on this machine's noise. Work on
wall-clock timers would keep real time meanwhile and land in far more windows than
natively, so pulsys's loop timers (its tick, sweep, fold idle and age, and access-log
writer interval) are slowed by --timer-scale (1000: a tick in a window is as rare as
natively), its loop's sleeps capped at a second (valgrind keeps its lock through a
blocking ctypes call: longer sleeps starve the other threads, and startup took >30
min). The access log's per-second timestamp text is not: a window of ~10 s under lackey
makes ~10 of them. The quietest window after the first is attributed. Each line is also
marked recurring when the window before touched it too: that set is what a reactor takes
back on every turn, where the others (text written once, ring entries) are new to it
anyway.

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
# objects reachable from the reactors (address, size, type, referrer's type) that cover a
# line of <objects>.want (sorted addresses, hex) for the attribution.
BOOT = r"""
import bisect, gc, os, runpy, signal, sys, ctypes
import pulsys.cache.indexdb as i
i.MAP_SIZE = 1 << 30
# the loop's timers, slowed as lackey slows the loop (HOT_LINES_TIMER_SCALE, 1: as built);
# but no sleep of the loop longer than a second: valgrind holds its lock through the
# ring's blocking wait (a ctypes call), so the process's other threads would not run
import pulsys.log, pulsys.reactor.base as b, pulsys.reactor.uring as u
k = float(os.environ.get("HOT_LINES_TIMER_SCALE", "1"))
for mod, names in ((b, ("TICK", "SWEEP", "HOOK_LOG_EVERY")), (u, ("FOLD_IDLE", "FOLD_AGE"))):
    for name in names:
        setattr(mod, name, getattr(mod, name) * k)
W = pulsys.log.AccessLogWriter
W.__init__.__defaults__ = W.__init__.__defaults__[:-1] + (W.__init__.__defaults__[-1] * k,)
_turn = u.UringReactor._turn
u.UringReactor._turn = lambda self, sleep: _turn(self, lambda t: sleep(min(t, 1.0)))
REACTORS = []
_init = u.UringReactor.__init__
def init(self, *args, **kw):
    REACTORS.append(self)
    _init(self, *args, **kw)
u.UringReactor.__init__ = init
def dump(sig, frame):
    # the objects reachable from the reactors, breadth first, not through modules, their
    # dicts or types (the rest of the process: a walk of every object under lackey took
    # more than 40 minutes); each written when it covers a wanted line
    import collections, types
    path = os.environ["HOT_LINES_OBJECTS"]
    with open(path + ".want") as f:
        want = [int(x, 16) for x in f.read().split()]
    find, n = bisect.bisect_right, len(want)
    stop = {id(m.__dict__) for m in list(sys.modules.values()) if hasattr(m, "__dict__")}
    seen, out, todo = set(stop), [], collections.deque((r, "-") for r in REACTORS)
    def covers(addr, size):
        j = find(want, addr - 64)
        return j < n and want[j] < addr + size
    while todo and len(seen) < 500000:
        o, owner = todo.popleft()
        if id(o) in seen or isinstance(o, (type, types.ModuleType)):
            continue
        seen.add(id(o))
        try:
            size = sys.getsizeof(o)
        except Exception:
            size = 16
        name = type(o).__name__
        if covers(id(o), size):
            out.append("%x %d %s %s" % (id(o), size, name, owner))
        if isinstance(o, bytearray) and len(o):
            b = (ctypes.c_char * 1).from_buffer(o)
            if covers(ctypes.addressof(b), len(o)):
                out.append("%x %d bytearray-buffer %s" % (ctypes.addressof(b), len(o), owner))
            del b
        for r in gc.get_referents(o):
            todo.append((r, name))
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
    """One server under lackey. -> (windows, requests a window, head bytes, maps text, the
    attributed window's index and lines, objects text or None)."""
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
                except OSError:     # not listening yet; a wrong answer (SystemExit) ends the run
                    time.sleep(0.1)
            else:
                raise SystemExit("hot_lines: error: pulsys did not fill the file")
        finally:
            native.terminate()
            native.wait(60)
        cmd = [sys.executable, "-c", BOOT] + args
        env = dict(env, HOT_LINES_OBJECTS=os.path.join(ctl, "objects"), HOT_LINES_TIMER_SCALE=str(a.timer_scale))
    else:
        files = os.path.join(work, "files")
        os.makedirs(files, exist_ok=True)
        with open(os.path.join(files, "f%d.bin" % SIZE), "wb") as f:
            f.write(body)
        cmd = [sys.executable, os.path.join(B.REFERENCE_DIR, "uring_min_server.py"), str(port), files, "mem"]
    url = PATH if server == "pulsys" else "/files/f%d.bin" % SIZE
    r, w = os.pipe()
    filt = subprocess.Popen([reader, str(a.window_enters), str(a.windows), ctl],
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
            if n == 0:
                open(os.path.join(ctl, "go.0"), "w").close()
        with open("/proc/%d/maps" % srv.pid) as f:
            maps = f.read()
        # every window has been printed before pause.1
        windows = [parse_window(filt.stdout.readline()) for _ in range(a.windows)]
        pick = quietest(windows) if a.dump_window is None else a.dump_window
        with open(os.path.join(ctl, "lines.%d" % pick)) as f:
            lines = f.read()
        open(os.path.join(ctl, "go.1"), "w").close()
        objects = None
        if server == "pulsys":
            with open(env["HOT_LINES_OBJECTS"] + ".want", "w") as f:
                f.write("\n".join("%x" % x for x in anon_data_lines(lines, maps)) + "\n")
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
        filt.communicate(timeout=600)
    per = (sent[1] - sent[0]) / (SIZE + head) / a.windows
    return windows, per, head, maps, pick, lines, objects


def parse_window(line):
    """The reader's "W <k> I <n> D <n> RI <n> RD <n> accesses <n>" -> {i, d, ri, rd, accesses}."""
    m = re.match(r"W \d+ I (\d+) D (\d+) RI (\d+) RD (\d+) accesses (\d+)$", line.strip())
    if not m:
        raise SystemExit("hot_lines: error: the trace reader wrote %r" % line)
    return dict(zip(("i", "d", "ri", "rd", "accesses"), map(int, m.groups())))


def parse_maps(text):
    """-> sorted [(start, end, file offset, path or "[anon]", perms)]"""
    out = []
    for line in text.splitlines():
        p = line.split()
        start, end = (int(x, 16) for x in p[0].split("-"))
        out.append((start, end, int(p[2], 16), p[5] if len(p) > 5 else "[anon]", p[1]))
    out.sort()
    return out


def mapping_of(maps, starts, addr):
    """-> (start, file offset, path, perms) of the mapping of parse_maps that holds addr
    (`starts` its starts), or (addr, 0, "[unmapped]", "")."""
    i = bisect.bisect_right(starts, addr) - 1
    if i >= 0 and addr < maps[i][1]:
        start, _, off, path, perms = maps[i]
        return start, off, path, perms
    return addr, 0, "[unmapped]", ""


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


def _tally(counter, top=None):
    """{key: [lines, recurring]} -> [(key, lines, recurring)], most lines first."""
    rows = sorted(((k, n, r) for k, (n, r) in counter.items()), key=lambda x: (-x[1], x[0]))
    return rows if top is None else rows[:top]


def attribute(lines_text, maps_text, objects_text=None, top=30):
    """One window's lines ("<0 I|1 D> <address hex> [<1 recurring>]") by mapping,
    instruction lines by function, and data lines in anonymous memory by the live object
    that covers them; each as (what, lines, of them recurring: the window before touched
    them too)."""
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
    new = lambda: [0, 0]     # noqa: E731
    by_map, by_fn, by_obj = (collections.defaultdict(new) for _ in range(3))
    for line in lines_text.splitlines():
        p = line.split()
        kind, addr, recur = ("I" if p[0] == "0" else "D"), int(p[1], 16), int(p[2]) if len(p) > 2 else 0
        start, off, path, perms = mapping_of(maps, starts, addr)
        name = path.rsplit("/", 1)[-1]
        keys = ["%s %s %s" % (kind, perms, name)]
        tallies = [by_map]
        if kind == "I" and path.startswith("/"):
            keys.append("%s %s" % (name, syms.name(path, addr - start + off)))
            tallies.append(by_fn)
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
            keys.append(hit or "other")
            tallies.append(by_obj)
        for k, t in zip(keys, tallies):
            t[k][0] += 1
            t[k][1] += recur
    return {"by_mapping": _tally(by_map),
            "instruction_lines_by_function": _tally(by_fn, top),
            "functions": len(by_fn),
            "anonymous_data_lines_by_object": _tally(by_obj, top) if objs else None}


def anon_data_lines(lines_text, maps_text):
    """-> the sorted addresses of a window's data lines outside mapped files (what the
    server's object walk looks for)."""
    maps = parse_maps(maps_text)
    starts = [m[0] for m in maps]
    out = []
    for line in lines_text.splitlines():
        p = line.split()
        if p[0] != "1":
            continue
        addr = int(p[1], 16)
        if not mapping_of(maps, starts, addr)[2].startswith("/"):
            out.append(addr)
    return sorted(out)


def quietest(windows):
    """-> the index of the window with the fewest lines among those with one before it
    (the others hold the timers' work, which lackey's slowness puts in most windows)."""
    return min(range(1, len(windows)), key=lambda k: windows[k]["i"] + windows[k]["d"])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--servers", default="pulsys,ref", help="comma list of pulsys, ref (default both)")
    ap.add_argument("--connections", type=int, default=32)
    ap.add_argument("--window-enters", type=int, default=8, help="io_uring_enter calls a window (default 8)")
    ap.add_argument("--windows", type=int, default=6)
    ap.add_argument("--dump-window", type=int, help="the window whose lines are attributed (default: the "
                    "quietest after the first)")
    ap.add_argument("--warmup", type=float, default=20.0, help="seconds of load before the windows")
    ap.add_argument("--timer-scale", type=float, default=1000.0,
                    help="pulsys's loop timers (tick, sweep, fold idle and age, access-log writer) run this "
                         "many times slower, as lackey slows the loop; its sleeps stay at most 1 s (default "
                         "1000; 1: as built)")
    ap.add_argument("--name", default="hot_lines")
    ap.add_argument("--out-dir")
    a = ap.parse_args()
    servers = [s for s in a.servers.split(",") if s]
    if not servers or any(s not in ("pulsys", "ref") for s in servers):
        ap.error("--servers: a comma list of pulsys and ref")
    if a.dump_window is not None and not 0 <= a.dump_window < a.windows or a.windows < 2 \
            or a.window_enters < 1 or a.connections < 1:
        ap.error("--dump-window must be one of the windows; --windows above 1; --window-enters and "
                 "--connections above 0")
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
            windows, per, head, maps, pick, lines, objects = run_server(server, a, work, hub, body, exe, reader,
                                                                        env)
            doc["servers"][server] = {
                "windows": windows, "requests_a_window": round(per, 1), "response_head_bytes": head,
                "attributed_window": pick, "attribution": attribute(lines, maps, objects)}
            w = windows[pick]
            say("%s: %.1f requests a window; window %d: %d instruction lines (%d recurring), %d data lines "
                "(%d recurring)" % (server, per, pick, w["i"], w["ri"], w["d"], w["rd"]))
    finally:
        if hub is not None:
            hub.stop()
        shutil.rmtree(work, ignore_errors=True)
    doc["provenance"] = provenance.provenance(
        counter="valgrind --tool=lackey --trace-mem=yes --trace-syscalls=yes (user space, every thread)",
        connections=a.connections, window_enters=a.window_enters, size=SIZE, timer_scale=a.timer_scale,
        binding=os.path.basename(os.environ.get("PULSYS_BENCH_LIBURING_WHEEL", "installed")))
    path = provenance.write_result("%s_%s.json" % (a.name, datetime.date.today().isoformat()), doc, a.out_dir)
    say("wrote " + path)


if __name__ == "__main__":
    main()
