"""What the shape of a 4 KiB answer costs a client-bound benchmark: the reference server
(uring_min_server.py, ../shared/reference) sending its own short head, and sending the exact
bytes pulsys answers for the same file, side by side under the C keep-alive client. With
--loadgen-rev REV the client of another revision runs too (scripts/bench_peers/loadgen.c at
REV), so a change to the client is measured on both answers in one run.

Why: at 4 KiB on two CPUs the client is the bottleneck (over 90% busy), and a client that
pays per byte of head answers each response later. The server's linked RECV then more
often finds no request waiting and arms a poll (io_uring's apoll: the socket's wake-up
queues task work that the server's next enter runs), which costs the server and, through
the wake-up in the client's softirq, the client too. So a longer head can cost far more
than its bytes. Counted per request: req/s, the server's CPU (all its threads, /proc),
the client's (its rusage) and io_uring poll arms (perf stat -a, tracepoint
io_uring:io_uring_poll_arm); rounds interleave the variants, in reverse every other round.

    python scripts/response_shape.py --concurrency 16 --rounds 3 --loadgen-rev b69cbad~1

Writes results/<machine>/response_shape_<date>.json (or --out-dir). Needs perf, a C
compiler and the reference server beside the repository.
"""

import argparse
import datetime
import os
import shutil
import socket
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import bench_compare as B  # noqa: E402
import profile_floors as PF  # noqa: E402
import provenance  # noqa: E402
from profile_warm import one_file_ctx  # noqa: E402

SIZE = 4096
EVENTS = ["io_uring:io_uring_poll_arm", "io_uring:io_uring_local_work_run"]

# The reference server with every file's answer replaced by the bytes of a file: its module
# runs without its main() (run_name is not __main__), FILES is changed in place, then main().
WRAPPER = """import runpy, sys
answer = sys.argv.pop()
sys.argv = sys.argv[1:]
g = runpy.run_path(sys.argv[0], run_name="uring_ref")
if answer != "-":
    with open(answer, "rb") as f:
        data = f.read()
    for k in g["FILES"]:
        g["FILES"][k] = data
g["main"]()
"""


def pulsys_answer(ctx):
    """-> the bytes pulsys (--iouring, --auth required) answers a warm GET of the file with."""
    peer = B.make_peers(ctx, ["pulsys-iouring"])[0]
    try:
        peer.start()
        peer.warm()
        with socket.create_connection(("127.0.0.1", peer.port), timeout=30) as s:
            s.sendall(("GET %s HTTP/1.1\r\nHost: 127.0.0.1\r\n%s\r\n\r\n" % (peer.path(SIZE), peer.header)).encode())
            data = b""
            while b"\r\n\r\n" not in data:
                chunk = s.recv(65536)
                if not chunk:
                    raise SystemExit("response_shape: error: pulsys closed before its head ended")
                data += chunk
            head, _, body = data.partition(b"\r\n\r\n")
            if not head.startswith(b"HTTP/1.1 200"):
                raise SystemExit("response_shape: error: pulsys answered %r" % head.split(b"\r\n")[0])
            while len(body) < SIZE:
                chunk = s.recv(65536)
                if not chunk:
                    break
                body += chunk
        if body != ctx.files[SIZE]:
            raise SystemExit("response_shape: error: pulsys's body is not the file")
        return head + b"\r\n\r\n" + body
    finally:
        peer.stop()


def build_loadgen_at(rev, workdir):
    """loadgen.c as of git revision `rev`, built -> its path."""
    try:
        src = subprocess.run(["git", "-C", B.ROOT, "show", "%s:scripts/bench_peers/loadgen.c" % rev],
                             capture_output=True, check=True).stdout
    except subprocess.CalledProcessError as e:
        raise SystemExit("response_shape: error: no loadgen.c at %s: %s" % (rev, e.stderr.decode().strip()))
    path = os.path.join(workdir, "loadgen_rev.c")
    with open(path, "wb") as f:
        f.write(src)
    return B.build_c(workdir, "loadgen_rev", who="response_shape", src=path)[0]


def one_run(ctx, ref, wrapper, answer, gen, conc, duration, header):
    port = B.free_port()
    www = os.path.join(ctx.www, B.REPO, "resolve", "main")
    proc = subprocess.Popen(B.pin(0) + [sys.executable, wrapper, ref, str(port), www, "mem", answer],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        if not B.wait_port(port, proc, 30):
            raise SystemExit("response_shape: error: the reference server did not start")

        def run():
            r = B.run_loadgen(gen, port, SIZE, conc, duration, "/files/f%d.bin" % SIZE, header)
            B.wait_idle(proc.pid)
            return r
        g, cpu = PF.thread_cpu(proc.pid, run, ctx.workdir, EVENTS)
    finally:
        proc.terminate()
        proc.wait(10)
    if "error" in g:
        raise SystemExit("response_shape: error: " + g["error"])
    if g["errors"]:
        raise SystemExit("response_shape: error: the client saw errors: %s" % g["errors_by"])
    n = g["requests"]
    ev = {}
    for per_cpu in g["kernel_events"].values():
        for k, v in per_cpu.items():
            ev[k] = ev.get(k, 0) + v
    return {"req_per_s": round(g["req_per_s"], 1), "requests": n,
            "server_cpu_us_per_req": round(sum(u + s for u, s in cpu.values()) / n * 1e6, 3),
            "client_cpu_us_per_req": round(g["cpu_s"] / n * 1e6, 3),
            "poll_arms_per_req": round(ev.get(EVENTS[0], 0) / n, 4),
            "local_work_runs_per_req": round(ev.get(EVENTS[1], 0) / n, 4)}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--duration", type=float, default=3.0, help="seconds of load per run")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--loadgen-rev", default=None, metavar="REV",
                    help="also run the client as of git revision REV")
    ap.add_argument("--out-dir", default=None)
    a = ap.parse_args()
    if not 1 <= a.concurrency <= 1024:
        ap.error("--concurrency: 1 to 1024 connections")
    if not 0 < a.duration <= 60:
        ap.error("--duration: seconds, more than 0 and at most 60")
    if not 1 <= a.rounds <= 20:
        ap.error("--rounds: 1 to 20")
    if not shutil.which("perf"):
        raise SystemExit("response_shape: error: perf not found (apt-get install linux-perf)")
    ref = os.path.join(B.REFERENCE_DIR, "uring_min_server.py")
    if not os.path.isfile(ref):
        raise SystemExit("response_shape: error: %s not found (PULSYS_REFERENCE_DIR)" % ref)
    prov = provenance.provenance()
    ctx = one_file_ctx(SIZE, a.duration, "pulsys-shape-")
    try:
        answer = os.path.join(ctx.workdir, "pulsys_answer.bin")
        with open(answer, "wb") as f:
            f.write(pulsys_answer(ctx))
        wrapper = os.path.join(ctx.workdir, "ref_with_answer.py")
        with open(wrapper, "w") as f:
            f.write(WRAPPER)
        gens = {"this checkout": ctx.loadgen}
        if a.loadgen_rev:
            gens["loadgen at %s" % a.loadgen_rev] = build_loadgen_at(a.loadgen_rev, ctx.workdir)
        answers = {"reference head": "-", "pulsys's answer": answer}
        variants = [(g, r) for g in gens for r in answers]
        header = "Authorization: Bearer " + ctx.peer_key     # what bench_compare sends every server
        runs = {v: [] for v in variants}
        for rnd in range(a.rounds):
            for g, r in (variants if rnd % 2 == 0 else variants[::-1]):
                row = one_run(ctx, ref, wrapper, answers[r], gens[g], a.concurrency, a.duration, header)
                runs[(g, r)].append(row)
                B.log("round %d  %-24s %-16s %8.0f req/s  server %.2f us  client %.2f us  poll arms %.3f a request"
                      % (rnd + 1, g, r, row["req_per_s"], row["server_cpu_us_per_req"],
                         row["client_cpu_us_per_req"], row["poll_arms_per_req"]))
        with open(answer, "rb") as f:
            head_len = len(f.read().partition(b"\r\n\r\n")[0]) + 4
    finally:
        ctx.hub.stop()
        shutil.rmtree(ctx.workdir, ignore_errors=True)
    rows = []
    for (g, r), rs in runs.items():
        med = {k: statistics.median(x[k] for x in rs) for k in rs[0] if k != "requests"}
        rows.append({"client": g, "answer": r, "rounds": rs, "median": med})
    doc = dict(prov, benchmark="response_shape", size=SIZE, concurrency=a.concurrency, duration_s=a.duration,
               load="scripts/bench_peers/loadgen.c on CPU 1, the reference server on CPU 0",
               pulsys_head_bytes=head_len, loadgen_rev=a.loadgen_rev, rows=rows)
    name = "response_shape_%s.json" % datetime.date.today().isoformat()
    print("wrote", provenance.write_result(name, doc, a.out_dir))


if __name__ == "__main__":
    main()
