"""The real clients through pulsys: client -> pulsys -> fake hub.

The fake hub runs with ``xet=True``, like the live Hub: every LFS answer and
/tree entry carries Xet signals, and the clients have hf_xet installed. Through
pulsys they must download over plain HTTP, which they do only if pulsys strips
those signals (hf-protocol.md §5, §7.8; the fake hub's CAS would serve them
otherwise), so every test also checks that the hub never saw a Xet token or CAS
request.

Scenarios (hf-protocol.md):
1. latest 2.x: hf_hub_download (regular, LFS), snapshot_download (model,
   dataset), ``hf download`` — correct bytes, no Xet.
2. a second round with a fresh client cache moves zero blob bytes upstream.
3. with the hub stopped, a fresh client still gets everything (warm cache,
   metadata from the last known answers).
4. legacy 0.36.2 + hf_transfer on a > 50 MiB LFS file (abandoned GET + many
   parallel ranges), then a warm round with zero upstream bytes.
5. legacy hf_hub_download / snapshot_download (/revision + siblings).
6. symbolic (refs/pr/1) and 40-hex revisions.
7. error classes survive the proxy (EntryNotFound, RepositoryNotFound, GatedRepo).
"""

import hashlib

import pytest

from .clients import client_env, json_out, run_cli, run_client, sha256_tree
from .conftest import BIG, BIG_FILE, BIG_SIZE, DATASET, ERROR_CASES, GATED, MODEL, REV_PR, REV_V1, REV_V3, REVS, populate, \
    xet_requests

pytestmark = pytest.mark.clients

T = 120  # seconds: bound for one client process
LFS_MODEL_FILES = ("model.safetensors", "weights/extra.bin")


@pytest.fixture(scope="module")
def hub_and_corpus(make_hub):
    hub = make_hub(xet=True, tree_page_size=3)
    return hub, populate(hub, big=True)


@pytest.fixture(scope="module")
def shared_proxy(hub_and_corpus, pulsys_server, tmp_path_factory):
    hub, _ = hub_and_corpus
    return pulsys_server(hub, tmp_path_factory.mktemp("pulsys-cache"))


@pytest.fixture
def proxy(shared_proxy):
    """The shared pulsys; a test during which it dies errors in teardown, and the
    next test gets it restarted (same cache dir) instead of a cascade of failures."""
    if not shared_proxy.alive():
        shared_proxy.restart()
    before = shared_proxy.debug_vars().get("internal_errors", 0)
    yield shared_proxy
    assert shared_proxy.alive(), "pulsys died during this test\n" + shared_proxy.diagnostics()
    after = shared_proxy.debug_vars().get("internal_errors", 0)
    assert after == before, "pulsys counted %d internal errors during this test\n%s" % (
        after - before, shared_proxy.diagnostics())


@pytest.fixture
def hub(hub_and_corpus):
    """The shared hub, with its request log and byte counters zeroed for this test."""
    h, _ = hub_and_corpus
    h.reset_counters()
    return h


@pytest.fixture
def corpus(hub_and_corpus):
    return hub_and_corpus[1]


# ---------------------------------------------------------------- helpers


def _ctx(server):
    return "\n" + server.diagnostics()


def download(venv, server, hf_home, repo, filename, *args, env_extra=None, check=True, timeout=T):
    env = client_env(server.url, hf_home, **(env_extra or {}))
    cp = run_client(venv, "hf_hub_download", [repo, filename, *args], env, timeout=timeout, check=False)
    if check and cp.returncode != 0:
        pytest.fail("hf_hub_download %s %s failed:\n%s\n%s%s" % (repo, filename, cp.stdout, cp.stderr[-6000:],
                                                                 _ctx(server)), pytrace=False)
    return json_out(cp)


def snapshot(venv, server, hf_home, repo, *args):
    cp = run_client(venv, "snapshot_download", [repo, *args], client_env(server.url, hf_home),
                    timeout=T, check=False)
    if cp.returncode != 0:
        pytest.fail("snapshot_download %s failed:\n%s\n%s%s" % (repo, cp.stdout, cp.stderr[-6000:], _ctx(server)),
                    pytrace=False)
    return json_out(cp)["files"]


def cli_download(venv, server, hf_home, *args):
    cp = run_cli(venv, "hf", ["download", *args, "--format", "json"], client_env(server.url, hf_home),
                 timeout=T, check=False)
    if cp.returncode != 0:
        pytest.fail("hf download %s failed:\n%s\n%s%s" % (" ".join(args), cp.stdout, cp.stderr[-6000:],
                                                          _ctx(server)), pytrace=False)
    return json_out(cp)["path"]


def latest_round(venv, server, corpus, new_hf_home, label):
    """Every latest-client download of scenario 1, each with a fresh client cache; asserts bytes."""
    out = download(venv, server, new_hf_home(label), MODEL, "config.json")
    assert out["sha256"] == corpus.sha256(MODEL, "config.json"), label
    for name in LFS_MODEL_FILES:
        out = download(venv, server, new_hf_home(label), MODEL, name)
        assert out["sha256"] == corpus.sha256(MODEL, name), (label, name)
        # The client named the blob after the HF etag (sha256 for LFS), not a CDN ETag.
        assert out["realpath"].endswith("/blobs/" + corpus.sha256(MODEL, name)), (label, out)
    assert snapshot(venv, server, new_hf_home(label), MODEL) == corpus.expected(MODEL), label
    assert (snapshot(venv, server, new_hf_home(label), DATASET, "--repo-type", "dataset")
            == corpus.expected(DATASET, "dataset")), label
    path = cli_download(venv, server, new_hf_home(label), MODEL)
    assert sha256_tree(path) == corpus.expected(MODEL), label


def assert_no_xet(hub, server=None):
    tried = xet_requests(hub)
    assert tried == [], "clients tried Xet through pulsys: %r%s" % (
        [(r.server, r.method, r.path) for r in tried], _ctx(server) if server else "")


# ---------------------------------------------------------------- 1. latest client, cold


def test_latest_hf_hub_download_regular(latest_venv, proxy, hub, corpus, new_hf_home):
    out = download(latest_venv, proxy, new_hf_home(), MODEL, "config.json")
    assert out["sha256"] == corpus.sha256(MODEL, "config.json")
    data = corpus.data(MODEL, "config.json")
    git_sha1 = hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()
    assert out["realpath"].endswith("/blobs/" + git_sha1), out
    out = download(latest_venv, proxy, new_hf_home(), MODEL, "tokenizer/vocab.txt")
    assert out["sha256"] == corpus.sha256(MODEL, "tokenizer/vocab.txt")
    assert_no_xet(hub, proxy)


def test_latest_hf_hub_download_lfs(latest_venv, proxy, hub, corpus, new_hf_home):
    for name in LFS_MODEL_FILES:
        out = download(latest_venv, proxy, new_hf_home(), MODEL, name)
        assert out["sha256"] == corpus.sha256(MODEL, name), name
        assert out["client"]["hf_xet"] and not out["client"]["xet_disabled"]
    assert_no_xet(hub, proxy)


def test_latest_file_metadata_carries_hf_headers_without_xet(latest_venv, proxy, hub, corpus, new_hf_home):
    env = client_env(proxy.url, new_hf_home())
    for name, etag in (("model.safetensors", corpus.sha256(MODEL, "model.safetensors")),
                       ("config.json", None)):
        cp = run_client(latest_venv, "file_metadata", [MODEL, name], env, timeout=T, check=False)
        md = json_out(cp)
        assert "error" not in md, "%r%s" % (md, _ctx(proxy))
        assert md["commit_hash"] == corpus.shas[MODEL]["initial"]
        assert md["size"] == len(corpus.data(MODEL, name))
        if etag:
            assert md["etag"] == etag
        assert md["xet_hash"] is None and md["xet_refresh_route"] is None, md
    assert_no_xet(hub, proxy)


def test_latest_snapshot_download_model(latest_venv, proxy, hub, corpus, new_hf_home):
    # The tree has pages of 3 entries: pulsys must hand the client a next-page Link it can follow.
    assert snapshot(latest_venv, proxy, new_hf_home(), MODEL) == corpus.expected(MODEL)
    assert_no_xet(hub, proxy)


def test_latest_snapshot_download_dataset(latest_venv, proxy, hub, corpus, new_hf_home):
    assert (snapshot(latest_venv, proxy, new_hf_home(), DATASET, "--repo-type", "dataset")
            == corpus.expected(DATASET, "dataset"))
    files = snapshot(latest_venv, proxy, new_hf_home(), DATASET, "--repo-type", "dataset",
                     "--allow-patterns", "*.parquet")
    assert files == {p: s for p, s in corpus.expected(DATASET, "dataset").items() if p.endswith(".parquet")}
    assert_no_xet(hub, proxy)


def test_latest_hf_download_cli_whole_repo(latest_venv, proxy, hub, corpus, new_hf_home):
    path = cli_download(latest_venv, proxy, new_hf_home(), MODEL)
    assert sha256_tree(path) == corpus.expected(MODEL)
    path = cli_download(latest_venv, proxy, new_hf_home(), DATASET, "--repo-type", "dataset")
    assert sha256_tree(path) == corpus.expected(DATASET, "dataset")
    assert_no_xet(hub, proxy)


# ---------------------------------------------------------------- 2. warm: fresh client, zero upstream bytes


def test_second_round_fresh_client_moves_zero_upstream_bytes(latest_venv, proxy, hub, corpus, new_hf_home):
    latest_round(latest_venv, proxy, corpus, new_hf_home, "warmup")  # cold or already warm: either way
    assert_no_xet(hub, proxy)
    hub.reset_counters()
    latest_round(latest_venv, proxy, corpus, new_hf_home, "round2")
    assert hub.total_body_bytes() == 0, "warm round fetched blob bytes upstream: %s%s" % (
        sorted({(r.server, r.method, r.path) for r in hub.requests if r.method == "GET"}), _ctx(proxy))
    for repo, rtype in ((MODEL, "model"), (DATASET, "dataset")):
        for name, sha in corpus.expected(repo, rtype).items():
            assert hub.body_fetches(sha) == 0, (repo, name)
    assert_no_xet(hub, proxy)


def test_warm_after_pulsys_restart(latest_venv, make_hub, pulsys_server, tmp_path_factory, new_hf_home):
    """Same cache dir, new pulsys process: a fresh client is served from disk."""
    hub = make_hub(xet=True, tree_page_size=3)
    corpus = populate(hub)
    server = pulsys_server(hub, tmp_path_factory.mktemp("pulsys-cache-restart"))
    latest_round(latest_venv, server, corpus, new_hf_home, "cold")
    server.restart()
    hub.reset_counters()
    latest_round(latest_venv, server, corpus, new_hf_home, "after-restart")
    assert hub.total_body_bytes() == 0, "after a restart pulsys re-fetched blobs%s" % _ctx(server)
    assert_no_xet(hub, server)


# ---------------------------------------------------------------- 3. upstream down


def test_upstream_down_serves_warm_cache(latest_venv, make_hub, pulsys_server, tmp_path_factory, new_hf_home):
    hub = make_hub(xet=True, tree_page_size=3)
    corpus = populate(hub)
    server = pulsys_server(hub, tmp_path_factory.mktemp("pulsys-cache-offline"))
    latest_round(latest_venv, server, corpus, new_hf_home, "cold")
    hub.reset_counters()
    latest_round(latest_venv, server, corpus, new_hf_home, "warm")
    assert hub.total_body_bytes() == 0
    hub.stop()
    latest_round(latest_venv, server, corpus, new_hf_home, "hub-down")
    assert server.alive(), _ctx(server)


# ---------------------------------------------------------------- 4. legacy + hf_transfer


def test_legacy_hf_transfer_big_file(legacy_venv, proxy, hub, corpus, new_hf_home):
    sha = corpus.sha256(BIG, BIG_FILE)
    env_extra = {"HF_HUB_ENABLE_HF_TRANSFER": "1"}
    out = download(legacy_venv, proxy, new_hf_home(), BIG, BIG_FILE, "--require-hf-transfer", env_extra=env_extra)
    assert out["sha256"] == sha
    assert out["size"] == BIG_SIZE
    assert out["realpath"].endswith("/blobs/" + sha)
    assert_no_xet(hub, proxy)
    # hf_transfer sends an abandoned full GET, `bytes=0-0` and 7 parallel ranges: pulsys fetches the
    # file in ranged pieces where they are wanted (ADR 0007) and never a byte twice (hf-protocol.md
    # §7.10): at most one upstream byte per cached byte, and all of them.
    assert hub.body_bytes(sha) == BIG_SIZE, (
        "upstream sent %d bytes in %d responses for one %d-byte file%s" % (
            hub.body_bytes(sha), hub.body_fetches(sha), BIG_SIZE, _ctx(proxy)))
    cdn_gets = [r for r in hub.requests if r.server == "cdn" and r.method == "GET" and sha in r.path]
    assert len(cdn_gets) >= 2 and all(r.range for r in cdn_gets), cdn_gets

    hub.reset_counters()
    out = download(legacy_venv, proxy, new_hf_home(), BIG, BIG_FILE, "--require-hf-transfer", env_extra=env_extra)
    assert out["sha256"] == sha
    assert hub.total_body_bytes() == 0, _ctx(proxy)
    assert hub.body_fetches(sha) == 0


# ---------------------------------------------------------------- 5. legacy hf_hub_download / snapshot_download


def test_legacy_hf_hub_download(legacy_venv, proxy, hub, corpus, new_hf_home):
    for name in ("config.json", "tokenizer/vocab.txt", *LFS_MODEL_FILES):
        out = download(legacy_venv, proxy, new_hf_home(), MODEL, name)
        assert out["client"]["huggingface_hub"] == "0.36.2"
        assert out["sha256"] == corpus.sha256(MODEL, name), name
    out = download(legacy_venv, proxy, new_hf_home(), DATASET, "data/train-00000-of-00001.parquet",
                   "--repo-type", "dataset")
    assert out["sha256"] == corpus.sha256(DATASET, "data/train-00000-of-00001.parquet", "dataset")
    assert_no_xet(hub, proxy)


def test_legacy_snapshot_download(legacy_venv, proxy, hub, corpus, new_hf_home):
    assert snapshot(legacy_venv, proxy, new_hf_home(), MODEL) == corpus.expected(MODEL)
    assert (snapshot(legacy_venv, proxy, new_hf_home(), DATASET, "--repo-type", "dataset")
            == corpus.expected(DATASET, "dataset"))
    assert_no_xet(hub, proxy)


# ---------------------------------------------------------------- 6. revisions


@pytest.mark.parametrize("client", ["latest", "legacy"])
def test_symbolic_and_sha_revisions(client, request, proxy, hub, corpus, new_hf_home):
    venv = request.getfixturevalue(client + "_venv")
    shas = corpus.shas[REVS]
    cases = (("refs/pr/1", REV_PR), (shas["v1"], REV_V1), (shas["pr"], REV_PR), ("main", REV_V3))
    for rev, want in cases:
        out = download(venv, proxy, new_hf_home(), REVS, "config.json", "--revision", rev)
        assert out["sha256"] == hashlib.sha256(want).hexdigest(), rev
        commit = {"refs/pr/1": shas["pr"], "main": shas["main"]}.get(rev, rev)
        assert "/snapshots/%s/" % commit in out["path"], (rev, out["path"])
    # A file that only differs between revisions: the LFS weights of refs/pr/1 vs the initial commit.
    a = download(venv, proxy, new_hf_home(), REVS, "weights.safetensors", "--revision", "refs/pr/1")
    b = download(venv, proxy, new_hf_home(), REVS, "weights.safetensors", "--revision", shas["v1"])
    assert a["sha256"] != b["sha256"]
    assert b["sha256"] == corpus.sha256(REVS, "weights.safetensors")
    if client == "latest":
        files = snapshot(venv, proxy, new_hf_home(), REVS, "--revision", "refs/pr/1")
        assert files["config.json"] == hashlib.sha256(REV_PR).hexdigest()
    assert_no_xet(hub, proxy)


# ---------------------------------------------------------------- 7. errors


@pytest.mark.parametrize("client", ["latest", "legacy"])
@pytest.mark.parametrize("case", ["missing-file", "missing-repo", "gated"])
def test_errors_through_pulsys(client, case, request, proxy, hub, new_hf_home):
    venv = request.getfixturevalue(client + "_venv")
    repo, name, want = ERROR_CASES[case]
    out = download(venv, proxy, new_hf_home(), repo, name, check=False)
    assert "error" in out, out
    # LocalEntryNotFoundError would mean the client never got a usable answer (network error,
    # missing X-Repo-Commit, ...), not the Hub's verdict.
    assert want in out["error_mro"] and "LocalEntryNotFoundError" not in out["error_mro"], "%r%s" % (
        out, _ctx(proxy))
    if case != "missing-file":
        assert out["error"] == want, out  # GatedRepoError is a RepositoryNotFoundError subclass
