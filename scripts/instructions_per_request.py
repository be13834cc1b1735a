"""User-space instructions per warm 4 KiB request of whole servers under real load,
counted by valgrind (callgrind): pulsys as bench_compare runs it (`--iouring --listeners 1
--auth required`, JSON access log) against the reference server (`uring-ref`), both
served real requests over loopback by the C keep-alive client.

Timings of the same Python move by 2x between runs on this shared machine; instruction
counts do not. Under callgrind a server runs ~30-50x slower while the client does not, so
each loop turn finds about as many requests ready as there are connections: the
concurrency here is the batch a turn reaps (c16 on the real machine reaps ~7 a turn,
c64 ~20, the kernel's cap of deferred task work per enter; the turns per request of
the real runs are in profile_floors_*.json). Every thread of the server is counted (the
access-log writer, admin and other threads), from just after a warm-up under load
until the end of a --duration window:

  1. start the server under `valgrind --tool=callgrind --separate-threads=yes`
  2. warm: one GET, then --warmup seconds of load at the concurrency
  3. `callgrind_control --zero`, then --duration seconds of load, `callgrind_control --dump`
     (both take effect when the server next runs: a few single GETs make it run; they are
     counted, at most --pokes of them, <0.1% of a window's requests)
  4. instructions of the window / requests of the window, per thread and per code object
     (the interpreter, the liburing binding, libc, the rest), and the turns (io_uring
     enters) per request: pulsys's own counter; the reference's calls of
     io_uring_submit_and_wait, one per turn

    python scripts/instructions_per_request.py --concurrency 1,7,20 --duration 6

--cache-sim adds valgrind's simulation of this CPU's caches and branch predictor (the
hardware counters are not readable in this VM): L1 and last-level misses and branch
mispredictions a request, and KCachegrind's cycle estimate from them. It simulates
user space only; what the kernel evicts between turns is not in it.

Writes results/<machine>/instructions_per_request_<date>.json (or --out-dir).
Needs valgrind (Debian package); the liburing binding must set up a ring on this CPU
(the portable wheel: PULSYS_BENCH_LIBURING_WHEEL, see docs/benchmarks.md).
"""

import argparse
import collections
import datetime
import glob
import os
import re
import shutil
import subprocess
import sys
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import bench_compare as B  # noqa: E402
import provenance  # noqa: E402
from profile_warm import one_file_ctx  # noqa: E402

SIZE = 4096
# pulsys started as `python -c BOOT args`: valgrind cannot reserve the index's 256 GiB LMDB
# map (address space only; a warm hit from the answer memo reads no index page). And the
# reactor sleeps in epoll (wait mode "epoll"), not in io_uring_enter: valgrind 3.19 keeps
# its one lock over a thread's blocking io_uring_enter (seen here: the reactor's idle wait
# held it and every other thread of pulsys stood still), where epoll_wait releases it.
# Under load a turn does not sleep; the two turns differ in the call that submits
# (Ring.submit against Ring.get_events) and in the kernel's completion delivery.
BOOT = ("import runpy, sys; import pulsys.cache.indexdb as i; i.MAP_SIZE = 1 << 30; "
        "from pulsys.reactor.uring import UringReactor as U; U.__init__.__kwdefaults__['wait'] = 'epoll'; "
        "sys.argv[0] = 'pulsys'; runpy.run_module('pulsys', run_name='__main__', alter_sys=True)")
# code objects, by the file a function's code came from (callgrind's fl= names)
GROUPS = (("interpreter", re.compile(r"libpython|/Python-3[^/]*/")),
          ("liburing binding", re.compile(r"liburing|zig|PyOZ")),
          ("libc", re.compile(r"libc\.so|/glibc|sysdeps|/string/|/malloc/|/nptl/|/stdlib/")),
          ("extension modules", re.compile(r"\.so")))


def control(pid, what, poke, pokes):
    """callgrind_control --zero|--dump PID, the server made to run by GETs meanwhile.
    -> the number of GETs made (they may fall on either side of the command)."""
    p = subprocess.Popen(["callgrind_control", what, str(pid)], stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL)
    made = 0
    while p.poll() is None and made < pokes:
        try:
            poke()
        except OSError:
            pass
        made += 1
        time.sleep(0.05)
    try:
        p.wait(30)
    except subprocess.TimeoutExpired:
        p.kill()
        raise SystemExit("instructions_per_request: error: callgrind_control %s did not return" % what)
    return made


def parse_dump(path):
    """-> (total Ir, {group: Ir}, {function name: calls}) of one callgrind output file."""
    names, files = {}, {}
    total, groups, calls = 0, collections.Counter(), collections.Counter()
    fl = cur = ""        # the function's file, and the file of its code here (fi=/fe=: inlined)
    cfn = None
    pending_call = False
    with open(path, errors="replace") as f:
        for line in f:
            c = line[:1]
            if c.isdigit() or c in "+-*":
                if pending_call:
                    pending_call = False      # the cost line of a call: inclusive, not self
                    continue
                parts = line.split()
                if len(parts) >= 2:
                    ir = int(parts[1])
                    groups[cur] += ir
                continue
            if line.startswith("fl="):
                fl = cur = _name(files, line[3:].strip())
            elif line.startswith(("fi=", "fe=")):
                cur = _name(files, line[3:].strip())
            elif line.startswith("fn="):
                cur = fl
                _name(names, line[3:].strip())
            elif line.startswith("cfn="):
                cfn = _name(names, line[4:].strip())
            elif line.startswith("cfi=") or line.startswith("cfl="):
                _name(files, line[4:].strip())
            elif line.startswith("calls="):
                calls[cfn] += int(line[6:].split()[0])
                pending_call = True
            elif line.startswith(("summary:", "totals:")):
                total = max(total, int(line.split()[1]))
    by = collections.Counter()
    for fname, ir in groups.items():
        for g, rx in GROUPS:
            if rx.search(fname):
                by[g] += ir
                break
        else:
            by["other"] += ir
    return total, dict(by), calls


def event_totals(path):
    """-> {event: total} of one callgrind output file (its `events:` and `totals:` lines;
    with --cache-sim=yes --branch-sim=yes: Ir, Dr, Dw, I1mr, D1mr, D1mw, ILmr, DLmr, DLmw,
    Bc, Bcm, Bi, Bim)."""
    events, totals = [], None
    with open(path, errors="replace") as f:
        for line in f:
            if line.startswith("events:"):
                events = line.split()[1:]
            elif line.startswith(("summary:", "totals:")):
                totals = [int(x) for x in line.split()[1:]]
    if not totals:
        return {}
    return dict(zip(events, totals))


def cycle_estimate(ev):
    """KCachegrind's "Cycle Estimation" of simulated events: Ir + 10 * (L1 misses + branch
    mispredictions) + 100 * last-level misses; None without the simulation's events."""
    if "D1mr" not in ev or "Bcm" not in ev:
        return None
    l1 = ev["I1mr"] + ev["D1mr"] + ev["D1mw"]
    ll = ev["ILmr"] + ev["DLmr"] + ev["DLmw"]
    return ev["Ir"] + 10 * (l1 + ev["Bcm"] + ev["Bim"]) + 100 * ll


def _name(table, text):
    """callgrind's name compression: '(id) name' defines, '(id)' refers."""
    m = re.match(r"\((\d+)\)(?: (.*))?$", text)
    if not m:
        return text
    if m.group(2) is not None:
        table[m.group(1)] = m.group(2)
    return table.get(m.group(1), text)


def pulsys_enters(peer):
    with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % peer.admin_port, timeout=60) as r:
        text = r.read().decode()
    m = re.search(r"^pulsys_uring_enter\S*\s+(\d+)", text, re.M)
    return int(m.group(1)) if m else None


def measure(ctx, peer, conc, a, outdir, ll_kib=None):
    prefix = os.path.join(outdir, "%s-%s-c%d-ll%s" % (peer.server, peer.variant, conc, ll_kib))
    spawn = peer.spawn

    def under_callgrind(cmd, _spawn=spawn, **kw):
        # taskset's CPU list (B.pin) stays first: valgrind runs on the CPU it is given
        at = 3 if cmd[:1] == ["taskset"] else 0
        if cmd[at + 1:at + 3] == ["-m", "pulsys"]:
            cmd = cmd[:at + 1] + ["-c", BOOT] + cmd[at + 3:]
        sim = ["--cache-sim=yes", "--branch-sim=yes"] if a.cache_sim else []
        if a.cache_sim and ll_kib:
            sim += ["--I1=32768,8,64", "--D1=32768,8,64", "--LL=%d,8,64" % (ll_kib * 1024)]
        _spawn(cmd[:at] + ["valgrind", "--tool=callgrind", "--separate-threads=yes"] + sim
               + ["--callgrind-out-file=%s.%%p.out" % prefix] + cmd[at:], **kw)
    peer.spawn = under_callgrind
    peer.start_timeout = 300.0
    B.log("%s c%d: starting under callgrind" % (peer.key, conc))
    try:
        peer.start()
        peer.warm()
        path, header = peer.path(SIZE), peer.header

        def poke():
            B.http_get(peer.port, path, timeout=30, header=header)
        B.run_loadgen(ctx.loadgen, peer.port, SIZE, conc, a.warmup, path, header)
        before = pulsys_enters(peer) if peer.server == "pulsys" else None
        for old in glob.glob(prefix + ".*"):
            os.unlink(old)
        pid = peer.proc.pid
        control(pid, "--zero", poke, a.pokes)
        g = B.run_loadgen(ctx.loadgen, peer.port, SIZE, conc, a.duration, path, header)
        after = pulsys_enters(peer) if peer.server == "pulsys" else None
        extra = control(pid, "--dump", poke, a.pokes)
    finally:
        peer.stop()
    if "error" in g:
        return {"server": peer.key, "concurrency": conc, "error": g["error"]}
    dumps = sorted(p for p in glob.glob(prefix + ".*.out*") if re.search(r"\.out\.\d+(-\d+)?$", p))
    if not dumps:
        return {"server": peer.key, "concurrency": conc, "error": "no callgrind dump written"}
    n = g["requests"]
    threads, groups, calls, total = [], collections.Counter(), collections.Counter(), 0
    events = collections.Counter()
    for d in dumps:
        t, by, cl = parse_dump(d)
        if t:
            threads.append(t)
        total += t
        groups.update(by)
        calls.update(cl)
        events.update(event_totals(d))
    threads.sort(reverse=True)
    if peer.server == "pulsys":
        turns = (after - before) if before is not None and after is not None else None
    else:
        turns = sum(v for k, v in calls.items() if k and k.endswith("io_uring_submit_and_wait"))
    row = {"server": peer.key, "concurrency": conc, "requests": n, "pokes_after_zero_at_most": extra,
           "req_per_s_under_callgrind": round(g["req_per_s"], 1),
           "instructions_per_request": round(total / n),
           "by_thread_per_request": [round(t / n) for t in threads],
           "by_code_per_request": {k: round(v / n) for k, v in sorted(groups.items())},
           "turns_per_request": round(turns / n, 4) if turns else None}
    if a.cache_sim:
        row["last_level_kib"] = ll_kib
        row["events_per_request"] = {k: round(v / n, 1) for k, v in events.items()}
        est = cycle_estimate(events)
        row["cycle_estimate_per_request"] = round(est / n) if est is not None else None
    B.log("%-26s c%-3d %7d requests  %6d instructions a request  threads %s  turns/request %s%s" % (
        peer.key, conc, n, row["instructions_per_request"], row["by_thread_per_request"][:4],
        row["turns_per_request"],
        "  cycle estimate %s" % row.get("cycle_estimate_per_request") if a.cache_sim else ""))
    return row


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--servers", default="uring-ref,pulsys-iouring")
    ap.add_argument("--concurrency", default="1,7,20", help="connections, i.e. requests a loop turn reaps")
    ap.add_argument("--duration", type=float, default=6.0, help="seconds of counted load per cell")
    ap.add_argument("--warmup", type=float, default=2.0, help="seconds of load before counting")
    ap.add_argument("--pokes", type=int, default=40, help="most single GETs made to deliver a command")
    ap.add_argument("--out-dir", default=None)
    ap.add_argument("--cache-sim", action="store_true", help="also simulate the caches and branch predictor "
                    "(valgrind --cache-sim=yes --branch-sim=yes): misses a request and a cycle estimate")
    ap.add_argument("--ll-kib", default=None, metavar="KIB[,KIB]",
                    help="with --cache-sim: simulate L1s of 32 KiB (8-way) and a last level of each of "
                         "these sizes (8-way, 64 B lines), e.g. 1024,512: this CPU's L2, whole and halved, "
                         "as when two reactors take turns on one core (default: the caches valgrind detects)")
    ap.add_argument("--keep-dumps", default=None, metavar="DIR", help="copy the callgrind dumps here "
                    "(callgrind_annotate reads them: which functions, which thread)")
    a = ap.parse_args()
    try:
        lls = [int(x) for x in a.ll_kib.split(",")] if a.ll_kib else [None]
    except ValueError:
        ap.error("--ll-kib: sizes in KiB, comma-separated, e.g. 1024,512")
    if a.ll_kib and not a.cache_sim:
        ap.error("--ll-kib needs --cache-sim")
    if any(n is not None and (n < 64 or n & (n - 1)) for n in lls):
        ap.error("--ll-kib: each size a power of two of at least 64 (valgrind needs a power-of-two set count)")
    for tool in ("valgrind", "callgrind_control"):
        if not shutil.which(tool):
            raise SystemExit("instructions_per_request: error: %s not found (apt-get install valgrind)" % tool)
    prov = provenance.provenance()
    ctx = one_file_ctx(SIZE, a.duration, "pulsys-instr-")
    outdir = os.path.join(ctx.workdir, "callgrind")
    os.makedirs(outdir)
    rows = []
    try:
        for conc in B.parse_list(a.concurrency):
            for ll in lls:
                for name in a.servers.split(","):
                    peer = B.make_peers(ctx, [name])[0]
                    try:
                        rows.append(measure(ctx, peer, conc, a, outdir, ll))
                    except B.Unavailable as e:
                        rows.append({"server": peer.key, "concurrency": conc, "last_level_kib": ll,
                                     "error": "unavailable: %s" % e})
                        B.log("%s: %s" % (peer.key, rows[-1]["error"]))
    finally:
        for p in ctx.started:
            p.stop()
        if a.keep_dumps:
            shutil.copytree(outdir, a.keep_dumps, dirs_exist_ok=True)
        ctx.hub.stop()
        shutil.rmtree(ctx.workdir, ignore_errors=True)
    doc = dict(prov, benchmark="instructions_per_request", size=SIZE, duration_s=a.duration, warmup_s=a.warmup,
               counter="valgrind --tool=callgrind --separate-threads=yes%s (user-space instructions, every "
                       "thread of the server process), between callgrind_control --zero and --dump"
                       % (" --cache-sim=yes --branch-sim=yes" if a.cache_sim else ""),
               load="scripts/bench_peers/loadgen.c on CPU 1, servers on CPU 0", rows=rows)
    name = "instructions_per_request_%s.json" % datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d")
    print("wrote", provenance.write_result(name, doc, a.out_dir))


if __name__ == "__main__":
    main()
