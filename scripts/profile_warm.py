"""Where a warm hit's CPU goes: pulsys and nginx profiled under the same load, one run.

Each server runs under `perf record -e cpu-clock` (a software clock: it works on VMs
without hardware counters), pinned to CPU 0; the C load generator (pinned to CPU 1)
drives one file size at one concurrency for --duration seconds. perf's samples are
split by where the CPU was (kernel, libpython, the liburing binding, libc, nginx) and
turned into microseconds of server CPU per request. The kernel share is what no
userspace server can remove; the rest is the server's own cost per request.

    python scripts/profile_warm.py --size 4096 --concurrency 16 --duration 8
    python scripts/profile_warm.py --servers pulsys-iouring,pulsys-portable,nginx-static

Writes results/<machine>/profile_warm_<size>_c<N>_<date>.json with provenance (or
--out-dir). Needs perf (Debian linux-perf), nginx and a C compiler; installs nothing.
"""

import argparse
import datetime
import os
import re
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import bench_compare as B  # noqa: E402
import provenance  # noqa: E402

FREQ = 1999   # samples per second of CPU time


def dso_group(dso):
    if dso.startswith("[kernel") or dso == "[vdso]":
        return "kernel"
    if "libpython" in dso or dso.startswith("python"):
        return "python"
    if "liburing" in dso:
        return "liburing binding"
    if dso.startswith("libc") or dso.startswith("ld-linux") or dso.startswith("libm"):
        return "libc"
    if "nginx" in dso:
        return "nginx"
    return "other"


def report(data):
    """{dso group: share}, [(share, dso, symbol)] top 12 from a perf.data file."""
    def run(sort):
        p = subprocess.run(["perf", "report", "-i", data, "--no-children", "--sort", sort, "--stdio"],
                           capture_output=True, text=True, timeout=300)
        return [l for l in p.stdout.splitlines() if l.strip() and not l.startswith("#")]
    groups = {}
    for line in run("dso"):
        m = re.match(r"\s*([\d.]+)%\s+(\S+)", line)
        if m:
            g = dso_group(m.group(2))
            groups[g] = groups.get(g, 0.0) + float(m.group(1)) / 100
    top = []
    for line in run("dso,sym")[:12]:
        m = re.match(r"\s*([\d.]+)%\s+(\S+)\s+\[.\]\s+(.*)", line)
        if m:
            top.append((float(m.group(1)) / 100, m.group(2), m.group(3).strip()))
    p = subprocess.run(["perf", "script", "-i", data, "-F", "time"], capture_output=True, text=True, timeout=300)
    samples = sum(1 for l in p.stdout.splitlines() if l.strip())
    return groups, top, samples


def one_file_ctx(size, duration, prefix):
    """bench_compare's context for one random file of `size`, the fake Hub holding it and
    the C load generator built; this process pinned to CPU 1 (servers go to CPU 0)."""
    if B.can_pin():
        os.sched_setaffinity(0, {1})
    ctx = B.Ctx()
    ctx.duration, ctx.started, ctx.olah_bin = duration, [], None
    ctx.workdir = tempfile.mkdtemp(prefix=prefix)
    ctx.peer_key = B.peer_key()
    ctx.loadgen, _ = B.build_loadgen(ctx.workdir)
    ctx.www = os.path.join(ctx.workdir, "www")
    d = os.path.join(ctx.www, B.REPO, "resolve", "main")
    os.makedirs(d)
    ctx.files = {size: os.urandom(size)}
    with open(os.path.join(d, "f%d.bin" % size), "wb") as f:
        f.write(ctx.files[size])
    ctx.hub = B.FakeHub(record_requests=False, xet=False).start()
    ctx.hub.add_repo(B.REPO, files={"f%d.bin" % size: ctx.files[size]}, lfs={"f%d.bin" % size})
    return ctx


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--size", type=int, default=4096)
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--duration", type=float, default=8.0)
    ap.add_argument("--servers", default="pulsys-iouring,nginx-static")
    ap.add_argument("--out-dir", default=None)
    a = ap.parse_args()
    if not shutil.which("perf"):
        raise SystemExit("profile_warm: error: perf not found (apt-get install linux-perf)")
    prov = provenance.provenance()
    ctx = one_file_ctx(a.size, a.duration, "pulsys-profile-")
    hub = ctx.hub
    rows = []
    try:
        for peer in B.make_peers(ctx, a.servers.split(",")):
            data = os.path.join(ctx.workdir, "%s-%s.perf" % (peer.server, peer.variant))
            spawn = peer.spawn

            def under_perf(cmd, _spawn=spawn, _data=data, **kw):
                _spawn(["perf", "record", "-q", "-e", "cpu-clock", "-F", str(FREQ), "-o", _data, "--"] + cmd,
                       **kw)
            peer.spawn = under_perf
            B.log("profiling %s" % peer.key)
            try:
                peer.start()
                peer.warm()
                g = B.run_loadgen(ctx.loadgen, peer.port, a.size, a.concurrency, a.duration,
                                  header=peer.header)
            finally:
                peer.stop()
            if "error" in g:
                rows.append({"server": peer.key, "error": g["error"]})
                continue
            groups, top, samples = report(data)
            cpu_s = samples / FREQ
            per_req = cpu_s / g["requests"] * 1e6 if g["requests"] else None
            rows.append({"server": peer.key, "req_per_s": round(g["req_per_s"], 1), "requests": g["requests"],
                         "cpu_s_sampled": round(cpu_s, 3), "cpu_us_per_request": round(per_req, 3),
                         "share": {k: round(v, 4) for k, v in sorted(groups.items())},
                         "us_per_request": {k: round(v * per_req, 3) for k, v in sorted(groups.items())},
                         "top_symbols": [{"share": round(s, 4), "dso": dso, "symbol": sym} for s, dso, sym in top]})
            r = rows[-1]
            B.log("%-28s %9.0f req/s  %.2f us CPU/request  %s" % (
                peer.key, r["req_per_s"], per_req,
                "  ".join("%s %.2f" % kv for kv in r["us_per_request"].items())))
    finally:
        for p in ctx.started:
            p.stop()
        hub.stop()
        shutil.rmtree(ctx.workdir, ignore_errors=True)
    doc = dict(prov, benchmark="profile_warm", size=a.size, concurrency=a.concurrency, duration_s=a.duration,
               sampler="perf record -e cpu-clock -F %d (server process tree)" % FREQ,
               load="scripts/bench_peers/loadgen.c on CPU 1, servers on CPU 0", rows=rows)
    name = "profile_warm_%d_c%d_%s.json" % (a.size, a.concurrency,
                                            datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d"))
    print("wrote", provenance.write_result(name, doc, a.out_dir))


if __name__ == "__main__":
    main()
