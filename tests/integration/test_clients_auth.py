"""Real clients against pulsys with --auth required, the key given the way users give
it: HF_TOKEN in the environment. huggingface_hub 2.x and 0.36.2 (with hf_transfer's
parallel ranges) download with a key; without one, or with a bad one, they fail with
pulsys's explanation in what they show."""

import hashlib
import re

import pytest

from tests.auth.conftest import call

from .clients import client_env, json_out, run_client
from .conftest import DATASET, MODEL, populate

pytestmark = pytest.mark.clients

T = 120
BIG = "acme/big-auth"
BIG_SIZE = 52 * 1024 * 1024 + 11       # > 50 MiB: 0.36.2 hands it to hf_transfer


@pytest.fixture(scope="module")
def setup(make_hub, pulsys_server, tmp_path_factory):
    import random
    hub = make_hub(xet=True)
    corpus = populate(hub)
    big = random.Random(9).randbytes(BIG_SIZE)
    hub.add_repo(BIG, files={"model.safetensors": big})
    server = pulsys_server(hub, tmp_path_factory.mktemp("pulsys-auth-cache"), "--auth", "required")
    with open(server._stdout_path) as f:
        key = re.search(r"^export HF_TOKEN=(\S+)$", f.read(), re.M).group(1)
    return hub, corpus, server, key, hashlib.sha256(big).hexdigest()


def run(venv, server, home, script, args, token, **extra):
    env = client_env(server.url, home, token=token, HF_HUB_DISABLE_IMPLICIT_TOKEN=None, **extra)
    return json_out(run_client(venv, script, args, env, timeout=T, check=False))


def shown(out):
    """What a person sees of a failure: the exception's text and its cause."""
    return out.get("message", "") + "\n" + out.get("cause", "")


@pytest.mark.parametrize("client", ["latest", "legacy"])
def test_a_key_in_hf_token_downloads(client, request, setup, new_hf_home):
    venv = request.getfixturevalue(client + "_venv")
    hub, corpus, server, key, _ = setup
    for name in ("config.json", "model.safetensors"):
        out = run(venv, server, new_hf_home(), "hf_hub_download", [MODEL, name], key)
        assert out.get("sha256") == corpus.sha256(MODEL, name), out
    out = run(venv, server, new_hf_home(), "snapshot_download", [MODEL], key)
    assert out.get("files") == corpus.expected(MODEL), out
    assert not any(key in (r.headers.get("authorization") or "") for r in hub.requests)


@pytest.mark.parametrize("client", ["latest", "legacy"])
@pytest.mark.parametrize("token,text", [(None, "needs an API key: set HF_TOKEN"),
                                        ("pulsys_0123456789ab_" + "q" * 43, "invalid API key"),
                                        ("hf_someHubToken", "not a pulsys API key")])
def test_no_key_or_a_bad_one_fails_with_pulsys_explanation(client, token, text, request, setup, new_hf_home):
    venv = request.getfixturevalue(client + "_venv")
    _, _, server, _, _ = setup
    out = run(venv, server, new_hf_home(), "hf_hub_download", [MODEL, "config.json"], token)
    assert "error" in out, out
    assert text in shown(out), out
    assert "RepositoryNotFoundError" not in out["error_mro"], out
    out = run(venv, server, new_hf_home(), "snapshot_download", [MODEL], token)
    assert "error" in out and text in shown(out), out
    assert server.alive()


def test_hf_transfer_parallel_ranges_carry_the_key(legacy_venv, setup, new_hf_home):
    hub, _, server, key, sha = setup
    out = run(legacy_venv, server, new_hf_home(), "hf_hub_download",
              [BIG, "model.safetensors", "--require-hf-transfer"], key, HF_HUB_ENABLE_HF_TRANSFER="1")
    assert out.get("sha256") == sha and out["size"] == BIG_SIZE, out


@pytest.mark.parametrize("client", ["latest", "legacy"])
def test_a_key_limited_to_some_repos_gets_the_hubs_not_found_for_the_rest(client, request, setup, new_hf_home):
    """A key an admin limited to MODEL's owner: MODEL downloads; a dataset of the same
    name is another repo type, outside the pattern, and the client raises the error it
    raises against the Hub for a repo the caller cannot see."""
    venv = request.getfixturevalue(client + "_venv")
    hub, corpus, server, admin, _ = setup
    owner = MODEL.split("/")[0]
    st, _, doc = call(server.admin_url + "/api/v1/keys", "POST", admin,
                      {"name": "limited", "repos": ["models/%s/*" % owner]})
    assert st == 201, doc
    limited = doc["key"]
    out = run(venv, server, new_hf_home(), "hf_hub_download", [MODEL, "config.json"], limited)
    assert out.get("sha256") == corpus.sha256(MODEL, "config.json"), out
    out = run(venv, server, new_hf_home(), "hf_hub_download", [DATASET, "README.md", "--repo-type", "dataset"],
              limited)
    assert "error" in out and "RepositoryNotFoundError" in out["error_mro"], out
    out = run(venv, server, new_hf_home(), "snapshot_download", [DATASET, "--repo-type", "dataset"], limited)
    assert "error" in out and "RepositoryNotFoundError" in out["error_mro"], out
    assert server.alive()
