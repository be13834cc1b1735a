"""Python bytecodes a warm 4 KiB request costs pulsys's reactor, by function, in the
io_uring "ring" wait mode that callgrind cannot run (instructions_per_request.py runs
the "epoll" mode: valgrind holds its lock over a blocking io_uring_enter).

CPython 3.11 reports every bytecode it executes to a trace function that sets
frame.f_trace_opcodes (sys.settrace docs, "opcode" events). pulsys runs under
scripts/opcount_boot.py, which counts them per thread and code object; SIGUSR1 zeroes
the counts, SIGUSR2 writes them out. For each concurrency:

  1. load at that concurrency for a second (warm; the answer remembered)
  2. SIGUSR1, --duration seconds of load (scripts/bench_peers/loadgen.c), SIGUSR2
  3. bytecodes and calls a request of each function of the reactor thread; passes a
     request = calls of the loop's turn (UringReactor._turn's closure)

Tracing slows the server ~10x and the client does not, so a pass reaps more requests
than it would at the same concurrency untraced: what a request and a pass each cost is
what this counts, and a fit over the concurrencies splits the two (bytecodes a request
= per_request + per_pass x passes a request). A bytecode is not a fixed time (a CALL
costs more than a LOAD_FAST): the count says where the Python runs, callgrind how much
each costs.

    python scripts/ops_per_request.py --concurrency 1,4,16 --duration 4

Writes results/<machine>/ops_per_request_<date>.json (or --out-dir).
"""

import argparse
import datetime
import json
import os
import shutil
import signal
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import bench_compare as B  # noqa: E402
import provenance  # noqa: E402
from profile_warm import one_file_ctx  # noqa: E402

SIZE = 4096
REACTOR = "pulsys-reactor-0"
TURN = "uring.py:turn"      # the loop's pass: UringReactor._turn's closure


def fit(points):
    """Least squares of y = a + b x over (x, y) points -> (a, b); None below two distinct x."""
    try:
        b, a = statistics.linear_regression([x for x, _ in points], [y for _, y in points])
    except statistics.StatisticsError:
        return None
    return a, b


def by_function(counts, requests, thread=REACTOR):
    """{"ops": {key: n}, "calls": {key: n}} of opcount_boot -> {"file.py:name": [ops,
    calls] a request} for one thread (keys "thread file.py:line:name")."""
    out = {}
    for kind, i in (("ops", 0), ("calls", 1)):
        for key, n in counts[kind].items():
            who, _, where = key.partition(" ")
            if who != thread:
                continue
            f, _, rest = where.partition(":")
            name = f + ":" + rest.partition(":")[2]
            out.setdefault(name, [0.0, 0.0])[i] += n / requests
    return out


def measure(ctx, peer, conc, duration, dump):
    path, header = peer.path(SIZE), peer.header
    B.run_loadgen(ctx.loadgen, peer.port, SIZE, conc, 1.0, path, header)
    time.sleep(0.2)
    os.kill(peer.proc.pid, signal.SIGUSR1)
    time.sleep(0.2)
    g = B.run_loadgen(ctx.loadgen, peer.port, SIZE, conc, duration, path, header)
    if os.path.exists(dump):
        os.unlink(dump)
    os.kill(peer.proc.pid, signal.SIGUSR2)
    for _ in range(100):
        if os.path.exists(dump):
            break
        time.sleep(0.05)
    if "error" in g:
        return {"concurrency": conc, "error": g["error"]}
    if not os.path.exists(dump):
        return {"concurrency": conc, "error": "the traced server wrote no counts"}
    with open(dump) as f:
        counts = json.load(f)
    n = g["requests"]
    fns = by_function(counts, n)
    ops = sum(v[0] for v in fns.values())
    passes = fns.get(TURN, [0, 0])[1]
    top = sorted(fns.items(), key=lambda kv: -kv[1][0])
    B.log("c%-3d %7d requests  %6.1f bytecodes a request  %.3f passes a request" % (conc, n, ops, passes))
    return {"concurrency": conc, "requests": n, "bytecodes_per_request": round(ops, 1),
            "passes_per_request": round(passes, 4),
            "functions_per_request": {k: {"bytecodes": round(v[0], 2), "calls": round(v[1], 4)}
                                      for k, v in top if v[0] >= 0.05}}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--concurrency", default="1,4,16", help="connections, comma-separated (two or more: the fit)")
    ap.add_argument("--duration", type=float, default=4.0, help="seconds of counted load per concurrency")
    ap.add_argument("--out-dir", default=None)
    a = ap.parse_args()
    try:
        concs = B.parse_list(a.concurrency)
    except ValueError:
        ap.error("--concurrency: connection counts, comma-separated, e.g. 1,4,16")
    if not concs or any(c < 1 for c in concs):
        ap.error("--concurrency: connection counts of at least 1, e.g. 1,4,16")
    if not 0 < a.duration <= 120:
        ap.error("--duration: seconds, more than 0 and at most 120")
    prov = provenance.provenance()
    ctx = one_file_ctx(SIZE, a.duration, "pulsys-ops-")
    dump = os.path.join(tempfile.mkdtemp(prefix="ops-", dir=ctx.workdir), "counts.json")
    peer = B.make_peers(ctx, ["pulsys-iouring"])[0]
    spawn = peer.spawn
    boot = os.path.join(HERE, "opcount_boot.py")

    def traced(cmd, _spawn=spawn, **kw):
        at = cmd.index("-m")            # `python -m pulsys ...` -> `python opcount_boot.py ...`
        env = dict(kw.pop("env", None) or os.environ, PULSYS_OPCOUNT_OUT=dump)
        _spawn(cmd[:at] + [boot] + cmd[at + 2:], env=env, **kw)
    peer.spawn = traced
    peer.start_timeout = 120.0
    rows = []
    try:
        peer.start()
        peer.warm()
        for conc in concs:
            rows.append(measure(ctx, peer, conc, a.duration, dump))
    finally:
        peer.stop()
        ctx.hub.stop()
        shutil.rmtree(ctx.workdir, ignore_errors=True)
    good = [r for r in rows if "error" not in r]
    f = fit([(r["passes_per_request"], r["bytecodes_per_request"]) for r in good])
    doc = dict(prov, benchmark="ops_per_request", size=SIZE, duration_s=a.duration,
               server="pulsys --iouring --listeners 1 --auth required (wait mode as the kernel allows)",
               counter="CPython trace function, opcode events, reactor thread only (scripts/opcount_boot.py)",
               load="scripts/bench_peers/loadgen.c on CPU 1, pulsys on CPU 0", rows=rows,
               fit=({"bytecodes_per_request": round(f[0], 1), "bytecodes_per_pass": round(f[1], 1)}
                    if f else None))
    if f:
        B.log("fit: %.1f bytecodes a request + %.1f a pass" % f)
    name = "ops_per_request_%s.json" % datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d")
    print("wrote", provenance.write_result(name, doc, a.out_dir))
    if not good:
        raise SystemExit("ops_per_request: error: no concurrency was measured: %s" % rows)


if __name__ == "__main__":
    main()
