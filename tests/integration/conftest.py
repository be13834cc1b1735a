"""Fixtures for the real-client integration layer.

* ``latest_venv`` / ``legacy_venv`` (session): the client venvs (clients.py).
* ``pulsys_server`` (module): a factory ``pulsys_server(hub, cache_dir, *extra_args)``
  that starts ``python -m pulsys`` on free loopback ports in front of a FakeHub
  and returns a :class:`PulsysServer`; every server it started is stopped at
  module teardown (by its own PID).
* ``new_hf_home``: a factory for fresh, empty client caches (HF_HOME dirs).
* ``make_hub`` (module): a factory for started FakeHubs, stopped at teardown.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from .clients import client_venv, set_deadline

REPO_ROOT = Path(__file__).resolve().parents[2]
HEALTH_TIMEOUT_S = 15.0
TEST_BUDGET_S = 240.0  # wall-clock bound for the client processes of one test
STOP_GRACE_S = 5.0


# ---------------------------------------------------------------- venvs


@pytest.fixture(scope="session")
def latest_venv():
    """huggingface_hub 2.x (+ hf_xet). Build failures raise with pip's output."""
    return client_venv("latest")


@pytest.fixture(scope="session")
def legacy_venv():
    """huggingface_hub 0.36.2 + hf_transfer 0.1.9 (+ hf_xet)."""
    return client_venv("legacy")


@pytest.fixture(scope="session")
def old_venv():
    """huggingface_hub 0.23.5 (no hf_xet, no hf_transfer)."""
    return client_venv("old")


# ---------------------------------------------------------------- fake hub


@pytest.fixture(scope="module")
def make_hub():
    """Factory: ``make_hub(**FakeHub kwargs)`` -> a started FakeHub (stopped at teardown)."""
    from pulsys.testing.fake_hub import FakeHub

    hubs = []

    def factory(**kwargs):
        hub = FakeHub(**kwargs)
        hub.start()
        hubs.append(hub)
        return hub

    yield factory
    errors = []
    for hub in hubs:
        hub.stop()
        errors.extend(hub.server_errors)
    assert not errors, "the fake hub had handler errors:\n" + "\n".join(errors)


@pytest.fixture(autouse=True)
def _client_time_budget():
    """Bound every test: client processes started by it share TEST_BUDGET_S seconds."""
    set_deadline(TEST_BUDGET_S)
    yield
    set_deadline(None)


@pytest.fixture
def new_hf_home(tmp_path_factory):
    """Factory: a new, empty HF_HOME directory per call (removed after the test:
    client caches hold up to 60 MiB files and are of no use afterwards)."""
    counter = itertools.count(1)
    made = []

    def factory(label="hf-home"):
        path = tmp_path_factory.mktemp("%s-%d" % (label, next(counter)))
        made.append(path)
        return str(path)

    yield factory
    for path in made:
        shutil.rmtree(path, ignore_errors=True)


# ---------------------------------------------------------------- pulsys


def free_port(host="127.0.0.1"):
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def _server_env():
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PULSYS_", "HF_", "HUGGINGFACE_"))
           and k.lower() not in ("http_proxy", "https_proxy", "all_proxy", "no_proxy")}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO_ROOT)] + ([os.environ["PYTHONPATH"]]
                                                           if os.environ.get("PYTHONPATH") else []))
    env["PYTHONUNBUFFERED"] = "1"
    env["NO_PROXY"] = env["no_proxy"] = "127.0.0.1,127.0.0.2,localhost,::1"
    return env


def _http_get(url, timeout=2.0):
    """(status, body bytes) without any proxy; raises OSError on connection failure."""
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(url, timeout=timeout) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


class PulsysServer:
    """One ``python -m pulsys`` process in front of a FakeHub.

    ``url`` / ``admin_url`` / ``proc`` / ``stderr_text()``; ``restart()`` keeps
    the cache dir and ports; ``stop()`` terminates (then kills after 5 s) the
    process this object started, and nothing else.
    """

    def __init__(self, hub, cache_dir, *extra_args, upstream=None, allow_hosts=None):
        self.hub = hub
        self.cache_dir = str(cache_dir)
        self.extra_args = [str(a) for a in extra_args]
        self.upstream = upstream or hub.url
        self.allow_hosts = list(allow_hosts) if allow_hosts is not None else [hub.cdn_netloc]
        self.port = free_port()
        self.admin_port = free_port()
        self.proc = None
        self._last_proc = None
        self._logdir = tempfile.mkdtemp(prefix="pulsys-server-log-")
        self._runs = 0
        self._stdout_path = self._stderr_path = None

    @property
    def url(self):
        return "http://127.0.0.1:%d" % self.port

    @property
    def admin_url(self):
        return "http://127.0.0.1:%d" % self.admin_port

    def argv(self):
        argv = [sys.executable, "-m", "pulsys",
                "--listen", "127.0.0.1:%d" % self.port,
                "--upstream", self.upstream,
                "--cache-dir", self.cache_dir,
                "--admin-listen", "127.0.0.1:%d" % self.admin_port,
                "--log-format", "json", "--auth", "off"]   # extra_args may say --auth required
        for host in self.allow_hosts:
            argv += ["--allow-upstream-host", host]
        return argv + self.extra_args

    def start(self, _port_retries=3):
        """Start and wait for /healthz. On a first start, a port taken between
        free_port() and pulsys's bind is retried with new ports."""
        if self.proc is not None and self.proc.poll() is None:
            raise RuntimeError("pulsys already running (pid %d)" % self.proc.pid)
        os.makedirs(self.cache_dir, exist_ok=True)
        first_start = self._runs == 0  # a restart keeps its ports, so it never retries
        for attempt in range(_port_retries):
            self._runs += 1
            self._stdout_path = os.path.join(self._logdir, "stdout-%d.log" % self._runs)
            self._stderr_path = os.path.join(self._logdir, "stderr-%d.log" % self._runs)
            with open(self._stdout_path, "wb") as out, open(self._stderr_path, "wb") as err:
                self.proc = subprocess.Popen(self.argv(), cwd=str(REPO_ROOT), env=_server_env(),
                                             stdin=subprocess.DEVNULL, stdout=out, stderr=err)
            try:
                problem = self._wait_healthy()
            except BaseException:
                self.stop()
                raise
            if problem is None:
                return self
            self.stop()
            port_clash = "in use" in self.stderr_text().lower()
            if port_clash and first_start and attempt + 1 < _port_retries:
                self.port, self.admin_port = free_port(), free_port()
                continue
            pytest.fail("%s\nargv: %s\n--- stderr ---\n%s" % (problem, " ".join(self.argv()), self.stderr_text()),
                        pytrace=False)
        raise AssertionError("unreachable")

    def _wait_healthy(self):
        """None once /healthz answers 200, else a description of what went wrong."""
        deadline = time.monotonic() + HEALTH_TIMEOUT_S
        last = "no answer"
        while time.monotonic() < deadline:
            rc = self.proc.poll()
            if rc is not None:
                return "pulsys exited with code %s before it was healthy" % rc
            try:
                status, body = _http_get(self.admin_url + "/healthz", timeout=1.0)
                if status == 200:
                    return None
                last = "status %d: %r" % (status, body[:200])
            except OSError as e:
                last = repr(e)
            time.sleep(0.1)
        return "pulsys not healthy after %.0fs (last: %s)" % (HEALTH_TIMEOUT_S, last)

    def stop(self):
        proc, self.proc = self.proc, None
        if proc is None:
            return
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=STOP_GRACE_S)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=STOP_GRACE_S)
        self._last_proc = proc

    def restart(self):
        """Stop and start again: same ports, same cache dir."""
        self.stop()
        return self.start()

    def cleanup(self):
        """Remove the server's log files (call after stop())."""
        shutil.rmtree(self._logdir, ignore_errors=True)

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def stderr_text(self, all_runs=False):
        paths = ([os.path.join(self._logdir, "stderr-%d.log" % i) for i in range(1, self._runs + 1)]
                 if all_runs else [self._stderr_path])
        out = []
        for p in paths:
            if p and os.path.exists(p):
                with open(p, "rb") as f:
                    out.append(f.read().decode("utf-8", "replace"))
        return "\n".join(out)

    def debug_vars(self):
        status, body = _http_get(self.admin_url + "/debug/vars", timeout=5.0)
        assert status == 200, "GET /debug/vars -> %d %r" % (status, body[:500])
        return json.loads(body)

    def diagnostics(self, tail_lines=15, max_chars=12000):
        """Text for assertion messages: process state, the server's error/warning
        lines (and any non-JSON output, e.g. tracebacks), then its last lines."""
        proc = self.proc or self._last_proc
        if proc is None:
            state = "not started"
        elif proc.poll() is None:
            state = "running (pid %d)" % proc.pid
        else:
            state = "exited with code %s" % proc.returncode
        lines = self.stderr_text().splitlines()
        notable = []
        for line in lines:
            try:
                rec = json.loads(line)
            except ValueError:
                notable.append(line)
                continue
            if isinstance(rec, dict) and str(rec.get("level", "")).lower() in ("warning", "error", "critical"):
                notable.append(line)
        text = "pulsys %s (stderr: %d lines); errors/warnings:\n%s\n--- last %d lines ---\n%s" % (
            state, len(lines), "\n".join(notable[-40:]) or "(none)", tail_lines, "\n".join(lines[-tail_lines:]))
        return text if len(text) <= max_chars else text[:max_chars // 2] + "\n[...]\n" + text[-max_chars // 2:]


@pytest.fixture(scope="module")
def pulsys_server():
    """Factory ``pulsys_server(hub, cache_dir, *extra_args)`` -> started PulsysServer."""
    servers = []

    def factory(hub, cache_dir, *extra_args, **kwargs):
        server = PulsysServer(hub, cache_dir, *extra_args, **kwargs)
        servers.append(server)
        return server.start()

    yield factory
    for server in servers:
        with contextlib.suppress(Exception):
            server.stop()
        server.cleanup()


# ---------------------------------------------------------------- helpers


def xet_requests(hub):
    """Requests that mean a client tried Xet: token refreshes and CAS calls."""
    return [r for r in hub.requests
            if "xet-read-token" in r.path
            or (r.server == "cdn" and r.path.startswith(("/v1/", "/v2/")))]


# ---------------------------------------------------------------- test corpus

MODEL = "acme/tiny-model"
DATASET = "acme/tiny-dataset"
BIG = "acme/big-model"
GATED = "acme/gated-model"
# error cases: (repo, file, exception class name the client must raise)
ERROR_CASES = {
    "missing-file": (MODEL, "no-such-file.json", "EntryNotFoundError"),
    "missing-repo": ("acme/no-such-repo", "config.json", "RepositoryNotFoundError"),
    "gated": (GATED, "config.json", "GatedRepoError"),
}
REVS = "acme/revisions"
BIG_FILE = "pytorch_model.bin"
BIG_SIZE = 60 * 1024 * 1024 + 4321  # > 50 MiB: 0.x hands it to hf_transfer; not a multiple of its 10 MiB chunks


def _rand(seed, n):
    import random

    return random.Random(seed).randbytes(n)


def _json(obj):
    return (json.dumps(obj, indent=2, sort_keys=True) + "\n").encode()


class Corpus:
    """What the fake hub holds, and the sha256 of every file a client should end up with."""

    def __init__(self):
        self.files = {}  # (repo_type, repo_id) -> {path: bytes}
        self.shas = {}  # repo_id -> {name: commit sha}

    def add(self, hub, repo_id, files, repo_type="model", **kwargs):
        self.files[(repo_type, repo_id)] = dict(files)
        sha = hub.add_repo(repo_id, files=files, repo_type=repo_type, **kwargs)
        self.shas.setdefault(repo_id, {})["initial"] = sha
        return sha

    def data(self, repo_id, path, repo_type="model"):
        return self.files[(repo_type, repo_id)][path]

    def sha256(self, repo_id, path, repo_type="model"):
        import hashlib

        return hashlib.sha256(self.data(repo_id, path, repo_type)).hexdigest()

    def expected(self, repo_id, repo_type="model"):
        """{path: sha256} of the whole repo at its initial commit."""
        import hashlib

        return {p: hashlib.sha256(d).hexdigest() for p, d in self.files[(repo_type, repo_id)].items()}


# Revisions repo contents: main moves past the initial commit, refs/pr/1 is a side commit.
REV_V1 = _json({"version": 1})
REV_PR = _json({"version": "pr-1"})
REV_V3 = _json({"version": 3})


def populate(hub, big=False):
    """Fill ``hub`` with the standard corpus; returns a Corpus."""
    c = Corpus()
    c.add(hub, MODEL, {
        "config.json": _json({"architectures": ["TinyModel"], "hidden_size": 8, "note": "x" * 3000}),
        "README.md": b"---\nlicense: apache-2.0\n---\n# tiny model\n" + b"lorem ipsum " * 400,
        "tokenizer/vocab.txt": b"\n".join(b"tok%d" % i for i in range(2000)) + b"\n",
        "model.safetensors": _rand(1, 3 * 1024 * 1024 + 17),  # LFS by suffix
        "weights/extra.bin": _rand(2, 512 * 1024 + 3),  # LFS by suffix, nested
    })
    c.add(hub, DATASET, {
        "README.md": b"# tiny dataset\n" + b"rows and columns\n" * 300,
        "data/train.csv": b"id,text\n" + b"".join(b"%d,row %d\n" % (i, i) for i in range(3000)),
        "data/test.jsonl": b"".join(_json({"id": i}).replace(b"\n", b"") + b"\n" for i in range(500)),
        "data/train-00000-of-00001.parquet": _rand(3, 2 * 1024 * 1024 + 5),  # LFS by suffix
    }, repo_type="dataset")
    c.add(hub, GATED, {"config.json": _json({"gated": True}), "model.safetensors": _rand(4, 4096)}, gated=True)
    sha1 = c.add(hub, REVS, {"config.json": REV_V1, "weights.safetensors": _rand(5, 300 * 1024)})
    sha_pr = hub.commit(REVS, {"config.json": REV_PR, "weights.safetensors": _rand(6, 300 * 1024)},
                        branch="pr-source")
    hub.set_ref(REVS, "refs/pr/1", sha_pr)
    sha3 = hub.commit(REVS, {"config.json": REV_V3})
    c.shas[REVS].update(v1=sha1, pr=sha_pr, main=sha3)
    if big:
        c.add(hub, BIG, {"config.json": _json({"big": True}), BIG_FILE: _rand(7, BIG_SIZE)})
    return c
