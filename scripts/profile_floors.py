"""Why one io_uring server's warm hit costs more than another's: the reference server
(`uring-ref`), pulsys's own featureless floor (`uring-floor`) and pulsys (`pulsys-iouring`,
as bench_compare runs it: access log on) under the same bounded load, counted per request.

Per server and round, up to five runs of the C keep-alive client (scripts/bench_peers/loadgen.c,
CPU 1; servers on CPU 0), each --duration seconds (--runs picks them; plain always runs):
  plain   req/s, each thread's user and system CPU (/proc/<pid>/task/<tid>/stat) per request,
          and kernel events per CPU (perf stat -a -A, counting: io_uring task work added
          or run locally, IPIs sent, reschedule and call-function interrupts, wake-ups,
          io_uring_enter calls, poll arms, SQEs submitted and CQEs posted)
  trace   `perf trace -s -p PID`: every system call by thread and name, per request
  py-spy  `py-spy record --threads --gil --nonblocking`: where the thread holding the GIL
          is (leaf frames, share of samples), and which thread it is. The liburing binding
          keeps the GIL inside io_uring_enter, so the reference's submit_and_wait (its
          sleep too) and pulsys's submit show up as lines; epoll sleeps do not
  profile `perf record -e cpu-clock` on CPU 0 (a software timer: this VM has no hardware
          counters): the server's time a request by function, kernel and user
  footprint  the memory each server process touches in --window seconds of load, by
          mapping: /proc/PID/clear_refs (1: clear the Accessed bits) then the
          "Referenced:" lines of /proc/PID/smaps (proc(5)). Pages, not cache lines: what
          the TLB must map again after another process ran, and a ceiling on what the
          caches must refill
Servers: uring-ref, uring-floor, pulsys-iouring, and for what two processes on one CPU
cost, pulsys-iouring-l2 (--listeners 2), uring-ref-p2 (the reference unchanged in two
processes on one port, bench_peers/ref_processes.py) and uring-floor-p2 (--processes 2).
Counts per request depend little on load (calls per loop turn do: batches grow with load),
CPU per request depends on it; compare servers within one run only.

    python scripts/profile_floors.py --size 4096 --concurrency 16 --duration 3 --rounds 2
    python scripts/profile_floors.py --concurrency 64 --runs plain,profile,footprint \
        --servers pulsys-iouring,pulsys-iouring-l2,uring-floor,uring-floor-p2

--base-tree DIR adds `pulsys-iouring` run from another source tree (a worktree of another
commit: git worktree add --detach /tmp/base <commit>) as the peer pulsys/iouring-base, with
the same interpreter and liburing, for a before/after comparison inside one run.

Writes results/<machine>/profile_floors_<size>_c<N>_<date>.json with provenance (or --out-dir).
Needs perf, and py-spy for its run (pip install py-spy); a server that cannot start is recorded unavailable.
"""

import argparse
import collections
import datetime
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import bench_compare as B  # noqa: E402
import provenance  # noqa: E402
from profile_warm import one_file_ctx  # noqa: E402

TCK = os.sysconf("SC_CLK_TCK")


def threads(pid):
    """{tid: (name, user ticks, system ticks)} of every thread of pid and its descendants
    (pulsys --listeners 2: the worker processes; uring_floor.py --processes 2: its forks)."""
    out = {}
    for tid, path in B.tree_threads(pid):
        try:
            with open(path + "/stat") as f:
                d = f.read()
        except OSError:
            continue
        name = d[d.index("(") + 1:d.rindex(")")]
        f = d[d.rindex(")") + 2:].split()
        out[tid] = (name, int(f[11]), int(f[12]))
    return out


def tree_pids(pid):
    return ",".join(str(p) for p in sorted(B.process_tree(pid)))


KERNEL_EVENTS = ["io_uring:io_uring_task_add", "io_uring:io_uring_local_work_run", "ipi:ipi_send_cpu",
                 "irq_vectors:reschedule_entry", "irq_vectors:call_function_single_entry", "sched:sched_wakeup",
                 "context-switches", "syscalls:sys_enter_io_uring_enter", "io_uring:io_uring_poll_arm",
                 "io_uring:io_uring_submit_req", "io_uring:io_uring_complete"]


def thread_cpu(pid, run, workdir, events=KERNEL_EVENTS):
    """Each thread's CPU, and kernel events on every CPU (perf stat -a -A, counting only)."""
    out = os.path.join(workdir, "stat.txt")
    p = subprocess.Popen(["perf", "stat", "-a", "-A", "-x", ",", "-o", out, "-e", ",".join(events)],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(0.5)
    t0 = threads(pid)
    g = run()
    t1 = threads(pid)
    p.send_signal(signal.SIGINT)
    p.wait(30)
    events = {}
    with open(out) as f:
        for line in f:
            v = line.strip().split(",")
            if len(v) > 3 and v[0].startswith("CPU") and v[1].isdigit():
                events.setdefault(v[0], {})[v[3]] = int(v[1])
    g["kernel_events"] = events
    per = {}
    for tid, (name, u, s) in t1.items():
        _, u0, s0 = t0.get(tid, (name, 0, 0))
        if u - u0 or s - s0:
            per["%s/%d" % (name, tid)] = ((u - u0) / TCK, (s - s0) / TCK)
    return g, per


def perf_trace(pid, run, workdir):
    out = os.path.join(workdir, "trace.txt")
    p = subprocess.Popen(["perf", "trace", "-s", "-p", tree_pids(pid), "-o", out], stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL)
    time.sleep(1.0)
    g = run()
    p.send_signal(signal.SIGINT)
    p.wait(30)
    calls, thread = {}, None
    with open(out) as f:
        for line in f:
            m = re.match(r"\s*(\S+) \((\d+)\), \d+ events", line)
            if m:
                thread = "%s/%s" % (m.group(1), m.group(2))
                continue
            m = re.match(r"\s+(\w+)\s+(\d+)\s+(\d+)\s+[\d.]+", line)
            if m and thread and m.group(1) != "syscall":
                calls.setdefault(thread, {})[m.group(1)] = int(m.group(2))
    return g, calls


def py_spy(pid, run, workdir, rate):
    out = os.path.join(workdir, "spy.txt")
    p = subprocess.Popen([os.path.join(os.path.dirname(sys.executable), "py-spy"), "record", "-p", str(pid),
                          "--threads", "--gil", "--nonblocking", "--subprocesses", "-r", str(rate), "-f", "raw",
                          "-o", out],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(1.0)
    g = run()
    p.send_signal(signal.SIGINT)
    p.wait(30)
    leaf, by_thread, total = collections.Counter(), collections.Counter(), 0
    with open(out) as f:
        for line in f:
            stack, _, n = line.rstrip().rpartition(" ")
            frames = stack.split(";")
            n = int(n)
            total += n
            by_thread[frames[0]] += n
            leaf[re.sub(r" \((\S+/)?", " (", frames[-1])] += n
    return g, {"samples": total, "threads": dict(by_thread.most_common()),
               "leaf_top": [(k, round(v / total, 4)) for k, v in leaf.most_common(25)] if total else []}


SAMPLE_US = 250      # perf record -e cpu-clock -c: one sample per 250 us of a CPU's time


def cpu_profile(pid, run, workdir, top=80):
    """Where CPU 0's time goes while it serves, by function and by shared object (the
    kernel's functions as one): `perf record -e cpu-clock`
    (a software timer, which this VM's missing hardware counters do not need) on CPU 0,
    the server's threads only (by name: `perf report --pid` drops some rounds' samples of
    threads perf found running at its start) -> (loadgen's report, [(dso, symbol,
    samples)], samples, {dso: samples} over every function)."""
    out = os.path.join(workdir, "cpu.data")
    comms = ",".join(sorted({name for name, _, _ in threads(pid).values()}))
    p = subprocess.Popen(["perf", "record", "-q", "-e", "cpu-clock", "-c", str(SAMPLE_US * 1000), "-C", "0",
                          "-o", out], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(0.5)
    g = run()
    p.send_signal(signal.SIGINT)
    p.wait(30)
    rep = subprocess.run(["perf", "report", "-i", out, "--stdio", "-n", "--no-children", "--comm", comms,
                          "--sort", "dso,sym", "-g", "none"], capture_output=True, text=True).stdout
    rows = []
    for line in rep.splitlines():
        m = re.match(r"\s+[\d.]+%\s+(\d+)\s+(\S+)\s+\[.\]\s+(.*)", line)
        if m:
            rows.append((m.group(2), m.group(3).strip(), int(m.group(1))))
    by_dso = collections.Counter()
    for dso, _, k in rows:
        by_dso["kernel" if dso.startswith("[kernel") else dso] += k
    return g, rows[:top], sum(r[2] for r in rows), by_dso


def footprint(pid, run, window, delay):
    """KiB of each mapping that each process of the server touched in `window` seconds
    of steady load, from `delay` seconds into it -> (loadgen's report, {pid: {mapping: KiB}})."""
    got = {}
    t = threading.Thread(target=lambda: got.update(g=run()))
    t.start()
    time.sleep(delay)
    # A window in which the server's processes ran less than a fifth of it saw no load
    # (on a busy machine the load can start late, and an idle pulsys touches next to
    # nothing: docs/decisions/0023): sample again while the load runs.
    while True:
        ran = B.tree_run_seconds(pid)
        touched = _touched(sorted(B.process_tree(pid)), window)
        after = B.tree_run_seconds(pid)
        # (None: no schedstat on this kernel; the window is taken as it is)
        if ran is None or after is None or after[0] - ran[0] >= window * 0.2 or not t.is_alive():
            break
    t.join()
    return got["g"], touched


def _touched(pids, window):
    """{pid: {mapping: KiB}} that each of `pids` touched in `window` seconds."""
    files = []
    for p in pids:
        try:
            files.append(open("/proc/%d/clear_refs" % p, "w"))
        except OSError:
            pass
    for f in files:
        f.write("1")
        f.flush()
    time.sleep(window)
    touched = {}
    for p in pids:
        try:
            with open("/proc/%d/smaps" % p) as f:
                text = f.read()
        except OSError:
            continue
        per, name = collections.Counter(), None
        for line in text.splitlines():
            parts = line.split()
            if re.match(r"[0-9a-f]+-[0-9a-f]+$", parts[0]):
                name = "%s %s" % (os.path.basename(parts[5]) if len(parts) > 5 else "[anon]", parts[1])
            elif parts[0] == "Referenced:" and int(parts[1]):
                per[name] += int(parts[1])
        if per:
            touched[p] = dict(per.most_common())
    for f in files:
        f.close()
    return touched


SUMMED_EVENTS = ("context-switches", "irq_vectors:reschedule_entry", "ipi:ipi_send_cpu", "sched:sched_wakeup",
                 "syscalls:sys_enter_io_uring_enter", "io_uring:io_uring_poll_arm", "io_uring:io_uring_task_add")


def summary(rows):
    """Per server, medians over rounds: CPU a request (user, system) and the kernel events
    of both CPUs a request; with profile runs, the functions' time a request summed over
    rounds (per-round medians of a thin function are mostly zero)."""
    out = {}
    for server in dict.fromkeys(r["server"] for r in rows):
        mine = [r for r in rows if r["server"] == server and r.get("cpu_us_per_request_split")]
        if not mine:
            continue
        med = lambda xs: round(statistics.median(xs), 3)  # noqa: E731
        s = {"rounds": len(mine),
             "cpu_us_per_request": med([r["cpu_us_per_request_total"] for r in mine]),
             "user_us_per_request": med([r["cpu_us_per_request_split"]["user"] for r in mine]),
             "system_us_per_request": med([r["cpu_us_per_request_split"]["system"] for r in mine]),
             "kernel_events_per_request": {e: med([sum(c.get(e, 0) for c in r["kernel_events_per_request"].values())
                                                   for r in mine]) for e in SUMMED_EVENTS}}
        prof = [r for r in mine if r.get("profile_top_us_per_request")]
        if prof:
            acc = collections.Counter()
            for r in prof:
                for d, f, us in r["profile_top_us_per_request"]:
                    acc["%s %s" % (d, f)] += us / len(prof)
            s["profile_us_per_request"] = med([r["profile_us_per_request"] for r in prof])
            dsos = dict.fromkeys(d for r in prof for d in r.get("profile_dso_us_per_request", {}))
            s["profile_dso_us_per_request"] = {d: med([r["profile_dso_us_per_request"].get(d, 0) for r in prof])
                                               for d in dsos}
            s["profile_top_us_per_request"] = [(k, round(v, 3)) for k, v in acc.most_common(60)]
        fp = [r["footprint_kib"] for r in mine if r.get("footprint_kib")]
        if fp:   # the process that touched most: a reactor (the parent of --listeners 2 is idle)
            big = [max(f.values(), key=lambda m: m["total"]) for f in fp]
            s["footprint_kib_busiest_process"] = med([m["total"] for m in big])
            s["footprint_kib_busiest_process_mappings"] = big[-1]["mappings"]
        out[server] = s
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--size", type=int, default=4096)
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--duration", type=float, default=3.0)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--servers", default="uring-ref,uring-floor,pulsys-iouring")
    ap.add_argument("--rate", type=int, default=500, help="py-spy samples per second")
    ap.add_argument("--out-dir")
    ap.add_argument("--base-tree", help="also run pulsys --iouring from this source tree (A/B)")
    ap.add_argument("--runs", default="plain,trace,py-spy",
                    help="which runs a round makes, of plain,trace,py-spy,profile (perf record),footprint")
    ap.add_argument("--window", type=float, default=0.02, help="footprint: seconds between clear and read")
    a = ap.parse_args()
    runs = set(a.runs.split(","))
    if runs - {"plain", "trace", "py-spy", "profile", "footprint"}:
        raise SystemExit("profile_floors: error: --runs takes plain,trace,py-spy,profile,footprint")
    for tool in ("perf",):
        if not shutil.which(tool):
            raise SystemExit("profile_floors: error: %s not found" % tool)
    prov = provenance.provenance()
    ctx = one_file_ctx(a.size, a.duration, "pulsys-floors-")
    hub = ctx.hub
    rows, unavailable, peers = [], {}, []
    try:
        made = B.make_peers(ctx, a.servers.split(","))
        base = None
        if a.base_tree:
            base = B.Pulsys(ctx, "iouring-base", "--iouring", root=os.path.abspath(a.base_tree))
            made.append(base)
        for peer in made:
            try:
                peer.start()
                peer.warm()
                peers.append(peer)
            except (B.Unavailable, OSError) as e:
                unavailable[peer.key] = "unavailable: %s" % e
                peer.stop()
        for rnd in range(1, a.rounds + 1):
            k = (rnd - 1) % max(1, len(peers))
            for peer in peers[k:] + peers[:k]:
                pid = peer.proc.pid

                def run():
                    r = B.run_loadgen(ctx.loadgen, peer.port, a.size, a.concurrency, a.duration, peer.path(a.size),
                                     peer.header)
                    B.wait_idle(peer.proc.pid)
                    return r
                row = {"server": peer.key, "round": rnd, "version": peer.version}
                g, cpu = thread_cpu(pid, run, ctx.workdir)
                n = g.get("requests") or 0
                row["kernel_events_per_request"] = {c: {k: round(v / n, 3) for k, v in e.items()}
                                                    for c, e in g["kernel_events"].items()} if n else {}
                row["req_per_s"] = round(g.get("req_per_s", 0), 1)
                row["cpu_us_per_request"] = {t: {"user": round(u / n * 1e6, 2), "system": round(s / n * 1e6, 2)}
                                             for t, (u, s) in cpu.items()} if n else {}
                row["cpu_us_per_request_total"] = round(sum(u + s for u, s in cpu.values()) / n * 1e6, 2) if n else None
                row["cpu_us_per_request_split"] = {
                    "user": round(sum(u for u, _ in cpu.values()) / n * 1e6, 2),
                    "system": round(sum(s for _, s in cpu.values()) / n * 1e6, 2)} if n else None
                syscalls = ""
                if "trace" in runs:
                    g, calls = perf_trace(pid, run, ctx.workdir)
                    n = g.get("requests") or 0
                    row["trace_req_per_s"] = round(g.get("req_per_s", 0), 1)
                    row["syscalls_per_request"] = {t: {k: round(v / n, 3) for k, v in sorted(c.items(), key=lambda kv: -kv[1])}
                                                   for t, c in calls.items()} if n else {}
                    syscalls = "; syscalls/request %s" % {t: round(sum(c.values()), 2)
                                                          for t, c in row["syscalls_per_request"].items()}
                if "py-spy" in runs:
                    g, spy = py_spy(pid, run, ctx.workdir, a.rate)
                    row["py_spy_req_per_s"] = round(g.get("req_per_s", 0), 1)
                    row["py_spy"] = spy
                if "profile" in runs:
                    g, top, total, by_dso = cpu_profile(pid, run, ctx.workdir)
                    n = g.get("requests") or 0
                    row["profile_req_per_s"] = round(g.get("req_per_s", 0), 1)
                    row["profile_us_per_request"] = round(total * SAMPLE_US / n, 2) if n else None
                    row["profile_dso_us_per_request"] = {d: round(k * SAMPLE_US / n, 3)
                                                         for d, k in by_dso.most_common()} if n else {}
                    row["profile_top_us_per_request"] = [(d, f, round(k * SAMPLE_US / n, 3)) for d, f, k in top] if n else []
                if "footprint" in runs:
                    g, touched = footprint(pid, run, a.window, min(1.0, a.duration / 3))
                    row["footprint_window_s"] = a.window
                    row["footprint_kib"] = {str(p): {"total": sum(m.values()), "mappings": m} for p, m in touched.items()}
                rows.append(row)
                B.log("round %d %-28s %9.0f req/s %6.2f us CPU/request (user %s, system %s)%s" % (
                    rnd, peer.key, row["req_per_s"], row["cpu_us_per_request_total"] or 0,
                    *((row["cpu_us_per_request_split"] or {}).get(k) for k in ("user", "system")), syscalls))
    finally:
        for p in ctx.started:
            p.stop()
        hub.stop()
        shutil.rmtree(ctx.workdir, ignore_errors=True)
    doc = dict(prov, benchmark="profile_floors", size=a.size, concurrency=a.concurrency, duration_s=a.duration,
               rounds=a.rounds, load="scripts/bench_peers/loadgen.c on CPU 1, servers on CPU 0 (taskset)",
               tools={"perf": B.version_of(["perf", "--version"]),
                      "py_spy": B.version_of([os.path.join(os.path.dirname(sys.executable), "py-spy"), "--version"])},
               peers={p.key: [B.portable_path(ctx, c) for c in p.command] for p in peers},
               loadavg_after=B.loadavg(), unavailable=unavailable, rows=rows, summary=summary(rows))
    if base is not None:
        p = subprocess.run(["git", "-C", base.root, "rev-parse", "HEAD"], capture_output=True, text=True)
        dirty = subprocess.run(["git", "-C", base.root, "status", "--porcelain"], capture_output=True, text=True)
        doc["base_tree"] = {"peer": base.key, "commit": p.stdout.strip(), "clean": dirty.stdout.strip() == ""}
    name = "profile_floors_%d_c%d_%s.json" % (a.size, a.concurrency,
                                              datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d"))
    print("wrote", provenance.write_result(name, doc, a.out_dir))


if __name__ == "__main__":
    main()
