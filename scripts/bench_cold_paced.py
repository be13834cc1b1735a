#!/usr/bin/env python3
"""Cold pulls with a CDN that paces each connection (issue 17): a single-stream client
(curl, as hf_hub_download without hf_transfer or wget would) pulling a cold file, direct
from the fake CDN and through pulsys, with read-ahead (--fill-fetchers-per-file N) and
with one upstream connection per fill (N = 1), all in one run. Records wall rate, time
to the first byte, upstream body bytes and pulsys's CPU per GB, with provenance.

    python scripts/bench_cold_paced.py --size-mib 1024 --pace-mbps 50 --rounds 2

Everything is on loopback: the fake Hub and its CDN in this process (the CDN sends each
response at --pace-mbps), pulsys as `python -m pulsys --listeners 1` with its cache on
--cache-root (default /dev/shm, so the disk is not what is measured), curl writing to
/dev/null. Each pulsys run starts with an empty cache.
"""

import argparse
import json
import os
import random
import shutil
import socket
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
sys.path.insert(0, ROOT)
from provenance import provenance, write_result  # noqa: E402

from pulsys.testing.fake_hub import FakeHub, sha256_hex  # noqa: E402

MB = 1000 * 1000
REPO, NAME = "bench/cold", "model.safetensors"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def curl(url):
    """-> (seconds to the first byte, seconds in all, bytes) of one single-stream GET."""
    p = subprocess.run(["curl", "-sS", "-L", "-o", "/dev/null", "--noproxy", "*", "-w",
                        "%{time_starttransfer} %{time_total} %{size_download} %{http_code}", url],
                       capture_output=True, text=True, timeout=900)
    if p.returncode != 0:
        raise SystemExit("bench: error: curl failed: " + p.stderr.strip())
    ttfb, total, size, code = p.stdout.split()
    if code != "200":
        raise SystemExit("bench: error: %s answered %s" % (url, code))
    return float(ttfb), float(total), int(size)


def cpu_seconds(pid):
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def start_pulsys(hub, cache, per_file):
    port = free_port()
    argv = [sys.executable, "-m", "pulsys", "--listen", "127.0.0.1:%d" % port, "--admin-listen", "off",
            "--upstream", hub.url, "--allow-upstream-host", hub.cdn_netloc, "--cache-dir", cache,
            "--auth", "off", "--listeners", "1", "--access-log", "off", "--log-level", "warning",
            "--network-mbps", "0", "--fill-fetchers-per-file", str(per_file)]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PULSYS_", "HF_"))}
    env["PYTHONPATH"] = ROOT
    proc = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return proc, "http://127.0.0.1:%d" % port
        except OSError:
            if proc.poll() is not None:
                raise SystemExit("bench: error: pulsys exited: " + proc.stderr.read().decode()[-2000:])
            time.sleep(0.1)
    proc.kill()
    raise SystemExit("bench: error: pulsys did not start")


def stop(proc):
    proc.terminate()
    try:
        proc.wait(15)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--size-mib", type=int, default=1024)
    ap.add_argument("--pace-mbps", type=float, default=50.0, help="per-connection CDN pace, MB/s")
    ap.add_argument("--per-file", type=int, default=8, help="--fill-fetchers-per-file for the read-ahead run")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--cache-root", default="/dev/shm" if os.path.isdir("/dev/shm") else None)
    ap.add_argument("--name", default=None, help="results file name (default cold_paced_<date>.json)")
    a = ap.parse_args(argv)
    if not 1 <= a.size_mib <= 8192 or a.pace_mbps <= 0 or not 1 <= a.rounds <= 10:
        ap.error("--size-mib 1..8192, --pace-mbps > 0, --rounds 1..10")
    rng = random.Random(17)
    data = b"".join(rng.randbytes(1 << 20) for _ in range(a.size_mib))
    sha = sha256_hex(data)
    hub = FakeHub().start()
    rows = []
    try:
        hub.add_repo(REPO, files={NAME: data})
        hub.faults.throttle(a.pace_mbps * MB)
        path = "/%s/resolve/main/%s" % (REPO, NAME)
        for rnd in range(a.rounds):
            ttfb, total, n = curl(hub.url + path)
            assert n == len(data)
            rows.append({"round": rnd, "what": "direct", "ttfb_s": ttfb, "seconds": total,
                         "mb_per_s": n / total / MB})
            for per_file in (a.per_file, 1):
                cache = tempfile.mkdtemp(prefix="pulsys-cold-", dir=a.cache_root)
                proc, url = start_pulsys(hub, cache, per_file)
                try:
                    hub.reset_counters()
                    cpu0 = cpu_seconds(proc.pid)
                    ttfb, total, n = curl(url + path)
                    time.sleep(0.5)                 # the commit after the last byte
                    cpu = cpu_seconds(proc.pid) - cpu0
                    assert n == len(data)
                    rows.append({"round": rnd, "what": "pulsys cold, %d per file" % per_file, "ttfb_s": ttfb,
                                 "seconds": total, "mb_per_s": n / total / MB,
                                 "upstream_body_bytes": hub.body_bytes(sha),
                                 "cdn_requests": hub.count("GET", server="cdn"),
                                 "server_cpu_s_per_gb": cpu / (n / 1e9)})
                finally:
                    stop(proc)
                    shutil.rmtree(cache, ignore_errors=True)
            for r in rows[-3:]:
                print(json.dumps(r), flush=True)
    finally:
        hub.stop()
    doc = provenance(benchmark="cold_paced", size_mib=a.size_mib, pace_mbps=a.pace_mbps, per_file=a.per_file,
                     cache_root=a.cache_root, client="curl, one stream")
    doc["rows"] = rows
    print("wrote", write_result(a.name or "cold_paced_%s.json" % time.strftime("%Y-%m-%d"), doc))


if __name__ == "__main__":
    main()
