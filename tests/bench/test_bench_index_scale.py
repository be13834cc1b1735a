"""scripts/bench_index_scale.py --quick runs end to end against this checkout only
(--no-before: no git worktree): a first start that imports the old-format cache, then
restarts with --listeners 1 and 2, each with a first warm hit, PSS and random warm hits,
and the random/hot throughput comparison; the JSON it writes has every field."""

import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPTS = os.path.join(ROOT, "scripts")
PROVENANCE = ["commit", "dirty", "date", "machine", "cpu_model", "cpus", "kernel", "system", "python",
              "python_build"]


def test_quick_run_measures_this_checkout(tmp_path):
    p = subprocess.run([sys.executable, "scripts/bench_index_scale.py", "--quick", "--no-before",
                        "--entries", "1500", "--out", str(tmp_path)],
                       cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    with open(tmp_path / "index_scale.json") as f:
        doc = json.load(f)
    assert all(k in doc for k in PROVENANCE) and doc["benchmark"] == "index_scale"
    assert doc["commit_at_start"] and len(doc["after_pulsys_sha256"]) == 64
    assert doc["parameters"]["entries"] == [1500] and doc["parameters"]["before_rev"] is None
    assert doc["builds"]["1500"]["entries_per_blob"] == 1 and doc["builds"]["1500"]["blobs"] == 1500
    runs = {(r["start"], r["listeners"]): r for r in doc["runs"]}
    assert set(runs) == {("first", 1), ("restart", 1), ("restart", 2)}
    assert all(r["version"] == "after" and r["status"] == "ok" for r in runs.values())

    first = runs["first", 1]
    assert first["index_load"]["from"] == "import-meta" and first["index_load"]["entries"] == 1500
    assert first["first_start_import_seconds"] > 0
    for L in (1, 2):
        r = runs["restart", L]
        assert r["index_load"]["from"] == "index" and r["index_load"]["entries"] == 1500
        assert 0 < r["first_hit_seconds"] <= r["ready_seconds"] + 1
        # --listeners 2: the server, its fork server and two workers (ADR 0014)
        assert r["after_first_hit"]["processes"] == r["after_warm_hits"]["processes"] == (1 if L == 1 else 4)
        assert r["after_first_hit"]["pss_bytes"] > 0 and r["after_warm_hits"]["pss_bytes"] > 0
        assert r["warm_hits"]["requests"] > 0 and r["warm_hits"]["errors"] == 0
        assert not r["stop_killed"]

    tp = runs["restart", 1]["throughput"]
    assert tp["random_req_per_s"] > 0 and tp["hot_req_per_s"] > 0 and tp["random_over_hot"] > 0
    assert {x["mode"] for x in tp["rounds"]} == {"random", "hot"} and all(x["errors"] == 0 for x in tp["rounds"])

    assert set(doc["targets"]) == {"pss_listeners8_le_1.5x_listeners1", "pss_1m_entries_lt_2GB",
                                   "first_warm_hit_within_1s", "random_over_hot_ge_0.8"}
    assert doc["targets"]["pss_1m_entries_lt_2GB"] is None          # not measured by a quick run
    assert isinstance(doc["targets"]["first_warm_hit_within_1s"], bool)


def test_old_format_cache_layout(tmp_path):
    """What the old version reads: meta/<d[:2]>/<d>.json with d = sha256(key)[:40], and
    blobs named by the sha256 of their bytes; entries share blobs when asked to."""
    import hashlib
    sys.path.insert(0, SCRIPTS)
    import bench_index_scale as S
    blobs = S.build_old_cache(str(tmp_path), 40, per_blob=10)
    assert len(blobs) == 4
    d = hashlib.sha256(S.entry_key(13).encode()).hexdigest()[:40]
    with open(tmp_path / "v1" / "meta" / d[:2] / (d + ".json")) as f:
        doc = json.load(f)
    sha, size = blobs[1]
    assert doc["type"] == "entry" and doc["immutable"] is True
    assert doc["entry"]["key"] == S.entry_key(13) and doc["entry"]["blob_id"] == "sha256/" + sha
    with open(tmp_path / "v1" / "blobs" / "sha256" / sha[:2] / sha, "rb") as f:
        body = f.read()
    assert len(body) == size == doc["entry"]["size"] and hashlib.sha256(body).hexdigest() == sha
    assert 100 <= size <= 4000
