#!/usr/bin/env python3
"""hf_xet through `pulsys --xet facade` (issue 19 item 4), in one run, rounds interleaved.

    python scripts/bench_xet.py                       # 256 MiB, 3 rounds
    python scripts/bench_xet.py --pace-mbps 50        # cold rows with the CAS pacing each connection

The same file (random bytes: weights compress little, so its chunks go uncompressed, as
most of a model's do on the Hub) is pulled with huggingface_hub 2.x `hf_hub_download`
by a fresh client cache each time:

  xet-direct          hf_xet straight from the fake Hub's CAS (pulsys/testing) in this process
  xet-pulsys-warm     hf_xet through pulsys, every xorb range already cached
  plain-pulsys-warm   HF_HUB_DISABLE_XET=1 through the same pulsys: plain HTTP, the file
                      already assembled and cached as a blob
  xet-pulsys-cold     hf_xet through a pulsys with an empty cache (each round a new one)
  plain-pulsys-cold   a plain client through a pulsys with an empty cache: the file
                      assembled from xorb ranges pulsys fetches (xet_plain.py)

With --pace-mbps, the CAS's xorb bodies are paced per connection (the fake Hub's
throttle fault), as the Hub's CDN paces each; the cold rows then say what pulsys's
one-fetch-per-range costs against hf_xet's own parallel fetches (xet-direct is paced too).
Per row: the client's time for hf_hub_download (inside its process: no interpreter start),
MB/s, pulsys's CPU seconds per GB (its process tree, /proc), and the CAS's xorb bytes per
file byte. Nothing is pinned; the fake CAS runs in this process on the same two cores,
so direct rows pay for it too. Results with provenance: results/<machine>/xet_<date>.json.
The client venv: the test suite's (~/.cache/pulsys-test-venvs/latest-*) or --client-python.
"""

import argparse
import datetime
import glob
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
sys.path.insert(0, ROOT)
import bench_compare as BC  # noqa: E402
from provenance import provenance, write_result  # noqa: E402

from pulsys.testing import fake_hub_xet as FX  # noqa: E402
from pulsys.testing.fake_hub import FakeHub  # noqa: E402

REPO = "bench/xet-model"
FILE = "model.safetensors"
CLIENT = r"""
import json, sys, time
from huggingface_hub import hf_hub_download
t = time.perf_counter()
path = hf_hub_download(sys.argv[1], sys.argv[2])
print(json.dumps({"seconds": time.perf_counter() - t, "path": path}))
"""
ROWS = ("xet-direct", "xet-pulsys-warm", "plain-pulsys-warm", "xet-pulsys-cold", "plain-pulsys-cold")


def default_client():
    found = sorted(glob.glob(os.path.expanduser("~/.cache/pulsys-test-venvs/latest-*/bin/python")))
    return found[-1] if found else None


class Pulsys:
    def __init__(self, hub, work):
        self.dir = tempfile.mkdtemp(prefix="bench-xet-", dir=work)
        self.port = BC.free_port()
        cmd = [sys.executable, "-m", "pulsys", "--listen", "127.0.0.1:%d" % self.port, "--admin-listen", "off",
               "--upstream", hub.url, "--allow-upstream-host", hub.cdn_netloc, "--allow-upstream-host",
               hub.xorb_url[len("http://"):], "--cache-dir", os.path.join(self.dir, "cache"), "--auth", "off",
               "--listeners", "1", "--log-format", "json", "--network-mbps", "0", "--xet", "facade"]
        env = {k: v for k, v in os.environ.items() if not k.startswith(("PULSYS_", "HF_"))}
        env["PYTHONPATH"] = ROOT
        self.proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                     start_new_session=True)
        BC.wait_port(self.port, self.proc)

    @property
    def url(self):
        return "http://127.0.0.1:%d" % self.port

    def cpu(self):
        return BC.tree_cpu_ticks(self.proc.pid) / os.sysconf("SC_CLK_TCK")

    def stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        shutil.rmtree(self.dir, ignore_errors=True)


def pull(python, endpoint, work, plain, max_time):
    home = tempfile.mkdtemp(prefix="bench-xet-client-", dir=work)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "HUGGINGFACE_"))
           and k.lower() not in ("http_proxy", "https_proxy", "all_proxy")}
    env.update(HF_ENDPOINT=endpoint, HF_HOME=home, HF_HUB_DISABLE_TELEMETRY="1", HF_XET_TELEMETRY_ENABLED="false",
               NO_PROXY="127.0.0.1,127.0.0.2,127.0.0.4,localhost", HF_HUB_DOWNLOAD_TIMEOUT="60")
    if plain:
        env["HF_HUB_DISABLE_XET"] = "1"
    try:
        cp = subprocess.run([python, "-c", CLIENT, REPO, FILE], env=env, capture_output=True, text=True,
                            timeout=max_time)
        if cp.returncode != 0:
            raise SystemExit("bench_xet: error: the client failed:\n" + cp.stderr[-2000:])
        out = json.loads(cp.stdout.strip().splitlines()[-1])
        with open(out["path"], "rb") as f:
            size = f.seek(0, 2)
        return out["seconds"], size
    finally:
        shutil.rmtree(home, ignore_errors=True)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--size-mib", type=int, default=256)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--pace-mbps", type=float, default=0.0, help="pace each CAS xorb connection (MB/s)")
    p.add_argument("--xorb-mib", type=int, default=64,
                   help="xorb size in the fake CAS (the Hub's uploads make xorbs of up to 64 MiB, §5)")
    p.add_argument("--client-python", default=default_client())
    p.add_argument("--max-time", type=float, default=300.0)
    p.add_argument("--out", default=None, help="result file name (default xet_<date>.json)")
    a = p.parse_args(argv)
    if not a.client_python or not os.path.exists(a.client_python):
        raise SystemExit("bench_xet: error: no huggingface_hub 2.x client venv: run the test suite once "
                         "(it builds ~/.cache/pulsys-test-venvs/latest-*) or give --client-python")
    FX.XORB_CHUNKS = max(1, (a.xorb_mib << 20) // FX.CHUNK)
    rng = random.Random(42)
    data = b"".join(rng.randbytes(1 << 20) for _ in range(a.size_mib))
    work = tempfile.mkdtemp(prefix="bench-xet-")
    hub = FakeHub(xet=True, record_requests=False).start()
    rows = {r: [] for r in ROWS}
    try:
        hub.add_repo(REPO, files={FILE: data})
        if a.pace_mbps:
            hub.faults.throttle(a.pace_mbps * 1e6, match="/xorbs/")
        warm = Pulsys(hub, work)
        pull(a.client_python, warm.url, work, False, a.max_time)      # fills the warm pulsys
        pull(a.client_python, warm.url, work, True, a.max_time)       # and its assembled blob
        for _ in range(a.rounds):
            for row in ROWS:
                server = warm if "warm" in row else None if row == "xet-direct" else Pulsys(hub, work)
                before_cpu = server.cpu() if server else 0.0
                before_xorb = hub.xorb_bytes()
                secs, size = pull(a.client_python, server.url if server else hub.url, work, row.startswith("plain"),
                                  a.max_time)
                assert size == len(data), (row, size)
                cpu = server.cpu() - before_cpu if server else None
                rows[row].append({"seconds": secs, "mb_s": size / secs / 1e6,
                                  "server_cpu_s_per_gb": cpu / (size / 1e9) if cpu is not None else None,
                                  "xorb_bytes_per_byte": (hub.xorb_bytes() - before_xorb) / size})
                if server is not None and server is not warm:
                    server.stop()
        warm.stop()
    finally:
        hub.stop()
        shutil.rmtree(work, ignore_errors=True)
    summary = {r: {"median_mb_s": statistics.median(x["mb_s"] for x in v),
                   "median_server_cpu_s_per_gb": (statistics.median(x["server_cpu_s_per_gb"] for x in v)
                                                  if v[0]["server_cpu_s_per_gb"] is not None else None),
                   "median_xorb_bytes_per_byte": statistics.median(x["xorb_bytes_per_byte"] for x in v)}
               for r, v in rows.items()}
    d = summary["xet-direct"]["median_mb_s"]
    ratios = {"xet-pulsys-warm/xet-direct": summary["xet-pulsys-warm"]["median_mb_s"] / d,
              "xet-pulsys-warm/plain-pulsys-warm": summary["xet-pulsys-warm"]["median_mb_s"]
              / summary["plain-pulsys-warm"]["median_mb_s"],
              "xet-pulsys-cold/xet-direct": summary["xet-pulsys-cold"]["median_mb_s"] / d}
    doc = provenance(benchmark="bench_xet", size_bytes=len(data), rounds=a.rounds, pace_mbps=a.pace_mbps,
                     xorb_bytes=FX.XORB_CHUNKS * FX.CHUNK, loadavg_at_end=os.getloadavg(),
                     client=subprocess.run([a.client_python, "-c", "from importlib.metadata import version as v; "
                                            "print('huggingface_hub', v('huggingface_hub'), 'hf_xet', v('hf_xet'))"],
                                           capture_output=True, text=True).stdout.strip(),
                     rows=rows, summary=summary, ratios=ratios)
    name = a.out or "xet_%s%s_xorb%dm.json" % (datetime.date.today().isoformat(), "_paced" if a.pace_mbps else "",
                                                a.xorb_mib)
    print(json.dumps({"summary": summary, "ratios": ratios}, indent=1))
    print("wrote", write_result(name, doc))


if __name__ == "__main__":
    main()
