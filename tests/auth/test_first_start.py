"""A first start with the default --auth required, as `scripts/serve.sh` runs it: pulsys
creates an admin key, prints it once on stdout with the exact export lines, keeps it out
of the logs, and the key works; a restart prints nothing new."""

import json
import os
import re
import signal
import subprocess
import sys
import time

import pytest

from tests.auth.conftest import call
from tests.conftest import ROOT

EXPORTS = re.compile(r"^export HF_ENDPOINT=(\S+)\nexport HF_TOKEN=(hf_pulsys[0-9a-f]{12}[A-Za-z0-9]{43})$", re.M)


class Run:
    def __init__(self, hub, cache, tmp, listeners, n):
        env = {k: v for k, v in os.environ.items() if not k.startswith(("PULSYS_", "HF_"))}
        self.out, self.err = tmp / ("out%d" % n), tmp / ("err%d" % n)
        with open(self.out, "wb") as o, open(self.err, "wb") as e:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "pulsys", "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0",
                 "--upstream", hub.url, "--allow-upstream-host", hub.cdn_netloc, "--cache-dir", str(cache),
                 "--listeners", str(listeners), "--log-format", "json"],
                cwd=ROOT, env=env, stdin=subprocess.DEVNULL, stdout=o, stderr=e)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            for line in self.err.read_text().splitlines():
                if '"pulsys started"' in line:
                    started = json.loads(line)
                    self.url, self.admin = started["listen"], started["admin"]
                    return
            assert self.proc.poll() is None, self.err.read_text()
            time.sleep(0.05)
        self.stop()
        raise AssertionError("pulsys did not start:\n" + self.err.read_text())

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        assert self.proc.wait(15) == 0


@pytest.mark.parametrize("listeners", [1, 2])
def test_first_start_prints_an_admin_key_once(hub, tmp_path, listeners):
    hub.add_repo("org/m", files={"w.safetensors": b"w" * 5000}, lfs={"w.safetensors"})
    cache = tmp_path / "cache"
    run = Run(hub, cache, tmp_path, listeners, 1)
    try:
        out = run.out.read_text()
        (endpoint, key), = EXPORTS.findall(out)
        assert endpoint == run.url
        assert key not in run.err.read_text()                      # never in the logs
        assert call(run.url + "/org/m/resolve/main/w.safetensors")[0] == 401
        st, _, body = call(run.url + "/org/m/resolve/main/w.safetensors", key=key)
        assert st == 200 and body == b"w" * 5000
        st, _, me = call(run.admin + "/api/v1/whoami", key=key)
        assert st == 200 and me["scope"] == "admin"
    finally:
        run.stop()
    again = Run(hub, cache, tmp_path, 3 - listeners, 2)
    try:
        assert again.out.read_text() == ""                          # no new key, nothing printed
        st, _, body = call(again.url + "/org/m/resolve/main/w.safetensors", key=key)
        assert st == 200 and body == b"w" * 5000
    finally:
        again.stop()


@pytest.mark.parametrize("taken", ["listen", "admin-listen"])
def test_a_first_start_that_cannot_bind_leaves_the_key_to_the_next_start(hub, tmp_path, taken):
    """A port in use ends the first start with an error; the key is made only once every
    socket is bound, so the next start still is a first start and shows one that works."""
    import socket
    hub.add_repo("org/m", files={"w.safetensors": b"w" * 5000}, lfs={"w.safetensors"})
    cache = tmp_path / "cache"
    held = socket.socket()
    held.bind(("127.0.0.1", 0))
    held.listen(1)
    ports = {"listen": "127.0.0.1:0", "admin-listen": "127.0.0.1:0"}
    ports[taken] = "127.0.0.1:%d" % held.getsockname()[1]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PULSYS_", "HF_"))}
    try:
        p = subprocess.run([sys.executable, "-m", "pulsys", "--listen", ports["listen"],
                            "--admin-listen", ports["admin-listen"], "--upstream", hub.url,
                            "--allow-upstream-host", hub.cdn_netloc, "--cache-dir", str(cache)],
                           cwd=ROOT, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=60)
    finally:
        held.close()
    assert p.returncode != 0 and p.stdout == "" and "Traceback" not in p.stderr
    assert "in use" in p.stderr.lower()
    run = Run(hub, cache, tmp_path, 1, 1)
    try:
        (endpoint, key), = EXPORTS.findall(run.out.read_text())
        st, _, body = call(run.url + "/org/m/resolve/main/w.safetensors", key=key)
        assert st == 200 and body == b"w" * 5000
    finally:
        run.stop()


def test_auth_off_makes_no_key(hub, tmp_path):
    hub.add_repo("org/m", files={"w.safetensors": b"w" * 10}, lfs={"w.safetensors"})
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PULSYS_", "HF_"))}
    env["PULSYS_AUTH"] = "off"
    os.makedirs(tmp_path / "c")
    p = subprocess.Popen([sys.executable, "-m", "pulsys", "--listen", "127.0.0.1:0", "--admin-listen", "off",
                          "--upstream", hub.url, "--allow-upstream-host", hub.cdn_netloc, "--listeners", "1",
                          "--cache-dir", str(tmp_path / "c"), "--log-format", "json"], cwd=ROOT, env=env,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL)
    try:
        url = None
        deadline = time.monotonic() + 30
        while url is None and time.monotonic() < deadline:
            line = p.stderr.readline().decode()
            if '"pulsys started"' in line:
                url = json.loads(line)["listen"]
        assert url, "pulsys did not start"
        st, _, body = call(url + "/org/m/resolve/main/w.safetensors")
        assert st == 200 and body == b"w" * 10
    finally:
        p.send_signal(signal.SIGTERM)
        out, _ = p.communicate(timeout=15)
    assert b"HF_TOKEN" not in out
