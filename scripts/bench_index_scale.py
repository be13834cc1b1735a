"""Start-up time, memory and random-hit throughput of the index at N entries (issue 14).

For each N (--entries, default 100000 and 1000000) a synthetic cache is built once, in a
temporary directory, in the format pulsys before the LMDB index wrote: one JSON file per
entry under v1/meta/, N FILE entries at one commit, each with a small verified blob
(100-4000 random bytes), N/100 revision mappings. Above 100000 entries the entries share
blobs (at most 100000 blob files; `entries_per_blob` in the result) to keep the build short.

Then, for this checkout ("after", run from a copy of its pulsys/ taken at the start) and
for pulsys at --before REV ("before", run from a git worktree in a temporary directory),
each on its own hard-linked copy of that cache:

  - a first start with --listeners 1: "after" imports the old files into LMDB
    (first_start_import_seconds), "before" reads every metadata file and writes its index
    snapshot at shutdown;
  - for each --listeners L (default 1, 2, 8) a restart, measuring the time from process
    start to the first warm hit (a GET of a cached file answered 200 with its bytes,
    polled every 10 ms), the PSS of the server and all its descendants
    (/proc/PID/smaps_rollup) after that hit and again after --warm-hits random warm hits
    spread over all N entries (bounded by --warm-seconds), then SIGTERM (SIGKILL after
    --stop-timeout).

A "before" run is skipped, and recorded as skipped with the estimate, when the RSS it
would need (its RSS at the largest smaller N measured, scaled by entries; else 3.6 KB
per entry per process) is above 60% of MemAvailable. For "after" with --listeners 1,
the same run also compares warm-GET throughput: uniformly random over all N entries vs
one hot file (of about the mean size), interleaved rounds of --tp-seconds each, with wrk
when it is installed, else a Python keep-alive client. Writes
results/<machine>/index_scale.json (or --out DIR/index_scale.json).

    python scripts/bench_index_scale.py [--entries 100000,1000000] [--listeners 1,2,8]
        [--before 4ada1f0 | --no-before] [--quick] [--out DIR]
"""

import argparse
import contextlib
import hashlib
import http.client
import json
import os
import random
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "scripts"))

from provenance import provenance, write_result  # noqa: E402
from pulsys.model.key import REV, cache_key  # noqa: E402  (unchanged since the old format)
from pulsys.model.target import RESOLVE  # noqa: E402

COMMIT = hashlib.sha1(b"commit").hexdigest()
PER_REPO = 50                  # entries per repo
MAX_BLOBS = 100000             # above this many entries, entries share blobs
POLL = 0.01                    # seconds between first-hit attempts
CONNS = 64                     # warm-hit connections, used in turn (SO_REUSEPORT spreads them)
MEM_SHARE = 0.6                # a before run may need at most this share of MemAvailable
OLD_BYTES_PER_ENTRY = 3600     # per process, when no smaller N of the before version was measured
GB = 1 << 30


class Failed(Exception):
    pass


# -- the synthetic cache, in the format pulsys before the LMDB index wrote ---------------

def entry_key(i):
    return cache_key(RESOLVE, "model", "org/repo%d" % (i // PER_REPO), COMMIT, "dir/file-%d.safetensors" % i)


def url_of(i):
    return "/org/repo%d/resolve/%s/dir/file-%d.safetensors" % (i // PER_REPO, COMMIT, i)


def _write_meta(v1, key, doc):
    """v1/meta/<d[:2]>/<d>.json, d = sha256(key)[:40] (pulsys/cache/store.py at 4ada1f0)."""
    d = hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()[:40]
    with open(os.path.join(v1, "meta", d[:2], d + ".json"), "w") as f:
        f.write(json.dumps(doc, separators=(",", ":")))


def build_old_cache(cache_dir, n, per_blob=1, seed=1):
    """n FILE entries (entry i -> blob i // per_blob), n // 100 revision mappings, one
    metadata file each; blobs under blobs/sha256/ named by their sha256. No fsync: test
    data. -> [(sha256 hex, size)] per blob."""
    rnd = random.Random(seed)
    v1 = os.path.join(cache_dir, "v1")
    for sub in ("meta", "blobs/sha256"):
        for aa in range(256):
            os.makedirs(os.path.join(v1, sub, "%02x" % aa), exist_ok=True)
    blobs = []
    for _ in range((n + per_blob - 1) // per_blob):
        body = rnd.randbytes(rnd.randint(100, 4000))
        sha = hashlib.sha256(body).hexdigest()
        with open(os.path.join(v1, "blobs", "sha256", sha[:2], sha), "wb") as f:
            f.write(body)
        blobs.append((sha, len(body)))
    now = time.time()
    for i in range(n):
        sha, size = blobs[i // per_blob]
        key = entry_key(i)
        entry = {"kind": 1, "key": key, "size": size, "etag": sha, "commit": COMMIT, "lfs": True,
                 "blob_id": "sha256/" + sha, "content_type": "application/octet-stream",
                 "content_disposition": "", "status": 200, "headers": [], "body": "", "head_only": False}
        _write_meta(v1, key, {"type": "entry", "fetched_at": now, "immutable": True, "entry": entry})
    for j in range(max(1, n // 100)):
        repo = "org/repo%d" % j
        key = cache_key(REV, "model", repo, "main")
        _write_meta(v1, key, {"type": "rev", "key": key, "rtype": "model", "repo": repo, "rev": "main",
                              "commit": COMMIT, "fetched_at": now})
    return blobs


def link_copy(src, dst):
    """A copy of a directory tree whose files are hard links (the servers only add files,
    or replace them by rename, so the copies stay independent)."""
    if subprocess.run(["cp", "-al", src, dst], capture_output=True).returncode != 0:
        shutil.copytree(src, dst, copy_function=os.link)


@contextlib.contextmanager
def before_tree(rev):
    """A git worktree of `rev` in a temporary directory, removed afterwards. -> (path, sha)."""
    parent = tempfile.mkdtemp(prefix="pulsys-before-")
    path = os.path.join(parent, "tree")
    try:
        subprocess.run(["git", "-C", ROOT, "worktree", "add", "--detach", path, rev], check=True,
                       capture_output=True, timeout=120)
        sha = subprocess.run(["git", "-C", path, "rev-parse", "HEAD"], check=True, capture_output=True,
                             text=True, timeout=30).stdout.strip()
        yield path, sha
    finally:
        subprocess.run(["git", "-C", ROOT, "worktree", "remove", "--force", path], capture_output=True,
                       timeout=120)
        shutil.rmtree(parent, ignore_errors=True)


def freeze_checkout(into):
    """A copy of this checkout's pulsys/ in `into`, so that every "after" run uses the same
    code while the checkout may change. -> (into, sha256 over its files' names and bytes)."""
    dst = os.path.join(into, "pulsys")
    shutil.copytree(os.path.join(ROOT, "pulsys"), dst, ignore=shutil.ignore_patterns("__pycache__"))
    h = hashlib.sha256()
    for dirpath, dirs, files in os.walk(dst):
        dirs.sort()
        for name in sorted(files):
            path = os.path.join(dirpath, name)
            with open(path, "rb") as f:
                h.update(os.path.relpath(path, dst).encode() + b"\0" + f.read())
    return into, h.hexdigest()


def server_env(tree):
    """Run `python -m pulsys` from `tree` (cwd and PYTHONPATH), no PULSYS_* settings inherited."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PULSYS_")}
    env["PYTHONPATH"] = tree
    return env


# -- processes and their memory --------------------------------------------------------

def _stat(pid):
    """(ppid, starttime) or None."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return int(fields[1]), int(fields[19])
    except (OSError, IndexError, ValueError):
        return None


def tree(root):
    """{pid: starttime} of root and its live descendants."""
    stats = {int(p): _stat(int(p)) for p in os.listdir("/proc") if p.isdigit()}
    out, todo = {}, [root]
    while todo:
        pid = todo.pop()
        if stats.get(pid) and pid not in out:
            out[pid] = stats[pid][1]
            todo.extend(p for p, st in stats.items() if st and st[0] == pid)
    return out


def memory(root):
    """Pss/Rss (bytes) of root and its descendants, from /proc/PID/smaps_rollup."""
    procs = []
    for pid in tree(root):
        try:
            with open("/proc/%d/smaps_rollup" % pid) as f:
                text = f.read()
        except OSError:
            continue
        kb = {k: int(v) * 1024 for k, v in re.findall(r"^(\w+):\s+(\d+) kB", text, re.M)}
        procs.append({"pid": pid, "pss": kb.get("Pss", 0), "rss": kb.get("Rss", 0),
                      "pss_anon": kb.get("Pss_Anon"), "pss_file": kb.get("Pss_File")})
    return {"pss_bytes": sum(p["pss"] for p in procs), "rss_bytes": sum(p["rss"] for p in procs),
            "processes": len(procs), "per_process": procs}


def mem_available():
    with open("/proc/meminfo") as f:
        return int(re.search(r"MemAvailable:\s+(\d+) kB", f.read()).group(1)) * 1024


def processes(listeners):
    return 1 if listeners == 1 else listeners + 1


# -- the server ------------------------------------------------------------------------

def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get(port, path, timeout=30.0):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        c.request("GET", path)
        r = c.getresponse()
        return r.status, r.read()
    finally:
        c.close()


class Server:
    def __init__(self, tree_dir, cache, listeners, log_path):
        self.port, self.admin = free_port(), free_port()
        cmd = [sys.executable, "-m", "pulsys", "--cache-dir", cache, "--listen", "127.0.0.1:%d" % self.port,
               "--admin-listen", "127.0.0.1:%d" % self.admin, "--listeners", str(listeners), "--auth", "off",
               "--upstream", "http://127.0.0.1:9", "--log-level", "warning"]
        self.log_path = log_path
        self.log = open(log_path, "ab")
        self.t0 = time.monotonic()
        self.proc = subprocess.Popen(cmd, cwd=tree_dir, env=server_env(tree_dir), stdout=self.log,
                                     stderr=subprocess.STDOUT)

    def log_tail(self, n=40):
        with open(self.log_path, "rb") as f:
            return f.read().decode("utf-8", "replace").splitlines()[-n:]

    def first_hit(self, path, body, timeout):
        """Seconds from process start to a 200 with `body`, trying every POLL seconds."""
        last = None
        while time.monotonic() - self.t0 < timeout:
            if self.proc.poll() is not None:
                raise Failed("server exited with status %d before a warm hit" % self.proc.returncode)
            try:
                status, got = get(self.port, path)
                if status == 200 and got == body:
                    return time.monotonic() - self.t0
                last = "status %d, %d bytes" % (status, len(got))
            except (OSError, http.client.HTTPException) as e:
                last = repr(e)
            time.sleep(POLL)
        raise Failed("no warm hit within %.0f s (last attempt: %s)" % (timeout, last))

    def wait_ready(self, want_procs, timeout):
        """Seconds from process start to /readyz 200 with all its processes up."""
        while time.monotonic() - self.t0 < timeout:
            try:
                if get(self.admin, "/readyz", 5)[0] == 200 and len(tree(self.proc.pid)) >= want_procs:
                    return time.monotonic() - self.t0
            except (OSError, http.client.HTTPException):
                pass
            time.sleep(0.05)
        raise Failed("not ready with %d processes within %.0f s" % (want_procs, timeout))

    def index_load(self):
        try:
            return json.loads(get(self.admin, "/debug/vars", 30)[1]).get("startup_index_load")
        except (OSError, ValueError, http.client.HTTPException) as e:
            return {"error": repr(e)}

    def stop(self, timeout):
        """SIGTERM, SIGKILL after `timeout`; descendants left behind are killed too.
        -> (seconds, killed)."""
        kids = {p: st for p, st in tree(self.proc.pid).items() if p != self.proc.pid}
        t = time.monotonic()
        killed = False
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            killed = True
        for pid, st in kids.items():
            if (_stat(pid) or (0, None))[1] == st:
                os.kill(pid, signal.SIGKILL)
                killed = True
        self.log.close()
        return round(time.monotonic() - t, 3), killed


def warm_hits(port, n, blobs, per_blob, count, seconds, seed=2):
    """`count` GETs of random entries (bounded by `seconds`), over CONNS keep-alive
    connections in turn, each answer checked against its blob's sha256."""
    rnd = random.Random(seed)
    conns = [None] * CONNS
    done = errors = 0
    t0 = time.monotonic()
    while done < count and time.monotonic() - t0 < seconds:
        i = rnd.randrange(n)
        k = done % CONNS
        try:
            conns[k] = conns[k] or http.client.HTTPConnection("127.0.0.1", port, timeout=30)
            conns[k].request("GET", url_of(i))
            r = conns[k].getresponse()
            ok = r.status == 200 and hashlib.sha256(r.read()).hexdigest() == blobs[i // per_blob][0]
        except (OSError, http.client.HTTPException):
            conns[k].close()
            conns[k] = None
            ok = False
        done += 1
        errors += not ok
    for c in conns:
        if c is not None:
            c.close()
    el = time.monotonic() - t0
    return {"requests": done, "errors": errors, "seconds": round(el, 3), "req_per_s": round(done / el, 1)}


# -- random vs hot throughput ------------------------------------------------------------

WRK_LUA = """
local n, hot, commit = %d, %d, "%s"
init = function(args) math.randomseed(%d) end
request = function()
  local i = hot
  if i < 0 then i = math.random(0, n - 1) end
  return wrk.format("GET", string.format("/org/repo%%d/resolve/%%s/dir/file-%%d.safetensors",
                                         math.floor(i / %d), commit, i))
end
"""


def run_wrk(port, n, hot, seconds, conns, workdir, seed):
    script = os.path.join(workdir, "paths.lua")
    with open(script, "w") as f:
        f.write(WRK_LUA % (n, hot, COMMIT, seed, PER_REPO))
    cmd = ["wrk", "-t1", "-c%d" % conns, "-d%ds" % seconds, "--timeout", "10s", "-s", script,
           "http://127.0.0.1:%d/" % port]
    return wrk_result(subprocess.run(cmd, capture_output=True, text=True, timeout=seconds + 60).stdout)


def wrk_result(out):
    """{requests, errors (non-2xx/3xx answers and socket errors), req_per_s} from wrk's output."""
    m = re.search(r"(\d+) requests in", out)
    rps = re.search(r"Requests/sec:\s+([\d.]+)", out)
    if not m or not rps:
        raise Failed("wrk output not understood: %s" % out[-300:])
    bad = sum(int(x) for x in re.findall(r"Non-2xx or 3xx responses: (\d+)", out))
    sock = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", out)
    bad += sum(map(int, sock.groups())) if sock else 0
    return {"requests": int(m.group(1)), "errors": bad, "req_per_s": float(rps.group(1))}


def run_python(port, n, hot, seconds, conns, workdir, seed, count=200000):
    """Fallback without wrk: `conns` threads, one keep-alive connection each."""
    lock, counts = threading.Lock(), [0, 0]
    deadline = time.monotonic() + seconds

    def client(k):
        rnd = random.Random(seed * 1000 + k)
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        while time.monotonic() < deadline and counts[0] < count:
            try:
                c.request("GET", url_of(hot if hot >= 0 else rnd.randrange(n)))
                r = c.getresponse()
                r.read()
                ok = r.status == 200
            except (OSError, http.client.HTTPException):
                c.close()
                ok = False
            with lock:
                counts[0] += 1
                counts[1] += not ok
        c.close()

    t0 = time.monotonic()
    threads = [threading.Thread(target=client, args=(k,)) for k in range(conns)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    el = time.monotonic() - t0
    return {"requests": counts[0], "errors": counts[1], "req_per_s": round(counts[0] / el, 1)}


def throughput(port, n, hot, a, workdir):
    gen = "wrk" if shutil.which("wrk") else "python"
    fn = run_wrk if gen == "wrk" else run_python
    rounds = []
    for r in range(a.tp_rounds):
        for mode in ("random", "hot"):
            res = fn(port, n, hot if mode == "hot" else -1, a.tp_seconds, a.tp_connections, workdir, r + 1)
            rounds.append(dict(res, mode=mode, round=r))
    med = {m: statistics.median(x["req_per_s"] for x in rounds if x["mode"] == m) for m in ("random", "hot")}
    return {"generator": gen, "connections": a.tp_connections, "seconds_per_round": a.tp_seconds,
            "hot_entry": hot, "rounds": rounds, "random_req_per_s": med["random"],
            "hot_req_per_s": med["hot"], "random_over_hot": round(med["random"] / med["hot"], 3)
            if med["hot"] else None}


# -- one run ---------------------------------------------------------------------------

def measure(version, tree_dir, cache, n, listeners, blobs, per_blob, a, logdir, first=False, extra=None):
    rec = {"version": version, "entries": n, "listeners": listeners, "start": "first" if first else "restart"}
    log_path = os.path.join(logdir, "%s-%d-%d%s.log" % (version, n, listeners, "-first" if first else ""))
    probe = n // 2
    with open(os.path.join(cache, "v1", "blobs", "sha256", blobs[probe // per_blob][0][:2],
                           blobs[probe // per_blob][0]), "rb") as f:
        body = f.read()
    srv = Server(tree_dir, cache, listeners, log_path)
    try:
        rec["first_hit_seconds"] = round(srv.first_hit(url_of(probe), body, a.start_timeout), 3)
        rec["after_first_hit"] = memory(srv.proc.pid)
        rec["ready_seconds"] = round(srv.wait_ready(processes(listeners), a.start_timeout), 3)
        rec["index_load"] = srv.index_load()
        if not first:
            rec["warm_hits"] = warm_hits(srv.port, n, blobs, per_blob, a.warm_hits, a.warm_seconds)
            rec["after_warm_hits"] = memory(srv.proc.pid)
        if extra:
            rec.update(extra(srv))
        rec["status"] = "ok"
    except (Failed, OSError, ValueError) as e:
        rec.update(status="failed", error=str(e) if isinstance(e, Failed) else repr(e))
    finally:
        rec["stop_seconds"], rec["stop_killed"] = srv.stop(a.stop_timeout)
    for _ in range(0 if first or rec["status"] != "ok" else a.repeats):
        srv = Server(tree_dir, cache, listeners, log_path)       # more restarts: first hit only
        try:
            rec.setdefault("first_hit_seconds_each", [rec["first_hit_seconds"]]).append(
                round(srv.first_hit(url_of(probe), body, a.start_timeout), 3))
        except Failed as e:
            rec.update(status="failed", error="repeat: %s" % e)
        finally:
            srv.stop(a.stop_timeout)
    if len(rec.get("first_hit_seconds_each", ())) > 1:
        rec["first_hit_seconds"] = statistics.median(rec["first_hit_seconds_each"])
    if rec["status"] != "ok":
        rec["log_tail"] = srv.log_tail()
        print("%s N=%d L=%d FAILED: %s\n  %s" % (version, n, listeners, rec["error"], "\n  ".join(rec["log_tail"])),
              file=sys.stderr)
    else:
        print("%s N=%d L=%d%s: first hit %.3f s, PSS %.0f MiB%s" % (
            version, n, listeners, " (first start)" if first else "", rec["first_hit_seconds"],
            rec.get("after_warm_hits", rec["after_first_hit"])["pss_bytes"] / 2**20,
            "" if "throughput" not in rec else ", random/hot %s" % rec["throughput"]["random_over_hot"]),
            file=sys.stderr)
    return rec


def old_estimate(runs, n, listeners):
    """RSS (bytes) the before version would need: its measured RSS at the largest smaller N
    (same --listeners, else per process of any), scaled by entries. -> (bytes, basis)."""
    done = [r for r in runs if r["version"] == "before" and r["status"] == "ok" and r["entries"] < n]
    same = [r for r in done if r["listeners"] == listeners]
    for pool in (same, done):
        if pool:
            r = max(pool, key=lambda r: r["entries"])
            m = r.get("after_warm_hits") or r["after_first_hit"]
            total = m["rss_bytes"] / m["processes"] * processes(listeners)
            return total * n / r["entries"], "RSS at %d entries, --listeners %d, scaled by entries" % (
                r["entries"], r["listeners"])
    return OLD_BYTES_PER_ENTRY * n * processes(listeners), "%d bytes per entry per process" % OLD_BYTES_PER_ENTRY


def fits(runs, n, listeners):
    """None when the before run fits in memory, else the skip record."""
    need, basis = old_estimate(runs, n, listeners)
    avail = mem_available()
    if need <= MEM_SHARE * avail:
        return None
    return {"version": "before", "entries": n, "listeners": listeners, "start": "restart", "status": "skipped",
            "reason": "estimated RSS %.1f GB > %d%% of MemAvailable %.1f GB" % (need / GB, MEM_SHARE * 100, avail / GB),
            "estimated_rss_bytes": int(need), "estimate_basis": basis, "mem_available_bytes": avail}


def per_blob_for(n):
    return max(1, -(-n // MAX_BLOBS))


def run_n(n, a, after, before, runs, builds):
    per_blob = per_blob_for(n)
    work = tempfile.mkdtemp(prefix="pulsys-index-scale-")
    try:
        base = os.path.join(work, "old-format")
        t0 = time.perf_counter()
        blobs = build_old_cache(base, n, per_blob)
        builds[str(n)] = {"entries": n, "blobs": len(blobs), "entries_per_blob": per_blob,
                          "revisions": max(1, n // 100), "blob_bytes": "100-4000 random",
                          "build_seconds": round(time.perf_counter() - t0, 2)}
        print("built N=%d in %.1f s" % (n, builds[str(n)]["build_seconds"]), file=sys.stderr)
        mean = statistics.fmean(s for _, s in blobs)
        hot = min(range(len(blobs)), key=lambda b: abs(blobs[b][1] - mean)) * per_blob
        versions = [("after", after)] + ([("before", before)] if before else [])
        for version, tree_dir in versions:
            cache = os.path.join(work, version)
            link_copy(base, cache)
            skip = fits(runs, n, 1) if version == "before" else None
            if skip:
                runs.append(dict(skip, start="first"))
                runs.extend(fits(runs, n, L) or dict(skip, listeners=L, reason="first start skipped")
                            for L in a.listeners)
                continue
            first = measure(version, tree_dir, cache, n, 1, blobs, per_blob, a, work, first=True)
            if version == "after" and first["status"] == "ok":
                first["first_start_import_seconds"] = (first.get("index_load") or {}).get("seconds")
            runs.append(first)
            for L in a.listeners:
                skip = fits(runs, n, L) if version == "before" else None
                if skip:
                    runs.append(skip)
                    print("before N=%d L=%d skipped: %s" % (n, L, skip["reason"]), file=sys.stderr)
                    continue
                extra = None
                if L == 1 and a.tp_rounds:      # both versions: random vs hot side by side
                    extra = lambda srv: {"throughput": throughput(srv.port, n, hot, a, work)}  # noqa: E731
                runs.append(measure(version, tree_dir, cache, n, L, blobs, per_blob, a, work, extra=extra))
    finally:
        shutil.rmtree(work, ignore_errors=True)


# -- the targets ---------------------------------------------------------------

def targets(runs, entries):
    ok = {(r["entries"], r["listeners"]): r for r in runs
          if r["version"] == "after" and r["status"] == "ok" and r["start"] == "restart"}

    def pss(n, L):
        return ok[n, L]["after_warm_hits"]["pss_bytes"] if (n, L) in ok else None

    ratio = {str(n): round(pss(n, 8) / pss(n, 1), 3) for n in entries if pss(n, 8) and pss(n, 1)}
    pss_1m = {str(L): pss(1000000, L) for L in (1, 2, 8) if pss(1000000, L)}
    hits = {"%d/%d" % k: r["first_hit_seconds"] for k, r in ok.items()}
    tps = {str(r["entries"]): r["throughput"]["random_over_hot"] for r in ok.values() if "throughput" in r}

    def all_(d, test):
        return all(test(v) for v in d.values()) if d else None

    return ({"pss_listeners8_le_1.5x_listeners1": all_(ratio, lambda v: v <= 1.5),
             "pss_1m_entries_lt_2GB": all_(pss_1m, lambda v: v < 2 * GB),
             "first_warm_hit_within_1s": all_(hits, lambda v: v <= 1.0),
             "random_over_hot_ge_0.8": all_(tps, lambda v: v is not None and v >= 0.8)},
            {"pss_listeners8_over_listeners1": ratio, "pss_bytes_1m_entries_by_listeners": pss_1m,
             "first_hit_seconds_by_entries/listeners": hits, "random_over_hot_by_entries": tps,
             "note": "after version, restarts; PSS after the warm hits; the targets are for the new version"})


def int_list(text):
    return [int(x) for x in text.split(",") if x.strip()]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--entries", type=int_list, help="N values (default 100000,1000000; --quick 2000)")
    ap.add_argument("--listeners", type=int_list, help="--listeners values (default 1,2,8; --quick 1,2)")
    ap.add_argument("--quick", action="store_true", help="small N and short runs, for tests")
    ap.add_argument("--before", default="4ada1f0", metavar="REV", help="the version to compare with")
    ap.add_argument("--no-before", action="store_true", help="measure this checkout only")
    ap.add_argument("--repeats", type=int, help="extra restarts per run timing the first hit only; "
                    "first_hit_seconds is then the median (default 2; --quick 0)")
    ap.add_argument("--warm-hits", type=int, help="random warm hits per run (default 20000)")
    ap.add_argument("--warm-seconds", type=float, default=10.0, help="time bound of the warm hits")
    ap.add_argument("--tp-rounds", type=int, help="random/hot throughput rounds (default 3; 0: none)")
    ap.add_argument("--tp-seconds", type=int, help="seconds per throughput round (default 5)")
    ap.add_argument("--tp-connections", type=int, default=8)
    ap.add_argument("--start-timeout", type=float, default=900.0, help="seconds allowed to the first hit")
    ap.add_argument("--stop-timeout", type=float, default=300.0, help="seconds from SIGTERM to SIGKILL")
    ap.add_argument("--out", metavar="DIR", help="write index_scale.json here instead of results/<machine>/")
    a = ap.parse_args()
    q = a.quick
    a.entries = a.entries or ([2000] if q else [100000, 1000000])
    a.listeners = a.listeners or ([1, 2] if q else [1, 2, 8])
    a.warm_hits = a.warm_hits if a.warm_hits is not None else (500 if q else 20000)
    a.tp_rounds = a.tp_rounds if a.tp_rounds is not None else (1 if q else 3)
    a.tp_seconds = a.tp_seconds or (1 if q else 5)
    a.repeats = a.repeats if a.repeats is not None else (0 if q else 2)
    if not all(1 <= n <= 10000000 for n in a.entries) or not all(1 <= L <= 64 for L in a.listeners):
        ap.error("--entries must be 1..10000000 and --listeners 1..64")
    at_start = provenance()         # the checkout may change while this runs: its code is copied
    runs, builds, frozen = [], {}, tempfile.mkdtemp(prefix="pulsys-after-")
    try:
        after, after_sha = freeze_checkout(frozen)
        with (contextlib.nullcontext((None, None)) if a.no_before else before_tree(a.before)) as (before, before_sha):
            for n in sorted(a.entries):
                run_n(n, a, after, before, runs, builds)
    finally:
        shutil.rmtree(frozen, ignore_errors=True)
    met, details = targets(runs, a.entries)
    doc = provenance(
        benchmark="index_scale", commit_at_start=at_start["commit"], dirty_at_start=at_start["dirty"],
        date_at_start=at_start["date"], after_pulsys_sha256=after_sha,
        parameters={"entries": sorted(a.entries), "listeners": a.listeners, "quick": q,
                    "before_rev": None if a.no_before else a.before, "before_commit": before_sha,
                    "warm_hits": a.warm_hits, "warm_seconds": a.warm_seconds, "warm_connections": CONNS,
                    "first_hit_poll_seconds": POLL, "first_hit_repeats": a.repeats, "throughput_rounds": a.tp_rounds,
                    "throughput_seconds": a.tp_seconds, "throughput_connections": a.tp_connections,
                    "mem_share_limit": MEM_SHARE, "mem_available_at_end_bytes": mem_available(),
                    "server": "python -m pulsys --cache-dir DIR --listen 127.0.0.1:PORT --admin-listen "
                              "127.0.0.1:PORT2 --listeners L --auth off --upstream http://127.0.0.1:9 "
                              "--log-level warning"},
        builds=builds, runs=runs, targets=met, target_details=details,
        notes=["commit/dirty/date: at the end of the run; *_at_start: at its start. The after version ran "
               "from a copy of pulsys/ taken at the start (after_pulsys_sha256: its files' names and bytes)",
               "every version runs on its own hard-linked copy of the old-format cache; its first start "
               "(--listeners 1) imports (after) or reads the metadata files (before); the measured runs are restarts",
               "above %d entries the entries share blobs (builds.<N>.entries_per_blob)" % MAX_BLOBS,
               "first_hit_seconds: from Popen to a 200 with the right bytes (median of the run and its "
               "--repeats restarts, each in first_hit_seconds_each); PSS/RSS summed over the server and its "
               "descendants"])
    print(json.dumps({"targets": met, **details}))
    print("wrote", write_result("index_scale.json", doc, a.out))
    failed = [r for r in runs if r["status"] == "failed" and r["version"] == "after"]
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
