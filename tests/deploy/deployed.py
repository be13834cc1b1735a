"""Reading the deploy files (deploy/) as their runtimes do, checking what they set against
pulsys's real settings, and running their command lines outside a container or systemd."""

import json
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import time
import urllib.request

from pulsys.cli.serve import make_parser
from pulsys.config import SETTINGS, build_config

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEPLOY = os.path.join(ROOT, "deploy")
KNOWN_ENV = {s.env for s in SETTINGS}


def config_of(argv, env):
    """The Config pulsys builds from these flags and this environment, through its own
    parser; every PULSYS_ variable must name a setting (build_config ignores others)."""
    unknown = sorted(k for k in env if k.startswith("PULSYS_") and k not in KNOWN_ENV)
    assert unknown == [], "not pulsys settings: %s" % unknown
    try:
        args = make_parser().parse_args(list(argv))
    except SystemExit as e:
        raise AssertionError("pulsys refuses the flags %r (exit %s)" % (argv, e.code)) from None
    return build_config(vars(args), dict(env))


def _instructions(path):
    """Dockerfile -> [(INSTRUCTION, rest)], continuation lines joined, comments dropped."""
    out, cur = [], ""
    with open(path) as f:
        for line in f:
            if not cur and line.lstrip().startswith("#"):
                continue
            cur += line.rstrip("\n")
            if cur.endswith("\\"):
                cur = cur[:-1] + " "
                continue
            if cur.strip():
                word, _, rest = cur.strip().partition(" ")
                out.append((word.upper(), rest.strip()))
            cur = ""
    return out


def _words(rest):
    return json.loads(rest) if rest.startswith("[") else shlex.split(rest)


def parse_dockerfile(path):
    """The final stage: env, entrypoint, cmd, expose, volumes, healthcheck, user, and the
    uid its useradd gives."""
    d = {"env": {}, "entrypoint": [], "cmd": [], "expose": [], "volumes": [], "healthcheck": None,
         "user": None, "uid": None}
    for word, rest in _instructions(path):
        if word == "FROM":
            d = {k: type(v)() if v is not None else None for k, v in d.items()}
        elif word == "ENV":
            d["env"].update(kv.split("=", 1) for kv in shlex.split(rest))
        elif word in ("ENTRYPOINT", "CMD"):
            d[word.lower()] = _words(rest)
        elif word == "EXPOSE":
            d["expose"] += [int(p.split("/")[0]) for p in rest.split()]
        elif word == "VOLUME":
            d["volumes"] += _words(rest)
        elif word == "HEALTHCHECK":
            d["healthcheck"] = _words(rest.split(" CMD ", 1)[1])
        elif word == "USER":
            d["user"] = rest
        elif word == "RUN" and "useradd" in rest:
            d["uid"] = int(re.search(r"useradd .*--uid (\d+)", rest).group(1))
    return d


def parse_unit(path):
    """A systemd unit -> {section: [(key, value), ...]} (keys repeat, order kept)."""
    out, section = {}, None
    with open(path) as f:
        for line in f:
            line = line.strip()
            if not line or line[0] in "#;":
                continue
            if line.startswith("["):
                section = line.strip("[]")
                out[section] = []
            else:
                k, _, v = line.partition("=")
                out[section].append((k.strip(), v.strip()))
    return out


def env_file(path):
    """KEY=value lines of a systemd EnvironmentFile (the subset pulsys.env uses)."""
    with open(path) as f:
        return dict(line.strip().split("=", 1) for line in f if "=" in line and not line.startswith("#"))


def substitute(value, mapping):
    """Replace every key of mapping by its value in strings, lists, tuples and dicts, longest first;
    keys that are all digits (ports) only as whole numbers."""
    if isinstance(value, dict):
        return {k: substitute(v, mapping) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(substitute(v, mapping) for v in value)
    for old in sorted(mapping, key=len, reverse=True):
        pattern = r"(?<!\d)%s(?!\d)" % old if old.isdigit() else re.escape(old)
        value = re.sub(pattern, lambda _: mapping[old], value)
    return value


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def clean_env(home):
    """What a container or a unit starts from: no proxies, no PULSYS_ of the caller."""
    return {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": home, "LANG": "C.UTF-8"}


class Started:
    """A command line run as deployed: stdout and stderr in files, stopped by its PID."""

    def __init__(self, argv, env, workdir, admin_url, timeout=60.0):
        self.out_path = os.path.join(workdir, "stdout")
        self._out = open(self.out_path, "wb")
        self.proc = subprocess.Popen(argv, env=env, cwd=workdir, stdin=subprocess.DEVNULL,
                                     stdout=self._out, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout
        while True:
            try:
                with urllib.request.build_opener(urllib.request.ProxyHandler({})).open(
                        admin_url + "/healthz", timeout=5) as r:
                    self.healthz = r.status
                    return
            except OSError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    self.stop()
                    raise AssertionError("%r did not start:\n%s" % (argv, self.output()))
                time.sleep(0.1)

    def output(self):
        with open(self.out_path, "rb") as f:
            return f.read().decode("utf-8", "replace")

    def first_key(self):
        """The admin key a first start prints on stdout (app.py), as a container log shows it."""
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            m = re.search(r"^export HF_TOKEN=(\S+)$", self.output(), re.M)
            if m:
                return m.group(1)
            time.sleep(0.1)
        raise AssertionError("no first-start key in the output:\n" + self.output())

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            rc = self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            rc = self.proc.wait(10)
        self._out.close()
        return rc


def download(url, token):
    req = urllib.request.Request(url, headers={"Authorization": "Bearer " + token})
    with urllib.request.build_opener(urllib.request.ProxyHandler({})).open(req, timeout=60) as r:
        return r.status, r.read()


VENV_BIN = os.path.dirname(sys.executable)
