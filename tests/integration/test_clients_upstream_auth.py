"""Real clients through `pulsys --upstream-auth client --auth off` (ADR 0016): each user's
own HF_TOKEN reaches the Hub, and what the Hub would answer that user is what the user
gets — huggingface_hub 2.x and 0.36.2 (hf_transfer for a big file), the `hf` CLI —
even for files pulsys already holds because another user fetched them. A warm gated
download inside --access-ttl asks the Hub nothing; a revoked access stops after it.
With `--auth required` (ADR 0017) each user's HF_TOKEN is a pulsys key that carries
the user's Hub token. The same users straight against the fake Hub: test_clients_direct.py."""

import random
import re
import time

import pytest

from tests.auth.conftest import call

from .clients import client_env, json_out, run_cli, run_client
from .conftest import GATED, MODEL, populate

pytestmark = pytest.mark.clients

T = 120
PRIVATE = "acme/private-weights"
BIG_GATED = "acme/big-gated"
BIG_SIZE = 52 * 1024 * 1024 + 7        # > 50 MiB: 0.36.2 hands it to hf_transfer


@pytest.fixture(scope="module")
def world(make_hub):
    hub = make_hub(xet=True)
    corpus = populate(hub)
    corpus.add(hub, PRIVATE, {"config.json": b'{"private": true}\n',
                              "model.safetensors": random.Random(3).randbytes(300_000)}, private=True)
    corpus.add(hub, BIG_GATED, {"model.safetensors": random.Random(4).randbytes(BIG_SIZE)}, gated=True)
    return hub, corpus


@pytest.fixture(scope="module")
def server(world, pulsys_server, tmp_path_factory):
    hub, _ = world
    return pulsys_server(hub, tmp_path_factory.mktemp("pulsys-client-auth"), "--upstream-auth", "client",
                         "--access-ttl", "60")


def user(hub, name, *repos):
    token = "hf_" + name + "x" * (34 - len(name))
    hub.add_user(token)
    for repo in repos:
        hub.grant(token, repo)
    return token


def download(venv, server, home, repo, name, token, *args, **env):
    e = client_env(server.url, home, token=token, HF_HUB_DISABLE_IMPLICIT_TOKEN=None, **env)
    return json_out(run_client(venv, "hf_hub_download", [repo, name, *args], e, timeout=T, check=False))


@pytest.mark.parametrize("client", ["latest", "legacy"])
def test_each_user_gets_what_the_hub_would_give_them(client, request, world, server, new_hf_home):
    hub, corpus = world
    venv = request.getfixturevalue(client + "_venv")
    alice = user(hub, "alice" + client, GATED, PRIVATE)
    bob = user(hub, "bob" + client)
    for repo in (GATED, PRIVATE):
        for name in ("config.json", "model.safetensors"):
            out = download(venv, server, new_hf_home(), repo, name, alice)
            assert out.get("sha256") == corpus.sha256(repo, name), out
    # pulsys holds every byte now; bob and anonymous get the Hub's refusals all the same
    for token in (bob, None):
        for name in ("config.json", "model.safetensors"):
            out = download(venv, server, new_hf_home(), GATED, name, token)
            assert out.get("error") == "GatedRepoError", out
            out = download(venv, server, new_hf_home(), PRIVATE, name, token)
            assert out.get("error") == "RepositoryNotFoundError", out
    out = download(venv, server, new_hf_home(), MODEL, "config.json", bob)      # public: anyone
    assert out.get("sha256") == corpus.sha256(MODEL, "config.json"), out
    assert server.alive()


def test_snapshot_download_and_the_hf_cli_per_user(latest_venv, world, server, new_hf_home):
    hub, corpus = world
    alice, bob = user(hub, "alicesnap", GATED), user(hub, "bobsnap")
    e = client_env(server.url, new_hf_home(), token=alice, HF_HUB_DISABLE_IMPLICIT_TOKEN=None)
    out = json_out(run_client(latest_venv, "snapshot_download", [GATED], e, timeout=T, check=False))
    assert out.get("files") == corpus.expected(GATED), out
    e = client_env(server.url, new_hf_home(), token=bob, HF_HUB_DISABLE_IMPLICIT_TOKEN=None)
    out = json_out(run_client(latest_venv, "snapshot_download", [GATED], e, timeout=T, check=False))
    assert out.get("error") == "GatedRepoError", out
    cp = run_cli(latest_venv, "hf", ["download", GATED, "config.json", "--format", "json"],
                 client_env(server.url, new_hf_home(), token=alice, HF_HUB_DISABLE_IMPLICIT_TOKEN=None),
                 timeout=T, check=False)
    assert cp.returncode == 0, cp.stderr[-3000:]
    cp = run_cli(latest_venv, "hf", ["download", GATED, "config.json", "--format", "json"],
                 client_env(server.url, new_hf_home(), token=bob, HF_HUB_DISABLE_IMPLICIT_TOKEN=None),
                 timeout=T, check=False)
    # the CLI's words for a GatedRepoError (huggingface_hub 2.x cli)
    assert cp.returncode != 0 and "requires approval" in cp.stderr, cp.stderr[-3000:]


def test_hf_transfer_pulls_a_big_gated_file_with_the_users_token(legacy_venv, world, server, new_hf_home):
    hub, corpus = world
    alice, bob = user(hub, "alicebig", BIG_GATED), user(hub, "bobbig")
    out = download(legacy_venv, server, new_hf_home(), BIG_GATED, "model.safetensors", alice,
                   "--require-hf-transfer", HF_HUB_ENABLE_HF_TRANSFER="1")
    assert out.get("sha256") == corpus.sha256(BIG_GATED, "model.safetensors") and out["size"] == BIG_SIZE, out
    out = download(legacy_venv, server, new_hf_home(), BIG_GATED, "model.safetensors", bob,
                   HF_HUB_ENABLE_HF_TRANSFER="1")
    assert out.get("error") == "GatedRepoError", out


def test_a_warm_gated_download_inside_the_ttl_asks_the_hub_nothing(latest_venv, world, server, new_hf_home):
    hub, corpus = world
    alice = user(hub, "alicewarm", GATED)
    for name in ("config.json", "model.safetensors"):
        assert download(latest_venv, server, new_hf_home(), GATED, name, alice).get("sha256")
    hub.reset_counters()
    for name in ("config.json", "model.safetensors"):
        out = download(latest_venv, server, new_hf_home(), GATED, name, alice)   # a new client cache
        assert out.get("sha256") == corpus.sha256(GATED, name), out
    assert hub.count() == 0, [(r.method, r.path) for r in hub.requests]


def test_a_revoked_access_stops_after_the_ttl(latest_venv, world, pulsys_server, tmp_path_factory,
                                               new_hf_home):
    hub, corpus = world
    srv = pulsys_server(hub, tmp_path_factory.mktemp("pulsys-client-auth-ttl"), "--upstream-auth", "client",
                        "--access-ttl", "1")
    alice = user(hub, "alicerevoke", GATED)
    out = download(latest_venv, srv, new_hf_home(), GATED, "model.safetensors", alice)
    assert out.get("sha256") == corpus.sha256(GATED, "model.safetensors"), out
    hub.revoke(alice, GATED)
    time.sleep(1.2)
    out = download(latest_venv, srv, new_hf_home(), GATED, "model.safetensors", alice)
    assert out.get("error") == "GatedRepoError", out
    hub.grant(alice, GATED)
    time.sleep(1.2)
    out = download(latest_venv, srv, new_hf_home(), GATED, "model.safetensors", alice)
    assert out.get("sha256") == corpus.sha256(GATED, "model.safetensors"), out


def test_service_mode_serves_what_its_own_token_reads_to_everyone(latest_venv, world, pulsys_server,
                                                                   tmp_path_factory, new_hf_home):
    """The other mode, side by side: with --upstream-auth service (the default) the Hub
    sees only pulsys's --hf-token, so every client reads what that token reads (what an
    organisation that accepted the terms once for everyone wants; docs/admin.md)."""
    hub, corpus = world
    org = user(hub, "orgtoken", GATED, PRIVATE)
    srv = pulsys_server(hub, tmp_path_factory.mktemp("pulsys-service-auth"), "--hf-token", org)
    hub.reset_counters()
    for token in (None, user(hub, "nobodyservice")):
        for repo in (GATED, PRIVATE):
            out = download(latest_venv, srv, new_hf_home(), repo, "config.json", token)
            assert out.get("sha256") == corpus.sha256(repo, "config.json"), out
    assert {r.headers.get("authorization") for r in hub.requests if r.server == "hub"} == {"Bearer " + org}


@pytest.fixture(scope="module")
def keyed_server(world, pulsys_server, tmp_path_factory):
    """--upstream-auth client --auth required: -> (server, the first start's admin key)."""
    hub, _ = world
    srv = pulsys_server(hub, tmp_path_factory.mktemp("pulsys-client-auth-keys"), "--upstream-auth", "client",
                        "--auth", "required", "--access-ttl", "60")
    with open(srv._stdout_path) as f:
        admin = re.search(r"^export HF_TOKEN=(\S+)$", f.read(), re.M).group(1)
    return srv, admin


def key_with(srv, admin, hub_token):
    """A read key carrying `hub_token` (None: no token), made through the admin API."""
    doc = {"name": "user"} if hub_token is None else {"name": "user", "hub_token": hub_token}
    st, _, out = call(srv.admin_url + "/api/v1/keys", "POST", admin, doc)
    assert st == 201, out
    return out["key"]


@pytest.mark.parametrize("client", ["latest", "legacy"])
def test_with_pulsys_keys_each_key_reads_what_its_owners_hub_token_may(client, request, world, keyed_server,
                                                                      new_hf_home):
    hub, corpus = world
    srv, admin = keyed_server
    venv = request.getfixturevalue(client + "_venv")
    alice = key_with(srv, admin, user(hub, "alicekey" + client, GATED, PRIVATE))
    bob = key_with(srv, admin, user(hub, "bobkey" + client))
    nobody = key_with(srv, admin, None)
    for repo in (GATED, PRIVATE):
        out = download(venv, srv, new_hf_home(), repo, "model.safetensors", alice)
        assert out.get("sha256") == corpus.sha256(repo, "model.safetensors"), out
    for key in (bob, nobody):
        out = download(venv, srv, new_hf_home(), GATED, "model.safetensors", key)
        assert out.get("error") == "GatedRepoError", out
        out = download(venv, srv, new_hf_home(), PRIVATE, "config.json", key)
        assert out.get("error") == "RepositoryNotFoundError", out
    out = download(venv, srv, new_hf_home(), MODEL, "config.json", nobody)     # public: any key
    assert out.get("sha256") == corpus.sha256(MODEL, "config.json"), out
    out = download(venv, srv, new_hf_home(), MODEL, "config.json", None)       # no key: pulsys says no
    assert out.get("error") and "API key" in out.get("message", "") + out.get("cause", ""), out
    assert not any("pulsys" in (r.headers.get("authorization") or "") for r in hub.requests)


def test_with_pulsys_keys_snapshot_download_and_the_hf_cli(latest_venv, world, keyed_server, new_hf_home):
    hub, corpus = world
    srv, admin = keyed_server
    alice = key_with(srv, admin, user(hub, "alicekeysnap", GATED))
    bob = key_with(srv, admin, user(hub, "bobkeysnap"))
    e = client_env(srv.url, new_hf_home(), token=alice, HF_HUB_DISABLE_IMPLICIT_TOKEN=None)
    out = json_out(run_client(latest_venv, "snapshot_download", [GATED], e, timeout=T, check=False))
    assert out.get("files") == corpus.expected(GATED), out
    cp = run_cli(latest_venv, "hf", ["download", GATED, "config.json", "--format", "json"],
                 client_env(srv.url, new_hf_home(), token=bob, HF_HUB_DISABLE_IMPLICIT_TOKEN=None),
                 timeout=T, check=False)
    assert cp.returncode != 0 and "requires approval" in cp.stderr, cp.stderr[-3000:]
