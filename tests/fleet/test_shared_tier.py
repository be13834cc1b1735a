"""--shared-store against a real S3-compatible server (moto's, a subprocess): what one node
pulled, another node serves with no Hub traffic at all; a wrong object in the bucket is
never served and is replaced; bad settings are one clear line."""

import os
import subprocess
import sys

import pytest

from tests.conftest import ROOT, RawClient
from tests.fleet.conftest import sha256
from tests.fleet.nodes import start_nodes, vars_of, wait_uploaded
from tests.fleet.pull import pull, session

REPO = "org/model"


def model_files():
    return {"config.json": b'{"model_type": "demo"}', "tokenizer.json": os.urandom(3000),
            "model-00001.safetensors": os.urandom(20 << 20), "model-00002.safetensors": os.urandom(1 << 20)}


LFS = {"model-00001.safetensors", "model-00002.safetensors"}


def test_node_c_serves_what_node_a_pulled_with_zero_hub_traffic(hub, s3, aws_env, tmp_path, stop_after):
    files = model_files()
    hub.add_repo(REPO, files=files, lfs=LFS)
    # node c runs worker processes: the parent's fill from the bucket streams to them
    nodes = stop_after(start_nodes(tmp_path, hub, s3.new_bucket(), s3.url, names=("a", "c"),
                                   per_node={"c": {"listeners": "2"}}))
    a, c = nodes["a"], nodes["c"]

    got, _ = pull(a.url, REPO)
    assert {p: d for p, (d, _) in got.items()} == {p: sha256(b) for p, b in files.items()}
    va = wait_uploaded(a, len(files))
    assert va["shared_uploads"] == len(files) and va["shared_upload_bytes"] == sum(map(len, files.values()))
    assert va["shared_fills"] == 0            # the bucket was empty: every body came from the Hub

    hub.reset_counters()
    got, _ = pull(c.url, REPO)               # node C: same model, same commit, via the bucket only
    got_main = session().get(c.url + "/%s/resolve/main/config.json" % REPO, timeout=30)
    assert {p: d for p, (d, _) in got.items()} == {p: sha256(b) for p, b in files.items()}
    assert got_main.status_code == 200 and got_main.content == files["config.json"]
    assert hub.requests == [] and hub.total_body_bytes() == 0          # not one request reached the Hub
    vc = vars_of(c)
    assert vc["upstream_requests"] == 0 and vc["upstream_body_bytes"] == 0
    assert vc["shared_fills"] == vc["fills_completed"] == len(files)
    assert vc["shared_body_bytes"] == sum(map(len, files.values()))
    assert vc["shared_uploads"] == 0 and vc["shared_errors"] == 0   # C uploads nothing it took from the bucket
    assert vc["shared_meta_hits"] > 0

    before = vars_of(c)["shared_requests"]
    pull(c.url, REPO)                        # warm on C: its own disk, not the bucket
    assert vars_of(c)["shared_requests"] == before and hub.requests == []


def test_a_wrong_object_in_the_bucket_is_never_served_and_is_replaced(hub, s3, aws_env, tmp_path, stop_after):
    body = os.urandom(12 << 20)
    hub.add_repo(REPO, files={"w.safetensors": body}, lfs={"w.safetensors"})
    bucket = s3.new_bucket()
    nodes = stop_after(start_nodes(tmp_path, hub, bucket, s3.url, names=("a", "c")))
    a, c = nodes["a"], nodes["c"]
    path = "/%s/resolve/main/w.safetensors" % REPO
    assert session().get(a.url + path, timeout=30).content == body
    wait_uploaded(a, 1)
    key = "fleet/blobs/sha256/" + sha256(body)
    bad = bytearray(body)
    bad[len(bad) // 2] ^= 0xFF
    s3.client().put_object(Bucket=bucket, Key=key, Body=bytes(bad))   # same size, one byte off

    hub.reset_counters()
    cl = RawClient(c.address, timeout=30)
    cl.send(b"GET %s HTTP/1.1\r\nHost: x\r\n\r\n" % path.encode())
    status, headers, _ = cl.response(head_only=True)
    assert status == 200 and int(headers["content-length"]) == len(body)
    assert cl.closed(30)                     # cut short: the copy failed verification
    received = len(cl.buf)
    cl.close()
    assert received < len(body)
    vc = vars_of(c)
    assert vc["shared_corrupt"] == 1 and vc["integrity_failures"] == 1 and vc["fills_completed"] == 0
    with pytest.raises(Exception):
        s3.client().head_object(Bucket=bucket, Key=key)          # the wrong object was deleted
    assert hub.total_body_bytes() == 0

    r = session().get(c.url + path, timeout=30)                  # the client's retry: from the Hub
    assert r.status_code == 200 and r.content == body
    assert hub.body_bytes(sha256(body)) == len(body)
    wait_uploaded(c, 1)
    obj = s3.client().get_object(Bucket=bucket, Key=key)["Body"].read()
    assert sha256(obj) == sha256(body)                           # the bucket holds the right bytes again


def run_pulsys(*args, env_extra=None, timeout=60):
    env = {k: v for k, v in os.environ.items() if not k.startswith("PULSYS_")}
    env.update(env_extra or {})
    return subprocess.run([sys.executable, "-m", "pulsys", "--listen", "127.0.0.1:0", "--admin-listen", "off",
                           "--auth", "off", *args], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=timeout)


@pytest.mark.parametrize("args,code,msg", [
    (["--shared-store", "s3://Bad_Bucket"], 2, "--shared-store 's3://Bad_Bucket': expected s3://BUCKET[/PREFIX]"),
    (["--shared-store", "http://bucket/x"], 2, "expected s3://BUCKET[/PREFIX]"),
    (["--shared-store", "s3://bucket/a/../b"], 2, "the prefix has an empty, '.' or '..' part"),
    (["--shared-store", "s3://bucket", "--shared-store-endpoint", "ftp://x"], 2, "expected http(s)://host"),
    (["--node-id", "two words"], 2, "--node-id 'two words'"),
])
def test_bad_settings_are_one_line_and_exit_2(tmp_path, args, code, msg):
    p = run_pulsys("--cache-dir", str(tmp_path), *args)
    assert p.returncode == code and msg in p.stderr, p.stderr
    assert len(p.stderr.strip().splitlines()) == 1 and "Traceback" not in p.stderr


def test_a_bucket_that_cannot_be_used_stops_the_start_with_one_line(tmp_path, s3, aws_env):
    p = run_pulsys("--cache-dir", str(tmp_path / "1"), "--shared-store", "s3://no-such-bucket/x",
                   "--shared-store-endpoint", s3.url)
    assert p.returncode == 1, p.stderr
    assert "--shared-store s3://no-such-bucket/x: the bucket answered 404 (no such bucket)" in p.stderr
    closed = "http://127.0.0.5:9"             # discard port: nothing listens there
    p = run_pulsys("--cache-dir", str(tmp_path / "2"), "--shared-store", "s3://bucket",
                   "--shared-store-endpoint", closed, "--upstream-timeout", "2")
    assert p.returncode == 1 and "--shared-store s3://bucket: Could not connect to the endpoint URL" in p.stderr, \
        p.stderr
    assert "Traceback" not in p.stderr
