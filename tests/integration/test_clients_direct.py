"""The real clients straight against the fake hub (no pulsys).

This proves the fake behaves like the Hub for huggingface_hub 2.x and
0.36.2 + hf_transfer, so the through-pulsys tests mean something.

* ``http_hub`` (xet=False, tree pages of 2 entries): plain HTTP downloads,
  pagination, hf_transfer, error classes.
* ``xet_hub`` (xet=True): what an unmodified Hub answer does to clients that
  have hf_xet installed — they go to Xet (token + CAS), never to the CDN, and
  download from the fake's CAS (pulsys/testing/fake_hub_xet.py). pulsys, which
  strips the Xet signals, must keep them on plain HTTP.
"""

import hashlib

import pytest

from .clients import client_env, json_out, run_cli, run_client, sha256_tree
from .conftest import BIG, BIG_FILE, BIG_SIZE, DATASET, ERROR_CASES, GATED, MODEL, REV_PR, REV_V1, REV_V3, REVS, populate, \
    xet_requests

pytestmark = pytest.mark.clients

T = 120  # seconds: bound for one client process


@pytest.fixture(scope="module")
def http_hub(make_hub):
    hub = make_hub(xet=False, tree_page_size=2)
    return hub, populate(hub, big=True)


@pytest.fixture(scope="module")
def xet_hub(make_hub):
    hub = make_hub(xet=True)
    return hub, populate(hub)


def _download(venv, hub, hf_home, repo, filename, *args, env_extra=None, check=True):
    env = client_env(hub.url, hf_home, **(env_extra or {}))
    cp = run_client(venv, "hf_hub_download", [repo, filename, *args], env, timeout=T, check=check)
    return json_out(cp)


def _snapshot(venv, hub, hf_home, repo, *args):
    cp = run_client(venv, "snapshot_download", [repo, *args], client_env(hub.url, hf_home), timeout=T)
    return json_out(cp)


def _ranges(hub, server="cdn"):
    return [r.range for r in hub.requests if r.server == server and r.method == "GET" and r.range]


# ---------------------------------------------------------------- latest (2.x)


def test_latest_hf_hub_download_regular_and_lfs(latest_venv, http_hub, new_hf_home):
    hub, corpus = http_hub
    home = new_hf_home()
    hub.reset_counters()
    out = _download(latest_venv, hub, home, MODEL, "config.json")
    assert out["sha256"] == corpus.sha256(MODEL, "config.json")
    assert out["client"]["huggingface_hub"].startswith("2.")
    assert out["client"]["hf_xet"], "hf_xet must stay installed in the latest venv"
    # Regular file: blob named after the git blob sha1, fetched via the 307 to resolve-cache.
    assert out["realpath"].endswith("/blobs/" + hashlib.sha1(
        b"blob %d\0" % len(corpus.data(MODEL, "config.json")) + corpus.data(MODEL, "config.json")).hexdigest())
    assert hub.count("GET", "/api/resolve-cache/", server="hub") == 1

    out = _download(latest_venv, hub, home, MODEL, "model.safetensors")
    assert out["sha256"] == corpus.sha256(MODEL, "model.safetensors")
    assert out["realpath"].endswith("/blobs/" + corpus.sha256(MODEL, "model.safetensors"))
    # LFS: 302 to the other origin, body from the CDN.
    assert hub.count("GET", "/repos/", server="cdn") == 1
    assert hub.body_bytes(corpus.sha256(MODEL, "model.safetensors")) == len(corpus.data(MODEL, "model.safetensors"))
    assert xet_requests(hub) == []


def test_latest_file_metadata(latest_venv, http_hub, new_hf_home):
    hub, corpus = http_hub
    env = client_env(hub.url, new_hf_home())
    md = json_out(run_client(latest_venv, "file_metadata", [MODEL, "model.safetensors"], env, timeout=T))
    assert md["etag"] == corpus.sha256(MODEL, "model.safetensors")
    assert md["size"] == len(corpus.data(MODEL, "model.safetensors"))
    assert md["commit_hash"] == corpus.shas[MODEL]["initial"]
    assert md["location"].startswith(hub.cdn_url + "/repos/")
    assert md["xet_hash"] is None


def test_latest_snapshot_download_model_paginated(latest_venv, http_hub, new_hf_home):
    hub, corpus = http_hub
    hub.reset_counters()
    out = _snapshot(latest_venv, hub, new_hf_home(), MODEL)
    assert out["files"] == corpus.expected(MODEL)
    # 2.x lists the tree (and follows the absolute Link: rel="next" across pages of 2).
    assert hub.count("GET", "/api/models/%s/revision/main" % MODEL) == 1
    assert hub.count("GET", "/api/models/%s/tree/" % MODEL) >= 3


def test_latest_snapshot_download_dataset_with_allow_patterns(latest_venv, http_hub, new_hf_home):
    hub, corpus = http_hub
    out = _snapshot(latest_venv, hub, new_hf_home(), DATASET, "--repo-type", "dataset")
    assert out["files"] == corpus.expected(DATASET, "dataset")
    out = _snapshot(latest_venv, hub, new_hf_home(), DATASET, "--repo-type", "dataset",
                    "--allow-patterns", "data/*.csv")
    assert out["files"] == {"data/train.csv": corpus.sha256(DATASET, "data/train.csv", "dataset")}


def test_latest_hf_download_cli(latest_venv, http_hub, new_hf_home):
    hub, corpus = http_hub
    env = client_env(hub.url, new_hf_home())
    cp = run_cli(latest_venv, "hf", ["download", MODEL, "--format", "json"], env, timeout=T)
    path = json_out(cp)["path"]
    assert sha256_tree(path) == corpus.expected(MODEL)
    # One file: hf_hub_download path; prints the file's path.
    cp = run_cli(latest_venv, "hf", ["download", DATASET, "data/train.csv", "--repo-type", "dataset",
                                     "--format", "json"], env, timeout=T)
    with open(json_out(cp)["path"], "rb") as f:
        assert hashlib.sha256(f.read()).hexdigest() == corpus.sha256(DATASET, "data/train.csv", "dataset")


def test_latest_revisions(latest_venv, http_hub, new_hf_home):
    hub, corpus = http_hub
    shas = corpus.shas[REVS]
    for rev, want in (("refs/pr/1", REV_PR), (shas["v1"], REV_V1), ("main", REV_V3)):
        out = _download(latest_venv, hub, new_hf_home(), REVS, "config.json", "--revision", rev)
        assert out["sha256"] == hashlib.sha256(want).hexdigest(), rev
    # The revision is quoted as one path segment on the wire.
    assert hub.count("HEAD", "/%s/resolve/refs%%2Fpr%%2F1/config.json" % REVS) >= 1


# ---------------------------------------------------------------- legacy (0.36.2)


def test_legacy_hf_hub_download_and_snapshot(legacy_venv, http_hub, new_hf_home):
    hub, corpus = http_hub
    home = new_hf_home()
    for name in ("config.json", "model.safetensors", "tokenizer/vocab.txt"):
        out = _download(legacy_venv, hub, home, MODEL, name)
        assert out["client"]["huggingface_hub"] == "0.36.2"
        assert out["sha256"] == corpus.sha256(MODEL, name)
    hub.reset_counters()
    out = _snapshot(legacy_venv, hub, new_hf_home(), DATASET, "--repo-type", "dataset")
    assert out["files"] == corpus.expected(DATASET, "dataset")
    # 0.36.2 lists files from /revision's siblings, not from /tree.
    assert hub.count("GET", "/api/datasets/%s/revision/main" % DATASET) == 1
    assert hub.count("GET", "/tree/") == 0


def test_legacy_hf_transfer_big_lfs_file(legacy_venv, http_hub, new_hf_home):
    hub, corpus = http_hub
    sha = corpus.sha256(BIG, BIG_FILE)
    hub.reset_counters()
    out = _download(legacy_venv, hub, new_hf_home(), BIG, BIG_FILE, "--require-hf-transfer",
                    env_extra={"HF_HUB_ENABLE_HF_TRANSFER": "1"})
    assert out["sha256"] == sha
    assert out["size"] == BIG_SIZE
    ranges = _ranges(hub)
    # hf_transfer: one plain GET it abandons after the headers, a one-byte range to learn the
    # size, then 10 MiB ranges in parallel, the last one asking past EOF (end == TOTAL).
    assert "bytes=0-0" in ranges
    chunk = 10 * 1024 * 1024
    want = ["bytes=%d-%d" % (s, min(s + chunk - 1, BIG_SIZE)) for s in range(0, BIG_SIZE, chunk)]
    assert want[-1].endswith("-%d" % BIG_SIZE)
    assert sorted(r for r in ranges if r != "bytes=0-0") == sorted(want), ranges
    assert hub.count("GET", "/repos/", server="cdn") == len(want) + 2
    assert hub.count("HEAD", "/resolve/main/" + BIG_FILE) == 1


# ---------------------------------------------------------------- errors


@pytest.mark.parametrize("client", ["latest", "legacy"])
@pytest.mark.parametrize("case", ["missing-file", "missing-repo", "gated"])
def test_errors_map_to_client_exceptions(client, case, request, http_hub, new_hf_home):
    hub, _ = http_hub
    venv = request.getfixturevalue(client + "_venv")
    repo, name, want = ERROR_CASES[case]
    out = _download(venv, hub, new_hf_home(), repo, name, check=False)
    assert "error" in out, out
    assert want in out["error_mro"], out
    assert "LocalEntryNotFoundError" not in out["error_mro"], out  # i.e. the hub's answer, not a network error
    if case != "missing-file":
        assert out["error"] == want, out  # GatedRepoError subclasses RepositoryNotFoundError


@pytest.mark.parametrize("client", ["latest", "legacy"])
def test_per_user_access_to_gated_and_private_repos(client, request, http_hub, new_hf_home):
    """What `--upstream-auth client` will lean on (ADR 0016): each user's own token
    decides. A user granted the gated repo downloads it; another user's token gets
    GatedRepoError; a private repo is RepositoryNotFoundError to anyone not granted it;
    a revoked grant is refused at the next request."""
    hub, corpus = http_hub
    venv = request.getfixturevalue(client + "_venv")
    private = "acme/private-model"
    if ("model", private) not in corpus.files:           # the module's hub is shared by both clients
        corpus.add(hub, private, {"config.json": b'{"private": true}'}, private=True)
    for who in ("hf_alice" + client, "hf_bob" + client):
        hub.add_user(who)
    hub.grant("hf_alice" + client, GATED)
    hub.grant("hf_alice" + client, private)

    def get(token, repo):
        return _download(venv, hub, new_hf_home(), repo, "config.json", "--token", token, check=False)
    for repo in (GATED, private):
        assert get("hf_alice" + client, repo).get("sha256") == corpus.sha256(repo, "config.json")
    assert get("hf_bob" + client, GATED)["error"] == "GatedRepoError"
    assert get("hf_bob" + client, private)["error"] == "RepositoryNotFoundError"
    hub.revoke("hf_alice" + client, GATED)
    assert get("hf_alice" + client, GATED)["error"] == "GatedRepoError"


# ---------------------------------------------------------------- Xet


@pytest.mark.parametrize("client", ["latest", "legacy"])
def test_xet_clients_download_byte_exact_from_the_fake_cas(client, request, xet_hub, new_hf_home):
    """The fake Hub speaks Xet (pulsys/testing/fake_hub_xet.py): with hf_xet installed the
    client asks for a read token, then the CAS's reconstruction (/v2, or /v1 for older
    hf_xet) and xorb ranges behind signed URLs, never the CDN's plain-HTTP URL, and gets
    the file byte-exact (its chunks are LZ4 frames where that is smaller, as the Hub's)."""
    hub, corpus = xet_hub
    venv = request.getfixturevalue(client + "_venv")
    hub.reset_counters()
    out = _download(venv, hub, new_hf_home(), MODEL, "model.safetensors",
                    env_extra={"HF_XET_TELEMETRY_ENABLED": "false"})
    assert out["sha256"] == corpus.sha256(MODEL, "model.safetensors"), out
    assert out["client"]["hf_xet"] and not out["client"]["xet_disabled"]
    assert hub.count("GET", "/xet-read-token/", server="hub") >= 1
    assert hub.count("GET", "/reconstructions/", server="cdn") >= 1
    assert hub.count(None, "/repos/", server="cdn") == 0  # the plain-HTTP CDN URL was never used
    assert hub.xorb_bytes() > 0 and hub.total_body_bytes() == 0

    # A regular file has no Xet data: plain HTTP works.
    out = _download(venv, hub, new_hf_home(), MODEL, "config.json")
    assert out["sha256"] == corpus.sha256(MODEL, "config.json")


def test_xet_metadata_and_disable_switch(latest_venv, xet_hub, new_hf_home):
    hub, corpus = xet_hub
    env = client_env(hub.url, new_hf_home())
    md = json_out(run_client(latest_venv, "file_metadata", [MODEL, "model.safetensors"], env, timeout=T))
    assert md["xet_hash"] and len(md["xet_hash"]) == 64
    assert "xet-read-token" in (md["xet_refresh_route"] or "")
    # HF_HUB_DISABLE_XET=1: the client falls back to the CDN Location over plain HTTP.
    hub.reset_counters()
    out = _download(latest_venv, hub, new_hf_home(), MODEL, "model.safetensors",
                    env_extra={"HF_HUB_DISABLE_XET": "1"})
    assert out["sha256"] == corpus.sha256(MODEL, "model.safetensors")
    assert xet_requests(hub) == []
    assert hub.count("GET", "/repos/", server="cdn") == 1


def test_latest_snapshot_with_xet_tree_skips_resolve(latest_venv, xet_hub, new_hf_home):
    """2.x trusts the /tree xetHash and goes straight to Xet for LFS files: no /resolve
    HEAD for them at all (hf-protocol.md §5); the snapshot is byte-exact from the CAS."""
    hub, corpus = xet_hub
    hub.reset_counters()
    cp = run_client(latest_venv, "snapshot_download", [MODEL],
                    client_env(hub.url, new_hf_home(), HF_XET_TELEMETRY_ENABLED="false"), timeout=T)
    out = json_out(cp)
    assert out["files"] == corpus.expected(MODEL)
    assert hub.count("GET", "/xet-read-token/", server="hub") >= 1
    assert hub.count("HEAD", "/resolve/%s/model.safetensors" % corpus.shas[MODEL]["initial"]) == 0
    assert hub.xorb_bytes() > 0


