"""huggingface.js (@huggingface/hub from npm) through pulsys, with `hubUrl` set to
pulsys as its users set it: files (regular and LFS) cold and then warm with zero
upstream body bytes, a recursive file listing, a missing file (downloadFile's null) and
a missing repo. The fake Hub advertises Xet like the live Hub; pulsys strips it, so the
client downloads over plain HTTP and the Hub sees no Xet request."""

import pytest

from .clients import client_env
from .conftest import DATASET, GATED, MODEL, populate, xet_requests
from .jsclient import hfjs_dir, run_hfjs

pytestmark = pytest.mark.clients

FILES = ("config.json", "model.safetensors", "weights/extra.bin")


@pytest.fixture(scope="module")
def setup(make_hub, pulsys_server, tmp_path_factory):
    install = hfjs_dir()
    hub = make_hub(xet=True, tree_page_size=3)
    corpus = populate(hub)
    return install, hub, corpus, pulsys_server(hub, tmp_path_factory.mktemp("pulsys-cache-hfjs"))


def test_files_cold_then_warm_and_a_listing(setup, tmp_path):
    install, hub, corpus, server = setup
    env = client_env(server.url, tmp_path)
    for round_ in ("cold", "warm"):
        if round_ == "warm":
            hub.reset_counters()
        for name in FILES:
            out = run_hfjs(install, env, "download", MODEL, name)
            assert out == {"sha256": corpus.sha256(MODEL, name), "size": len(corpus.data(MODEL, name))}, \
                (round_, name, out)
        out = run_hfjs(install, env, "download", "datasets/" + DATASET, "data/train.csv")
        assert out.get("sha256") == corpus.sha256(DATASET, "data/train.csv", "dataset"), out
    assert hub.total_body_bytes() == 0
    out = run_hfjs(install, env, "list", MODEL)
    assert out == {"files": sorted(corpus.expected(MODEL))}, out
    assert xet_requests(hub) == [] and server.alive()


def test_missing_and_refused_answers_read_as_they_do_from_the_hub(setup, tmp_path):
    install, hub, _, server = setup
    via, direct = client_env(server.url, tmp_path / "a"), client_env(hub.url, tmp_path / "b")
    assert run_hfjs(install, via, "download", MODEL, "no-such-file.json") == {"missing": True}
    for repo in ("acme/no-such-repo", GATED):
        a = run_hfjs(install, via, "download", repo, "config.json")
        b = run_hfjs(install, direct, "download", repo, "config.json")
        # the same status and the Hub's words (the URL the message ends with differs)
        assert a["status"] == b["status"] == 401, (a, b)
        assert a["message"].split(". URL: ")[0] == b["message"].split(". URL: ")[0], (a, b)
