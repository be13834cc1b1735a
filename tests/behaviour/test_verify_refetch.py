"""`pulsys verify` on a real cache: a blob corrupted on disk (same size, so start-up
cannot tell) is found and quarantined by `python -m pulsys verify`, its entry becomes
metadata only in the index, and a server started on the directory afterwards refetches
it from the fake Hub and serves the right bytes."""

import json
import os
import subprocess
import sys

import requests

from pulsys.cache.index_import import open_index
from pulsys.cache.store import Store
from pulsys.testing.fake_hub import git_blob_sha1, sha256_hex
from tests.conftest import ROOT

LFS = os.urandom(2 * 1024 * 1024 + 1)
CFG = b'{"hidden": 64}\n'


def verify(cache, *extra):
    env = dict(os.environ, PYTHONPATH=ROOT)
    return subprocess.run([sys.executable, "-m", "pulsys", "verify", "--cache-dir", cache, *extra],
                          capture_output=True, text=True, timeout=60, cwd=ROOT, env=env)


class _Quiet:
    def info(self, *a, **kw):
        pass

    warning = info


def test_corrupt_blob_is_quarantined_then_refetched(hub, make_server, tmp_path):
    hub.add_repo("org/v", files={"w.safetensors": LFS, "config.json": CFG})
    cache = str(tmp_path / "c")
    srv = make_server(hub, cache_dir=cache, auth="off")
    assert requests.get(srv.url + "/org/v/resolve/main/w.safetensors", timeout=30).content == LFS
    assert requests.get(srv.url + "/org/v/resolve/main/config.json", timeout=30).content == CFG
    srv.stop()
    srv.shutdown()
    sha = sha256_hex(LFS)
    path = os.path.join(cache, "v1", "blobs", "sha256", sha[:2], sha)
    with open(path, "r+b") as f:
        f.seek(12345)
        f.write(bytes([LFS[12345] ^ 1]))
    p = verify(cache)
    assert p.returncode == 1, p.stderr
    assert "bad blob sha256/%s: content does not match its name" % sha in p.stdout
    assert "entries now metadata only: 1 (blob quarantined: 1;" in p.stdout
    assert "result: 1 problem(s) found; bad blobs quarantined, the index repaired" in p.stdout
    p = verify(cache, "--json")                       # a second run finds a clean cache
    rep = json.loads(p.stdout)
    assert p.returncode == 0 and rep["problems"] == 0 and rep["blobs_checked"] == 1
    assert rep["entries_to_refetch"] == 0 and rep["index"]["source"] == "index"
    assert not os.path.exists(path)
    assert os.path.exists(os.path.join(cache, "v1", "quarantine", "blobs", "sha256", sha))
    st = Store(cache)
    index = open_index(st, 0.0, _Quiet())[0]
    try:                                              # the index no longer points at it
        assert [e.blob_path for e in index.entries_of_blob("sha256/" + sha)] == [None]
        assert "sha256/" + sha not in {b for b, _, _ in index.blob_records()}
        assert "sha1/" + git_blob_sha1(CFG) in {b for b, _, _ in index.blob_records()}
    finally:
        index.db.close()
    hub.reset_counters()
    srv = make_server(hub, cache_dir=cache, auth="off")
    r = requests.get(srv.url + "/org/v/resolve/main/w.safetensors", timeout=30)
    assert r.status_code == 200 and sha256_hex(r.content) == sha
    assert hub.body_fetches(sha) >= 1                 # refetched from the Hub
    r = requests.get(srv.url + "/org/v/resolve/main/config.json", timeout=30)
    assert r.content == CFG and hub.body_fetches(git_blob_sha1(CFG)) == 0   # untouched: warm
