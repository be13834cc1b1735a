"""`pulsys prefetch` and `pulsys stats` as real processes against a running pulsys's
admin listener (stdout/stderr not a terminal, as in CI)."""

import json
import os
import subprocess
import sys

from tests.auth.conftest import admin_url


def _run(*args, env=None, timeout=60):
    e = {k: v for k, v in os.environ.items() if not k.startswith("PULSYS_")}
    e.update(env or {})
    return subprocess.run([sys.executable, "-m", "pulsys"] + list(args), capture_output=True,
                          text=True, env=e, timeout=timeout)


def test_prefetch_and_stats_commands(auth_server, hub):
    hub.add_repo("org/cli", files={"w.safetensors": os.urandom(1 << 20), "c.json": b"{}", "x.bin": b"x"})
    hub.add_repo("org/ds", files={"data.csv": b"a,b\n"}, repo_type="dataset")
    server, admin, read = auth_server()
    conn = ["--server", admin_url(server), "--token", admin]
    r = _run("prefetch", "org/cli", "--include", "*.safetensors", "--include", "*.json", *conn)
    assert r.returncode == 0, r.stderr
    assert "100%" in r.stderr and "\r" not in r.stderr          # plain lines when not a tty
    assert r.stderr.strip().splitlines()[-1].startswith("pulsys prefetch: org/cli@main: 2 files")
    assert hub.total_body_bytes() == (1 << 20) + 2
    r = _run("prefetch", "org/ds", "--dataset", env={"PULSYS_ADMIN_URL": admin_url(server),
                                                     "PULSYS_ADMIN_TOKEN": admin})
    assert r.returncode == 0, r.stderr
    r = _run("prefetch", "org/nope", *conn)
    assert r.returncode == 1 and r.stderr.strip().splitlines()[-1].startswith("pulsys prefetch: error: job ")
    assert "failed" in r.stderr.strip().splitlines()[-1]
    r = _run("stats", "--json", *conn)
    assert r.returncode == 0
    doc = json.loads(r.stdout)
    assert doc["bytes_used"] >= 1 << 20 and "hit_ratio" in doc
    r = _run("stats", *conn)
    assert r.returncode == 0 and "hit ratio" in r.stdout
    # mistakes: one line on stderr, exit 2; an unreachable server: exit 1
    for args, code, text in [(("prefetch", "org/cli", "--server", "ftp://x", "--token", "t"), 2, "expected http://"),
                             (("prefetch", "org/cli", "--server", admin_url(server)), 2, "admin key"),
                             (("prefetch", "../x", *conn), 2, "repo"),
                             (("stats", "--server", admin_url(server), "--token", read), 2, "scope admin"),
                             (("stats", "--server", "http://127.0.0.1:9", "--token", "t"), 1, "cannot reach")]:
        r = _run(*args)
        assert r.returncode == code and len(r.stderr.strip().splitlines()) == 1 and text in r.stderr, (args, r.stderr)
