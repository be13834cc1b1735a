"""Random warm hits over many entries against one hot file: pulsys and nginx side by side.

Issue 14 asks that random warm hits over all N entries run at no less than 0.8x the rate
of one hot file. This measures that ratio for pulsys (--listeners 1, the portable and,
when its probe passes, the io_uring backend) and, as the reference for what serving a
file not looked up before costs on this machine, for nginx serving the same blob files
(one worker, sendfile, open_file_cache max=1000 as in scripts/bench_peers/nginx-static.conf).

A cache of N entries is built as scripts/bench_index_scale.py builds it (one small
random blob per entry, 100-4000 bytes) and imported by one pulsys start. Every blob and
the index file are read once before the rounds, so every body is in the page cache.
Then interleaved rounds of wrk (1 thread, --connections, --seconds each), per server:
random (each request a uniformly random entry; the paths come from a file, so the
client's cost is the same in both modes) and hot (one entry, always the same). For
each round: req/s, and the server's CPU time per request (utime + stime of all its
processes, /proc/PID/stat), which does not depend on how much CPU wrk leaves it.
Writes results/<machine>/random_hits.json (or --out DIR/random_hits.json).

    python scripts/bench_random_hits.py [--entries 100000] [--rounds 3] [--seconds 5]
"""

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "scripts"))

import bench_index_scale as S  # noqa: E402
from provenance import provenance, write_result  # noqa: E402

NGINX_CONF = """
%(user)s
worker_processes 1;
daemon off;
pid %(dir)s/nginx.pid;
error_log %(dir)s/error.log warn;
events { worker_connections 1024; }
http {
    default_type application/octet-stream;
    access_log off;
    sendfile on;
    tcp_nodelay on;
    keepalive_requests 1000000;
    open_file_cache max=1000 inactive=60s;
    client_body_temp_path %(dir)s/t1; proxy_temp_path %(dir)s/t2; fastcgi_temp_path %(dir)s/t3;
    uwsgi_temp_path %(dir)s/t4; scgi_temp_path %(dir)s/t5;
    server { listen 127.0.0.1:%(port)d; root %(root)s; location / { } }
}
"""

WRK_LUA = """
local paths = {}
for line in io.lines("%s") do paths[#paths + 1] = line end
init = function(args) math.randomseed(%d) end
request = function() return wrk.format("GET", paths[math.random(#paths)]) end
"""


Failed = S.Failed


def cpu_seconds(root_pid):
    total = 0
    for pid in S.tree(root_pid):
        try:
            with open("/proc/%d/stat" % pid) as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += int(fields[11]) + int(fields[12])
    return total / os.sysconf("SC_CLK_TCK")


def read_all(path):
    """Read every file under path once (into the page cache). -> bytes read."""
    n = 0
    for dirpath, _, files in os.walk(path):
        for name in files:
            with open(os.path.join(dirpath, name), "rb") as f:
                while True:
                    b = f.read(1 << 20)
                    if not b:
                        break
                    n += len(b)
    return n


def wrk(port, paths_file, seconds, conns, seed, workdir):
    script = os.path.join(workdir, "paths-%d.lua" % seed)
    with open(script, "w") as f:
        f.write(WRK_LUA % (paths_file, seed))
    cmd = ["wrk", "-t1", "-c%d" % conns, "-d%ds" % seconds, "--timeout", "10s", "-s", script,
           "http://127.0.0.1:%d/" % port]
    r = S.wrk_result(subprocess.run(cmd, capture_output=True, text=True, timeout=seconds + 60).stdout)
    return r["requests"], r["req_per_s"], r["errors"]


class Pulsys:
    def __init__(self, cache, iouring, workdir):
        self.name = "pulsys-" + ("iouring" if iouring else "portable")
        self.port, admin = S.free_port(), S.free_port()
        cmd = [sys.executable, "-m", "pulsys", "--cache-dir", cache, "--listen", "127.0.0.1:%d" % self.port,
               "--admin-listen", "127.0.0.1:%d" % admin, "--listeners", "1", "--auth", "off",
               "--upstream", "http://127.0.0.1:9", "--log-level", "warning",
               "--iouring" if iouring else "--no-iouring"]
        self.log = open(os.path.join(workdir, self.name + ".log"), "ab")
        self.proc = subprocess.Popen(cmd, cwd=ROOT, env=S.server_env(ROOT), stdout=self.log,
                                     stderr=subprocess.STDOUT)

    def stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()


class Nginx:
    name = "nginx-static"

    def __init__(self, blobs_root, workdir):
        nginx = shutil.which("nginx") or "/usr/sbin/nginx"
        if not os.path.exists(nginx):
            raise Failed("nginx not installed (Debian package nginx)")
        self.dir = os.path.join(workdir, "nginx")
        os.makedirs(self.dir, exist_ok=True)
        self.port = S.free_port()
        conf = os.path.join(self.dir, "nginx.conf")
        with open(conf, "w") as f:
            f.write(NGINX_CONF % {"user": "user root;" if os.geteuid() == 0 else "", "dir": self.dir,
                                  "port": self.port, "root": blobs_root})
        self.proc = subprocess.Popen([nginx, "-c", conf, "-p", self.dir + "/", "-e", self.dir + "/error.log"],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def stop(self):
        self.proc.terminate()
        self.proc.wait(30)


def wait_200(server, path, timeout=120):
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        if server.proc.poll() is not None:
            raise Failed("%s exited with status %d" % (server.name, server.proc.returncode))
        try:
            if S.get(server.port, path)[0] == 200:
                return
        except OSError:
            pass
        time.sleep(0.05)
    raise Failed("%s did not answer %s within %d s" % (server.name, path, timeout))


def iouring_available():
    code = "from pulsys.platform.uring import probe; import sys; sys.exit(0 if probe()[0] else 1)"
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=S.server_env(ROOT),
                          capture_output=True, timeout=60).returncode == 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--entries", type=int, default=100000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=int, default=5)
    ap.add_argument("--connections", type=int, default=8)
    ap.add_argument("--no-nginx", action="store_true")
    ap.add_argument("--out", metavar="DIR")
    a = ap.parse_args()
    if not shutil.which("wrk"):
        raise SystemExit("bench: error: wrk not installed (Debian package wrk)")
    prov = provenance(benchmark="random_hits")
    work = tempfile.mkdtemp(prefix="pulsys-random-")
    servers = []
    try:
        cache = os.path.join(work, "cache")
        t = time.monotonic()
        blobs = S.build_old_cache(cache, a.entries)
        built = time.monotonic() - t
        hot = a.entries // 2
        files = {}
        for kind, fmt in (("pulsys", lambda i: S.url_of(i)),
                          ("nginx", lambda i: "/sha256/%s/%s" % (blobs[i][0][:2], blobs[i][0]))):
            for mode, ids in (("random", range(a.entries)), ("hot", [hot])):
                path = files[kind, mode] = os.path.join(work, "%s-%s.txt" % (kind, mode))
                with open(path, "w") as f:
                    f.write("".join(fmt(i) + "\n" for i in ids))
        first = Pulsys(cache, False, work)              # imports the old-format cache
        servers.append(first)
        wait_200(first, S.url_of(hot), 900)
        first.stop()
        servers.remove(first)
        warmed = read_all(os.path.join(cache, "v1", "blobs")) + read_all(os.path.join(cache, "v1", "index"))
        kinds = [("pulsys", False)]
        if iouring_available():
            kinds.append(("pulsys", True))
        if not a.no_nginx:
            kinds.append(("nginx", None))
        rounds = []
        for kind, iouring in kinds:
            srv = Nginx(os.path.join(cache, "v1", "blobs"), work) if kind == "nginx" else Pulsys(cache, iouring, work)
            servers.append(srv)
            wait_200(srv, open(files[kind, "hot"]).readline().strip())
            for r in range(a.rounds):
                for mode in ("random", "hot"):
                    c0 = cpu_seconds(srv.proc.pid)
                    n, rps, bad = wrk(srv.port, files[kind, mode], a.seconds, a.connections, r + 1, work)
                    c1 = cpu_seconds(srv.proc.pid)
                    rounds.append({"server": srv.name, "mode": mode, "round": r, "requests": n, "req_per_s": rps,
                                   "errors": bad, "server_cpu_us_per_request": round((c1 - c0) / n * 1e6, 2)})
                    print("%-16s %-6s round %d: %9.0f req/s, %6.1f us server CPU/request, %d errors" % (
                        srv.name, mode, r, rps, rounds[-1]["server_cpu_us_per_request"], bad), flush=True)
            srv.stop()
            servers.remove(srv)
        summary = {}
        for name in sorted({x["server"] for x in rounds}):
            med = {m: statistics.median(x["req_per_s"] for x in rounds if x["server"] == name and x["mode"] == m)
                   for m in ("random", "hot")}
            cpu = {m: statistics.median(x["server_cpu_us_per_request"] for x in rounds
                                        if x["server"] == name and x["mode"] == m) for m in ("random", "hot")}
            summary[name] = {"random_req_per_s": med["random"], "hot_req_per_s": med["hot"],
                             "random_over_hot": round(med["random"] / med["hot"], 3),
                             "cpu_us_random": cpu["random"], "cpu_us_hot": cpu["hot"]}
        doc = dict(prov, parameters={"entries": a.entries, "rounds": a.rounds, "seconds": a.seconds,
                                     "connections": a.connections, "hot_entry": hot,
                                     "blob_sizes": "100-4000 bytes, one random blob per entry"},
                   build_seconds=round(built, 1), page_cache_warmed_bytes=warmed, rounds=rounds,
                   summary=summary,
                   notes=["wrk -t1 with a Lua script choosing each path from a file: the same client "
                          "cost for random and hot", "server CPU: utime+stime of the server's processes "
                          "over the round, per request"])
        print(write_result("random_hits.json", doc, a.out))
        for name, s in summary.items():
            print("%-16s random/hot %.3f (%.0f / %.0f req/s; %.1f / %.1f us CPU per request)" % (
                name, s["random_over_hot"], s["random_req_per_s"], s["hot_req_per_s"], s["cpu_us_random"],
                s["cpu_us_hot"]))
    except Failed as e:
        raise SystemExit("bench: error: %s" % e)
    finally:
        for srv in servers:
            srv.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
