"""Real clients never keep a file with a byte the Hub did not send (ADR 0012).

The fake Hub flips one byte in the middle of the first CDN body pulsys fetches for a
file, and paces bodies so that the clients stream from the fill while it runs. pulsys's
digest check fails, the blob is fetched again, and:
- huggingface_hub 2.x, cut one byte short, resumes with `Range: bytes=<have>-` and checks
  only the size at the end: it must be answered 200 and start over;
- hf_transfer (0.36.2), whose 10 MiB chunks are closed ranges that it does not check for
  206: no chunk may complete before the blob is verified; the cut chunks are retried.
Either way the file the client ends up with has the Hub's sha256.
"""

import hashlib
import os

import pytest

from .clients import client_env, json_out, run_client

pytestmark = pytest.mark.clients

MIB = 1024 * 1024
RESUME = ("org/resume", "w.safetensors", os.urandom(24 * MIB + 5))     # > 2 of 2.x's 10 MiB units
CHUNKS = ("org/chunks", "pytorch_model.bin", os.urandom(55 * MIB + 7))  # > 50 MiB: hf_transfer


@pytest.fixture(scope="module")
def hub(make_hub):
    h = make_hub()
    for repo, name, data in (RESUME, CHUNKS):
        h.add_repo(repo, files={name: data, "config.json": b"{}"})
    return h


def _download(venv, server, hf_home, repo, name, *args, env_extra=None):
    env = client_env(server.url, hf_home, **(env_extra or {}))
    cp = run_client(venv, "hf_hub_download", [repo, name, *args], env, timeout=120, check=False)
    assert cp.returncode == 0, "download failed:\n%s\n%s\n%s" % (cp.stdout, cp.stderr[-4000:],
                                                                server.diagnostics())
    return json_out(cp)


def _poison(hub, rate):
    hub.reset_counters()
    hub.faults.clear()
    hub.faults.throttle(rate)
    hub.faults.corrupt(times=1, match="/repos/")


def test_huggingface_hub_resume_after_a_failed_verification_keeps_no_wrong_byte(
        latest_venv, hub, pulsys_server, tmp_path_factory, new_hf_home):
    repo, name, data = RESUME
    srv = pulsys_server(hub, tmp_path_factory.mktemp("cache-resume"))
    _poison(hub, 8 * MIB)                       # ~3 s per copy: the client streams from the fill
    out = _download(latest_venv, srv, new_hf_home(), repo, name)
    hub.faults.clear()
    sha = hashlib.sha256(data).hexdigest()
    assert out["size"] == len(data)
    assert out["sha256"] == sha, "the client kept a file of the right size with a flipped byte"
    v = srv.debug_vars()
    assert v["integrity_failures"] == 1 and v["fill_refetches"] == 1, v
    resumes = [r for r in hub.requests if r.server == "cdn" and sha in r.path]
    assert len(resumes) >= 2                    # the bad copy and the good one


def test_hf_transfer_chunks_never_complete_with_unverified_bytes(
        legacy_venv, hub, pulsys_server, tmp_path_factory, new_hf_home):
    """hf_transfer asks `bytes=0-0` first and its chunks only after that answer; the
    probe's one byte is its last, so it waits for the verified blob, and when the fill
    fails verification it has received only a head: it is answered from the refetch
    (cut instead, hf_transfer would give up: huggingface_hub 0.36 passes it
    parallel_failures=3). So the download succeeds, with the Hub's bytes."""
    repo, name, data = CHUNKS
    srv = pulsys_server(hub, tmp_path_factory.mktemp("cache-chunks"))
    _poison(hub, 40 * MIB)
    env = {"HF_HUB_ENABLE_HF_TRANSFER": "1"}
    out = _download(legacy_venv, srv, new_hf_home(), repo, name, "--require-hf-transfer", env_extra=env)
    hub.faults.clear()
    assert out["size"] == len(data)
    assert out["sha256"] == hashlib.sha256(data).hexdigest(), "hf_transfer wrote a flipped byte"
    v = srv.debug_vars()
    assert v["integrity_failures"] == 1 and v["fill_refetches"] == 1, v
