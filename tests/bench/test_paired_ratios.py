"""scripts/paired_ratios.py: any two variants of a bench_warm results file, round by round."""

import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, "scripts", "paired_ratios.py")


def _run(*args):
    return subprocess.run([sys.executable, SCRIPT] + list(args), capture_output=True, text=True, timeout=60)


def _results(tmp_path):
    # a:b per round 1.0, 1.1, 1.2, 1.3 (CPU); b's user part unread in one round
    doc = {"results": [
        {"variant": "ref:p2", "server_cpu_us_per_req": [6.0, 6.6, 7.2, 7.8],
         "server_user_us_per_req": [1.0, 1.0, 1.0, 1.0], "server_system_us_per_req": [5.0, 5.6, 6.2, 6.8]},
        {"variant": "b", "server_cpu_us_per_req": [6.0, 6.0, 6.0, 6.0],
         "server_user_us_per_req": [1.0, None, 1.0, 0.5], "server_system_us_per_req": [5.0, 5.0, 5.0, 5.0]}]}
    path = tmp_path / "warm.json"
    path.write_text(json.dumps(doc))
    return str(path)


def test_ratios_are_paired_by_round_with_quartiles_and_differences(tmp_path):
    p = _run(_results(tmp_path), "ref:p2/b", "--json")
    assert p.returncode == 0, p.stderr
    got = json.loads(p.stdout)["ref:p2/b"]
    assert got["cpu"] == {"median": 1.15, "q1": 1.075, "q3": 1.225, "diff_us": 0.9, "n": 4}
    assert got["user"]["n"] == 3 and got["user"]["median"] == 1.0     # the unread round left out
    assert got["system"]["diff_us"] == 0.9
    text = _run(_results(tmp_path), "ref:p2/b").stdout
    assert "median x1.150 (quartiles 1.075-1.225)  difference +0.900 us  (4 rounds)" in text


def test_unknown_variants_and_files_are_clear_errors(tmp_path):
    p = _run(_results(tmp_path), "ref:p2/c")
    assert p.returncode == 2 and "no variant 'c'" in p.stderr and "it has: ref:p2, b" in p.stderr
    assert "Traceback" not in p.stderr
    p = _run(str(tmp_path / "none.json"), "a/b")
    assert p.returncode == 2 and "is not a bench_warm results file" in p.stderr
    (tmp_path / "bad.json").write_text("[1, 2]")
    p = _run(str(tmp_path / "bad.json"), "a/b")
    assert p.returncode == 2 and "is not a bench_warm results file" in p.stderr and "Traceback" not in p.stderr
