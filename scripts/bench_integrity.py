"""What holding back the last byte of every cold response costs (ADR 0012), measured side
by side in one run: this checkout against a baseline commit in which only the file's last
byte waited for verification (ranges completed as soon as their bytes were on disk).

Each round uses a new file, so every request is cold: the fake Hub's CDN answers are
throttled to --hub-mibps per response, like one upstream connection, and pulsys
(`--listeners 1`, selector backend) fills in ranged pieces.
  whole     one GET of the whole file: first body byte, last byte
  range     one closed 10 MiB range in the middle: first byte, last byte
  chunks    hf_transfer's pattern: `bytes=0-0`, then every 10 MiB chunk at once, the last
            one ending past EOF: time until all chunks completed
Writes results/<machine>/integrity_cost.json.

    python scripts/bench_integrity.py --baseline-commit ccf47d9 [--rounds 3] [--file-mib 64]

Bounded: every request has a 120 s timeout; the run starts and stops its own processes
and removes the baseline's worktree.
"""

import argparse
import concurrent.futures
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "scripts"))

from provenance import provenance, write_result  # noqa: E402
from pulsys.testing.fake_hub import FakeHub  # noqa: E402
from tests.behaviour.fillcheck import timed_get  # noqa: E402
from tests.conftest import ProcServer  # noqa: E402

MIB = 1024 * 1024
CHUNK = 10 * MIB


def get(address, path, rng=None):
    """-> (status, body, seconds to the first body byte, seconds to the last)."""
    st, body, _, first, last = timed_get(address, path, [("Range", rng)] if rng else (), timeout=120)
    return st, body, first, last


def one_round(addr, hub, n, size):
    """Three cold files: whole, range, chunks. -> {measure: seconds}."""
    out = {}
    data = {}
    for kind in ("whole", "range", "chunks"):
        repo = "bench/r%d-%s" % (n, kind)
        data[kind] = os.urandom(size)
        hub.add_repo(repo, files={"w.safetensors": data[kind]})
    st, body, first, last = get(addr, "/bench/r%d-whole/resolve/main/w.safetensors" % n)
    assert st == 200 and body == data["whole"], "whole: wrong answer"
    out["whole_first_byte_s"], out["whole_last_byte_s"] = first, last
    a = size // 2
    st, body, first, last = get(addr, "/bench/r%d-range/resolve/main/w.safetensors" % n,
                                "bytes=%d-%d" % (a, a + CHUNK - 1))
    assert st == 206 and body == data["range"][a:a + CHUNK], "range: wrong answer"
    out["range_first_byte_s"], out["range_last_byte_s"] = first, last
    path = "/bench/r%d-chunks/resolve/main/w.safetensors" % n
    t0 = time.monotonic()
    st, body, _, _ = get(addr, path, "bytes=0-0")
    assert st == 206 and body == data["chunks"][:1]
    spans = [(s, min(s + CHUNK - 1, size)) for s in range(0, size, CHUNK)]
    with concurrent.futures.ThreadPoolExecutor(len(spans)) as ex:
        parts = list(ex.map(lambda sp: get(addr, path, "bytes=%d-%d" % sp), spans))
    assert b"".join(p[1] for p in parts) == data["chunks"], "chunks: wrong answer"
    out["chunks_all_s"] = time.monotonic() - t0
    out["chunks_slowest_first_byte_s"] = max(p[2] for p in parts)
    return out


def measure(src, label, args, work):
    hub = FakeHub(record_requests=False).start()
    hub.faults.throttle(args.hub_mibps * MIB)
    settings = {"upstream": hub.url, "allow_upstream_host": [hub.cdn_netloc], "listeners": 1,
                "cache_dir": os.path.join(work, label + "-cache"), "auth": "off", "iouring": "off",
                "access_log": "off"}
    srv = ProcServer(settings, os.path.join(work, label + ".log"), root=src)
    rounds = []
    try:
        for n in range(args.rounds):
            rounds.append(one_round(srv.address, hub, n, args.file_mib * MIB + 12345))
    finally:
        srv.stop()
        srv.shutdown()
        hub.stop()
    med = {k: round(statistics.median(r[k] for r in rounds), 3) for k in rounds[0]}
    return {"median": med, "rounds": rounds}


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--baseline-commit", required=True,
                   help="commit whose cold ranges did not wait for verification")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--file-mib", type=int, default=64)
    p.add_argument("--hub-mibps", type=float, default=64.0, help="CDN throttle per response")
    args = p.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))   # stop the servers, remove the worktree
    work = tempfile.mkdtemp(prefix="pulsys-bench-integrity-")
    base = os.path.join(work, "baseline-src")
    try:
        subprocess.run(["git", "worktree", "add", "--detach", base, args.baseline_commit],
                       cwd=ROOT, check=True, capture_output=True)
        # the io_uring probe of older commits runs in the server's own process, and some
        # liburing wheels die of SIGILL on CPUs without AVX-512: the baseline gets this
        # checkout's crash-safe probe, which does not touch what is measured
        shutil.copy(os.path.join(ROOT, "pulsys", "platform", "__init__.py"),
                    os.path.join(base, "pulsys", "platform", "__init__.py"))
        variants = {}
        for label, src in (("baseline", base), ("held", ROOT), ("baseline_again", base)):
            variants[label] = measure(src, label, args, work)
            print(label, json.dumps(variants[label]["median"]), flush=True)
    finally:
        subprocess.run(["git", "worktree", "remove", "--force", base], cwd=ROOT, capture_output=True)
        shutil.rmtree(work, ignore_errors=True)
    commit = subprocess.run(["git", "rev-parse", args.baseline_commit], cwd=ROOT, check=True,
                            capture_output=True, text=True).stdout.strip()
    doc = provenance(benchmark="integrity_cost", baseline_commit=commit, backend="selector",
                     listeners=1, rounds=args.rounds, file_bytes=args.file_mib * MIB + 12345,
                     hub_bytes_per_s_per_response=args.hub_mibps * MIB, variants=variants)
    print("wrote", write_result("integrity_cost.json", doc))


if __name__ == "__main__":
    main()
