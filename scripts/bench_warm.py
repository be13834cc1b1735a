"""Warm-hit throughput of pulsys variants, side by side in one run.

Starts the fake Hub, then for each round and each variant starts pulsys (pinned to
CPU 0) with that variant's flags, warms the files once, and runs wrk (pinned to the
other CPU) against one warm file per size. Rounds interleave variants, in reverse
order every other round, so a noisy machine slows them alike; the report is the median
req/s and the ratio to the first variant, the server's CPU time per request
(/proc/PID/stat over the run), the load generator's CPU time per request (its rusage),
and from the two the most any server could do on the CPUs both share (see main()).
Installs nothing: needs `wrk` on PATH (Debian package `wrk`) or, with --generator
loadgen, a C compiler.

    python scripts/bench_warm.py --sizes 4096 --connections 16 --duration 5 --rounds 3 \
        --variant access_log_on= --variant access_log_off=--access-log=off

pulsys runs with --auth off unless a variant says --auth=required; then the script
creates a read key in the variant's store first (`pulsys keys create`) and every
request, wrk's included, carries it as `Authorization: Bearer ...`:

    python scripts/bench_warm.py --name auth_warm --variant auth_off= --variant auth_required=--auth=required

A variant named NAME@REV runs pulsys at git revision REV (checked out in a temporary git
worktree, removed at the end) instead of this checkout: the guard for a change to the
warm path, before and after in one run:

    python scripts/bench_warm.py --name guard --variant before@HEAD~1=--no-iouring --variant after=--no-iouring

A variant named floor:NAME runs scripts/bench_peers/uring_floor.py (the featureless
Python + liburing server) with FLAGS instead of pulsys, on the same files and CPUs: what
a layout costs without pulsys, e.g. --listeners 2 against 1 beside the floor's
--processes 2 against 1, all on CPU 0:

    python scripts/bench_warm.py --name layout --generator loadgen --connections 64 \
        --variant l1="--iouring --listeners=1" --variant l2="--iouring --listeners=2" \
        --variant floor:p1=--processes=1 --variant floor:p2=--processes=2

A variant named ref:NAME runs the shared reference server (../shared/reference/
uring_min_server.py, bench_compare's uring-ref) unchanged, with FLAGS empty or
--processes=N: N copies sharing its port through SO_REUSEPORT (bench_peers/ref_processes.py),
what the --listeners N layout costs the reference itself:

    python scripts/bench_warm.py --name layout_ref --generator loadgen --connections 64 \
        --variant l1="--iouring --listeners=1" --variant l2="--iouring --listeners=2" \
        --variant ref:p1= --variant ref:p2=--processes=2

A FLAGS token +co-runner=PERIOD_US:HOT_KIB (taken out of the flags) runs, beside that
variant's server on its first CPU and only while the load runs, the co-runner of
scripts/bench_peers/switch_cost.c: every PERIOD_US it wakes, walks a hot set of HOT_KIB
and sleeps, taking the CPU from the server as a second reactor would. Its CPU is not
the server's; what the server's CPU a request does beside it is what each interruption
costs the server (the switch, and refilling what the co-runner evicted):

    python scripts/bench_warm.py --name interrupted --generator loadgen --connections 64 \
        --variant l1="--iouring --listeners=1" --variant l1_h512="--iouring --listeners=1 +co-runner=250:512"

+co-runner=idle runs a busy loop in SCHED_IDLE there instead: it takes the CPU only
when no server thread wants it, so the CPU is never idle and no wake-up of the server
starts from an idle CPU (in this VM, where an idle vCPU halts, that path is dear).

A FLAGS token +env=NAME=VALUE (taken out of the flags; any number) sets NAME in that
variant's server environment: a switch of a scratch revision, measured beside main,
e.g. a probe read from os.environ at NAME@REV:

    python scripts/bench_warm.py --name probe --generator loadgen --connections 64 --together 8 \
        --variant l1="--iouring" --variant probe@scratch-w1="--iouring +env=PULSYS_EXP_WORKERS=1"

A FLAGS token +connections=N (taken out of the flags) runs that variant's load with N
connections instead of --connections: e.g. two reactors at 128 connections, as many a
reactor as one reactor has at 64:

    python scripts/bench_warm.py --name layout_per_reactor --generator loadgen --connections 64 \
        --variant l1="--iouring --listeners=1" --variant l2="--iouring --listeners=2" \
        --variant l2_c128="--iouring --listeners=2 +connections=128"

--listeners 2 against 1 on a 2-CPU machine (workers on both CPUs, the client on CPU 1):

    python scripts/bench_warm.py --name listeners_scaling --server-cpus 0,1 --generator loadgen \
        --variant listeners_1="--iouring --listeners=1" --variant listeners_2="--iouring --listeners=2"
"""

import argparse
import contextlib
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
sys.path.insert(0, ROOT)
import bench_compare  # noqa: E402
import switch_cost  # noqa: E402
from paired_ratios import median_quartiles  # noqa: E402
from provenance import provenance, write_result  # noqa: E402

from pulsys.testing.fake_hub import FakeHub  # noqa: E402

REF_SCRIPT = os.path.join(bench_compare.REFERENCE_DIR, "uring_min_server.py")


def needs_key(flags):
    return "--auth=required" in flags or " ".join(flags).find("--auth required") >= 0


def server_env(extra=None, tree=None):
    """A server's environment: this one, with PYTHONPATH=`tree` for `python -m pulsys` run
    from a tree (ROOT or a worktree), then a variant's +env=NAME=VALUE settings over it."""
    env = dict(os.environ)
    if tree is not None:
        env["PYTHONPATH"] = tree
    env.update(extra or {})
    return env


def worktree(rev, parent):
    """A git worktree of `rev` under `parent`. -> (path, full commit)."""
    path = os.path.join(parent, rev.replace("/", "_").replace("~", "-").replace("^", "-"))
    subprocess.run(["git", "-C", ROOT, "worktree", "add", "-q", "--detach", path, rev], check=True)
    sha = subprocess.run(["git", "-C", path, "rev-parse", "HEAD"], check=True, capture_output=True,
                         text=True).stdout.strip()
    return path, sha


def create_key(cache, tree=ROOT):
    """A read key in the store of `cache` (before the server starts: no first-start key)."""
    out = subprocess.run([sys.executable, "-m", "pulsys", "keys", "create", "--cache-dir", cache,
                          "--name", "bench"], cwd=tree, env=server_env(tree=tree), capture_output=True,
                         text=True, timeout=60)
    if out.returncode != 0:
        raise SystemExit("bench_warm: pulsys keys create failed: " + out.stderr.strip())
    return out.stdout.strip()


def start_pulsys(hub, cache, flags, cpus="0", tree=ROOT, env=None):
    port, admin = bench_compare.free_port(), bench_compare.free_port()
    cmd = bench_compare.pin(cpus) + [sys.executable, "-m", "pulsys", "--listen", "127.0.0.1:%d" % port,
                    "--admin-listen", "127.0.0.1:%d" % admin, "--upstream", hub.url,
                    "--cache-dir", cache, "--allow-upstream-host", hub.cdn_netloc,
                    "--log-format", "json", "--auth", "off"] + flags
    p = subprocess.Popen(cmd, cwd=tree, env=server_env(env, tree), stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL)
    # 30 s, as bench_compare.wait_port, and an exit told apart from a slow start: the 10 s
    # this waited ran out once under the test suite's parallel load on 2 CPUs, and nothing
    # said which it was (tests/bench/test_bench_scripts.py)
    deadline = time.monotonic() + 30.0
    while time.monotonic() < deadline and p.poll() is None:
        try:
            urllib.request.urlopen("http://127.0.0.1:%d/healthz" % admin, timeout=1).read()
            return p, "http://127.0.0.1:%d" % port
        except OSError:
            time.sleep(0.05)
    if p.poll() is not None:
        raise SystemExit("bench_warm: pulsys with flags %s exited with status %s before it served"
                         % (flags, p.returncode))
    p.kill()
    raise SystemExit("bench_warm: pulsys did not start within 30 s with flags %s" % flags)


def start_floor(root, flags, cpus="0", env=None):
    """uring_floor.py serving the files under `root`, pinned like pulsys. -> (Popen, base URL)."""
    port = bench_compare.free_port()
    p = subprocess.Popen(bench_compare.pin(cpus) + [sys.executable, os.path.join(HERE, "bench_peers", "uring_floor.py"),
                         "--port", str(port), "--root", root] + flags, env=server_env(env),
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    if bench_compare.wait_port(port, p):
        return p, "http://127.0.0.1:%d" % port
    p.kill()
    raise SystemExit("bench_warm: uring_floor.py did not start with flags %s" % flags)


def start_ref(files_dir, processes, cpus="0", env=None):
    """The shared reference server (bench_compare's uring-ref, unchanged) serving the files
    of `files_dir` at /files/NAME, in `processes` copies sharing its port
    (bench_peers/ref_processes.py), pinned like pulsys. -> (Popen, URL of the files)."""
    port = bench_compare.free_port()
    p = subprocess.Popen(bench_compare.pin(cpus) + [sys.executable, os.path.join(HERE, "bench_peers", "ref_processes.py"),
                         "--processes", str(processes), "--script", REF_SCRIPT, "--", str(port), files_dir, "mem"],
                         env=server_env(env), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    if bench_compare.wait_port(port, p):
        return p, "http://127.0.0.1:%d/files" % port
    p.kill()
    raise SystemExit("bench_warm: the reference server did not start in %d processes" % processes)


def ref_processes(flags):
    """A ref: variant's FLAGS -> its number of processes: none, or one --processes=N."""
    if not flags:
        return 1
    m = re.fullmatch(r"--processes=([1-9]\d*)", flags[0])
    if len(flags) > 1 or not m:
        raise SystemExit("bench_warm: error: %r: a ref: variant takes one flag, --processes=N (N above 0)"
                         % " ".join(flags))
    return int(m.group(1))


def wrk(url, connections, duration, headers=()):
    """-> (req/s, p50, p99, requests, client CPU seconds: wrk's user + system time;
    taskset execs wrk in its own process)."""
    cmd = bench_compare.pin(1) + ["wrk", "-t1", "-c%d" % connections, "-d%ds" % duration, "--latency", url]
    for name, value in headers:
        cmd[-1:-1] = ["-H", "%s: %s" % (name, value)]
    # wrk is the only child reaped during this call: the children's rusage grows by its own
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=duration + 60).stdout
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    client_s = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if "Non-2xx" in out:
        raise SystemExit("bench_warm: wrk saw error answers:\n" + out)
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))
    total = int(re.search(r"(\d+) requests in", out).group(1))
    lat = dict(re.findall(r"^\s+(50|99)%\s+(\S+)", out, re.M))
    return rps, lat.get("50"), lat.get("99"), total, client_s


def loadgen(exe, url, size, connections, duration, headers=()):
    """The C closed-loop client of bench_compare (scripts/bench_peers/loadgen.c): cheaper
    per request than wrk, and it reports its own CPU time (getrusage)."""
    if len(headers) > 1:
        raise SystemExit("bench_warm: loadgen sends one extra header; use wrk for more")
    u = urllib.parse.urlsplit(url)
    d = bench_compare.run_loadgen(exe, u.port, size, connections, duration, path=u.path,
                                  header="%s: %s" % headers[0] if headers else None)
    if "error" in d:
        raise SystemExit("bench_warm: " + d["error"])
    if d["errors"]:
        raise SystemExit("bench_warm: loadgen saw errors: %s" % d["errors_by"])
    return (d["req_per_s"], "%.1fus" % d["p50_us"], "%.1fus" % d["p99_us"], d["requests"], d["cpu_s"])


# The idle co-runner: a busy loop in SCHED_IDLE (sched(7): run only when nothing else
# wants the CPU), so the CPU never goes idle and the server's wake-ups never start from it
_IDLE_SPIN = "import os\nos.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))\nwhile True:\n    pass\n"


def start_co_runner(exe, co):
    """switch_cost.c's tick mode on co["cpu"] (the first of the server's CPUs), or the
    idle co-runner; a moment to build its hot set before the load starts."""
    if co.get("idle"):
        cmd = [sys.executable, "-c", _IDLE_SPIN]
    else:
        cmd = [exe, "tick", str(co["period_us"]), str(co["hot_kib"]), "64"]
    p = subprocess.Popen(["taskset", "-c", str(co["cpu"])] + cmd)
    time.sleep(0.2)
    if p.poll() is not None:
        raise SystemExit("bench_warm: error: the co-runner exited %s" % p.returncode)
    return p


def cpu_reading(pid):
    """Where the CPU time of a process tree stands (pulsys and, with --listeners N > 1,
    its worker processes), for cpu_between(); None when the tree is gone."""
    try:
        ticks = bench_compare.tree_user_system_ticks(pid)        # one reading of /proc for both
        return bench_compare.tree_run_seconds(pid), sum(ticks) / os.sysconf("SC_CLK_TCK"), ticks
    except OSError:
        return None


def cpu_between(before, after):
    """CPU seconds a process tree used between two cpu_reading()s: each thread's run time
    to the nanosecond (bench_compare.tree_run_seconds; a 1 s load of ~150k requests is
    ~1 s of CPU, where clock ticks of 10 ms are 1% steps), unless the kernel keeps no
    schedstat or a thread ended in between (its time would be lost): then user + system
    time in clock ticks (bench_compare.tree_user_system_ticks, which keeps the time of
    ended threads and reaped children). None when either reading is missing."""
    if before is None or after is None:
        return None
    (run0, ticks0, _), (run1, ticks1, _) = before, after
    if run0 is not None and run1 is not None and run0[1] <= run1[1]:
        return run1[0] - run0[0]
    return ticks1 - ticks0


def user_share(before, after):
    """The user part of the CPU time a process tree used between two cpu_reading()s, from
    its clock ticks (utime against stime: proc(5); a 1 s load is ~100 ticks, so one round
    reads it to ~1%, a median of rounds closer). None without both readings or ticks."""
    if before is None or after is None:
        return None
    (u0, s0), (u1, s1) = before[2], after[2]
    used = (u1 - u0) + (s1 - s0)
    return (u1 - u0) / used if used > 0 else None


def cpu_ratios(rows, base_rows, together):
    """A variant's server CPU a request over the first variant's, round by round (both ran
    in the same round, moments apart): {median, q1, q3, n}, and with --together the median
    of each start's rounds (what differs between starts shows there); None when a round
    lacks either reading."""
    pairs = [(r[3], b[3]) for r, b in zip(rows, base_rows)]
    if not pairs or any(x is None or not y for x, y in pairs):
        return None
    ratios = [x / y for x, y in pairs]
    out = median_quartiles(ratios)
    if together:
        out["by_start"] = [round(statistics.median(ratios[i:i + together]), 4)
                           for i in range(0, len(ratios), together)]
    return out


def cpu_list(text):
    """taskset's CPU list syntax, "0", "0,1", "0-3" -> [ints]."""
    out = []
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        out.extend(range(int(lo), int(hi or lo) + 1))
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="4096")
    ap.add_argument("--connections", type=int, default=16)
    ap.add_argument("--duration", type=float, default=5, help="seconds of load a variant a round")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--variant", action="append", default=[],
                    help="NAME=FLAGS (FLAGS space-separated pulsys flags, may be empty)")
    ap.add_argument("--together", type=int, default=0, metavar="ROUNDS",
                    help="start every variant's server at once and keep them all up (idle but for "
                         "their own load) for ROUNDS rounds, then start them all again: rounds take "
                         "seconds, not a server start each, so many short rounds pair the variants "
                         "closely in time, and the restarts mix in what differs from one start to "
                         "the next (memory placement); 0 (default): each variant's server starts and "
                         "stops within each round")
    ap.add_argument("--name", default="warm", help="results file name prefix")
    ap.add_argument("--server-cpus", default="0",
                    help="taskset CPU list for pulsys and its worker processes (wrk stays on CPU 1); "
                         "e.g. 0,1 to compare --listeners 1 and 2")
    ap.add_argument("--out-dir", help="where the JSON goes (default results/<machine>/)")
    ap.add_argument("--generator", choices=("wrk", "loadgen"), default="wrk",
                    help="load generator on CPU 1: wrk (default) or the C client of bench_compare "
                         "(scripts/bench_peers/loadgen.c, built with cc)")
    a = ap.parse_args()
    if a.together < 0:
        raise SystemExit("bench_warm: error: --together %d: a number of rounds, 0 for off" % a.together)
    if a.duration <= 0 or (a.generator == "wrk" and a.duration != int(a.duration)):
        raise SystemExit("bench_warm: error: --duration %g: seconds above 0, whole seconds with wrk" % a.duration)
    if a.generator == "wrk" and not shutil.which("wrk"):
        raise SystemExit("bench_warm: wrk not found (apt-get install wrk)")
    variants, trees, revs, co, conns, envs = [], {}, {}, {}, {}, {}
    co_cpu = cpu_list(a.server_cpus)[0]       # a co-runner's: the first of the server's CPUs
    for v in a.variant or ["access_log_on=", "access_log_off=--access-log=off"]:
        name, _, flags = v.partition("=")
        flags = flags.split()
        for t in [t for t in flags if t.startswith("+connections=")]:
            flags.remove(t)
            n = t.partition("=")[2]
            if not n.isdigit() or int(n) < 1:
                raise SystemExit("bench_warm: error: %r: +connections=N takes a whole number above 0" % t)
            conns[name] = int(n)
        for t in [t for t in flags if t.startswith("+env=")]:
            flags.remove(t)
            m = re.fullmatch(r"\+env=([A-Za-z_][A-Za-z0-9_]*)=(.*)", t)
            if not m:
                raise SystemExit("bench_warm: error: %r: +env=NAME=VALUE takes an environment variable's name "
                                 "(letters, digits, _), then = and its value" % t)
            envs.setdefault(name, {})[m.group(1)] = m.group(2)
        for t in [t for t in flags if t.startswith("+co-runner=")]:
            flags.remove(t)
            if t == "+co-runner=idle":
                co[name] = {"idle": True, "cpu": co_cpu}
                continue
            m = re.fullmatch(r"\+co-runner=(\d+):(\d+)", t)
            if not m or int(m.group(1)) < 1:
                raise SystemExit("bench_warm: error: %r: +co-runner=PERIOD_US:HOT_KIB (e.g. +co-runner=250:512) "
                                 "or +co-runner=idle" % t)
            co[name] = {"period_us": int(m.group(1)), "hot_kib": int(m.group(2)), "cpu": co_cpu}
        if name.startswith("ref:"):
            ref_processes(flags)
            if not os.path.isfile(REF_SCRIPT):
                raise SystemExit("bench_warm: error: ref: variants need %s (or PULSYS_REFERENCE_DIR)" % REF_SCRIPT)
        variants.append((name, flags))
    workdir = tempfile.mkdtemp(prefix="bench_warm-") if a.generator == "loadgen" else None
    if workdir:
        exe = bench_compare.build_loadgen(workdir)[0]
        generate = lambda url, size, headers, c: loadgen(exe, url, size, c, a.duration, headers)  # noqa: E731
    else:
        generate = lambda url, size, headers, c: wrk(url, c, a.duration, headers)  # noqa: E731
    tree_dir = tempfile.mkdtemp(prefix="bench_warm-trees-")
    for name, _ in variants:
        rev = name.partition("@")[2]
        if rev and rev not in revs:
            revs[rev] = worktree(rev, tree_dir)
        trees[name] = revs[rev][0] if rev else ROOT
    tick_exe = (switch_cost.build(tempfile.mkdtemp(prefix="bench_warm-tick-", dir=tree_dir))
                if any(not c.get("idle") for c in co.values()) else None)
    sizes = [int(x) for x in a.sizes.split(",")]
    load_before = list(os.getloadavg())
    hub = FakeHub(record_requests=False).start()
    files = {"f%d.bin" % s: os.urandom(s) for s in sizes}
    hub.add_repo("bench/warm", files=files, lfs=set(files))
    floor_root = tempfile.mkdtemp(prefix="bench_warm-floor-")      # the same files for floor: variants
    floor_dir = os.path.join(floor_root, "bench", "warm", "resolve", "main")
    os.makedirs(floor_dir)
    for fname, body in files.items():
        with open(os.path.join(floor_dir, fname), "wb") as f:
            f.write(body)
    rows = {(n, s): [] for n, _ in variants for s in sizes}
    starts = {}

    def launch(stack, name, flags):
        """Start variant `name`'s server, stopped when `stack` closes. -> (Popen, files URL, headers)."""
        cache = stack.enter_context(tempfile.TemporaryDirectory())
        tree = trees[name]
        headers = (("Authorization", "Bearer " + create_key(cache, tree)),) if needs_key(flags) else ()
        if name.startswith("floor:"):
            p, url = start_floor(floor_root, flags, a.server_cpus, envs.get(name))
            url += "/bench/warm/resolve/main"
        elif name.startswith("ref:"):
            p, url = start_ref(floor_dir, ref_processes(flags), a.server_cpus, envs.get(name))
        else:
            p, url = start_pulsys(hub, cache, flags, a.server_cpus, tree, envs.get(name))
            url += "/bench/warm/resolve/main"
        stack.callback(p.wait, 10)
        stack.callback(p.terminate)
        starts[name] = starts.get(name, 0) + 1
        for size in sizes:
            urllib.request.urlopen(urllib.request.Request("%s/f%d.bin" % (url, size), headers=dict(headers))).read()
        return p, url, headers

    def measure(name, server, size, live):
        """One load of `size` against `server`. -> (req/s, p50, p99, server CPU µs a request,
        client CPU µs a request, the other live servers' CPU µs a request meanwhile)."""
        p, url, headers = server
        others = [q.pid for q, _, _ in live.values() if q is not p]
        tick = start_co_runner(tick_exe, co[name]) if name in co else None
        try:
            idle0 = [cpu_reading(pid) for pid in others]
            cpu0 = cpu_reading(p.pid)
            rps, p50, p99, total, client_s = generate("%s/f%d.bin" % (url, size), size, headers,
                                                      conns.get(name, a.connections))
            cpu1 = cpu_reading(p.pid)
            idle = sum(cpu_between(r0, cpu_reading(pid)) or 0 for r0, pid in zip(idle0, others))
        finally:
            if tick is not None:
                tick.terminate()
                tick.wait(10)
        used = cpu_between(cpu0, cpu1)
        us = used * 1e6 / total if used is not None else None
        return (rps, p50, p99, us, client_s * 1e6 / total, idle * 1e6 / total if others else None,
                user_share(cpu0, cpu1))

    together = contextlib.ExitStack()     # the servers of --together, up across rounds
    try:
        live = {}
        for rnd in range(a.rounds):
            if a.together and rnd % a.together == 0:
                # every server (re)started, up for the next --together rounds, each loaded in turn
                together.close()
                live = {}
                for name, flags in variants:
                    live[name] = launch(together, name, flags)
                for name, _ in variants:      # a first load, not counted: the servers' first-use costs
                    measure(name, live[name], sizes[0], live)
            # ABBA order: a load that grows or fades during the run weighs on every variant alike
            for name, flags in (variants if rnd % 2 == 0 else variants[::-1]):
                with contextlib.ExitStack() as one:
                    server = live.get(name) or launch(one, name, flags)
                    for size in sizes:
                        rows[(name, size)].append(measure(name, server, size, live))
    finally:
        together.close()
        hub.stop()
        if workdir:
            shutil.rmtree(workdir, ignore_errors=True)
        for path, _ in revs.values():
            subprocess.run(["git", "-C", ROOT, "worktree", "remove", "--force", path], capture_output=True)
        shutil.rmtree(tree_dir, ignore_errors=True)
        shutil.rmtree(floor_root, ignore_errors=True)
    cpus = len(set(cpu_list(a.server_cpus)) | {1})
    results = []
    for s in sizes:
        base = statistics.median(r[0] for r in rows[(variants[0][0], s)])
        for name, flags in variants:
            rps = [r[0] for r in rows[(name, s)]]
            med = statistics.median(rps)
            cpu = [r[3] for r in rows[(name, s)] if r[3] is not None]
            cpu_med = statistics.median(cpu) if cpu else None
            # user and system µs a request: each round's CPU split by its clock ticks' shares
            split = [(r[3] * r[6], r[3] * (1 - r[6])) for r in rows[(name, s)]
                     if r[3] is not None and r[6] is not None]
            user, system = [u for u, _ in split], [k for _, k in split]
            client = statistics.median(r[4] for r in rows[(name, s)])
            # A closed loop on `cpus` CPUs can do at most cpus / (server + client CPU per
            # request) req/s, whatever the server's parallelism: this variant's ceiling
            # as a multiple of the first variant's measured rate.
            ceiling = cpus / ((cpu_med + client) * 1e-6) / base if cpu else None
            within = cpu_ratios(rows[(name, s)], rows[(variants[0][0], s)], a.together)
            results.append({"client_cpu_us_per_req": round(client, 2),
                            "ceiling_ratio_on_%d_cpus" % cpus: round(ceiling, 3) if ceiling else None,
                            "variant": name, "flags": flags, "size": s, "co_runner": co.get(name),
                            "connections": conns.get(name, a.connections), "env": envs.get(name),
                            "server_starts": starts.get(name, 0),
                            "median_req_per_s": round(med),
                            "ratio": round(med / base, 3), "rounds_req_per_s": [round(x) for x in rps],
                            "p50": [r[1] for r in rows[(name, s)]], "p99": [r[2] for r in rows[(name, s)]],
                            "server_cpu_us_per_req": [round(x, 2) for x in cpu],
                            "median_server_cpu_us_per_req": round(cpu_med, 2) if cpu else None,
                            "server_user_us_per_req": [round(x, 3) for x in user],
                            "server_system_us_per_req": [round(x, 3) for x in system],
                            "median_server_user_us_per_req": round(statistics.median(user), 3) if user else None,
                            "median_server_system_us_per_req": round(statistics.median(system), 3) if system else None,
                            "server_cpu_ratio_within_rounds": within,
                            # --together: what the idle servers used meanwhile (their timers)
                            "idle_servers_cpu_us_per_req": [round(r[5], 3) for r in rows[(name, s)]]
                            if a.together else None})
            print("%-18s %8d B  %9.0f req/s  x%.3f  rounds=%s  server CPU %s us/req (rounds %s)  "
                  "client CPU %.2f us/req  ceiling on %d CPUs x%s" % (
                      name, s, med, med / base, [round(x) for x in rps],
                      "%.2f" % cpu_med if cpu else "?", [round(x, 1) for x in cpu], client, cpus,
                      "%.2f" % ceiling if ceiling else "?"))
            if user:
                print("%-18s server CPU a request split by clock ticks: user %.2f, system %.2f us (medians)"
                      % ("", statistics.median(user), statistics.median(system)))
            if within:
                print("%-18s server CPU a request / %s's, within rounds: median x%.3f (quartiles %.3f-%.3f)%s"
                      % ("", variants[0][0], within["median"], within["q1"], within["q3"],
                         "; by start %s" % within["by_start"] if within.get("by_start") else ""))
    backend = ("selector" if all("--no-iouring" in f for _, f in variants)
               else "io_uring where the probe passes, unless a variant says --no-iouring")
    doc = provenance(benchmark=a.name, backend=backend, loadavg_before=load_before, load="%s c%d %gs" % (a.generator, a.connections, a.duration),
                     together=a.together,
                     pinning="pulsys CPU %s, %s CPU 1" % (a.server_cpus, a.generator), rounds=a.rounds, results=results,
                     revisions={rev: sha for rev, (_, sha) in revs.items()})
    print("wrote", write_result("%s.json" % a.name, doc, a.out_dir))


if __name__ == "__main__":
    main()
