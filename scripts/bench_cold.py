#!/usr/bin/env python3
"""Cold pulls (issue 17): pulsys against nginx proxy_cache in front of the same origin,
and against curl straight from that origin, in one run, rounds interleaved.

    python scripts/bench_cold.py                          # 512 MiB, one file, tmpfs, 3 rounds
    python scripts/bench_cold.py --files 8 --size-mib 128 # eight cold files at once
    python scripts/bench_cold.py --cache-root /var/tmp    # caches on disk
    python scripts/bench_cold.py --pace-mbps 50           # a CDN pacing each connection

The origin is the fake Hub (pulsys/testing) in this process: `/resolve` answers 302 to
a CDN host. With --origin nginx (the default) that host is an nginx sending the blobs
from files with sendfile (scripts/bench_peers/nginx-origin.conf), paced with
limit_rate when --pace-mbps is given: the fake Hub's own Python CDN spends ~12 s of CPU
sending 1 GiB over 8 connections at once on this 2-core machine (1.8 s over one), which
starved the servers measured. --origin fake uses that CDN. Each round, for each server
in turn, with an empty cache:

  direct             curl -L from the Hub's /resolve: the origin's own rate
  nginx-proxy-cache  nginx (1 worker) caching 200s keyed by URI, following the Hub's
                     redirect internally (scripts/bench_peers/nginx-proxy-cache.conf);
                     it verifies nothing
  pulsys             python -m pulsys --listeners 1, access log on; sha256-verified
  pulsys-base        pulsys from another checkout (--base-root, e.g. a `git worktree` of
                     an earlier commit), to compare a change in one run (not in the
                     default --servers)
  pulsys-1-fetcher   the same with --fill-fetchers-per-file 1: no read-ahead (not in the
                     default --servers)

--client hf_transfer pulls with hf_transfer (the Rust client huggingface_hub 0.x hands
files over 50 MiB to: 100 ranged connections of 10 MiB, as huggingface_hub 0.36 calls
it), from a venv given with --hf-transfer-python (default: the test suite's
huggingface_hub 0.36 venv under ~/.cache/pulsys-test-venvs when it is there); direct
means the CDN URL the Hub redirects to, as huggingface_hub resolves it. Only direct and
pulsys then (nginx proxy_cache without the slice module fetches a whole file per range).
--files N runs N clients at once, each on its own file; with --one-at-a-time they run one
after another instead, and the row's TTFB is the median over the files (what the cold
TTFB target is measured with: many small cold files, each a new /resolve). Per row: wall seconds and rate
(all bytes / the wall of the slowest client), the first client's time to first byte,
the server's CPU seconds per GB (its whole process tree, /proc/<pid>/stat), and the
upstream body bytes the fake CDN sent per file byte. Nothing is pinned: cold fills may
use every core, and the origin and curl run on the same two. Results with provenance:
results/<machine>/<name>.json. Every load is bounded (curl --max-time); only processes
this script started are stopped, by PID.
"""

import argparse
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
sys.path.insert(0, ROOT)
import bench_compare as BC  # noqa: E402
from provenance import provenance, write_result  # noqa: E402

from pulsys.testing.fake_hub import FakeHub, sha256_hex  # noqa: E402

MB = 1000 * 1000
REPO = "bench/cold"
SERVERS = ("direct", "nginx-proxy-cache", "pulsys", "pulsys-1-fetcher", "pulsys-base")


HF_TRANSFER = """
import sys, time, hf_transfer
url, out, conc, chunk = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
t0 = time.monotonic()
hf_transfer.download(url=url, filename=out, max_files=conc, chunk_size=chunk, parallel_failures=3, max_retries=5)
print(time.monotonic() - t0)
"""


def hf_transfers(python, urls, sizes, work, max_time):
    """One hf_transfer download per URL at once. -> (wall, None, bytes)."""
    outs = [os.path.join(work, "hft-%d" % i) for i in range(len(urls))]
    t0 = time.monotonic()
    procs = [subprocess.Popen([python, "-c", HF_TRANSFER, u, o, "100", str(10 << 20)], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for u, o in zip(urls, outs)]
    for p in procs:
        try:
            _, err = p.communicate(timeout=max_time)
        except subprocess.TimeoutExpired:
            p.kill()
            raise SystemExit("bench_cold: error: hf_transfer took longer than %d s" % max_time)
        if p.returncode != 0:
            raise SystemExit("bench_cold: error: hf_transfer failed: " + err.strip()[-500:])
    wall = time.monotonic() - t0
    total = 0
    for o, size in zip(outs, sizes):
        total += os.path.getsize(o)
        os.unlink(o)
    return wall, None, total


def cdn_url(hub_url, path):
    """Where the Hub's /resolve redirects (what huggingface_hub hands hf_transfer)."""
    import requests
    r = requests.head(hub_url + path, allow_redirects=False, timeout=10)
    return r.headers["Location"]


def default_hf_transfer_python():
    import glob
    found = sorted(glob.glob(os.path.expanduser("~/.cache/pulsys-test-venvs/legacy-*/bin/python")))
    return found[-1] if found else None


def curls(urls, max_time):
    """Run one curl per URL at once. -> (wall seconds of all, first TTFB, bytes in all)."""
    fmt = "%{time_starttransfer} %{size_download} %{http_code}"
    t0 = time.monotonic()
    procs = [subprocess.Popen(["curl", "-sS", "-L", "-o", "/dev/null", "--noproxy", "*", "--max-time",
                               str(max_time), "-w", fmt, u], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True) for u in urls]
    outs = [p.communicate() for p in procs]
    wall = time.monotonic() - t0
    ttfbs, total = [], 0
    for p, (out, err) in zip(procs, outs):
        if p.returncode != 0:
            raise SystemExit("bench_cold: error: curl failed: " + err.strip())
        ttfb, size, code = out.split()
        if code != "200":
            raise SystemExit("bench_cold: error: HTTP %s" % code)
        ttfbs.append(float(ttfb))
        total += int(size)
    return wall, min(ttfbs), total


class Server:
    """A cold server on a fresh cache dir: start(), url, cpu(), stop()."""
    extra = []          # --pulsys-args
    base_root = None    # --base-root: where pulsys-base runs from

    def __init__(self, name, hub, root):
        self.name, self.hub = name, hub
        self.dir = tempfile.mkdtemp(prefix="bench-cold-%s-" % name, dir=root)
        self.port = BC.free_port()
        self.proc = None

    @property
    def url(self):
        return self.hub.url if self.name == "direct" else "http://127.0.0.1:%d" % self.port

    def start(self):
        if self.name.startswith("pulsys"):
            cmd = [sys.executable, "-m", "pulsys", "--listen", "127.0.0.1:%d" % self.port,
                   "--admin-listen", "off", "--upstream", self.hub.url, "--allow-upstream-host",
                   self.hub.cdn_netloc, "--cache-dir", os.path.join(self.dir, "cache"), "--auth", "off",
                   "--listeners", "1", "--log-format", "json", "--network-mbps", "0"]
            if self.name == "pulsys-1-fetcher":
                cmd += ["--fill-fetchers-per-file", "1"]
            cmd += self.extra
            root = self.base_root if self.name == "pulsys-base" else ROOT
            env = {k: v for k, v in os.environ.items() if not k.startswith(("PULSYS_", "HF_"))}
            env["PYTHONPATH"] = root
            self.proc = subprocess.Popen(cmd, cwd=root, env=env, stdout=subprocess.DEVNULL,
                                         stderr=subprocess.DEVNULL, start_new_session=True)
        elif self.name == "nginx-proxy-cache":
            nginx = BC.which("nginx")
            if not nginx:
                raise SystemExit("bench_cold: error: nginx is not installed (Debian package nginx)")
            conf = os.path.join(self.dir, "nginx.conf")
            with open(conf, "w") as f:
                f.write(BC.render_template("nginx-proxy-cache.conf", {
                    "USER": "user root;" if os.geteuid() == 0 else "", "DIR": self.dir, "PORT": self.port,
                    "FOLLOW_PORT": BC.free_port(), "HUB_URL": self.hub.url}))
            self.proc = subprocess.Popen([nginx, "-c", conf, "-p", self.dir + "/", "-e",
                                          os.path.join(self.dir, "error.log")], stdout=subprocess.DEVNULL,
                                         stderr=subprocess.DEVNULL, start_new_session=True)
        else:
            return self
        if not BC.wait_port(self.port, self.proc):
            raise SystemExit("bench_cold: error: %s did not start" % self.name)
        return self

    def cpu(self):
        return BC.tree_cpu_ticks(self.proc.pid) / os.sysconf("SC_CLK_TCK") if self.proc else 0.0

    def stop(self):
        if self.proc is not None and self.proc.poll() is None:
            tree = BC.process_tree(self.proc.pid)
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
            for pid, start in tree.items():      # workers that outlived their master: ours only
                st = BC._stat(pid)
                if pid != self.proc.pid and st is not None and st[3] == start:
                    os.kill(pid, signal.SIGKILL)
        shutil.rmtree(self.dir, ignore_errors=True)


class NginxOrigin:
    """nginx serving the blobs at the fake CDN's paths (see the module docstring)."""

    def __init__(self, files, root, pace_mbps):
        nginx = BC.which("nginx")
        if not nginx:
            raise SystemExit("bench_cold: error: nginx is not installed (Debian package nginx)")
        self.dir = tempfile.mkdtemp(prefix="bench-cold-origin-", dir=root)
        os.makedirs(os.path.join(self.dir, "blobs"))
        for data in files.values():
            with open(os.path.join(self.dir, "blobs", sha256_hex(data)), "wb") as f:
                f.write(data)
        self.netloc = "127.0.0.3:%d" % BC.free_port()
        conf = os.path.join(self.dir, "nginx.conf")
        with open(conf, "w") as f:
            f.write(BC.render_template("nginx-origin.conf", {
                "USER": "user root;" if os.geteuid() == 0 else "", "DIR": self.dir, "ADDR": self.netloc,
                "RATE": "%dk" % (pace_mbps * MB / 1024) if pace_mbps else "0"}))
        self.proc = subprocess.Popen([nginx, "-c", conf, "-p", self.dir + "/", "-e",
                                      os.path.join(self.dir, "error.log")], stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL, start_new_session=True)
        host, port = self.netloc.split(":")
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                socket.create_connection((host, int(port)), timeout=1).close()
                return
            except OSError:
                time.sleep(0.05)
        raise SystemExit("bench_cold: error: the nginx origin did not start")

    def sent(self):
        """Body bytes sent so far (the log is written as each response ends)."""
        try:
            with open(os.path.join(self.dir, "sent.log")) as f:
                return sum(int(line) for line in f if line.strip().isdigit())
        except OSError:
            return 0

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            self.proc.wait(15)
        shutil.rmtree(self.dir, ignore_errors=True)


def hub_with_origin(origin):
    """A FakeHub whose /resolve redirects to `origin` (NginxOrigin) instead of its CDN."""
    class Hub(FakeHub):
        @property
        def cdn_netloc(self):
            return origin.netloc
    return Hub(record_requests=False)


def machine_ticks():
    """(busy, all) CPU ticks of the whole machine so far (/proc/stat, every CPU)."""
    with open("/proc/stat") as f:
        t = [int(x) for x in f.readline().split()[1:]]
    idle = t[3] + (t[4] if len(t) > 4 else 0)       # idle + iowait
    return sum(t) - idle, sum(t)


def one_at_a_time(urls, max_time):
    """curls() for each URL in turn. -> (wall of all, median TTFB, bytes)."""
    walls, ttfbs, total = 0.0, [], 0
    for u in urls:
        wall, ttfb, n = curls([u], max_time)
        walls, total = walls + wall, total + n
        ttfbs.append(ttfb)
    return walls, sorted(ttfbs)[len(ttfbs) // 2], total


def one(name, hub, origin, root, paths, sizes, max_time, hf_python=None, sequential=False):
    srv = Server(name, hub, root).start()
    try:
        hub.reset_counters()
        sent0 = origin.sent() if origin else 0
        cpu0 = srv.cpu()
        busy0 = machine_ticks()
        if hf_python:
            urls = [cdn_url(hub.url, p) if name == "direct" else srv.url + p for p in paths]
            wall, ttfb, n = hf_transfers(hf_python, urls, sizes, srv.dir, max_time)
        else:
            wall, ttfb, n = (one_at_a_time if sequential else curls)([srv.url + p for p in paths], max_time)
        busy1 = machine_ticks()
        if n != sum(sizes):
            raise SystemExit("bench_cold: error: %s sent %d bytes of %d" % (name, n, sum(sizes)))
        if srv.proc is not None:
            BC.wait_idle(srv.proc.pid, timeout=10)   # the last writes and the commit count too
        cpu = srv.cpu() - cpu0
        upstream = origin.sent() - sent0 if origin else hub.total_body_bytes()
    finally:
        srv.stop()
    row = {"server": name, "seconds": round(wall, 3), "mb_per_s": round(n / wall / MB, 1),
           "ttfb_ms": round(ttfb * 1000, 2) if ttfb is not None else None,
           "server_cpu_s_per_gb": round(cpu / (n / 1e9), 3) if name != "direct" else None,
           "upstream_bytes_per_byte": round(upstream / n, 4),
           # every process on the machine (server, origin, clients): 1.0 = all CPUs busy
           "machine_cpu_busy": round((busy1[0] - busy0[0]) / max(1, busy1[1] - busy0[1]), 3)}
    return row


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--size-mib", type=int, default=512, help="size of each file")
    ap.add_argument("--files", type=int, default=1, help="cold files pulled at once, one curl each")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--pace-mbps", type=float, default=0.0, help="per-connection CDN pace (0: none)")
    ap.add_argument("--servers", default=",".join(SERVERS[:3]), help="from %s" % ",".join(SERVERS))
    ap.add_argument("--one-at-a-time", action="store_true",
                    help="pull the --files one after another; TTFB is their median")
    ap.add_argument("--client", choices=("curl", "hf_transfer"), default="curl")
    ap.add_argument("--hf-transfer-python", default=None, help="python of a venv with hf_transfer")
    ap.add_argument("--pulsys-args", default="", help="extra pulsys flags, e.g. '--fill-fetchers-per-file 32'")
    ap.add_argument("--base-root", help="checkout that the pulsys-base server runs from")
    ap.add_argument("--origin", choices=("nginx", "fake"), default="nginx",
                    help="what sends the bytes: nginx with sendfile (default) or the fake Hub's CDN")
    ap.add_argument("--cache-root", default="/dev/shm" if os.path.isdir("/dev/shm") else None,
                    help="where the servers' caches go (default /dev/shm: tmpfs)")
    ap.add_argument("--name", default=None, help="results file name (default cold_<date>.json)")
    ap.add_argument("--out-dir", help="write the JSON here instead of results/<machine>/")
    a = ap.parse_args(argv)
    servers = [s for s in a.servers.split(",") if s]
    if not 1 <= a.size_mib <= 8192 or not 1 <= a.files <= (64 if a.one_at_a_time else 16) or not 1 <= a.rounds <= 10 or a.pace_mbps < 0 \
            or not set(servers) <= set(SERVERS) or not servers:
        ap.error("--size-mib 1..8192, --files 1..16 (64 one at a time), --rounds 1..10, --pace-mbps >= 0, --servers from %s"
                 % ",".join(SERVERS))
    if not shutil.which("curl"):
        raise SystemExit("bench_cold: error: curl is not installed")
    hf_python = None
    if a.client == "hf_transfer":
        hf_python = a.hf_transfer_python or default_hf_transfer_python()
        if not hf_python:
            raise SystemExit("bench_cold: error: --client hf_transfer needs --hf-transfer-python (a venv with "
                             "hf_transfer; the test suite builds one under ~/.cache/pulsys-test-venvs)")
        if "nginx-proxy-cache" in servers:
            servers.remove("nginx-proxy-cache")
    if "pulsys-base" in servers and not (a.base_root and os.path.isdir(os.path.join(a.base_root, "pulsys"))):
        ap.error("the pulsys-base server needs --base-root, a checkout of pulsys")
    Server.extra = a.pulsys_args.split()
    Server.base_root = a.base_root and os.path.abspath(a.base_root)
    rng = random.Random(17)
    files = {"f%02d.safetensors" % i: b"".join(rng.randbytes(1 << 20) for _ in range(a.size_mib))
             for i in range(a.files)}
    origin = NginxOrigin(files, a.cache_root, a.pace_mbps) if a.origin == "nginx" else None
    hub = (hub_with_origin(origin) if origin else FakeHub(record_requests=False)).start()
    rows = []
    try:
        hub.add_repo(REPO, files=files)
        if a.pace_mbps and not origin:
            hub.faults.throttle(a.pace_mbps * MB)
        paths = ["/%s/resolve/main/%s" % (REPO, n) for n in files]
        sizes = [len(b) for b in files.values()]
        max_time = max(60, int(sum(sizes) / (a.pace_mbps * MB if a.pace_mbps else 20 * MB)) + 60)
        for rnd in range(a.rounds):
            order = servers[rnd % len(servers):] + servers[:rnd % len(servers)]
            for name in order:
                row = dict(one(name, hub, origin, a.cache_root, paths, sizes, max_time, hf_python,
                                   a.one_at_a_time), round=rnd)
                rows.append(row)
                print(json.dumps(row), flush=True)
    finally:
        hub.stop()
        if origin:
            origin.stop()
    med = {}
    for name in servers:
        mine = sorted(r["mb_per_s"] for r in rows if r["server"] == name)
        med[name] = mine[len(mine) // 2]
    doc = provenance(benchmark="cold", origin=a.origin, size_mib=a.size_mib, files=a.files, rounds=a.rounds,
                     pace_mbps=a.pace_mbps, pulsys_args=a.pulsys_args, one_at_a_time=a.one_at_a_time,
                     client="curl, one stream per file" if a.client == "curl" else
                     "hf_transfer (100 connections of 10 MiB) per file",
                     cache_on="tmpfs" if (a.cache_root or "").startswith("/dev/shm") else "disk",
                     pinning="none")
    doc["rows"] = rows
    doc["median_mb_per_s"] = med
    if "pulsys" in med and "nginx-proxy-cache" in med:
        doc["pulsys_over_nginx"] = round(med["pulsys"] / med["nginx-proxy-cache"], 3)
    print("medians (MB/s):", json.dumps(med))
    print("wrote", write_result(a.name or "cold_%s.json" % time.strftime("%Y-%m-%d"), doc, a.out_dir))


if __name__ == "__main__":
    main()
