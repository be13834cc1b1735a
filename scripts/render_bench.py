"""Charts, tables and the headline from one scripts/bench_compare.py result.

    python scripts/render_bench.py [results/<machine>/compare_<date>.json]

With no path, the newest full-run compare_*.json of this machine. Writes, next to it:
  <stem>_req_per_s_c<N>.svg, <stem>_gbytes_per_s_c<N>.svg   one chart per concurrency
  <stem>.md                                                 the tables docs/benchmarks.md shows
and results/headline.json (pulsys vs the better nginx static at 4 KiB, 256 KiB and
16 MiB with 16 connections, and vs olah at 4 KiB; with the run's provenance) unless
the run was --quick or --no-headline is given. Charts need matplotlib (a bench-only
dependency: scripts/bench_compare.sh installs it into ~/.cache/pulsys-bench/venv);
the tables and the headline do not.
"""

import argparse
import datetime
import glob
import json
import os
import statistics
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
import provenance  # noqa: E402

HEADLINE_PATH = os.path.join(ROOT, "results", "headline.json")
DOCS_PATH = os.path.join(ROOT, "docs", "benchmarks.md")
DOCS_START, DOCS_END = "<!-- bench:results:start -->", "<!-- bench:results:end -->"
PROVENANCE_KEYS = ("commit", "dirty", "date", "machine", "cpu_model", "cpus", "kernel", "system", "python",
                   "python_build")
KIB, MIB = 1024, 1024 * 1024
# (id, size, concurrency, peer, metric, target ratio, also needs less CPU per GB)
TARGETS = [
    ("4k_c16_req_per_s", 4 * KIB, 16, "nginx-static", "req_per_s", 1.3, False),
    ("4k_c64_req_per_s", 4 * KIB, 64, "nginx-static", "req_per_s", 1.3, False),
    ("4k_c16_vs_reference", 4 * KIB, 16, "uring-ref", "req_per_s", 0.85, False),
    ("4k_c64_vs_reference", 4 * KIB, 64, "uring-ref", "req_per_s", 0.85, False),
    ("64k_c16_gbytes_per_s", 64 * KIB, 16, "nginx-static", "gbytes_per_s", 1.0, False),
    ("256k_c16_gbytes_per_s", 256 * KIB, 16, "nginx-static", "gbytes_per_s", 1.0, True),
    ("16m_c16_gbytes_per_s", 16 * MIB, 16, "nginx-static", "gbytes_per_s", 1.0, True),
    ("4k_c16_vs_olah", 4 * KIB, 16, "olah", "req_per_s", 100.0, False),
]


def human_size(n):
    if n >= MIB and n % MIB == 0:
        return "%d MiB" % (n // MIB)
    if n >= KIB and n % KIB == 0:
        return "%d KiB" % (n // KIB)
    return "%d B" % n


def label(server, variant):
    return server if variant == "default" else "%s %s" % (server, variant)


def _medians(doc):
    return {(m["server"], m["variant"], m["size"], m["concurrency"]): m for m in doc.get("medians", [])}


def best_of(meds, server, size, conc):
    """The median row of `server`'s best variant (by req/s) at this cell, or None."""
    rows = [m for (s, v, z, c), m in meds.items() if s == server and z == size and c == conc
            and m.get("req_per_s") is not None]
    return max(rows, key=lambda m: m["req_per_s"]) if rows else None


def _pick(m):
    return None if m is None else {k: m.get(k) for k in ("server", "variant", "generator", "req_per_s",
                                                         "gbytes_per_s", "p50_us", "p99_us", "cpu_s_per_gb",
                                                         "errors", "note")}


def paired(doc, backend, q, metric):
    """pulsys's `metric` over the peer row `q`'s, round by round (the same round of the
    same run: both measured minutes apart, in the order the round rotated), and the same
    for server CPU per GB; -> (ratios, cpu ratios), each sorted, [] without rows."""
    def cell(server, variant):
        return {r["round"]: r for r in doc.get("rows", [])
                if (r["server"], r["variant"], r["size"], r["concurrency"])
                == (server, variant, q["size"], q["concurrency"])}
    mine, theirs = cell("pulsys", backend), cell(q["server"], q["variant"])
    ratios, cpu = [], []
    for rnd in sorted(set(mine) & set(theirs)):
        a, b = mine[rnd], theirs[rnd]
        if a.get(metric) is not None and b.get(metric):
            ratios.append(round(a[metric] / b[metric], 3))
        if a.get("cpu_s_per_gb") is not None and b.get("cpu_s_per_gb"):
            cpu.append(round(a["cpu_s_per_gb"] / b["cpu_s_per_gb"], 3))
    return sorted(ratios), sorted(cpu)


def _median(xs):
    return round(statistics.median(xs), 3) if xs else None


def compare(doc, backend):
    """Every target for one pulsys backend: numbers, ratio, met or not, and why.

    A target is met only when both ways of reading the run say so: the ratio of the two
    servers' medians over rounds, and the median of the ratios taken within each round.
    On a shared machine one slow stretch can sink one server's round and not the
    other's (2026-12-04: nginx at 22,934 req/s in a round where it did 49,833 in the
    next), and the two readings then disagree; the round ratios are in the JSON."""
    meds = _medians(doc)
    out = []
    for tid, size, conc, peer, metric, target, less_cpu in TARGETS:
        p = meds.get(("pulsys", backend, size, conc))
        q = best_of(meds, peer, size, conc)
        item = {"id": tid, "size": size, "concurrency": conc, "metric": metric, "target_ratio": target,
                "target": ">= %gx %s%s" % (target, "req/s" if metric == "req_per_s" else "GB/s",
                                            " with less server CPU per GB" if less_cpu else ""),
                "versus": "the better nginx static (tcp_nopush on/off)" if peer == "nginx-static" else peer,
                "pulsys": _pick(p), "peer": _pick(q), "ratio": None, "cpu_ratio": None, "met": None}
        if p is None or p.get(metric) is None:
            item["why"] = "pulsys %s not measured at %s c%d" % (backend, human_size(size), conc)
        elif q is None:
            un = [v for k, v in doc.get("unavailable", {}).items() if k.startswith(peer + "/")]
            item["why"] = "%s %s" % (peer, un[0] if un else "not measured at %s c%d" % (human_size(size), conc))
        elif not q.get(metric):
            item["ratio"] = float("inf") if p[metric] else None
            item["met"] = bool(p[metric])
            item["why"] = "%s completed no request at %s c%d" % (peer, human_size(size), conc)
        else:
            item["ratio"] = round(p[metric] / q[metric], 3)
            ok = item["ratio"] >= target
            why = ["%.2fx (%s vs %s)" % (item["ratio"], p[metric], q[metric])]
            rounds, cpu_rounds = paired(doc, backend, q, metric)
            item["round_ratios"], item["round_cpu_ratios"] = rounds, cpu_rounds
            item["round_ratio_median"] = _median(rounds)
            if rounds:
                ok = ok and item["round_ratio_median"] >= target
                why.append("within rounds %s (median %.2fx)" % (", ".join("%.2f" % r for r in rounds),
                                                                 item["round_ratio_median"]))
            if less_cpu:
                pc, qc = p.get("cpu_s_per_gb"), q.get("cpu_s_per_gb")
                if pc is not None and qc:
                    item["cpu_ratio"] = round(pc / qc, 3)
                    ok = ok and pc < qc and (not cpu_rounds or _median(cpu_rounds) < 1.0)
                    why.append("server CPU %.3f vs %.3f s/GB (%.2fx%s)" % (
                        pc, qc, pc / qc, "; within rounds median %.2fx" % _median(cpu_rounds) if cpu_rounds else ""))
                else:
                    ok = False
                    why.append("server CPU per GB not measured")
            item["met"] = ok
            item["why"] = "; ".join(why)
        if item["ratio"] == float("inf"):
            item["ratio"] = "inf"
        out.append(item)
    return out


def latency_c1(doc):
    """p50 at c=1 for each size: shows a head+body coalescing stall (delayed-ACK ~40 ms)."""
    out = {}
    for m in doc.get("medians", []):
        if m["concurrency"] == 1 and m.get("p50_us") is not None:
            out.setdefault(label(m["server"], m["variant"]), {})[str(m["size"])] = m["p50_us"]
    return out


def compute_headline(doc, source):
    """results/headline.json content for one compare run (pure: no I/O, no matplotlib)."""
    measured = {m["variant"] for m in doc.get("medians", []) if m["server"] == "pulsys"}
    unavailable = doc.get("unavailable", {})
    head = {k: doc.get(k) for k in PROVENANCE_KEYS}
    backend = "iouring" if "iouring" in measured else ("portable" if "portable" in measured else None)
    head.update({
        "benchmark": "headline", "source": source,
        "rendered_at": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "pinning": doc.get("pinning"), "loadavg_before": doc.get("loadavg_before"),
        "loadavg_after": doc.get("loadavg_after"), "duration_s": doc.get("settings", {}).get("duration_s"),
        "rounds": doc.get("settings", {}).get("rounds"),
        "pulsys_backend": backend,
        "pulsys_iouring": "measured" if "iouring" in measured else unavailable.get(
            "pulsys/iouring", "not measured"),
        "comparisons": compare(doc, backend) if backend else [],
        "by_backend": {b: compare(doc, b) for b in ("iouring", "portable") if b in measured},
        "p50_us_c1": latency_c1(doc),
    })
    return head


# -- tables ------------------------------------------------------------------------------

def _fmt(x, metric):
    if x is None:
        return "–"
    if metric == "req_per_s":
        return "%.0f" % x if x >= 100 else "%.1f" % x
    if metric == "gbytes_per_s":
        return "%.3f" % x if x < 1 else "%.2f" % x
    if metric == "cpu_s_per_gb":
        return "%.3f" % x if x < 10 else "%.0f" % x
    if metric in ("p50_us", "p99_us"):
        return "%.0f" % x if x >= 10 else "%.1f" % x
    if metric == "max_us":
        return "%.1f" % (x / 1000.0)
    return str(x)


def pivot(doc, metric, conc):
    meds = _medians(doc)
    sizes = doc["settings"]["sizes"]
    keys = []
    for m in doc.get("medians", []):
        k = (m["server"], m["variant"])
        if k not in keys:
            keys.append(k)
    keys.sort(key=lambda k: (0 if k[0] == "pulsys" else 1, k))
    lines = ["| server | " + " | ".join(human_size(s) for s in sizes) + " |",
             "|---|" + "---:|" * len(sizes)]
    for server, variant in keys:
        cells = []
        for s in sizes:
            m = meds.get((server, variant, s, conc))
            if metric in ("max_us", "over_30ms"):   # over every round, from the rows
                rs = [r for r in doc.get("rows", []) if (r["server"], r["variant"], r["size"], r["concurrency"])
                      == (server, variant, s, conc) and r.get(metric) is not None]
                if not rs:
                    cells.append("–")
                elif metric == "max_us":
                    cells.append(_fmt(max(r["max_us"] for r in rs), metric))
                else:
                    cells.append("%d of %d" % (sum(r["over_30ms"] for r in rs), sum(r["requests"] for r in rs)))
                continue
            cell = _fmt(m.get(metric) if m else None, metric)
            if m and m.get("generator") == "wrk":
                cell += "ʷ"
            if m and "client-bound" in (m.get("note") or ""):
                cell += "ᶜ"
            cells.append(cell)
        lines.append("| %s | %s |" % (label(server, variant), " | ".join(cells)))
    return "\n".join(lines)


def markdown(doc, source, headline=None):
    names = {"req_per_s": "req/s", "gbytes_per_s": "GB/s (payload, 1e9 bytes)", "p50_us": "p50 latency, µs",
             "p99_us": "p99 latency, µs", "cpu_s_per_gb": "server CPU seconds per GB"}
    out = ["Source: `%s` — commit `%s`%s, %s, %s; %s s × %s rounds; load average before %s, after %s."
           % (source, doc["commit"][:12], " (dirty tree)" if doc.get("dirty") else "", doc.get("date"),
              doc.get("machine"), doc["settings"]["duration_s"], doc["settings"]["rounds"],
              doc.get("loadavg_before"), doc.get("loadavg_after")),
           "", "Medians over rounds. ʷ = produced by wrk (every other cell by loadgen). "
           "ᶜ = in at least one round the load generator's CPU was over 90% busy: the client may have been "
           "the limit, the server may be faster.", ""]
    for key, reason in sorted(doc.get("unavailable", {}).items()):
        out.append("- `%s`: %s" % (key, reason))
    if doc.get("unavailable"):
        out.append("")
    for conc in doc["settings"]["concurrency"]:
        for metric in ("req_per_s", "gbytes_per_s", "p50_us", "p99_us", "cpu_s_per_gb"):
            out += ["#### %s, %d connection%s" % (names[metric], conc, "" if conc == 1 else "s"), "",
                    pivot(doc, metric, conc), ""]
    if 1 in doc["settings"]["concurrency"]:
        out += ["#### Head+body coalescing: stalls at 1 connection", "",
                "A delayed-ACK stall (head and body held back until the peer's ACK, ~40 ms on loopback) "
                "barely moves p50 when it hits a fraction of responses; it shows in req/s (above), in the "
                "slowest response and in the count of responses that took 30 ms or more.", "",
                "Slowest response in any round, ms:", "", pivot(doc, "max_us", 1), ""]
        if any(r.get("over_30ms") is not None for r in doc.get("rows", [])):
            out += ["Responses that took >= 30 ms, all rounds:", "", pivot(doc, "over_30ms", 1), ""]
    gc = doc.get("generator_check")
    if gc and gc.get("by_concurrency"):
        out += ["#### Generator check (4 KiB, against %s)" % gc["server"], "",
                "| connections | loadgen req/s (median) | wrk req/s (median) | loadgen / wrk | used for <= 64 KiB |",
                "|---:|---:|---:|---:|---|"]
        for c, r in gc["by_concurrency"].items():
            out.append("| %s | %.0f | %.0f | %s | %s |" % (c, r["loadgen_median"], r["wrk_median"],
                                                          r["ratio"], r["use"]))
        out.append("")
    elif gc:
        out += ["Generator check: %s" % gc.get("skipped"), ""]
    if headline:
        out += ["#### Targets (pulsys %s)" % headline["pulsys_backend"], "",
                "| target | pulsys | peer | ratio | met | why |", "|---|---:|---:|---:|---|---|"]
        for c in headline["comparisons"]:
            metric = c["metric"]
            out.append("| %s c%d: %s vs %s | %s | %s | %s | %s | %s |" % (
                human_size(c["size"]), c["concurrency"], c["target"], c["versus"],
                _fmt((c["pulsys"] or {}).get(metric), metric), _fmt((c["peer"] or {}).get(metric), metric),
                c["ratio"] if c["ratio"] is not None else "–",
                {True: "met", False: "not met", None: "not measured"}[c["met"]], c.get("why", "")))
        out.append("")
    return "\n".join(out)


# -- charts -------------------------------------------------------------------------------

COLORS = {("pulsys", "iouring"): "#d62728", ("pulsys", "portable"): "#ff7f0e",
          ("nginx-static", "tcp_nopush_on"): "#1f77b4", ("nginx-static", "tcp_nopush_off"): "#17becf",
          ("nginx-proxy-cache", "default"): "#2ca02c", ("varnish", "default"): "#9467bd",
          ("olah", "default"): "#7f7f7f"}


def color(server, variant):
    """The same colour for a server in every chart."""
    return COLORS.get((server, variant), "#8c564b")


def charts(doc, out_dir, stem):
    import matplotlib
    matplotlib.use("svg")
    import matplotlib.pyplot as plt
    plt.rcParams["svg.hashsalt"] = "pulsys-bench"   # stable ids: re-rendering gives the same file
    rounds = {}
    for r in doc.get("rows", []):
        if r.get("req_per_s") is not None:
            rounds.setdefault((r["server"], r["variant"], r["size"], r["concurrency"]), []).append(r)
    meds = _medians(doc)
    keys = sorted({(s, v) for (s, v, _, _) in meds}, key=lambda k: (0 if k[0] == "pulsys" else 1, k))
    sizes = doc["settings"]["sizes"]
    paths = []
    for conc in doc["settings"]["concurrency"]:
        for metric, ylabel, logy in (("req_per_s", "requests per second", True),
                                     ("gbytes_per_s", "GB/s (payload)", False)):
            fig, ax = plt.subplots(figsize=(8, 5))
            for server, variant in keys:
                xs, ys, lo, hi = [], [], [], []
                for s in sizes:
                    m = meds.get((server, variant, s, conc))
                    if m is None or m.get(metric) is None:
                        continue
                    vals = [r[metric] for r in rounds.get((server, variant, s, conc), []) if r.get(metric) is not None]
                    xs.append(s)
                    ys.append(m[metric])
                    lo.append(m[metric] - min(vals) if vals else 0)
                    hi.append(max(vals) - m[metric] if vals else 0)
                if not xs:
                    continue
                style = "-" if server == "pulsys" else "--"
                ax.errorbar(xs, ys, yerr=[lo, hi], fmt="o" + style, capsize=3, label=label(server, variant),
                            linewidth=2.2 if server == "pulsys" else 1.2, color=color(server, variant))
            ax.set_xscale("log", base=2)
            if logy:
                ax.set_yscale("log")
            ax.set_xticks(sizes)
            ax.set_xticklabels([human_size(s) for s in sizes])
            ax.set_xlabel("file size")
            ax.set_ylabel(ylabel)
            ax.set_title("Warm hits, %d connection%s (median of %d rounds, bars: min-max) — %s %s" % (
                conc, "" if conc == 1 else "s", doc["settings"]["rounds"], doc["commit"][:8],
                doc.get("date", "")[:10]), fontsize=9)
            ax.grid(True, which="both", alpha=0.3)
            ax.legend(fontsize=8)
            fig.tight_layout()
            path = os.path.join(out_dir, "%s_%s_c%d.svg" % (stem, metric, conc))
            fig.savefig(path, format="svg", metadata={"Date": None})
            plt.close(fig)
            paths.append(path)
    return paths


# -- main ---------------------------------------------------------------------------------

def update_docs(path, tables):
    """Put the run's tables between the results markers of docs/benchmarks.md (if it has them)."""
    try:
        with open(path) as f:
            text = f.read()
    except OSError:
        return
    lines = text.split("\n")
    if lines.count(DOCS_START) != 1 or lines.count(DOCS_END) != 1:
        print("render_bench: %s has no %s ... %s pair: tables not copied there" % (rel(path), DOCS_START, DOCS_END))
        return
    i, j = lines.index(DOCS_START), lines.index(DOCS_END)
    if j < i:
        return
    new = "\n".join(lines[:i + 1] + tables.rstrip("\n").split("\n") + lines[j:])
    if new != text:
        with open(path, "w") as f:
            f.write(new)
        print("render_bench: rewrote the results tables in %s" % rel(path))


def newest_run(machine_dir):
    runs = []
    for path in glob.glob(os.path.join(machine_dir, "compare_*.json")):
        try:
            with open(path) as f:
                d = json.load(f)
        except (OSError, ValueError):
            continue
        if full_run(d):
            runs.append((d.get("started_at") or d.get("date") or "", path))
    return max(runs)[1] if runs else None


HEADLINE_SIZES = {4096, 262144, 16 << 20}
HEADLINE_SERVERS = {"pulsys-iouring", "pulsys-portable", "nginx-static", "olah"}


def full_run(doc):
    """Only a run that measured every cell and peer of the headline may replace it (and
    the tables in docs/benchmarks.md): not --quick, every headline size at 16
    connections, pulsys, nginx static and olah."""
    st = doc.get("settings") or {}
    return (doc.get("benchmark") == "compare" and not doc.get("quick")
            and HEADLINE_SIZES <= set(st.get("sizes") or ()) and 16 in (st.get("concurrency") or ())
            and HEADLINE_SERVERS <= set(st.get("servers") or ()))


def rel(path):
    path = os.path.abspath(path)
    return os.path.relpath(path, ROOT) if path.startswith(ROOT + os.sep) else path


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("json", nargs="?", help="a compare_*.json (default: the newest full run of this machine)")
    ap.add_argument("--no-charts", action="store_true")
    ap.add_argument("--no-headline", action="store_true", help="do not write results/headline.json")
    ap.add_argument("--headline-path", default=HEADLINE_PATH)
    ap.add_argument("--docs", default=DOCS_PATH, help="with the headline, also rewrite this file's tables "
                    "between %s and %s" % (DOCS_START, DOCS_END))
    a = ap.parse_args(argv)
    path = a.json or newest_run(os.path.join(ROOT, "results", provenance.machine_label()))
    if not path:
        print("render_bench: error: no compare_*.json in results/%s; run scripts/bench_compare.sh"
              % provenance.machine_label(), file=sys.stderr)
        return 1
    with open(path) as f:
        doc = json.load(f)
    if doc.get("benchmark") != "compare" or not doc.get("commit"):
        print("render_bench: error: %s is not a bench_compare result with provenance" % path, file=sys.stderr)
        return 1
    out_dir, stem = os.path.dirname(os.path.abspath(path)), os.path.basename(path)[:-len(".json")]
    source = rel(path)
    headline = compute_headline(doc, source)
    md_path = os.path.join(out_dir, stem + ".md")
    with open(md_path, "w") as f:
        f.write(markdown(doc, source, headline) + "\n")
    print("render_bench: wrote %s" % rel(md_path))
    if not a.no_charts:
        try:
            for p in charts(doc, out_dir, stem):
                print("render_bench: wrote %s" % rel(p))
        except ImportError as e:
            print("render_bench: error: charts need matplotlib (%s); bash scripts/bench_compare.sh installs it "
                  "into ~/.cache/pulsys-bench/venv" % e, file=sys.stderr)
            return 1
    if a.no_headline:
        pass
    elif not full_run(doc):
        print("render_bench: %s is a --quick or partial run: results/headline.json left as it was" % source)
    elif not headline["comparisons"]:
        print("render_bench: no pulsys backend measured: results/headline.json left as it was")
    else:
        with open(a.headline_path, "w") as f:
            json.dump(headline, f, indent=1, sort_keys=True)
            f.write("\n")
        print("render_bench: wrote %s" % rel(a.headline_path))
        update_docs(a.docs, markdown(doc, source, headline))
        for c in headline["comparisons"]:
            print("  %-24s %-12s %s" % (c["id"], {True: "met", False: "NOT met", None: "not measured"}[c["met"]],
                                         c.get("why", "")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
