"""An older huggingface_hub (0.23.5, what older training images still pin) through
pulsys: single files and whole snapshots cold and then warm with zero upstream body
bytes, and the Hub's error classes (hf-protocol.md §4.3) intact."""

import pytest

from .clients import client_env, json_out, run_client
from .conftest import DATASET, ERROR_CASES, MODEL, populate

pytestmark = pytest.mark.clients

T = 120


@pytest.fixture(scope="module")
def setup(make_hub, pulsys_server, tmp_path_factory):
    hub = make_hub(xet=True, tree_page_size=3)
    corpus = populate(hub)
    return hub, corpus, pulsys_server(hub, tmp_path_factory.mktemp("pulsys-cache-old"))


def run(venv, server, home, script, args):
    return json_out(run_client(venv, script, args, client_env(server.url, home), timeout=T, check=False))


def test_files_and_snapshots_cold_then_warm(old_venv, setup, new_hf_home):
    hub, corpus, server = setup
    for round_ in ("cold", "warm"):
        if round_ == "warm":
            hub.reset_counters()
        for name in ("config.json", "model.safetensors", "weights/extra.bin"):
            out = run(old_venv, server, new_hf_home(), "hf_hub_download", [MODEL, name])
            assert out.get("sha256") == corpus.sha256(MODEL, name), (round_, name, out)
            assert out["client"]["huggingface_hub"] == "0.23.5"
        out = run(old_venv, server, new_hf_home(), "snapshot_download", [MODEL])
        assert out.get("files") == corpus.expected(MODEL), (round_, out)
        out = run(old_venv, server, new_hf_home(), "snapshot_download", [DATASET, "--repo-type", "dataset"])
        assert out.get("files") == corpus.expected(DATASET, "dataset"), (round_, out)
    assert hub.total_body_bytes() == 0              # the warm round moved no body upstream
    assert server.alive()


@pytest.mark.parametrize("case", ["missing-file", "missing-repo", "gated"])
def test_the_hubs_errors_reach_the_old_client(old_venv, setup, new_hf_home, case):
    _, _, server = setup
    repo, name, want = ERROR_CASES[case]
    out = run(old_venv, server, new_hf_home(), "hf_hub_download", [repo, name])
    assert "error" in out and want in out["error_mro"], out
    assert "LocalEntryNotFoundError" not in out["error_mro"], out
