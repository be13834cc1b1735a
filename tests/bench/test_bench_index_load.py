"""scripts/bench_index_load.py runs end to end on a small synthetic cache in the format
pulsys before the LMDB index wrote: every import sees every entry, a reopen finds the
imported index, and --before times that older version's Store.load on the same cache
(from its metadata files and from its snapshot)."""

import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BEFORE = "4ada1f0"      # the last version that read v1/meta/ at every start


def test_small_run_imports_every_entry_and_times_the_old_loader(tmp_path):
    keep = str(tmp_path / "cache")
    p = subprocess.run([sys.executable, "scripts/bench_index_load.py", "--entries", "300",
                        "--rounds", "1", "--no-write", "--keep", keep, "--before", BEFORE],
                       cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout.strip().splitlines()[-1])
    assert out["entries"] == 300
    assert out["import_from_metadata_files"]["load_seconds"][0] > 0
    assert out["reopen_index"]["load_seconds"][0] > 0
    before = out["before"]
    assert before["commit"].startswith(BEFORE)
    assert before["from_metadata_files"]["load_seconds"][0] > 0
    assert before["from_snapshot"]["load_seconds"][0] > 0 and before["snapshot_write_seconds"] > 0
    # the old-format cache the script built, untouched (every load ran on a copy)
    metas = sum(len(fs) for _, _, fs in os.walk(os.path.join(keep, "v1", "meta")))
    assert metas == 303 and not os.path.exists(os.path.join(keep, "v1", "index"))


def test_every_load_sees_every_entry(tmp_path):
    """The rounds themselves, not only the summary: 300 entries and 3 revision mappings."""
    sys.path.insert(0, os.path.join(ROOT, "scripts"))
    import bench_index_load as B
    import bench_index_scale as S
    base = str(tmp_path / "old")
    S.build_old_cache(base, 300)
    S.link_copy(base, str(tmp_path / "copy"))
    r = B.run(B.OPEN, ROOT, 60, str(tmp_path / "copy"))
    assert (r["from"], r["entries_in_index"], r["revisions_in_index"]) == ("import-meta", 300, 3)
    r = B.run(B.OPEN, ROOT, 60, str(tmp_path / "copy"))
    assert (r["from"], r["entries_in_index"], r["revisions_in_index"]) == ("index", 300, 3)


def test_bad_arguments_are_refused():
    p = subprocess.run([sys.executable, "scripts/bench_index_load.py", "--entries", "0"],
                       cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and "--entries" in p.stderr
