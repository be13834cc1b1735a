"""Time the start-up index rebuild (Store.load) on a synthetic cache of N entries.

Builds a cache directory in a temporary directory: N FILE entries at a commit, each
with its own small verified blob (100-4000 bytes, so the in-memory small-body budget
is exercised), plus N/100 revision mappings. Then runs `Store.load` in a fresh Python
process `--rounds` times from the metadata files, writes the index snapshot a clean
shutdown writes, and runs `Store.load` `--rounds` times from that (the page cache is
warm after the first round: this measures pulsys's own work, not the disk). With
`--before REV`, the loader of pulsys/cache/store.py at git revision REV is timed on the
same directory in the same run, for a before/after comparison. Writes
results/<machine>/index_load.json.

    python scripts/bench_index_load.py [--entries 100000] [--rounds 3] [--before REV]
"""

import argparse
import hashlib
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "scripts"))

from provenance import provenance, write_result  # noqa: E402
from pulsys.cache.store import Store  # noqa: E402
from pulsys.model import target as T  # noqa: E402
from pulsys.model.entry import FILE, Entry  # noqa: E402
from pulsys.model.key import rev_key, target_key  # noqa: E402

LOAD = """
import json, sys, time
sys.path.insert(0, %r)
t0 = time.perf_counter()
from pulsys.cache.index import Index
if len(sys.argv) > 3:                       # an older store.py, for --before
    sys.path.insert(0, sys.argv[3])
    from store_before import Store
else:
    from pulsys.cache.store import Store
t1 = time.perf_counter()
st = Store(sys.argv[1])
ix = Index()
stats = st.load(ix, 60.0, time.monotonic())
t2 = time.perf_counter()
out = {"import_seconds": t1 - t0, "load_seconds": t2 - t1, "stats": list(stats),
       "entries_in_index": len(ix), "revisions_in_index": len(ix.revs),
       "from": getattr(st, "loaded_from", "meta")}
if sys.argv[2] == "write-snapshot":
    from pulsys.cache import snapshot
    snapshot.write(st, ix, {}, 60.0, time.monotonic(), time.time())
    out["snapshot_write_seconds"] = time.perf_counter() - t2
print(json.dumps(out))
"""


def build(cache_dir, n, seed=1):
    """A synthetic cache: n entries, n blobs, n // 100 revision mappings. No fsync: this is
    test data, written the way Store writes it but without paying for durability."""
    rnd = random.Random(seed)
    st = Store(cache_dir)
    commit = hashlib.sha1(b"commit").hexdigest()
    now = time.time()
    for i in range(n):
        body = rnd.randbytes(rnd.randint(100, 4000))
        sha = hashlib.sha256(body).hexdigest()
        blob_id = "sha256/" + sha
        path = st.blob_path(blob_id)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(body)
        t = T.Target(T.RESOLVE, "model", "org/repo%d" % (i // 50), commit, "dir/file-%d.safetensors" % i)
        e = Entry(FILE, target_key(t), len(body), sha, commit, True, blob_id, None,
                  "application/octet-stream")
        doc = {"type": "entry", "fetched_at": now, "immutable": True, "entry": e.to_json()}
        mp = st._meta_path(e.key)
        os.makedirs(os.path.dirname(mp), exist_ok=True)
        with open(mp, "w") as f:
            json.dump(doc, f, separators=(",", ":"))
    for j in range(max(1, n // 100)):
        repo = "org/repo%d" % j
        key = rev_key("model", repo, "main")
        doc = {"type": "rev", "key": key, "rtype": "model", "repo": repo, "rev": "main",
               "commit": commit, "fetched_at": now}
        mp = st._meta_path(key)
        os.makedirs(os.path.dirname(mp), exist_ok=True)
        with open(mp, "w") as f:
            json.dump(doc, f, separators=(",", ":"))


def load_once(cache_dir, timeout, then="-", module_dir=None):
    argv = [sys.executable, "-c", LOAD % ROOT, cache_dir, then] + ([module_dir] if module_dir else [])
    out = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=True)
    return json.loads(out.stdout)


def old_store(rev, into):
    """pulsys/cache/store.py at git revision `rev`, as module store_before in `into`."""
    src = subprocess.run(["git", "show", "%s:pulsys/cache/store.py" % rev], cwd=ROOT, check=True,
                         capture_output=True, text=True, timeout=30).stdout
    with open(os.path.join(into, "store_before.py"), "w") as f:
        f.write(src)
    return subprocess.run(["git", "rev-parse", rev], cwd=ROOT, check=True, capture_output=True,
                          text=True, timeout=30).stdout.strip()


def summary(rounds):
    loads = sorted(r["load_seconds"] for r in rounds)
    return {"load_seconds": [round(x, 3) for x in loads],
            "load_seconds_median": round(loads[len(loads) // 2], 3)}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--entries", type=int, default=100000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--timeout", type=float, default=300.0, help="seconds allowed per load")
    ap.add_argument("--keep", metavar="DIR", help="build the cache here and keep it")
    ap.add_argument("--before", metavar="REV", help="also time store.py of this git revision")
    ap.add_argument("--no-write", action="store_true", help="print only; write no results file")
    a = ap.parse_args()
    if not 1 <= a.entries <= 1000000 or not 1 <= a.rounds <= 10:
        ap.error("--entries must be 1..1000000 and --rounds 1..10")
    base = a.keep or tempfile.mkdtemp(prefix="pulsys-index-load-")
    try:
        t0 = time.perf_counter()
        build(base, a.entries)
        build_s = time.perf_counter() - t0
        before = None
        if a.before:
            mod_dir = tempfile.mkdtemp(prefix="pulsys-store-before-")
            before_commit = old_store(a.before, mod_dir)
            before = [load_once(base, a.timeout, "-", mod_dir) for _ in range(a.rounds)]
            shutil.rmtree(mod_dir, ignore_errors=True)
        meta = [load_once(base, a.timeout) for _ in range(a.rounds)]
        written = load_once(base, a.timeout, "write-snapshot")
        snap = [load_once(base, a.timeout) for _ in range(a.rounds)]
    finally:
        if not a.keep:
            shutil.rmtree(base, ignore_errors=True)
    assert all(r["from"] == "meta" for r in meta) and all(r["from"] == "snapshot" for r in snap)
    doc = provenance(benchmark="index_load", entries=a.entries, revisions=max(1, a.entries // 100),
                     blob_bytes="100-4000 each", build_seconds=round(build_s, 2),
                     from_metadata_files=dict(summary(meta), rounds=meta),
                     from_snapshot=dict(summary(snap), rounds=snap),
                     snapshot_write_seconds=round(written["snapshot_write_seconds"], 3),
                     note="page cache warm after round 1; Store.load in a fresh process each round")
    if before:
        doc["before"] = dict(summary(before), rounds=before, store_py_at=before_commit)
    print(json.dumps({"entries": a.entries, "before": before and summary(before),
                      "from_metadata_files": summary(meta), "from_snapshot": summary(snap),
                      "snapshot_write_seconds": doc["snapshot_write_seconds"]}))
    if not a.no_write:
        print("wrote", write_result("index_load.json", doc))


if __name__ == "__main__":
    main()
