"""scripts/bench_index_load.py runs end to end on a small synthetic cache: both load
paths see every entry, and --before times an older store.py on the same directory."""

import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_small_run_loads_every_entry_both_ways(tmp_path):
    keep = str(tmp_path / "cache")
    p = subprocess.run([sys.executable, "scripts/bench_index_load.py", "--entries", "300",
                        "--rounds", "1", "--no-write", "--keep", keep, "--before", "HEAD"],
                       cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout.strip().splitlines()[-1])
    assert out["entries"] == 300 and out["before"]["load_seconds"][0] > 0
    assert out["from_metadata_files"]["load_seconds"][0] > 0
    assert out["from_snapshot"]["load_seconds"][0] > 0
    metas = sum(len(fs) for _, _, fs in os.walk(os.path.join(keep, "v1", "meta")))
    assert metas == 303 and os.path.exists(os.path.join(keep, "v1", "index-snapshot.json"))


def test_bad_arguments_are_refused():
    p = subprocess.run([sys.executable, "scripts/bench_index_load.py", "--entries", "0"],
                       cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and "--entries" in p.stderr
