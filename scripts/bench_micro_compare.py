"""The warm path's micro-benchmarks (tests/bench/test_bench_micro.py) at another commit
and at this tree, interleaved in one run, into results/<machine>/micro_compare.json.

    python scripts/bench_micro_compare.py --before 4ada1f0 [--rounds 2] [-k EXPR]

The other commit is checked out in a temporary git worktree (removed at the end) and
runs its own copy of the benchmarks; a benchmark only one side has is reported for that
side. Minimum and median per round, in nanoseconds.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "scripts"))

from provenance import provenance, write_result  # noqa: E402


def run(tree, select, out):
    env = dict(os.environ, PYTHONPATH=tree)
    subprocess.run([sys.executable, "-m", "pytest", "tests/bench/test_bench_micro.py", "-q", "-p",
                    "no:randomly", "-k", select, "--benchmark-json", out], cwd=tree, env=env,
                   check=True, stdout=subprocess.DEVNULL)
    with open(out) as f:
        doc = json.load(f)
    return {b["name"]: {"min_ns": round(b["stats"]["min"] * 1e9, 1),
                        "median_ns": round(b["stats"]["median"] * 1e9, 1)} for b in doc["benchmarks"]}


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--before", required=True, help="git revision to compare with")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("-k", default="index_lookup or plan_warm_full or uring_warm or revalidate")
    args = p.parse_args()
    prov = provenance(before=args.before)
    tmp = tempfile.mkdtemp(prefix="pulsys-micro-")
    wt = os.path.join(tmp, "before")
    subprocess.run(["git", "-C", ROOT, "worktree", "add", "-q", "--detach", wt, args.before], check=True)
    rounds = []
    try:
        for i in range(args.rounds):
            rounds.append({"before": run(wt, args.k, os.path.join(tmp, "b%d.json" % i)),
                           "after": run(ROOT, args.k, os.path.join(tmp, "a%d.json" % i))})
    finally:
        subprocess.run(["git", "-C", ROOT, "worktree", "remove", "--force", wt], check=False)
    names = sorted({n for r in rounds for side in r.values() for n in side})
    best = {n: {side: min((r[side][n]["min_ns"] for r in rounds if n in r[side]), default=None)
                for side in ("before", "after")} for n in names}
    doc = dict(prov, settings={"select": args.k, "rounds": args.rounds}, rounds=rounds, best_min_ns=best)
    path = write_result("micro_compare.json", doc)
    print(json.dumps(best, indent=1))
    print("wrote", path)


if __name__ == "__main__":
    main()
