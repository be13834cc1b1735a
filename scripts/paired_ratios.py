"""Paired ratios between any two variants of a bench_warm.py results file.

bench_warm prints each variant's server CPU a request over the first variant's, round
by round. This prints it for any pair, `A/B`: per round A's value over B's (both ran in
the same round, moments apart), then the median and quartiles of those ratios and the
median difference in µs; for the whole CPU, its user part and its system part (the
split by clock ticks). docs/benchmarks.md's layout-by-layout table (issue 18,
seventeenth day) is this script on the files it names:

    python scripts/paired_ratios.py results/linux-x86_64-2cpu/quiet_c64.json \\
        l2/l1 ref:p2/ref:p1 ref:p1/l1 ref:p2/l2
"""

import argparse
import json
import statistics
import sys

FIELDS = (("cpu", "server_cpu_us_per_req"), ("user", "server_user_us_per_req"),
          ("system", "server_system_us_per_req"))


def median_quartiles(values):
    """{median, q1, q3, n} of a non-empty list, rounded to 4 places (bench_warm's
    within-round ratios too)."""
    q = statistics.quantiles(values, n=4, method="inclusive") if len(values) > 1 else values * 3
    return {"median": round(statistics.median(values), 4), "q1": round(q[0], 4), "q3": round(q[2], 4),
            "n": len(values)}


def paired(a, b):
    """Per-round a/b and a-b over the rounds where both were read -> {median, q1, q3,
    diff_us, n}, or None when no round has both."""
    pairs = [(x, y) for x, y in zip(a, b) if x is not None and y]
    if not pairs:
        return None
    out = median_quartiles([x / y for x, y in pairs])
    out["diff_us"] = round(statistics.median(x - y for x, y in pairs), 4)
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("results", help="a JSON file that bench_warm.py wrote")
    ap.add_argument("pairs", nargs="+", metavar="A/B", help="variant names, as in the file (the last / splits)")
    ap.add_argument("--json", action="store_true", help="print the numbers as JSON")
    a = ap.parse_args(argv)
    try:
        with open(a.results) as f:
            doc = json.load(f)
        variants = {r["variant"]: r for r in doc["results"]}
    except (OSError, ValueError, KeyError, TypeError) as e:
        ap.exit(2, "paired_ratios: error: %s is not a bench_warm results file (%s)\n" % (a.results, e))
    out = {}
    for pair in a.pairs:
        num, sep, den = pair.rpartition("/")
        missing = [v for v in (num, den) if v not in variants]
        if not sep or missing:
            ap.exit(2, "paired_ratios: error: %r: no variant %s in %s (it has: %s)\n"
                    % (pair, " or ".join(repr(m) for m in missing) or "A/B", a.results, ", ".join(variants)))
        out[pair] = {name: paired(variants[num].get(field, []), variants[den].get(field, []))
                     for name, field in FIELDS}
    if a.json:
        print(json.dumps(out, indent=1))
        return 0
    for pair, parts in out.items():
        for name, p in parts.items():
            if p is None:
                print("%-24s %-6s  not measured" % (pair, name))
            else:
                print("%-24s %-6s  median x%.3f (quartiles %.3f-%.3f)  difference %+.3f us  (%d rounds)"
                      % (pair, name, p["median"], p["q1"], p["q3"], p["diff_us"], p["n"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
