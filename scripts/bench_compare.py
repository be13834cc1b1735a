"""Warm hits: pulsys against nginx, Varnish and olah, on the same files and load, in one run.

Every server serves the same random files at /bench/files/resolve/main/f<size>.bin:

  pulsys-iouring     python -m pulsys --iouring       (in front of the fake Hub)
  pulsys-portable    python -m pulsys --no-iouring    (in front of the fake Hub)
  nginx-static       nginx, files on disk; variants tcp_nopush on and off
  nginx-proxy-cache  nginx proxy_cache in front of the fake Hub
  varnish            Varnish in front of the fake Hub
  olah               olah (PyPI) in front of the fake Hub
  uring-floor        scripts/bench_peers/uring_floor.py: a featureless Python + liburing
                     server (files in memory, no parser/cache/log), sizes <= 64 KiB only:
                     the floor that pulsys's per-request Python is measured against
  uring-ref          ../shared/reference/uring_min_server.py beside the repository (outside
                     it, never copied in; PULSYS_REFERENCE_DIR moves it): one thread, one
                     io_uring_submit_and_wait per loop turn, sizes <= 64 KiB only; recorded
                     unavailable when the file is absent or the liburing binding cannot run

All listen on 127.0.0.1 only. Each is warmed (one GET per file, bytes checked), then
every (size, concurrency) cell is measured for each server in turn, rounds
interleaving the servers (the order rotates every round) because the machine is
shared and noisy. Servers are pinned to CPU 0, the load generator to CPU 1. Per
measurement: req/s, payload GB/s, p50/p99 latency, errors, and the server's CPU
seconds per GB from /proc/<pid>/stat (utime+stime of its whole process tree, before
and after). Every load is bounded in time; only processes this script started are
stopped, by PID.

Load generator: the C client scripts/bench_peers/loadgen.c, compiled with the system
cc into a temp dir, for every size above 64 KiB (wrk reads 8 KiB per read(2) and
saturates its core near 2 GB/s). At 4 KiB both are measured against the fastest
server; the C client is used for <= 64 KiB too when it is at least as fast as wrk
there (>= GEN_PARITY x wrk's median). Each row says which generator produced it.

Output: results/<machine>/<name>_<date>.csv and .json (provenance: commit, dirty
flag, machine, kernel, Python; the load average before and after), or under
--out-dir. Refuses to run when the git commit is unknown. Installs nothing: see
scripts/bench_compare.sh, which installs the peers and calls this driver.

    python scripts/bench_compare.py                       # the full default run
    python scripts/bench_compare.py --quick
    python scripts/bench_compare.py --servers pulsys-portable,nginx-static --sizes 4096 \\
        --concurrency 16 --duration 2 --rounds 1
"""

import argparse
import csv
import datetime
import http.client
import json
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
PEERS_DIR = os.path.join(HERE, "bench_peers")
sys.path.insert(0, HERE)
sys.path.insert(0, ROOT)
import provenance  # noqa: E402

from pulsys.testing.fake_hub import FakeHub  # noqa: E402

KIB, MIB = 1024, 1024 * 1024
DEFAULT_SIZES = [4 * KIB, 64 * KIB, 256 * KIB, 4 * MIB, 16 * MIB]
DEFAULT_CONCURRENCY = [1, 16, 64]
QUICK = {"sizes": [4 * KIB, 256 * KIB], "concurrency": [16], "duration": 2.0, "rounds": 1}
SERVERS = ["pulsys-iouring", "pulsys-portable", "nginx-static", "nginx-proxy-cache", "varnish", "olah",
           "uring-floor", "uring-ref"]
ALIASES = {"pulsys": ["pulsys-iouring", "pulsys-portable"], "nginx": ["nginx-static", "nginx-proxy-cache"],
           "all": SERVERS}
REPO = "bench/files"
WRK_MAX_SIZE = 64 * KIB     # wrk is never used above this size
GEN_PARITY = 0.97           # "at least as fast": loadgen median >= 0.97 x wrk median (noise)
GEN_BUSY = 0.90             # generator CPU share above which a row is flagged as client-bound
QUIET_BUSY, QUIET_WINDOW = 0.15, 5   # --wait-quiet: machine-wide CPU busy share, sampled over seconds
COLUMNS = ["server", "variant", "generator", "size", "concurrency", "round", "req_per_s", "gbytes_per_s",
           "p50_us", "p99_us", "cpu_s_per_gb", "errors", "note", "commit", "dirty"]
CLK_TCK = os.sysconf("SC_CLK_TCK")
BENCH_HOME = os.path.expanduser(os.environ.get("PULSYS_BENCH_HOME", "~/.cache/pulsys-bench"))
# Reference programs shared by every checkout, kept next to the repository, not in it
# (their README: "not to be copied into pulsys").
REFERENCE_DIR = os.environ.get("PULSYS_REFERENCE_DIR") or os.path.join(os.path.dirname(ROOT), "shared", "reference")


def portable_path(ctx, text):
    """A command-line word or config with this machine's paths replaced by placeholders:
    results are committed, and paths of the machine that ran them must not be."""
    for path, mark in ((ctx.workdir, "<workdir>"), (REFERENCE_DIR, "<reference-dir>"), (ROOT, "<repo>"),
                       (sys.prefix, "<python-prefix>"), (os.path.expanduser("~"), "~")):
        text = text.replace(path, mark)
    return text


def log(msg):
    print("bench_compare: " + msg, flush=True)


# -- small helpers ---------------------------------------------------------------

def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def can_pin():
    return bool(shutil.which("taskset")) and (os.cpu_count() or 1) > 1


def pin(cpu):
    return ["taskset", "-c", str(cpu)] if can_pin() else []


def which(name):
    """shutil.which, also looking in the sbin directories a non-root PATH may lack."""
    return shutil.which(name) or shutil.which(name, path="/usr/sbin:/usr/local/sbin:/sbin")


def render_template(name, values):
    with open(os.path.join(PEERS_DIR, name)) as f:
        text = f.read()
    for key, value in values.items():
        text = text.replace("@@%s@@" % key, str(value))
    left = re.findall(r"@@[A-Z_]+@@", text)
    if left:
        raise RuntimeError("template %s: unfilled %s" % (name, ", ".join(sorted(set(left)))))
    return text


def version_of(cmd, cwd=None):
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=20, cwd=cwd)
    except (OSError, subprocess.TimeoutExpired) as e:
        return "unknown (%s)" % e
    out = (p.stdout + p.stderr).strip().splitlines()
    return out[0].strip() if out else "unknown"


def loadavg():
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None


def cpu_busy(window):
    """Share of all CPUs busy (not idle or iowait) over `window` seconds, from /proc/stat."""
    def sample():
        with open("/proc/stat") as f:
            v = [int(x) for x in f.readline().split()[1:]]
        return sum(v), v[3] + v[4]
    t0, i0 = sample()
    time.sleep(window)
    t1, i1 = sample()
    return 1 - (i1 - i0) / max(1, t1 - t0)


def wait_quiet(limit):
    """Wait up to `limit` seconds for a quiet machine; returns (seconds waited, last busy share)."""
    t0 = time.monotonic()
    while True:
        busy = cpu_busy(QUIET_WINDOW)
        waited = time.monotonic() - t0
        if busy < QUIET_BUSY or waited >= limit:
            return round(waited, 1), round(busy, 3)
        log("machine busy (%.0f%% of all CPUs); waiting for quiet (%.0f/%.0f s)" % (100 * busy, waited, limit))


def other_pytest_processes():
    """Count processes whose command line runs pytest (the shared machine's test suites)."""
    n = 0
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            with open("/proc/%s/cmdline" % pid, "rb") as f:
                cmd = f.read().replace(b"\0", b" ")
        except OSError:
            continue
        if b"pytest" in cmd and b"bench_compare" not in cmd:
            n += 1
    return n


# -- process trees and their CPU time ----------------------------------------------

def _stat_fields(pid):
    """/proc/PID/stat's fields from the third (state) on, or None: fields[0] is field 3
    of proc(5), so ppid=4 is fields[1], utime=14 fields[11], stime=15, cutime=16,
    cstime=17, starttime=22 fields[19]."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            data = f.read()
    except OSError:
        return None
    return data[data.rindex(")") + 2:].split()


def _stat(pid):
    """(ppid, utime+stime, cutime+cstime, starttime) in clock ticks, or None."""
    fields = _stat_fields(pid)
    if fields is None:
        return None
    return (int(fields[1]), int(fields[11]) + int(fields[12]), int(fields[13]) + int(fields[14]),
            int(fields[19]))


def process_tree(root):
    """{pid: starttime} for root and all its live descendants."""
    parents, starts = {}, {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            st = _stat(int(name))
            if st is not None:
                parents[int(name)] = st[0]
                starts[int(name)] = st[3]
    tree, frontier = {}, [root]
    while frontier:
        pid = frontier.pop()
        if pid in starts and pid not in tree:
            tree[pid] = starts[pid]
            frontier.extend(p for p, pp in parents.items() if pp == pid)
    return tree


def tree_cpu_ticks(root):
    """utime+stime of root's live tree, plus the time of children root already reaped."""
    return sum(tree_user_system_ticks(root))


def tree_user_system_ticks(root):
    """(user, system) clock ticks of root's live tree, plus those of the children root
    already reaped (proc(5): utime and stime, fields 14 and 15; cutime and cstime, 16
    and 17)."""
    user = system = 0
    for pid in process_tree(root):
        fields = _stat_fields(pid)
        if fields is None:
            continue
        user += int(fields[11]) + (int(fields[13]) if pid == root else 0)
        system += int(fields[12]) + (int(fields[14]) if pid == root else 0)
    return user, system


def tree_threads(root):
    """[(tid, "/proc/PID/task/TID")] of every live thread of root's tree."""
    out = []
    for pid in process_tree(root):
        try:
            out.extend((int(tid), "/proc/%d/task/%s" % (pid, tid)) for tid in os.listdir("/proc/%d/task" % pid))
        except OSError:
            continue
    return out


def tree_run_seconds(root):
    """(seconds on a CPU of every thread of root's live tree, to the nanosecond; the set of
    those threads' ids) or None where the kernel keeps no schedstat. The seconds are the
    first field of /proc/PID/task/TID/schedstat (sum_exec_runtime, the total that
    /proc/PID/stat's utime+stime are scaled to, there in clock ticks of 10 ms: proc(5)).
    A thread that has ended is not counted: a difference of two readings is exact only
    when every thread of the first is in the second."""
    total, tids = 0, set()
    for tid, path in tree_threads(root):
        try:
            with open(path + "/schedstat") as f:
                total += int(f.read().split()[0])
        except (OSError, ValueError, IndexError):
            if not os.path.exists(path):
                continue      # the thread ended between the listing and the read
            return None
        tids.add(tid)
    return total / 1e9, frozenset(tids)


def wait_idle(root, timeout=20.0, interval=0.2):
    """Wait until the server tree stops burning CPU (work left over from the last load,
    e.g. responses to abandoned requests, must not land in the next measurement)."""
    t0 = time.monotonic()
    quiet, last = 0, tree_cpu_ticks(root)
    while time.monotonic() - t0 < timeout:
        time.sleep(interval)
        now = tree_cpu_ticks(root)
        quiet = quiet + 1 if now - last <= 1 else 0
        last = now
        if quiet >= 2:
            break
    return round(time.monotonic() - t0, 2)


# -- HTTP checks -------------------------------------------------------------------

def http_get(port, path, timeout=120.0, header=None):
    """GET path -> (status, body); header: one extra "Name: value" line, as the generators send."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        name, _, value = (header or "").partition(":")
        conn.request("GET", path, headers={name: value.strip()} if header else {})
        r = conn.getresponse()
        return r.status, r.read()
    finally:
        conn.close()


def wait_port(port, proc, timeout=30.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            return False
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return True
        except OSError:
            time.sleep(0.05)
    return False


def file_path(size):
    return "/%s/resolve/main/f%d.bin" % (REPO, size)


# -- the servers ---------------------------------------------------------------------

def peer_key():
    """A made-up key of a pulsys key's length, for the peers that check none (Peer.header)."""
    from pulsys.auth.keys import KEY_LEN, new_key
    key = new_key()[0]
    if len(key) != KEY_LEN:
        raise SystemExit("bench_compare: a made-up key has %d characters, not %d" % (len(key), KEY_LEN))
    return key


class Unavailable(Exception):
    pass


class Peer:
    """One measured endpoint: a server process (tree) listening on 127.0.0.1:port."""
    server = variant = ""
    max_size = float("inf")      # larger files are not measured on this peer
    start_timeout = 30.0         # seconds to answer after spawn (longer under valgrind)

    def __init__(self, ctx):
        self.ctx = ctx
        self.proc = None
        self.port = free_port()
        self.dir = os.path.join(ctx.workdir, "%s-%s" % (self.server, self.variant))
        os.makedirs(self.dir, exist_ok=True)
        self.command = []
        self.config = None
        self.version = ""

    @property
    def key(self):
        return "%s/%s" % (self.server, self.variant)

    def path(self, size):
        """The URL path this peer serves the file of `size` at."""
        return file_path(size)

    @property
    def header(self):
        """The Authorization line every request to this peer carries: pulsys's own key
        (`--auth required`), and for the peers, which check none, a made-up key of the same
        length, so that every server parses the same request bytes."""
        return "Authorization: Bearer " + self.ctx.peer_key

    def spawn(self, cmd, **kw):
        self.command = cmd
        kw.setdefault("stdout", subprocess.DEVNULL)
        kw.setdefault("stderr", subprocess.DEVNULL)
        self.proc = subprocess.Popen(cmd, cwd=kw.pop("cwd", self.dir), start_new_session=True, **kw)
        self.ctx.started.append(self)

    def start(self):
        raise NotImplementedError

    def warm(self):
        """One GET per file, bytes checked; raises Unavailable on any difference."""
        for size, data in self.ctx.files.items():
            if size > self.max_size:
                continue
            try:
                status, body = http_get(self.port, self.path(size), header=self.header)
            except OSError as e:
                raise Unavailable("warm-up GET of f%d.bin failed: %s" % (size, e)) from None
            if status != 200 or body != data:
                raise Unavailable("warm-up GET of f%d.bin returned status %d, %d bytes, %s" % (
                    size, status, len(body), "same bytes" if body == data else "different bytes"))

    def stop(self):
        if self.proc is None or self.proc.poll() is not None:
            return
        tree = process_tree(self.proc.pid)
        try:
            self.proc.send_signal(signal.SIGTERM)
            self.proc.wait(15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)
        # Children that outlived their parent (e.g. nginx workers after a killed master):
        # end exactly those PIDs, and only if they are still the processes we started.
        for pid, start in tree.items():
            st = _stat(pid)
            if pid != self.proc.pid and st is not None and st[3] == start:
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass

    def exited_message(self):
        return "exited with code %s" % self.proc.returncode


class Pulsys(Peer):
    server = "pulsys"

    def __init__(self, ctx, variant, flag, root=ROOT, listeners=1):
        self.variant = variant
        self.flag = flag
        self.listeners = listeners   # > 1: worker processes on CPU 0 (profile_floors)
        self.root = root      # the source tree run (`python -m pulsys` from there): this one,
        super().__init__(ctx)  # or another commit's worktree for an A/B (profile_floors --base-tree)

    def cmd(self):
        hub = self.ctx.hub
        self.admin_port = free_port()
        # one listener: the targets compare one pulsys reactor with one nginx worker
        return pin(0) + [sys.executable, "-m", "pulsys", self.flag, "--listeners", str(self.listeners),
                         "--listen", "127.0.0.1:%d" % self.port,
                         "--admin-listen", "127.0.0.1:%d" % self.admin_port,
                         "--upstream", hub.url, "--allow-upstream-host", hub.cdn_netloc,
                         "--cache-dir", os.path.join(self.dir, "cache"), "--log-format", "json",
                         # every request carries a real read key (self.header), checked
                         "--auth", "required"]

    @property
    def header(self):
        return "Authorization: Bearer " + self.key_text

    def make_key(self):
        """A read key in this server's own store, made before it starts (so no first-start
        admin key is made and printed)."""
        p = subprocess.run([sys.executable, "-m", "pulsys", "keys", "create", "--cache-dir",
                            os.path.join(self.dir, "cache"), "--name", "bench"], cwd=self.root,
                           capture_output=True, text=True, timeout=60)
        if p.returncode != 0 or not p.stdout.strip():
            raise Unavailable("pulsys keys create failed: " + (p.stderr.strip().splitlines() or ["?"])[-1])
        self.key_text = p.stdout.strip()

    def start(self):
        self.version = version_of([sys.executable, "-m", "pulsys", "--version"], cwd=self.root)
        self.make_key()
        cmd = self.cmd()
        # Product defaults (access log on, JSON), stderr discarded as in production.
        self.spawn(cmd, cwd=self.root)
        deadline = time.monotonic() + self.start_timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                # Run the same command again with stderr captured, for its one-line reason.
                try:
                    p = subprocess.run(cmd, cwd=self.root, capture_output=True, text=True, timeout=30)
                except subprocess.TimeoutExpired:
                    raise Unavailable("pulsys %s; started again, it did not exit"
                                      % self.exited_message()) from None
                lines = [l for l in p.stderr.strip().splitlines() if l.strip()]
                raise Unavailable(lines[-1] if lines else "pulsys exited with code %s" % p.returncode)
            try:
                http_get(self.admin_port, "/healthz", timeout=1)
                return
            except OSError:
                time.sleep(0.05)
        raise Unavailable("pulsys did not answer /healthz within %d s" % self.start_timeout)


class NginxStatic(Peer):
    server = "nginx-static"

    def __init__(self, ctx, nopush):
        self.nopush = nopush
        self.variant = "tcp_nopush_%s" % nopush
        super().__init__(ctx)

    def values(self):
        return {"USER": "user root;" if os.geteuid() == 0 else "", "DIR": self.dir, "PORT": self.port,
                "TCP_NOPUSH": self.nopush, "ROOT": self.ctx.www}

    template = "nginx-static.conf"

    def start(self):
        nginx = which("nginx")
        if not nginx:
            raise Unavailable("nginx not installed (Debian package nginx; bash scripts/bench_compare.sh installs it)")
        self.version = version_of([nginx, "-v"])
        self.config = render_template(self.template, self.values())
        conf = os.path.join(self.dir, "nginx.conf")
        with open(conf, "w") as f:
            f.write(self.config)
        err = os.path.join(self.dir, "error.log")
        self.spawn(pin(0) + [nginx, "-c", conf, "-p", self.dir + "/", "-e", err])
        if not wait_port(self.port, self.proc, self.start_timeout):
            raise Unavailable("nginx did not start: %s" % tail(err))


class NginxProxyCache(NginxStatic):
    server = "nginx-proxy-cache"
    template = "nginx-proxy-cache.conf"

    def __init__(self, ctx):
        Peer.__init__(self, ctx)

    variant = "default"

    def values(self):
        return {"USER": "user root;" if os.geteuid() == 0 else "", "DIR": self.dir, "PORT": self.port,
                "FOLLOW_PORT": free_port(), "HUB_URL": self.ctx.hub.url}


class Varnish(Peer):
    server = "varnish"
    variant = "default"

    def start(self):
        varnishd = which("varnishd")
        if not varnishd:
            raise Unavailable("varnishd not installed (Debian package varnish; bash scripts/bench_compare.sh installs it)")
        self.version = version_of([varnishd, "-V"])
        hub_host, hub_port = self.ctx.hub.url[len("http://"):].rsplit(":", 1)
        cdn_host, cdn_port = self.ctx.hub.cdn_netloc.rsplit(":", 1)
        self.config = render_template("varnish.vcl", {
            "HUB_HOST": hub_host, "HUB_PORT": hub_port, "CDN_HOST": cdn_host, "CDN_PORT": cdn_port,
            "CDN_NETLOC_RE": re.escape(self.ctx.hub.cdn_netloc)})
        vcl = os.path.join(self.dir, "bench.vcl")
        with open(vcl, "w") as f:
            f.write(self.config)
        out = os.path.join(self.dir, "varnishd.log")
        with open(out, "w") as logf:
            self.spawn(pin(0) + [varnishd, "-F", "-j", "none", "-a", "127.0.0.1:%d" % self.port, "-f", vcl,
                                 "-n", os.path.join(self.dir, "work"), "-s", "malloc,1g", "-T", "none"],
                       stdout=logf, stderr=subprocess.STDOUT)
        if not wait_port(self.port, self.proc, timeout=60):
            raise Unavailable("varnishd did not start: %s" % tail(out))


class Olah(Peer):
    server = "olah"
    variant = "default"

    def start(self):
        exe = self.ctx.olah_bin
        if not exe or not os.access(exe, os.X_OK):
            raise Unavailable("olah not installed at %s (bash scripts/bench_compare.sh installs it into a venv)"
                              % exe)
        py = os.path.join(os.path.dirname(exe), "python")
        self.version = "olah " + version_of([py, "-c", "import importlib.metadata as m; print(m.version('olah'))"])
        hub_netloc = self.ctx.hub.url[len("http://"):]
        out = os.path.join(self.dir, "olah.log")
        with open(out, "w") as logf:
            self.spawn(pin(0) + [exe, "--host", "127.0.0.1", "--port", str(self.port),
                                 "--hf-scheme", "http", "--hf-netloc", hub_netloc,
                                 "--hf-lfs-netloc", self.ctx.hub.cdn_netloc,
                                 "--mirror-netloc", "127.0.0.1:%d" % self.port,
                                 "--mirror-lfs-netloc", "127.0.0.1:%d" % self.port,
                                 "--repos-path", os.path.join(self.dir, "repos"),
                                 "--log-path", os.path.join(self.dir, "logs")],
                       stdout=logf, stderr=subprocess.STDOUT)
        if not wait_port(self.port, self.proc, timeout=60):
            raise Unavailable("olah did not start: %s" % tail(out))


def liburing_version():
    """'CPython X, liburing Y (wheel tag)' of the Python the peers run, or raises
    Unavailable when the binding cannot set up a ring here. The probe runs in a child:
    the PyPI liburing 2026.3.30 wheel was built for AVX-512 and dies of SIGILL on CPUs
    without it (docs/internals.md); scripts/build_liburing.sh builds one that does not."""
    from pulsys.platform import _probe_in_child
    crashed = _probe_in_child("import liburing as L; r = L.Ring(); L.io_uring_queue_init(8, r, 0); "
                              "L.io_uring_queue_exit(r)")
    if crashed:
        raise Unavailable(crashed + " (a portable wheel: scripts/build_liburing.sh, "
                          "PULSYS_BENCH_LIBURING_WHEEL; docs/benchmarks.md)")
    code = ("import importlib.metadata as m; d = m.distribution('liburing'); "
            "w = [l for l in (d.read_text('WHEEL') or '').splitlines() if l.startswith('Tag:')]; "
            "print(d.version, w[0][4:].strip() if w else '')")
    return "CPython %s, liburing %s" % (sys.version.split()[0], version_of([sys.executable, "-c", code]))


class UringFloor(Peer):
    server = "uring-floor"
    variant = "python-liburing"
    max_size = WRK_MAX_SIZE      # a per-request Python reference: small bodies only

    def __init__(self, ctx, processes=1):
        self.processes = processes   # > 1: its --processes (SO_REUSEPORT, a process and ring each)
        if processes > 1:
            self.variant = "python-liburing-p%d" % processes
        super().__init__(ctx)

    def start(self):
        self.version = liburing_version()
        out = os.path.join(self.dir, "floor.log")
        with open(out, "w") as logf:
            self.spawn(pin(0) + [sys.executable, os.path.join(PEERS_DIR, "uring_floor.py"),
                                 "--port", str(self.port), "--root", self.ctx.www,
                                 "--processes", str(self.processes)],
                       stdout=logf, stderr=subprocess.STDOUT)
        if not wait_port(self.port, self.proc, self.start_timeout):
            raise Unavailable("uring_floor.py did not start: %s" % tail(out))


class UringRef(Peer):
    """The shared reference server (its README: `python uring_min_server.py PORT DIR mem`
    serves DIR/<name> at /files/<name>, bodies from memory)."""
    server = "uring-ref"
    variant = "mem"
    max_size = WRK_MAX_SIZE
    script = "uring_min_server.py"

    def __init__(self, ctx, processes=1):
        self.processes = processes   # > 1: that many copies on one port (bench_peers/ref_processes.py)
        if processes > 1:
            self.variant = "mem-p%d" % processes
        super().__init__(ctx)

    def path(self, size):
        return "/files/f%d.bin" % size

    def start(self):
        src = os.path.join(REFERENCE_DIR, self.script)
        if not os.path.isfile(src):
            raise Unavailable("%s not found in ../shared/reference beside the repository (or "
                              "PULSYS_REFERENCE_DIR)" % self.script)
        self.version = liburing_version() + ", %s" % self.script
        args = [str(self.port), os.path.join(self.ctx.www, REPO, "resolve", "main"), "mem"]
        cmd = [sys.executable, src] + args
        if self.processes > 1:
            cmd = [sys.executable, os.path.join(PEERS_DIR, "ref_processes.py"), "--processes",
                   str(self.processes), "--script", src, "--"] + args
        out = os.path.join(self.dir, "ref.log")
        with open(out, "w") as logf:
            self.spawn(pin(0) + cmd, stdout=logf, stderr=subprocess.STDOUT)
        if not wait_port(self.port, self.proc, self.start_timeout):
            raise Unavailable("%s did not start: %s" % (self.script, tail(out)))


def tail(path, n=3):
    try:
        with open(path, errors="replace") as f:
            lines = [l.strip() for l in f.read().strip().splitlines() if l.strip()]
        return " | ".join(lines[-n:]) or "no output"
    except OSError:
        return "no log"


def make_peers(ctx, names):
    out = []
    for name in names:
        if name == "pulsys-iouring":
            out.append(Pulsys(ctx, "iouring", "--iouring"))
        elif name == "pulsys-portable":
            out.append(Pulsys(ctx, "portable", "--no-iouring"))
        elif name == "nginx-static":
            out += [NginxStatic(ctx, "on"), NginxStatic(ctx, "off")]
        elif name == "nginx-proxy-cache":
            out.append(NginxProxyCache(ctx))
        elif name == "varnish":
            out.append(Varnish(ctx))
        elif name == "olah":
            out.append(Olah(ctx))
        elif name == "pulsys-iouring-l2":     # what two reactor processes on one CPU cost
            out.append(Pulsys(ctx, "iouring-l2", "--iouring", listeners=2))
        elif name == "uring-floor":
            out.append(UringFloor(ctx))
        elif name == "uring-floor-p2":        # the same layout without pulsys
            out.append(UringFloor(ctx, processes=2))
        elif name == "uring-ref":
            out.append(UringRef(ctx))
        elif name == "uring-ref-p2":          # the reference in pulsys's --listeners 2 layout
            out.append(UringRef(ctx, processes=2))
    return out


# -- load generators -------------------------------------------------------------------

def build_c(workdir, name, who="bench_compare", flags=(), src=None):
    """scripts/bench_peers/<name>.c (or the file `src`) built with the system cc (-O2) into
    workdir/<name>. -> (path, the compiler's version); a clear error naming `who` when it
    cannot be."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if not cc:
        raise SystemExit("%s: error: no C compiler (cc) to build %s.c; apt-get install gcc" % (who, name))
    exe = os.path.join(workdir, name)
    p = subprocess.run([cc, "-O2", *flags, "-o", exe, src or os.path.join(PEERS_DIR, name + ".c")],
                       capture_output=True, text=True)
    if p.returncode != 0:
        raise SystemExit("%s: error: building %s.c failed:\n%s" % (who, name, p.stderr))
    return exe, version_of([cc, "--version"])


def build_loadgen(workdir):
    return build_c(workdir, "loadgen")


def run_loadgen(exe, port, size, conns, duration, path=None, header=None):
    """loadgen on CPU 1 against 127.0.0.1:port, GET path (default: the bench file of
    `size`), each body expected to be `size` bytes -> its JSON report, or {"error": ...}."""
    cmd = pin(1) + [exe, "-a", "127.0.0.1", "-p", str(port), "-u", path or file_path(size), "-c", str(conns),
                    "-d", "%g" % duration, "-s", str(size)] + (["-H", header] if header else [])
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=duration + 60)
    except subprocess.TimeoutExpired:
        return {"error": "loadgen did not finish within duration + 60 s"}
    if p.returncode != 0:
        return {"error": "loadgen exited %d: %s" % (p.returncode, p.stderr.strip()[-300:])}
    d = json.loads(p.stdout)
    for k in ("p50_us", "p90_us", "p99_us", "p999_us", "max_us", "mean_us"):
        if d[k] < 0:
            d[k] = None
    return d


_WRK_UNITS = {"us": 1.0, "ms": 1e3, "s": 1e6, "m": 6e7}


def _wrk_time(text):
    m = re.fullmatch(r"([\d.]+)(us|ms|s|m)", text)
    return float(m.group(1)) * _WRK_UNITS[m.group(2)] if m else None


def run_wrk(port, size, conns, duration, path=None, header=None):
    secs = max(1, int(round(duration)))
    cmd = pin(1) + ["wrk", "-t1", "-c%d" % conns, "-d%ds" % secs, "--timeout", "30s", "--latency"] + (
        ["-H", header] if header else []) + ["http://127.0.0.1:%d%s" % (port, path or file_path(size))]
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=secs + 60)
    except subprocess.TimeoutExpired:
        return {"error": "wrk did not finish within duration + 60 s"}
    out = p.stdout
    m = re.search(r"(\d+) requests in ([\d.]+)(us|ms|s|m),", out)
    rps = re.search(r"Requests/sec:\s+([\d.]+)", out)
    if not m or not rps:
        return {"error": "wrk output not understood: %s" % (out + p.stderr).strip()[-300:]}
    lat = dict(re.findall(r"^\s+(50|90|99)%\s+(\S+)", out, re.M))
    sock = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", out)
    non2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    errs = {"connect": 0, "read": 0, "write": 0, "timeout": 0, "status": 0}
    if sock:
        errs.update(zip(("connect", "read", "write", "timeout"), map(int, sock.groups())))
    if non2xx:
        errs["status"] = int(non2xx.group(1))
    requests = int(m.group(1))
    if requests == 0:
        lat = {}   # wrk prints 0.00us percentiles when nothing completed
    elapsed = float(m.group(2)) * _WRK_UNITS[m.group(3)] / 1e6
    return {"generator": "wrk", "connections": conns, "duration_s": elapsed, "requests": requests,
            "body_bytes": requests * size, "req_per_s": float(rps.group(1)), "errors": sum(errs.values()),
            "errors_by": errs, "p50_us": _wrk_time(lat.get("50", "")), "p90_us": _wrk_time(lat.get("90", "")),
            "p99_us": _wrk_time(lat.get("99", "")), "p999_us": None, "max_us": None, "mean_us": None,
            "over_30ms": None, "cpu_s": None}


# -- one measurement -----------------------------------------------------------------------

def measure(ctx, peer, generator, size, conns, rnd):
    root = peer.proc.pid
    hub0 = ctx.hub.total_body_bytes()
    cpu0 = tree_cpu_ticks(root)
    if generator == "wrk":
        g = run_wrk(peer.port, size, conns, ctx.duration, peer.path(size), peer.header)
    else:
        g = run_loadgen(ctx.loadgen, peer.port, size, conns, ctx.duration, peer.path(size), peer.header)
    cpu1 = tree_cpu_ticks(root)
    hub1 = ctx.hub.total_body_bytes()
    settle = wait_idle(root)
    row = {"server": peer.server, "variant": peer.variant, "generator": generator, "size": size,
           "concurrency": conns, "round": rnd}
    notes = []
    if "error" in g:
        row.update({"req_per_s": None, "gbytes_per_s": None, "p50_us": None, "p99_us": None,
                    "cpu_s_per_gb": None, "errors": None})
        notes.append(g["error"])
    else:
        server_cpu = (cpu1 - cpu0) / CLK_TCK
        gb = g["body_bytes"] / 1e9
        row.update({
            "req_per_s": round(g["req_per_s"], 1),
            "gbytes_per_s": round(gb / g["duration_s"], 4) if g["duration_s"] else None,
            "p50_us": _r(g["p50_us"]), "p99_us": _r(g["p99_us"]),
            "cpu_s_per_gb": round(server_cpu / gb, 4) if gb > 0 else None,
            "errors": g["errors"],
            "requests": g["requests"], "body_bytes": g["body_bytes"], "duration_s": round(g["duration_s"], 4),
            "server_cpu_s": round(server_cpu, 3), "gen_cpu_s": g["cpu_s"], "errors_by": g["errors_by"],
            "p90_us": _r(g["p90_us"]), "p999_us": _r(g["p999_us"]), "max_us": _r(g["max_us"]),
            "mean_us": _r(g["mean_us"]), "over_30ms": g["over_30ms"],
            "unfinished": g.get("unfinished"), "reconnects": g.get("reconnects"),
        })
        if g["cpu_s"] is not None and g["duration_s"] and g["cpu_s"] / g["duration_s"] > GEN_BUSY:
            notes.append("generator CPU %.0f%%: client-bound, the server may be faster" %
                         (100 * g["cpu_s"] / g["duration_s"]))
        if g["requests"] == 0:
            notes.append("no request completed within %gs" % ctx.duration)
    row["upstream_body_bytes"] = hub1 - hub0
    if hub1 != hub0:
        notes.append("upstream sent %d body bytes during the measurement" % (hub1 - hub0))
    row["settle_s"] = settle
    row["note"] = "; ".join(notes)
    return row


def _r(x):
    return None if x is None else round(x, 1)


# -- the run -----------------------------------------------------------------------------

class Ctx:
    pass


def parse_list(text, conv=int):
    return [conv(x) for x in text.split(",") if x.strip()]


def parse_size(text):
    t = text.strip().lower()
    for suffix, mult in (("kib", KIB), ("k", KIB), ("mib", MIB), ("m", MIB)):
        if t.endswith(suffix):
            return int(float(t[:-len(suffix)]) * mult)
    return int(t)


def parse_args(argv):
    ap = argparse.ArgumentParser(description="Warm hits: pulsys vs nginx, Varnish and olah in one run.",
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("--sizes", help="comma-separated bytes, K/M suffixes allowed (default 4K,64K,256K,4M,16M)")
    ap.add_argument("--concurrency", help="comma-separated connection counts (default 1,16,64)")
    ap.add_argument("--duration", type=float, help="seconds per measurement (default 5)")
    ap.add_argument("--rounds", type=int, help="rounds; servers interleave within each (default 3)")
    ap.add_argument("--servers", default="all", help="comma-separated subset of: %s (or pulsys, nginx, all)"
                    % ", ".join(SERVERS))
    ap.add_argument("--quick", action="store_true", help="sizes 4K,256K, concurrency 16, 2 s, 1 round "
                    "(explicit flags win); results are named compare_quick_<date>")
    ap.add_argument("--generator", choices=("auto", "loadgen", "wrk"), default="auto",
                    help="for sizes <= 64 KiB: auto = measure both at 4 KiB and use loadgen when it is at "
                    "least as fast as wrk (default); larger sizes always use loadgen")
    ap.add_argument("--name", default="compare", help="results file prefix (default compare)")
    ap.add_argument("--out-dir", help="write the CSV/JSON here instead of results/<machine>/")
    ap.add_argument("--olah-bin", default=os.path.join(BENCH_HOME, "olah-venv", "bin", "olah-cli"),
                    help="olah's entry point (default: the venv bench_compare.sh makes under %(default)s)")
    ap.add_argument("--wait-quiet", type=float, default=0, metavar="SECONDS",
                    help="first wait up to SECONDS for the machine to be quiet (all CPUs < %d%%%% busy over %d s)"
                    % (QUIET_BUSY * 100, QUIET_WINDOW))
    ap.add_argument("--render-with", metavar="PYTHON",
                    help="after writing, run scripts/render_bench.py on the JSON with this Python (matplotlib)")
    a = ap.parse_args(argv)
    a.sizes = [parse_size(x) for x in a.sizes.split(",")] if a.sizes else (
        QUICK["sizes"] if a.quick else DEFAULT_SIZES)
    a.concurrency = parse_list(a.concurrency) if a.concurrency else (
        QUICK["concurrency"] if a.quick else DEFAULT_CONCURRENCY)
    a.duration = a.duration if a.duration is not None else (QUICK["duration"] if a.quick else 5.0)
    a.rounds = a.rounds if a.rounds is not None else (QUICK["rounds"] if a.quick else 3)
    names = []
    for n in parse_list(a.servers, str):
        n = n.strip()
        for m in ALIASES.get(n, [n]):
            if m not in SERVERS:
                ap.error("unknown server %r (choose from %s)" % (n, ", ".join(SERVERS + list(ALIASES))))
            if m not in names:
                names.append(m)
    a.server_names = [n for n in SERVERS if n in names]
    if not a.sizes or any(s <= 0 for s in a.sizes) or not a.concurrency or any(c < 1 for c in a.concurrency):
        ap.error("sizes and concurrency must be positive")
    if a.duration <= 0 or a.duration > 600 or a.rounds < 1:
        ap.error("--duration must be in (0, 600] and --rounds >= 1")
    if a.quick and a.name == "compare":
        a.name = "compare_quick"
    return a


def generator_check(ctx, peers, conc_list, rounds):
    """Measure wrk and loadgen at 4 KiB against the fastest server available, alternating.
    Returns ({concurrency: "loadgen"|"wrk"}, report). The fastest server, because a client
    slower than it caps it and every server below it alike: at 4 KiB the reference server
    runs ~1.5x nginx, and a check against nginx chose wrk, which then read the reference
    and pulsys tied at ~110k req/s, 1.01x (compare_foldidle_2026-12-04: wrk's limit, not
    theirs; docs/benchmarks.md, issue 18)."""
    size = 4 * KIB
    by_key = {p.key: p for p in peers}
    target = next((by_key[k] for k in ("uring-ref/mem", "uring-floor/python-liburing",
                                       "nginx-static/tcp_nopush_off", "nginx-static/tcp_nopush_on",
                                       "pulsys/iouring", "pulsys/portable") if k in by_key), peers[0])
    choice, report = {}, {"server": target.key, "size": size, "parity": GEN_PARITY, "by_concurrency": {}}
    for c in conc_list:
        res = {"loadgen": [], "wrk": []}
        for _ in range(rounds):
            for gen in ("loadgen", "wrk"):
                g = (run_loadgen(ctx.loadgen, target.port, size, c, ctx.duration, target.path(size), target.header)
                     if gen == "loadgen" else
                     run_wrk(target.port, size, c, ctx.duration, target.path(size), target.header))
                wait_idle(target.proc.pid)
                res[gen].append(None if "error" in g else round(g["req_per_s"], 1))
        lg = [x for x in res["loadgen"] if x is not None]
        wk = [x for x in res["wrk"] if x is not None]
        ml = statistics.median(lg) if lg else 0.0
        mw = statistics.median(wk) if wk else 0.0
        use = "loadgen" if ml >= GEN_PARITY * mw else "wrk"
        choice[c] = use
        report["by_concurrency"][str(c)] = {"loadgen_req_per_s": res["loadgen"], "wrk_req_per_s": res["wrk"],
                                            "loadgen_median": ml, "wrk_median": mw,
                                            "ratio": round(ml / mw, 3) if mw else None, "use": use}
        log("generator check 4 KiB c%d on %s: loadgen %.0f req/s, wrk %.0f req/s -> %s for <= 64 KiB"
            % (c, target.key, ml, mw, use))
    return choice, report


def medians(rows):
    groups = {}
    for r in rows:
        groups.setdefault((r["server"], r["variant"], r["size"], r["concurrency"]), []).append(r)
    out = []
    for (server, variant, size, conc), rs in groups.items():
        def med(k):
            vals = [r[k] for r in rs if r.get(k) is not None]
            return round(statistics.median(vals), 4) if vals else None
        errs = [r["errors"] for r in rs if r.get("errors") is not None]
        maxes = [r["max_us"] for r in rs if r.get("max_us") is not None]
        slow = [r["over_30ms"] for r in rs if r.get("over_30ms") is not None]
        reqs = [r["requests"] for r in rs if r.get("requests") is not None]
        out.append({"server": server, "variant": variant,
                    "generator": "+".join(sorted({r["generator"] for r in rs})), "size": size,
                    "concurrency": conc, "round": "median", "rounds": len(rs),
                    "req_per_s": med("req_per_s"), "gbytes_per_s": med("gbytes_per_s"), "p50_us": med("p50_us"),
                    "p99_us": med("p99_us"), "cpu_s_per_gb": med("cpu_s_per_gb"),
                    "errors": sum(errs) if errs else None, "p999_us": med("p999_us"), "mean_us": med("mean_us"),
                    "max_us": max(maxes) if maxes else None, "over_30ms": sum(slow) if slow else None,
                    "requests": sum(reqs) if reqs else None,
                    "note": "; ".join(sorted({r["note"] for r in rs if r["note"]}))})
    return out


def write_outputs(a, doc, rows_csv, stamp):
    name = "%s_%s" % (a.name, stamp)
    if a.out_dir:
        os.makedirs(a.out_dir, exist_ok=True)
        json_path = os.path.join(a.out_dir, name + ".json")
        with open(json_path, "w") as f:
            json.dump(doc, f, indent=1, sort_keys=True)
            f.write("\n")
    else:
        json_path = os.path.join(ROOT, provenance.write_result(name + ".json", doc))
    csv_path = json_path[:-len(".json")] + ".csv"
    with open(csv_path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=COLUMNS, extrasaction="ignore")
        w.writeheader()
        for r in rows_csv:
            w.writerow({k: ("" if r.get(k) is None else r.get(k)) for k in COLUMNS})
    return json_path, csv_path


def main(argv=None):
    a = parse_args(sys.argv[1:] if argv is None else argv)
    # Provenance first: refuse before spending half an hour when the commit is unknown.
    prov = provenance.provenance()
    started_at = datetime.datetime.now(datetime.timezone.utc)
    stamp = started_at.strftime("%Y-%m-%d")
    quiet = wait_quiet(a.wait_quiet) if a.wait_quiet > 0 else None
    load_before, pytest_before = loadavg(), other_pytest_processes()
    log("commit %s%s, load average %s, other pytest processes: %d"
        % (prov["commit"][:12], " (dirty)" if prov["dirty"] else "", load_before, pytest_before))
    if load_before and load_before[0] > 1.0:
        log("warning: the machine is busy (load %.2f); results will be noisy" % load_before[0])
    if can_pin():
        os.sched_setaffinity(0, {1})   # the driver (and the fake Hub's threads) stay off the server's CPU
    else:
        log("warning: cannot pin (needs taskset and 2 CPUs); servers and generator share CPUs")

    ctx = Ctx()
    ctx.duration = a.duration
    ctx.started = []
    ctx.olah_bin = a.olah_bin
    ctx.workdir = tempfile.mkdtemp(prefix="pulsys-bench-")
    ctx.peer_key = peer_key()
    hub = None

    def on_term(signum, frame):
        raise KeyboardInterrupt()
    signal.signal(signal.SIGTERM, on_term)
    try:
        ctx.loadgen, cc_version = build_loadgen(ctx.workdir)
        ctx.www = os.path.join(ctx.workdir, "www")
        d = os.path.join(ctx.www, REPO, "resolve", "main")
        os.makedirs(d)
        ctx.files = {}
        for s in a.sizes:
            ctx.files[s] = os.urandom(s)
            with open(os.path.join(d, "f%d.bin" % s), "wb") as f:
                f.write(ctx.files[s])
        hub = ctx.hub = FakeHub(record_requests=False, xet=False).start()
        hub.add_repo(REPO, files={"f%d.bin" % s: b for s, b in ctx.files.items()},
                     lfs={"f%d.bin" % s for s in ctx.files})

        unavailable, peers = {}, []
        for peer in make_peers(ctx, a.server_names):
            log("starting %s on 127.0.0.1:%d" % (peer.key, peer.port))
            try:
                peer.start()
                peer.warm()
                peers.append(peer)
            except (Unavailable, OSError, RuntimeError) as e:
                reason = str(e) or e.__class__.__name__
                log("%s unavailable: %s" % (peer.key, reason))
                unavailable[peer.key] = "unavailable: " + reason
                peer.stop()
        if not peers:
            raise SystemExit("bench_compare: error: no server could be started: %s" % unavailable)

        gen_report = None
        small = [s for s in a.sizes if s <= WRK_MAX_SIZE]
        if a.generator == "auto" and small and shutil.which("wrk"):
            gen_choice, gen_report = generator_check(ctx, peers, a.concurrency, a.rounds)
        elif a.generator == "wrk" and not shutil.which("wrk"):
            raise SystemExit("bench_compare: error: --generator wrk but wrk is not installed")
        else:
            use = "wrk" if a.generator == "wrk" else "loadgen"
            gen_choice = {c: use for c in a.concurrency}
            if a.generator == "auto" and small:
                gen_report = {"skipped": "wrk not installed: loadgen used for every size"}
                log("wrk not installed: loadgen for every size")

        rows, round_info = [], []
        t_start = time.monotonic()
        cells = [(s, c) for s in a.sizes for c in a.concurrency]
        total = a.rounds * sum(1 for s, _ in cells for p in peers if s <= p.max_size)
        log("%d measurements of %gs: about %.0f min" % (total, a.duration, total * (a.duration + 1.5) / 60))
        n = 0
        for rnd in range(1, a.rounds + 1):
            k = (rnd - 1) % len(peers)
            order = peers[k:] + peers[:k]       # rotate: no server always goes first
            round_info.append({"round": rnd, "order": [p.key for p in order], "loadavg": loadavg(),
                               "started_s": round(time.monotonic() - t_start, 1),
                               "other_pytest_processes": other_pytest_processes()})
            for size, conc in cells:
                gen = gen_choice[conc] if size <= WRK_MAX_SIZE else "loadgen"
                for peer in order:
                    if size > peer.max_size:
                        continue
                    n += 1
                    if peer.proc.poll() is not None:
                        row = {"server": peer.server, "variant": peer.variant, "generator": gen, "size": size,
                               "concurrency": conc, "round": rnd, "note": "server %s" % peer.exited_message()}
                    else:
                        row = measure(ctx, peer, gen, size, conc, rnd)
                    rows.append(row)
                    log("[%d/%d] round %d %-30s %8d B c%-3d %-7s %10s req/s %8s GB/s p50 %9s us %s"
                        % (n, total, rnd, peer.key, size, conc, gen, row.get("req_per_s"),
                           row.get("gbytes_per_s"), row.get("p50_us"), row.get("note", "")))
        load_after = loadavg()
        elapsed_min = round((time.monotonic() - t_start) / 60, 1)
    finally:
        for peer in ctx.started:
            try:
                peer.stop()
            except Exception as e:  # keep stopping the others
                log("stopping %s: %s" % (peer.key, e))
        if hub is not None:
            hub.stop()
        shutil.rmtree(ctx.workdir, ignore_errors=True)

    meds = medians(rows)
    for r in rows + meds:
        r["commit"], r["dirty"] = prov["commit"], prov["dirty"]
    unavailable_rows = []
    for key, reason in unavailable.items():
        server, variant = key.split("/", 1)
        unavailable_rows.append({"server": server, "variant": variant, "generator": "", "size": None,
                                 "concurrency": None, "round": None, "note": reason,
                                 "commit": prov["commit"], "dirty": prov["dirty"]})
    doc = dict(prov)
    doc.update({
        "benchmark": "compare", "quick": a.quick,
        "started_at": started_at.isoformat(timespec="seconds"),
        "settings": {"sizes": a.sizes, "concurrency": a.concurrency, "duration_s": a.duration,
                     "rounds": a.rounds, "servers": a.server_names, "generator": a.generator},
        "pinning": "servers CPU 0, load generator CPU 1 (taskset)" if can_pin() else "none (cannot pin)",
        "load": "closed loop, keep-alive, one GET after another per connection, fixed duration",
        "loadavg_before": load_before, "loadavg_after": load_after, "measuring_minutes": elapsed_min,
        "other_pytest_processes_before": pytest_before, "rounds_info": round_info,
        "quiet_wait": None if quiet is None else {"waited_s": quiet[0], "cpu_busy_at_start": quiet[1]},
        "generator_check": gen_report, "loadgen_cc": cc_version,
        "wrk_version": version_of(["wrk", "-v"]) if shutil.which("wrk") else None,
        "columns": COLUMNS,
        "peers": {p.key: {"version": p.version, "command": [portable_path(ctx, c) for c in p.command],
                          "config": portable_path(ctx, p.config) if p.config else p.config, "port": p.port}
                  for p in peers},
        "unavailable": unavailable,
        "rows": rows, "medians": meds,
    })
    json_path, csv_path = write_outputs(a, doc, rows + meds + unavailable_rows, stamp)
    log("wrote %s" % os.path.relpath(json_path, ROOT))
    log("wrote %s" % os.path.relpath(csv_path, ROOT))
    print_table(meds, unavailable)
    if a.render_with:
        cmd = [a.render_with, os.path.join(HERE, "render_bench.py"), json_path]
        if a.out_dir:
            cmd.append("--no-headline")   # results/headline.json only ever comes from results/
        r = subprocess.run(cmd)
        if r.returncode != 0:
            log("render_bench.py failed with exit code %d" % r.returncode)
            return r.returncode
    return 0


def print_table(meds, unavailable):
    print("\nmedians (req/s | GB/s | p50 us | p99 us | server CPU s/GB)")
    for m in sorted(meds, key=lambda r: (r["size"], r["concurrency"], -(r["req_per_s"] or 0))):
        print("  %9d B c%-3d %-18s %-15s %-8s %10s %8s %9s %9s %8s" % (
            m["size"], m["concurrency"], m["server"], m["variant"], m["generator"], m["req_per_s"],
            m["gbytes_per_s"], m["p50_us"], m["p99_us"], m["cpu_s_per_gb"]))
    for key, reason in unavailable.items():
        print("  %s: %s" % (key, reason))


if __name__ == "__main__":
    sys.exit(main())
