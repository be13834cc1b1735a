"""Time opening the index of a synthetic cache of N entries, in a fresh process each round.

Builds, in a temporary directory, the cache pulsys before the LMDB index wrote
(scripts/bench_index_scale.py build_old_cache: N FILE entries at a commit, each with its
own small verified blob of 100-4000 bytes, N/100 revision mappings, one JSON file each
under v1/meta/). Then times `open_index` (pulsys/cache/index_import.py) `--rounds` times:

  - import: on a fresh hard-linked copy of that directory each round, what the first
    start of this version does (reads every metadata file into LMDB);
  - reopen: on the imported directory, what every later start does.

With `--before REV`, `Store.load` of pulsys at git revision REV (from a git worktree in a
temporary directory) is timed on the same cache: from the metadata files, and from the
index snapshot that version writes at a clean shutdown. The page cache is warm after the
first round: this measures pulsys's own work, not the disk. Writes
results/<machine>/index_load.json. Servers, memory and hit rates: bench_index_scale.py.

    python scripts/bench_index_load.py [--entries 100000] [--rounds 3] [--before REV]
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "scripts"))

from bench_index_scale import before_tree, build_old_cache, link_copy, server_env  # noqa: E402
from provenance import provenance, write_result  # noqa: E402

OPEN = """
import json, sys, time
t0 = time.perf_counter()
from pulsys.cache.index_import import open_index
from pulsys.cache.store import Store
class Quiet:
    def info(self, *a, **k): pass
    warning = info
t1 = time.perf_counter()
ix, stats = open_index(Store(sys.argv[1]), 60.0, Quiet())
t2 = time.perf_counter()
print(json.dumps({"import_seconds": t1 - t0, "load_seconds": t2 - t1, "entries_in_index": len(ix),
                  "revisions_in_index": ix.rev_count(), "from": stats["from"]}))
"""

LOAD_BEFORE = """
import json, sys, time
t0 = time.perf_counter()
from pulsys.cache.index import Index
from pulsys.cache.store import Store
t1 = time.perf_counter()
st = Store(sys.argv[1])
ix = Index()
stats = st.load(ix, 60.0, time.monotonic())
t2 = time.perf_counter()
out = {"import_seconds": t1 - t0, "load_seconds": t2 - t1, "stats": list(stats),
       "entries_in_index": len(ix), "revisions_in_index": len(ix.revs), "from": st.loaded_from}
if sys.argv[2] == "write-snapshot":
    from pulsys.cache import snapshot
    snapshot.write(st, ix, {}, 60.0, time.monotonic(), time.time())
    out["snapshot_write_seconds"] = time.perf_counter() - t2
print(json.dumps(out))
"""


def run(code, tree, timeout, *args):
    p = subprocess.run([sys.executable, "-c", code, *args], cwd=tree, env=server_env(tree),
                       capture_output=True, text=True, timeout=timeout)
    if p.returncode != 0:
        raise SystemExit("bench: error: a load failed:\n%s" % p.stderr[-2000:])
    return json.loads(p.stdout.strip().splitlines()[-1])


def summary(rounds):
    loads = sorted(r["load_seconds"] for r in rounds)
    # microseconds: reopening the LMDB index takes well under a millisecond
    return {"load_seconds": [round(x, 6) for x in loads],
            "load_seconds_median": round(loads[len(loads) // 2], 6)}


def without_rounds(d):
    if not isinstance(d, dict):
        return d
    return {k: without_rounds(v) for k, v in d.items() if k != "rounds"}


def time_before(rev, base, work, a):
    with before_tree(rev) as (tree, sha):
        cache = os.path.join(work, "before")
        link_copy(base, cache)
        meta = [run(LOAD_BEFORE, tree, a.timeout, cache, "-") for _ in range(a.rounds)]
        written = run(LOAD_BEFORE, tree, a.timeout, cache, "write-snapshot")
        snap = [run(LOAD_BEFORE, tree, a.timeout, cache, "-") for _ in range(a.rounds)]
    assert all(r["from"] == "meta" for r in meta) and all(r["from"] == "snapshot" for r in snap)
    assert all(r["entries_in_index"] == a.entries for r in meta + snap), meta + snap
    return {"commit": sha, "from_metadata_files": dict(summary(meta), rounds=meta),
            "from_snapshot": dict(summary(snap), rounds=snap),
            "snapshot_write_seconds": round(written["snapshot_write_seconds"], 3)}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--entries", type=int, default=100000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--timeout", type=float, default=300.0, help="seconds allowed per load")
    ap.add_argument("--keep", metavar="DIR", help="build the old-format cache here and keep it")
    ap.add_argument("--before", metavar="REV", help="also time Store.load of this git revision")
    ap.add_argument("--no-write", action="store_true", help="print only; write no results file")
    a = ap.parse_args()
    if not 1 <= a.entries <= 1000000 or not 1 <= a.rounds <= 10:
        ap.error("--entries must be 1..1000000 and --rounds 1..10")
    work = tempfile.mkdtemp(prefix="pulsys-index-load-")
    base = a.keep or os.path.join(work, "old-format")
    try:
        t0 = time.perf_counter()
        build_old_cache(base, a.entries)
        build_s = time.perf_counter() - t0
        before = time_before(a.before, base, work, a) if a.before else None
        imports = []
        for i in range(a.rounds):
            cache = os.path.join(work, "import-%d" % i)
            link_copy(base, cache)
            imports.append(run(OPEN, ROOT, a.timeout, cache))
        reopens = [run(OPEN, ROOT, a.timeout, cache) for _ in range(a.rounds)]
    finally:
        shutil.rmtree(work, ignore_errors=True)
    assert all(r["from"] == "import-meta" for r in imports) and all(r["from"] == "index" for r in reopens)
    assert all(r["entries_in_index"] == a.entries for r in imports + reopens), imports + reopens
    doc = provenance(benchmark="index_load", entries=a.entries, revisions=max(1, a.entries // 100),
                     blob_bytes="100-4000 each", build_seconds=round(build_s, 2),
                     import_from_metadata_files=dict(summary(imports), rounds=imports),
                     reopen_index=dict(summary(reopens), rounds=reopens),
                     note="page cache warm after round 1; open_index in a fresh process each round")
    if before:
        doc["before"] = before
    print(json.dumps(without_rounds({k: doc.get(k) for k in ("entries", "import_from_metadata_files",
                                                             "reopen_index", "before")})))
    if not a.no_write:
        print("wrote", write_result("index_load.json", doc))


if __name__ == "__main__":
    main()
