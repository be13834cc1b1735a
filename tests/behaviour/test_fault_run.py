"""The fault run: a real pulsys process between concurrent clients and a fake Hub that
breaks everything at once, and one kill -9 in the middle. Whatever the faults, no client
may end up with a body that differs from the Hub's bytes.

- The fake Hub holds LFS files of 3-12 MiB and a few regular files. `--cache-max-bytes`
  is below their total, so blobs are evicted and fetched again all through the run and
  the faults keep meeting fills.
- Clients (tests/behaviour/faultclients.py) act like huggingface_hub 2.4 (HEAD, GET,
  resume with `bytes=<written>-`, restart on a 200, final size check only), hf_transfer
  (closed ranges, the last past EOF, whole-chunk retries, no 206 check), a client
  resuming a partial download at byte granularity, and HEADs. Each operation is bounded
  in attempts and time; each client in operations and time.
- Faults, scheduled by count from a seeded plan over the first FAULTS_UNTIL seconds: drops,
  resets, stalls (some longer than --upstream-timeout), 5xx statuses, one flipped byte in
  an upstream body; every upstream body is throttled meanwhile (two blobs more), so fills
  last long enough for clients to read from them.
- At KILL_AT the pulsys process is killed with SIGKILL and started again on the same
  cache directory and port; clients meet connection errors and retry as theirs do.
- At the end every body a client completed (a whole file of the right size, or a whole
  range) is compared with the Hub's bytes, a clean round of GETs of every file must
  succeed with the right sha256, and `pulsys verify` must find the cache clean.

The seed is printed; PULSYS_FAULT_SEED=N reruns another plan. What a run found is kept
below it as a small deterministic test of its own.
"""

import collections
import concurrent.futures
import hashlib
import json
import os
import random
import re
import signal
import sys
import threading
import time

import pytest

from pulsys.testing.fake_hub import git_blob_sha1, sha256_hex
from tests.behaviour.faultclients import (MIB, WireError, follow, head_check, hf24_get,
                                          hf_transfer_get, partial_resume, request)
from tests.behaviour.fillcheck import blob_files
from tests.behaviour.test_verify_refetch import verify
from tests.conftest import ProcServer, wait_until

SEED = int(os.environ.get("PULSYS_FAULT_SEED", "20261201"))
RUN = 16.0                  # seconds during which clients start operations
FAULTS_UNTIL = 11.0         # faults are injected from 0.5 s to here, then cleared
KILL_AT = 6.0
HARD_STOP = RUN + 10.0      # no client operation goes on past this
MAX_OPS = 400               # per client
UPSTREAM_TIMEOUT = 2.0
CACHE_MAX = 24 * MIB        # the files total about 44 MiB: blobs keep being evicted
THROTTLE = 16 * MIB         # bytes/s of every upstream body during the fault window
PLAN = (("drop", 8), ("reset", 8), ("hang", 6), ("status", 8), ("corrupt", 12))   # events

LFS_SIZES = (3 * MIB + 5, 5 * MIB + 4097, 7 * MIB + 1, 11 * MIB + 77, 12 * MIB - 3)
REGULAR = (("config.json", 731), ("vocab.txt", 300_017), ("rows.jsonl", 2_600_003))
REPO = "org/faults"

# client kind -> threads
CLIENTS = {"hf24": 3, "hf_transfer": 3, "resume": 2, "head": 2}
MIN_FILES = 25              # completed whole files, all kinds together
MIN_RANGES = 40             # completed hf_transfer chunks


class Blob:
    def __init__(self, name, data):
        self.name, self.data = name, data
        self.lfs = name.endswith(".safetensors")
        self.sha256 = sha256_hex(data)
        self.sha1 = git_blob_sha1(data)
        self.path = "/%s/resolve/main/%s" % (REPO, name)
        # what the fake Hub's fault switches match in the upstream body request
        self.target = self.sha256 if self.lfs else "resolve-cache/models/%s/" % REPO


def make_blobs(rng):
    blobs = [Blob("w-%d.safetensors" % i, rng.randbytes(n)) for i, n in enumerate(LFS_SIZES)]
    blobs += [Blob(name, rng.randbytes(n)) for name, n in REGULAR]
    return blobs


def start_pulsys(hub, cache, tmp_path, listeners, port=0, _n=[0]):
    _n[0] += 1
    settings = {"upstream": hub.url, "cache_dir": cache, "listeners": str(listeners), "auth": "off",
                "allow_upstream_host": [hub.cdn_netloc], "access_log": False,
                "upstream_timeout": str(UPSTREAM_TIMEOUT), "cache_max_bytes": str(CACHE_MAX),
                "fill_threads": "16"}
    argv = [sys.executable, "-m", "pulsys"] + (["--listen", "127.0.0.1:%d" % port] if port else [])
    return ProcServer(settings, str(tmp_path / ("pulsys-%d.log" % _n[0])), argv=argv)


def first_difference(got, want):
    """(first differing offset, differing bytes in the common length) of two bodies."""
    n = min(len(got), len(want))
    first, count, step = None, 0, 1 << 16
    for at in range(0, n, step):
        a, b = got[at:at + step], want[at:at + step]
        if a != b:
            for i in range(len(a)):
                if a[i] != b[i]:
                    count += 1
                    if first is None:
                        first = at + i
    if first is None and len(got) != len(want):
        first = n
    return first, count


# -- the fault plan -------------------------------------------------------------------


def fault_plan(rng, blobs):
    """[(at seconds, kind, kwargs)]: PLAN's events in a seeded order spread over the
    fault window."""
    targets = [b.target for b in blobs]
    events = []
    for kind, n in PLAN:
        for _ in range(n):
            if kind in ("drop", "reset"):
                kw = {"nbytes": rng.randrange(0, 6 * MIB), "times": rng.choice((1, 2)),
                      "match": rng.choice(targets)}
            elif kind == "hang":
                kw = {"nbytes": rng.randrange(0, 6 * MIB), "seconds": rng.choice((0.6, 1.2, 2.6, 3.0)),
                      "times": 1, "match": rng.choice(targets)}
            elif kind == "status":
                kw = {"code": rng.choice((500, 502, 503)), "times": rng.choice((1, 2, 3)),
                      "match": rng.choice(targets + ["/resolve/", "/repos/", None])}
            else:
                kw = {"times": 1, "match": rng.choice(targets)}
            events.append([0.0, kind, kw])
    rng.shuffle(events)
    span = FAULTS_UNTIL - 1.0
    for i, e in enumerate(events):
        e[0] = 0.5 + span * i / len(events)
    return [tuple(e) for e in events]


class Injector(threading.Thread):
    def __init__(self, hub, plan, throttled, t0):
        super().__init__(name="fault-injector", daemon=True)
        self.hub, self.plan, self.throttled, self.t0 = hub, plan, throttled, t0
        self.added = collections.Counter()
        self.left = collections.Counter()
        self.halt = threading.Event()

    def run(self):
        f = self.hub.faults
        f.throttle(THROTTLE)            # every blob body: fills last long enough to be read from
        for b in self.throttled:        # added later, so it wins for these
            f.throttle(THROTTLE // 4, match=b.target)
        for at, kind, kw in self.plan:
            if self.halt.wait(max(0.0, self.t0 + at - time.monotonic())):
                break
            kw = dict(kw)
            if kind == "drop":
                f.drop_after(kw.pop("nbytes"), **kw)
            elif kind == "reset":
                f.reset_after(kw.pop("nbytes"), **kw)
            elif kind == "hang":
                f.hang_after(kw.pop("nbytes"), kw.pop("seconds"), **kw)
            elif kind == "status":
                f.status(kw.pop("code"), **kw)
            else:
                f.corrupt(**kw)
            self.added[kind] += kw["times"]
        self.halt.wait(max(0.0, self.t0 + FAULTS_UNTIL - time.monotonic()))
        with f._lock:       # what was never used (the Faults class keeps no history)
            for fault in f._faults:
                if fault.times is not None:
                    self.left[fault.kind] += fault.times
        f.clear()

    def fired(self):
        return {k: self.added[k] - self.left[k] for k in sorted(self.added)}


# -- the run --------------------------------------------------------------------------


class Run:
    def __init__(self, hub, blobs, srv, cache, tmp_path, listeners):
        self.hub, self.blobs, self.srv = hub, blobs, srv
        self.cache, self.tmp_path, self.listeners = cache, tmp_path, listeners
        self.address = srv.address
        self.t0 = time.monotonic()
        self.lock = threading.Lock()
        self.stats = collections.Counter()
        self.failures = collections.Counter()
        self.failure_samples = []
        self.wrong = []
        self.crashes = []
        self.kill = None

    # checking what clients completed against the Hub's bytes

    def record(self, out):
        with self.lock:
            self.stats[out.kind + " ops"] += 1
            if out.failed:
                key = "%s: %s" % (out.kind, re.sub(r"\d{4,}", "N", out.failed))
                self.failures[key] += 1
                if self.failures[key] <= 2:
                    self.failure_samples.append((key, out.name, round(time.monotonic() - self.t0, 1),
                                                 out.events[-8:]))
        blob = self.by_path(out.name)
        for body in out.files:
            ok = body == blob.data
            self._count(out.kind + " files", ok, out, blob, 0, len(blob.data) - 1, None, body)
        for start, stop, status, body in out.ranges:
            want = blob.data[start:min(stop, len(blob.data) - 1) + 1]
            self._count("ranges", body == want, out, blob, start, stop, status, body)
        for status, h in out.heads:
            if blob.lfs:
                ok = (h.get("x-linked-etag") == '"%s"' % blob.sha256
                      and h.get("x-linked-size") == str(len(blob.data)))
            else:
                ok = h.get("etag") == '"%s"' % blob.sha1
            ok = ok and h.get("content-length") == str(len(blob.data))
            self._count("heads", ok, out, blob, None, None, status, h)

    def _count(self, what, ok, out, blob, start, stop, status, body):
        with self.lock:
            self.stats[what] += 1
            if ok:
                return
            if isinstance(body, dict):
                self.wrong.append({"client": out.kind, "blob": blob.name, "headers": body})
                return
            want = blob.data[start:min(stop, len(blob.data) - 1) + 1]
            first, count = first_difference(body, want)
            self.wrong.append({
                "client": out.kind, "blob": blob.name, "size": len(blob.data),
                "range": None if what != "ranges" else "bytes=%d-%d" % (start, stop),
                "status": status, "got_bytes": len(body), "want_bytes": len(want),
                "first_bad_offset": None if first is None else start + first,
                "bad_bytes": count, "attempts": out.events[-12:]})

    def by_path(self, path):
        return next(b for b in self.blobs if b.path == path)

    def left(self):
        return self.t0 + RUN - time.monotonic()

    def deadline(self):
        return self.t0 + HARD_STOP

    # the clients

    def client(self, kind, no):
        rng = random.Random("%d-%s-%d" % (SEED, kind, no))
        pool = concurrent.futures.ThreadPoolExecutor(3) if kind == "hf_transfer" else None
        weights = [3 if b.lfs else 1 for b in self.blobs]
        try:
            for _ in range(MAX_OPS):
                if self.left() <= 0:
                    return
                blob = rng.choices(self.blobs, weights)[0]
                out = self.one(kind, rng, blob, pool)
                self.record(out)
                if out.failed:              # as a user or a job runner would: again, soon
                    time.sleep(rng.uniform(0.1, 0.3))
        except Exception as e:           # a bug in the client model: reported, not hidden
            with self.lock:
                self.crashes.append("%s-%d: %r" % (kind, no, e))
            raise
        finally:
            if pool is not None:
                pool.shutdown(wait=True)

    def one(self, kind, rng, blob, pool):
        a, dl = self.address, self.deadline()
        if kind == "head":
            return head_check(a, blob.path)
        if kind == "resume":
            return partial_resume(a, blob.path, len(blob.data), rng.randrange(1, len(blob.data)), dl)
        meta = head_check(a, blob.path)   # both clients ask for the metadata first
        meta.kind = kind + " head"
        if meta.failed:
            return meta
        self.record(meta)
        h = meta.heads[0][1]
        size = int(h.get("x-linked-size") or h.get("content-length"))
        if kind == "hf24":
            return hf24_get(a, blob.path, size, dl)
        # huggingface_hub 0.36 + hf_transfer: the final URL, a plain GET it abandons after the
        # head, then the probe and the parallel chunks
        try:
            request(a, "GET", meta.final, stop_after=0)
        except WireError:
            pass
        out = hf_transfer_get(a, meta.final, rng.choice((1 * MIB, 2 * MIB, 4 * MIB)), dl, pool)
        out.name = blob.path
        return out

    # kill -9 and restart on the same port

    def chaos(self):
        try:
            self._chaos()
        except Exception as e:
            self.kill = {"error": repr(e)[:2000]}
            raise

    def _chaos(self):
        time.sleep(max(0.0, self.t0 + KILL_AT - time.monotonic()))
        os.kill(self.srv.pid, signal.SIGKILL)
        rc = self.srv.shutdown()
        port = self.address[1]
        t = time.monotonic()
        for attempt in range(20):
            try:
                self.srv = start_pulsys(self.hub, self.cache, self.tmp_path, self.listeners, port=port)
                break
            except AssertionError:      # the port may still be held by a dying worker
                if attempt == 19:
                    raise
                time.sleep(0.25)
        self.kill = {"rc": rc, "at": round(KILL_AT, 1), "restart_seconds": round(time.monotonic() - t, 2),
                     "blobs_valid_at_restart": all(blob_files(self.cache).values())}


@pytest.mark.parametrize("listeners", [1, 2])
def test_fault_run(hub, tmp_path, listeners):
    print("fault run: seed=%d listeners=%d (PULSYS_FAULT_SEED=N to rerun with another plan)"
          % (SEED, listeners))
    rng = random.Random(SEED)
    blobs = make_blobs(rng)
    hub.add_repo(REPO, files={b.name: b.data for b in blobs})
    cache = str(tmp_path / "cache")
    srv = start_pulsys(hub, cache, tmp_path, listeners)
    run = Run(hub, blobs, srv, cache, tmp_path, listeners)
    injector = Injector(hub, fault_plan(rng, blobs), [b for b in blobs if b.lfs][1:3], run.t0)
    threads = [threading.Thread(target=run.client, args=(kind, i), name="%s-%d" % (kind, i), daemon=True)
               for kind, n in CLIENTS.items() for i in range(n)]
    chaos = threading.Thread(target=run.chaos, name="chaos", daemon=True)
    try:
        injector.start()
        chaos.start()
        for t in threads:
            t.start()
        for t in threads + [chaos]:
            t.join(run.t0 + HARD_STOP + 15 - time.monotonic())
        injector.halt.set()
        injector.join(5)
        hung = [t.name for t in threads + [chaos, injector] if t.is_alive()]
        client_seconds = time.monotonic() - run.t0

        # the server kept serving: once the fills in progress have ended, every file, clean
        srv = run.srv
        settled = wait_until(lambda: srv.vars(sync=False)["fills_in_flight"] == 0, 15, 0.1)
        final_bad = []
        for b in blobs:
            try:
                r, _ = follow(run.address, "GET", b.path)
                if not (r.status == 200 and r.complete and hashlib.sha256(r.body).hexdigest() == b.sha256):
                    final_bad.append((b.name, r.status, len(r.body), r.error))
            except WireError as e:
                final_bad.append((b.name, e.kind))
        v = srv.vars()
    finally:
        run.srv.stop()
        rc = run.srv.shutdown()
    p = verify(cache, "--json")
    rep = json.loads(p.stdout) if p.stdout.startswith("{") else {"stderr": p.stderr}

    summary = {
        "seed": SEED, "listeners": listeners, "wall_seconds": round(time.monotonic() - run.t0, 1),
        "client_seconds": round(client_seconds, 1),
        "clients": dict(CLIENTS), "completed": dict(sorted(run.stats.items())),
        "failed_operations": dict(sorted(run.failures.items())),
        "failure_samples": run.failure_samples[:40],
        "faults_added": dict(injector.added), "faults_fired": injector.fired(),
        "kill": run.kill, "fills_settled": settled,
        "server_after_restart": {k: v.get(k) for k in (
            "fills_started", "fills_completed", "fills_failed", "fill_refetches", "integrity_failures",
            "upstream_retries", "upstream_errors", "evictions", "quota_rejects", "stale_served",
            "cache_hits", "cache_misses", "bytes_served")},
        "verify": {k: rep.get(k) for k in ("blobs_checked", "problems", "stderr") if k in rep},
        "hub_errors": hub.server_errors[:3],
    }
    print(json.dumps(summary, indent=1, default=str))
    files = sum(n for k, n in run.stats.items() if k.endswith(" files"))
    problems = []
    if run.wrong:
        problems.append("%d completed bodies differ from the Hub's bytes:\n%s" % (
            len(run.wrong), "\n".join(json.dumps(w, default=str) for w in run.wrong[:20])))
    if run.crashes or hung:
        problems.append("client model crashed or hung: %s %s" % (run.crashes, hung))
    if files < MIN_FILES or run.stats["ranges"] < MIN_RANGES:
        problems.append("too little completed: %d files (min %d), %d ranges (min %d)"
                        % (files, MIN_FILES, run.stats["ranges"], MIN_RANGES))
    fired = injector.fired()
    if any(fired.get(k, 0) < 1 for k in ("drop", "reset", "hang", "status", "corrupt")):
        problems.append("not every fault kind fired: %s" % fired)
    if run.kill is None or run.kill.get("rc") != -signal.SIGKILL:
        problems.append("the kill -9 did not happen: %s" % run.kill)
    if final_bad:
        problems.append("the final clean round failed: %s" % final_bad)
    if rc != 0:
        problems.append("pulsys exited %s on SIGTERM" % rc)
    if hub.server_errors:
        problems.append("the fake Hub failed: %s" % hub.server_errors[:3])
    if p.returncode != 0 or rep.get("problems") != 0:
        problems.append("pulsys verify: rc %d %s %s" % (p.returncode, p.stdout[-2000:], p.stderr[-500:]))
    assert not problems, "seed=%d listeners=%d\n%s\n%s" % (
        SEED, listeners, "\n".join(problems), json.dumps(summary, default=str))


def test_a_resume_across_a_kill_never_completes_a_corrupt_file(hub, tmp_path):
    """What the fault run found (seed 20261201, --listeners 2): a client that read
    unverified bytes of a fill with a flipped byte holds them when pulsys is killed; the
    restarted pulsys fetches a good copy and answers the client's `bytes=<have>-` with a
    206, so the client completes a file of the right size with the wrong byte in it. The
    client here is the byte-granular resume client (huggingface_hub 2.4 does the same from
    a 10 MiB boundary): it must end with the Hub's bytes, by a 206 or by a 200 restart."""
    data = random.Random(SEED).randbytes(12 * MIB - 3)
    hub.add_repo("org/k9", files={"w.safetensors": data})
    sha = sha256_hex(data)
    hub.faults.throttle(2 * MIB, match=sha)          # the fill runs for seconds
    hub.faults.corrupt(times=1, match=sha)           # its first body: a byte flipped in the middle
    cache = str(tmp_path / "cache")
    path = "/org/k9/resolve/main/w.safetensors"
    srv = start_pulsys(hub, cache, tmp_path, 1)
    port = srv.address[1]
    have = 5 * MIB                                   # past the flipped byte (4 MiB into the 8 MiB piece)
    r = request(srv.address, "GET", path, stop_after=have)
    assert r.status == 200 and len(r.body) == have
    os.kill(srv.pid, signal.SIGKILL)
    assert srv.shutdown() == -signal.SIGKILL
    sha_path = os.path.join(cache, "v1", "blobs", "sha256", sha[:2], sha)
    assert not os.path.exists(sha_path)              # killed mid-fill: nothing was verified
    hub.faults.clear()
    srv = start_pulsys(hub, cache, tmp_path, 1, port=port)
    try:
        got = bytearray(r.body)
        for _ in range(6):
            r = request(srv.address, "GET", path, [("Range", "bytes=%d-" % len(got))])
            assert r.status in (200, 206), r.status
            if r.status == 200:
                del got[:]
            got += r.body
            if len(got) == len(data):
                break
        assert len(got) == len(data)
        first, count = first_difference(got, data)
        assert first is None, "the client completed a file with %d wrong byte(s), the first at %d" % (
            count, first)
    finally:
        srv.stop()
        srv.shutdown()
