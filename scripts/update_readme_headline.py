"""Rewrite the README's benchmark headline from results/headline.json.

Replaces everything between the lines `<!-- bench:headline:start -->` and
`<!-- bench:headline:end -->` in README.md; the rest of the file is left byte for byte.
Exits 1 (and changes nothing) when the markers are absent or the headline is missing.

    python scripts/update_readme_headline.py [--readme README.md] [--headline results/headline.json]
"""

import argparse
import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
START = "<!-- bench:headline:start -->"
END = "<!-- bench:headline:end -->"
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from render_bench import human_size  # noqa: E402  (the tables and the headline name sizes alike)


def _num(x, metric):
    if x is None:
        return "–"
    if metric == "req_per_s":
        return "{:,.0f} req/s".format(x) if x >= 100 else "%.1f req/s" % x
    return "%.2f GB/s" % x


def _peer(c):
    p = c.get("peer") or {}
    if c["versus"] == "olah":
        return "olah"
    if c["versus"] == "uring-ref":
        return "[reference server](docs/benchmarks.md#pulsys-against-the-reference-server-per-request-issue-18)"
    return "nginx static (%s)" % p["variant"].replace("_", " ") if p.get("variant") else "nginx static"


def render(h):
    backend = h["pulsys_backend"]
    lines = ["Warm hits, server pinned to one core and load generator to another, same files and load for every "
             "server ([method and full tables](docs/benchmarks.md)); commit `%s`%s, %s, %s:"
             % (h["commit"][:12], " (dirty tree)" if h.get("dirty") else "", (h.get("date") or "")[:10],
                h.get("machine")), ""]
    if backend != "iouring":
        lines += ["pulsys io_uring: %s — the numbers below are the portable backend." % h.get("pulsys_iouring"), ""]
    lines += ["| what | pulsys %s | versus | ratio | target |" % backend, "|---|---:|---:|---:|---|"]
    wrk = False
    for c in h["comparisons"]:
        metric = c["metric"]
        pv = (c.get("pulsys") or {}).get(metric)
        qv = (c.get("peer") or {}).get(metric)
        ratio = c.get("ratio")
        ratio_s = "–" if ratio is None else ("%s×" % ratio if isinstance(ratio, str) else "%.2f×" % ratio)
        if c.get("round_ratio_median") is not None:
            ratio_s += ", %.2f× within rounds" % c["round_ratio_median"]
        if c.get("cpu_ratio") is not None:
            ratio_s += " (CPU/GB %.2f×)" % c["cpu_ratio"]
        verdict = {True: "met", False: "not met", None: "not measured"}[c.get("met")]
        if "wrk" in ((c.get("pulsys") or {}).get("generator"), (c.get("peer") or {}).get("generator")):
            ratio_s += " ʷ"
            wrk = True
        lines.append("| %s, %d connections | %s | %s: %s | %s | %s: %s |" % (
            human_size(c["size"]), c["concurrency"], _num(pv, metric), _peer(c), _num(qv, metric), ratio_s,
            c["target"].replace(">=", "≥"), verdict))
    if wrk:
        lines += ["", "ʷ measured with wrk, which the run's generator check found faster than the C client "
                  "at that concurrency; a ratio near 1 there can be both servers at wrk's own limit "
                  "([load generators](docs/benchmarks.md#load-generators))."]
    lines += ["", "Source: `%s` (regenerate: `bash scripts/bench_compare.sh`, then "
              "`python scripts/update_readme_headline.py`)." % h.get("source")]
    return "\n".join(lines)


def rewrite(text, block):
    """text with the part between the markers replaced by block, or None if markers are absent."""
    lines = text.split("\n")
    starts = [i for i, l in enumerate(lines) if l.strip() == START]
    ends = [i for i, l in enumerate(lines) if l.strip() == END]
    if len(starts) != 1 or len(ends) != 1 or ends[0] < starts[0]:
        return None
    return "\n".join(lines[:starts[0] + 1] + block.split("\n") + lines[ends[0]:])


def main(argv=None):
    ap = argparse.ArgumentParser(description="Rewrite the README benchmark headline from results/headline.json.")
    ap.add_argument("--readme", default=os.path.join(ROOT, "README.md"))
    ap.add_argument("--headline", default=os.path.join(ROOT, "results", "headline.json"))
    a = ap.parse_args(argv)
    try:
        with open(a.headline) as f:
            h = json.load(f)
    except (OSError, ValueError) as e:
        print("update_readme_headline: error: cannot read %s (%s); run scripts/bench_compare.sh first"
              % (a.headline, e), file=sys.stderr)
        return 1
    with open(a.readme) as f:
        text = f.read()
    new = rewrite(text, render(h))
    if new is None:
        print("update_readme_headline: error: %s has no single %s ... %s marker pair; add both lines "
              "where the headline goes" % (a.readme, START, END), file=sys.stderr)
        return 1
    if new != text:
        with open(a.readme, "w") as f:
            f.write(new)
        print("update_readme_headline: rewrote the headline in %s" % a.readme)
    else:
        print("update_readme_headline: %s already up to date" % a.readme)
    return 0


if __name__ == "__main__":
    sys.exit(main())
