#!/usr/bin/env python3
"""Chart cold-pull results (scripts/bench_cold.py JSON files): one SVG with wall rate
and server CPU per GB per server, one group of bars per run, median of its rounds
(the lines: min-max). Needs matplotlib (scripts/bench_compare.sh --cold installs it into
its bench venv, never into pulsys's).

    python scripts/render_cold.py results/linux-x86_64-2cpu/cold_*_2026-12-03.json \\
        --out results/linux-x86_64-2cpu/cold_2026-12-03.svg
"""

import argparse
import json
import os

ORDER = ("direct", "nginx-proxy-cache", "pulsys", "pulsys-1-fetcher")
COLORS = {"direct": "#7f7f7f", "nginx-proxy-cache": "#2ca02c", "pulsys": "#1f77b4", "pulsys-1-fetcher": "#aec7e8"}


def run_label(doc):
    where = doc.get("cache_on", "?")
    pace = " CDN %g MB/s/conn" % doc["pace_mbps"] if doc.get("pace_mbps") else ""
    how = " hf_transfer" if str(doc.get("client", "")).startswith("hf_transfer") else ""
    when = " one at a time" if doc.get("one_at_a_time") else ""
    return "%d x %d MiB, %s%s%s%s" % (doc["files"], doc["size_mib"], where, pace, how, when)


def stats(doc, server, key):
    vals = sorted(r[key] for r in doc["rows"] if r["server"] == server and r.get(key) is not None)
    if not vals:
        return None
    return vals[len(vals) // 2], vals[0], vals[-1]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("files", nargs="+")
    ap.add_argument("--out", required=True)
    a = ap.parse_args(argv)
    docs = [json.load(open(f)) for f in a.files]
    import matplotlib
    matplotlib.use("svg")
    import matplotlib.pyplot as plt
    plt.rcParams["svg.hashsalt"] = "pulsys-bench"
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.8))
    for ax, key, ylabel in ((axes[0], "mb_per_s", "MB/s, all files (log)"),
                            (axes[1], "server_cpu_s_per_gb", "server CPU seconds per GB")):
        servers = [s for s in ORDER if any(stats(d, s, key) for d in docs)]
        width = 0.8 / max(1, len(servers))
        for i, server in enumerate(servers):
            xs, ys, lo, hi = [], [], [], []
            for j, d in enumerate(docs):
                st = stats(d, server, key)
                if st is None:
                    continue
                xs.append(j + i * width)
                ys.append(st[0])
                lo.append(st[0] - st[1])
                hi.append(st[2] - st[0])
            ax.bar(xs, ys, width, yerr=[lo, hi], capsize=2, label=server, color=COLORS.get(server))
        ax.set_xticks([j + 0.4 - width / 2 for j in range(len(docs))])
        ax.set_xticklabels([run_label(d) for d in docs], fontsize=7, rotation=12)
        ax.set_ylabel(ylabel)
        if key == "mb_per_s":
            ax.set_yscale("log")
        ax.grid(True, axis="y", alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle("Cold pulls, one curl per file (median of rounds, lines: min-max) - %s, %s" % (
        docs[0].get("machine", ""), docs[0].get("date", "")[:10]), fontsize=9)
    fig.tight_layout()
    fig.savefig(a.out, format="svg", metadata={"Date": None})
    print("wrote", os.path.relpath(a.out))


if __name__ == "__main__":
    main()
