"""`pulsys doctor` and the start-up write-ceiling warning, on this machine's real disk,
loopback and the fake Hub."""

import json
import os
import subprocess
import sys
import time

import pytest

from pulsys import doctor
from pulsys.cli.doctor import parse_size, render

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
KEYS = ("write_MBps", "read_cold_MBps", "read_warm_MBps", "serve_MBps", "upstream_MBps", "fill_MBps", "binding",
        "model_bytes", "expected_seconds")


def run_doctor(*args, timeout=120):
    return subprocess.run([sys.executable, "-m", "pulsys", "doctor", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=timeout)


def test_json_has_every_key_and_the_slowest_stage_binds(tmp_path, hub):
    hub.add_repo("org/big", files={"w.bin": os.urandom(24 << 20)}, lfs={"w.bin"})
    p = run_doctor("--cache-dir", str(tmp_path), "--size", "32MiB", "--seconds", "3", "--model-size", "140GB",
                   "--probe-url", hub.url + "/org/big/resolve/main/w.bin", "--json")
    assert p.returncode == 0, p.stderr
    r = json.loads(p.stdout)
    assert all(k in r for k in KEYS)
    rates = {"disk_write": r["write_MBps"], "disk_read": r["read_cold_MBps"], "serve": r["serve_MBps"],
             "upstream": r["upstream_MBps"], "fill": r["fill_MBps"]}
    assert all(isinstance(v, float) and v > 0 for v in rates.values()), rates
    assert r["read_warm_MBps"] > 0 and r["model_bytes"] == 140 * 10**9
    assert r["binding"] == min(rates, key=rates.get)
    assert r["expected_seconds"] == pytest.approx(140e9 / (rates[r["binding"]] * 1e6), rel=0.01)
    assert r["test_bytes"] >= 32 << 20
    assert [n for n in os.listdir(tmp_path) if n.startswith(".pulsys-doctor")] == []   # cleaned up


def test_human_output_names_the_binding_stage(tmp_path):
    p = run_doctor("--cache-dir", str(tmp_path), "--size", "16MiB", "--seconds", "2", "--model-size", "1GB")
    assert p.returncode == 0, p.stderr
    assert "disk write (fdatasync'd)" in p.stdout and "<- binds" in p.stdout
    assert "1.0 GB lands in about" in p.stdout
    assert "upstream" in p.stdout and "not measured" in p.stdout
    assert "fill engine (local origin)" in p.stdout


@pytest.mark.parametrize("args,msg", [
    (["--model-size", "banana"], "not a size"),
    (["--seconds", "0"], "seconds must be"),
    (["--probe-file", "justonepart"], "--probe-file must be ORG/NAME/PATH"),
])
def test_bad_input_is_one_line_and_exit_2(tmp_path, args, msg):
    p = run_doctor("--cache-dir", str(tmp_path), *args)
    assert p.returncode == 2 and msg in p.stderr and len(p.stderr.strip().splitlines()) == 1, p.stderr
    assert "Traceback" not in p.stderr


def test_unusable_cache_dir_and_unreachable_upstream_are_one_line(tmp_path):
    f = tmp_path / "a-file"
    f.write_text("x")
    p = run_doctor("--cache-dir", str(f / "sub"), "--size", "4MiB", "--seconds", "1")
    assert p.returncode == 2 and p.stderr.startswith("pulsys doctor: error:") and "Traceback" not in p.stderr
    p = run_doctor("--cache-dir", str(tmp_path), "--size", "4MiB", "--seconds", "1",
                   "--probe-url", "http://127.0.0.1:9/nothing-listens-here")
    assert p.returncode == 2 and "upstream probe failed" in p.stderr and "Traceback" not in p.stderr


def test_verdict_and_rendering():
    r = doctor.verdict({"cache_dir": "/c", "write_MBps": 125.0, "read_cold_MBps": 900.0, "read_warm_MBps": 5000.0,
                        "serve_MBps": 2000.0, "upstream_MBps": None, "network_MBps": 1250.0, "notes": []},
                       140 * 10**9)
    assert r["binding"] == "disk_write" and r["expected_seconds"] == 1120.0
    text = render(r)
    assert "18min 40s: disk write binds at 125.0 MB/s" in text
    assert "note: the cache dir sustains 125 MB/s" in text     # far below the 1250 MB/s link
    assert doctor.verdict({"write_MBps": None}, 1)["binding"] is None
    r = doctor.verdict({"cache_dir": "/c", "write_MBps": 2000.0, "read_cold_MBps": 3000.0, "serve_MBps": 4000.0,
                        "upstream_MBps": 1200.0, "fill_MBps": 450.0, "notes": []}, 45 * 10**9)
    assert r["binding"] == "fill" and "the fill engine (receive, hash, write) binds at 450.0 MB/s" in render(r)


def test_the_fill_ceiling_is_a_real_verified_fill(tmp_path):
    from pulsys.upstream import fill_ceiling
    assert fill_ceiling.measure(str(tmp_path), 20 << 20, 4, 30) > 0     # 3 pieces: read-ahead too
    assert os.listdir(tmp_path) == []                                    # origin file and cache gone


def test_sizes():
    assert parse_size("140GB") == 140 * 10**9 and parse_size("10GiB") == 10 << 30
    assert parse_size("512M") == 512 * 10**6 and parse_size("1000") == 1000 and parse_size("1.5KiB") == 1536


def test_network_speed_from_sysfs(tmp_path):
    for name, speed in (("lo", "100000"), ("eth0", "10000"), ("eth1", "-1"), ("wg0", "junk")):
        (tmp_path / name).mkdir()
        (tmp_path / name / "speed").write_text(speed + "\n")
    (tmp_path / "veth9").mkdir()                       # no speed file at all
    assert doctor.network_MBps(str(tmp_path)) == 1250.0   # 10 Gbit/s; loopback ignored
    assert doctor.network_MBps(str(tmp_path / "missing")) is None
    assert doctor.write_ceiling_warning(700.0, 1250.0) is None and doctor.write_ceiling_warning(600.0, 1250.0)
    assert doctor.write_ceiling_warning(None, 1250.0) is None and doctor.write_ceiling_warning(100.0, None) is None


def test_server_warns_at_start_when_the_disk_is_far_slower_than_the_network(tmp_path, hub):
    """--network-mbps stands for a link no disk here can match (10 TB/s), so the start-up
    check must warn; with 0 it must stay silent."""
    def start(mbps):
        return subprocess.Popen([sys.executable, "-m", "pulsys", "--listen", "127.0.0.1:0", "--admin-listen", "off",
                                 "--upstream", hub.url, "--cache-dir", str(tmp_path / "c"), "--auth", "off",
                                 "--log-format", "json", "--network-mbps", mbps],
                                cwd=ROOT, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
    for mbps, expect in (("10000000", True), ("0", False)):
        p = start(mbps)
        try:
            lines, deadline = [], time.monotonic() + 30
            while time.monotonic() < deadline:
                line = p.stderr.readline()
                if not line:
                    break
                lines.append(line)
                if "network delivers up to" in line or ("pulsys started" in line and not expect):
                    break
            warned = any("network delivers up to 10000000 MB/s" in l for l in lines)
            assert warned == expect, lines
            if expect:
                rec = json.loads(next(l for l in lines if "network delivers" in l))
                assert rec["level"] == "warning" and rec["write_MBps"] > 0
        finally:
            p.terminate()
            p.wait(15)
