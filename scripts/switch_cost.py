"""What a switch between two tasks on one CPU costs on this machine, and how the cost
grows with the hot set each task walks after it wakes: the mechanism behind what
`--listeners 2` costs a request when both reactors share a CPU (issue 18).

Runs scripts/bench_peers/switch_cost.c (built with the system cc) on one CPU in three
modes, interleaved, for each hot-set size:
  alone   one task: the same pipe calls and walks, no switch
  thread  two threads of one process take turns (one address space)
  proc    two processes take turns (two address spaces: what --listeners N forks)
and derives, per hot set, from the medians over rounds (ns per switch):
  switch_and_refill_ns   proc - alone: the switch itself and refilling the hot set after it
  address_space_ns       proc - thread: what the change of address space adds

    python scripts/switch_cost.py --hot-kib 0,32,128,256,512,1024 --rounds 5

Writes results/<machine>/switch_cost_<date>.json (or --out-dir).
"""

import argparse
import datetime
import os
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import bench_compare as B  # noqa: E402
import provenance  # noqa: E402

MODES = ("alone", "thread", "proc")


def build(workdir):
    return B.build_c(workdir, "switch_cost", "switch_cost", ["-pthread"])[0]


def roundtrips_for(hot_kib, stride, budget_s):
    """Round trips that take about budget_s: ~3 us a switch here, plus ~4 ns a line
    walked when the walk misses to L3 (the worst case; cells with hot sets in cache end
    sooner)."""
    per_switch_ns = 3000 + 4 * hot_kib * 1024 // stride
    return max(200, int(budget_s * 1e9 / (2 * per_switch_ns)))


def run_cell(exe, cpu, mode, roundtrips, hot_kib, stride):
    p = subprocess.run(["taskset", "-c", str(cpu), exe, mode, str(roundtrips), str(hot_kib), str(stride)],
                       capture_output=True, text=True, timeout=120)
    if p.returncode != 0:
        raise SystemExit("switch_cost: error: %s %s KiB exited %d: %s"
                         % (mode, hot_kib, p.returncode, p.stderr.strip()))
    return float(p.stdout)


def measure(exe, a, hots):
    samples = {(m, h): [] for m in MODES for h in hots}
    for r in range(a.rounds):
        for h in hots:
            n = roundtrips_for(h, a.stride, a.cell_seconds)
            for m in MODES:
                samples[m, h].append(run_cell(exe, a.cpu, m, n, h, a.stride))
        print("switch_cost: round %d/%d done" % (r + 1, a.rounds), file=sys.stderr)
    rows = []
    for h in hots:
        med = {m: statistics.median(samples[m, h]) for m in MODES}
        rows.append({"hot_kib": h, "lines_walked_per_wake": h * 1024 // a.stride,
                     "ns_per_switch": {m: round(med[m], 1) for m in MODES},
                     "samples": {m: samples[m, h] for m in MODES},
                     "switch_and_refill_ns": round(med["proc"] - med["alone"], 1),
                     "address_space_ns": round(med["proc"] - med["thread"], 1)})
    return rows


def parse_hots(text):
    try:
        hots = [int(x) for x in text.split(",")]
    except ValueError:
        hots = None
    if not hots or any(h < 0 for h in hots):
        raise SystemExit("switch_cost: error: --hot-kib takes sizes in KiB >= 0, comma-separated, e.g. 0,256,1024")
    return hots


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--hot-kib", default="0,32,128,256,512,1024", help="hot-set sizes a task walks after each wake")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--stride", type=int, default=64, help="bytes between lines walked (64: every cache line)")
    ap.add_argument("--cell-seconds", type=float, default=0.3, help="about how long one mode at one size runs")
    ap.add_argument("--cpu", type=int, default=0)
    ap.add_argument("--out-dir", default=None)
    a = ap.parse_args(argv)
    hots = parse_hots(a.hot_kib)
    if a.rounds < 1 or a.stride < 8 or a.cell_seconds <= 0:
        ap.error("--rounds >= 1, --stride >= 8, --cell-seconds > 0")
    if a.cpu not in os.sched_getaffinity(0):
        ap.error("--cpu %d is not one this process may run on" % a.cpu)
    prov = provenance.provenance()
    with tempfile.TemporaryDirectory(prefix="pulsys-switch-") as work:
        rows = measure(build(work), a, hots)
    for r in rows:
        print("switch_cost: %5d KiB  alone %8.1f  thread %8.1f  proc %8.1f ns a switch  "
              "switch+refill %8.1f  address space %7.1f" % (
                  r["hot_kib"], r["ns_per_switch"]["alone"], r["ns_per_switch"]["thread"],
                  r["ns_per_switch"]["proc"], r["switch_and_refill_ns"], r["address_space_ns"]),
              file=sys.stderr)
    doc = dict(prov, benchmark="switch_cost", cpu=a.cpu, rounds=a.rounds, stride=a.stride,
               method="scripts/bench_peers/switch_cost.c: two tasks on one CPU pass a byte over two "
                      "pipes; after each wake a task walks its hot set as a pointer chase (every "
                      "stride-th byte, random cyclic order); medians over interleaved rounds",
               rows=rows)
    name = "switch_cost_%s.json" % datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d")
    print("wrote", provenance.write_result(name, doc, a.out_dir))


if __name__ == "__main__":
    main()
