"""deploy/systemd/pulsys.service: `systemd-analyze verify` finds nothing to say, its
directories are the ones pulsys writes, and its ExecStart, run with its Environment= and
an EnvironmentFile, serves a file from the fake Hub byte for byte. Outside systemd: the
sandboxing options are checked by verify only, never enforced here (PID 1 is no systemd)."""

import os
import shlex
import shutil
import subprocess

import pytest

from pulsys.db.database import sqlite_path
from pulsys.testing.fake_hub import FakeHub, sha256_hex
from tests.deploy.deployed import (DEPLOY, VENV_BIN, Started, clean_env, config_of, download,
                                   env_file, free_port, parse_unit, substitute)

UNIT = os.path.join(DEPLOY, "systemd", "pulsys.service")
BODY = os.urandom(2 * 1024 * 1024 + 3)


def service(unit):
    return parse_unit(unit)["Service"]


def exec_start(svc):
    cmd = [v for k, v in svc if k == "ExecStart"]
    assert len(cmd) == 1
    return shlex.split(cmd[0].lstrip("-@:+!"))


def unit_env(svc, read_env_file):
    """Environment= in order, then each EnvironmentFile= over it, as systemd applies them."""
    env = {}
    for k, v in svc:
        if k == "Environment":
            env.update(w.split("=", 1) for w in shlex.split(v))
    for k, v in svc:
        if k == "EnvironmentFile":
            env.update(read_env_file(v.lstrip("-")))
    return env


def verify(path):
    return subprocess.run(["systemd-analyze", "verify", path], capture_output=True, text=True, timeout=120)


@pytest.mark.skipif(not shutil.which("systemd-analyze"), reason="systemd-analyze is not installed "
                    "(Debian package systemd); the unit is still run by test_exec_start_serves_a_file")
def test_systemd_analyze_verify_finds_nothing_to_say(tmp_path):
    # verify wants ExecStart's program to exist: point it at this venv's pulsys in a copy
    with open(UNIT) as f:
        text = f.read()
    ours = tmp_path / "pulsys.service"
    ours.write_text(text.replace("ExecStart=/opt/pulsys/bin/", "ExecStart=%s/" % VENV_BIN))
    p = verify(str(ours))
    assert p.returncode == 0 and p.stdout + p.stderr == "", p.stdout + p.stderr
    # a misspelt option is reported (verify exits 0 for it, so the output is what counts)
    bad = tmp_path / "bad.service"
    bad.write_text(ours.read_text().replace("ProtectHome=yes", "ProtectHom=yes"))
    assert "ProtectHom" in verify(str(bad)).stderr


def test_what_the_unit_sets_is_pulsys_and_its_directories_are_writable():
    svc = service(UNIT)
    env = unit_env(svc, lambda path: {})      # the unit alone, without an operator's file
    config = config_of(exec_start(svc)[1:], env)
    opts = dict(svc)
    rw = opts["ReadWritePaths"].split()
    cache_dir = "/var/cache/" + opts["CacheDirectory"]
    state_dir = "/var/lib/" + opts["StateDirectory"]
    assert config.cache_dir == cache_dir and cache_dir in rw
    assert os.path.dirname(sqlite_path(config.db)) == state_dir and state_dir in rw
    assert os.path.dirname(config.token_secret_file) == state_dir
    assert config.admin_listen[0] == "127.0.0.1"       # console and admin API: this machine only
    assert opts["ProtectSystem"] == "strict" and opts["NoNewPrivileges"] == "yes"
    assert int(opts["LimitNOFILE"]) > config.max_connections


def test_exec_start_serves_a_file_with_an_environment_file(tmp_path):
    hub = FakeHub().start()
    try:
        hub.add_repo("org/model", files={"model.safetensors": BODY})
        data, admin = free_port(), free_port()
        mapping = {"/opt/pulsys/bin": VENV_BIN, "/var/cache/pulsys": str(tmp_path / "cache"),
                   "/var/lib/pulsys": str(tmp_path / "state"), "/etc/pulsys": str(tmp_path / "etc"),
                   "0.0.0.0": "127.0.0.1", "8080": str(data), "8081": str(admin)}
        for d in ("cache", "state", "etc"):       # CacheDirectory=, StateDirectory= make them
            os.makedirs(tmp_path / d)
        # the operator's /etc/pulsys/pulsys.env: the upstream (here the fake Hub)
        (tmp_path / "etc" / "pulsys.env").write_text(
            "PULSYS_UPSTREAM=%s\nPULSYS_ALLOW_UPSTREAM_HOST=%s\nPULSYS_NETWORK_MBPS=0\n" % (hub.url, hub.cdn_netloc))
        svc = substitute(service(UNIT), mapping)
        env = clean_env(str(tmp_path))
        env.update(unit_env(svc, env_file))
        assert env["PULSYS_UPSTREAM"] == hub.url
        srv = Started(exec_start(svc), env, str(tmp_path), "http://127.0.0.1:%d" % admin)
        try:
            status, body = download("http://127.0.0.1:%d/org/model/resolve/main/model.safetensors" % data,
                                    srv.first_key())    # the journal shows it on a first start
            assert status == 200 and body == BODY
            assert hub.body_fetches(sha256_hex(BODY)) == 1
            assert os.path.exists(tmp_path / "state" / "pulsys.sqlite3")
        finally:
            assert srv.stop() == 0, srv.output()      # SIGTERM (KillSignal=) is a clean stop
    finally:
        hub.stop()
