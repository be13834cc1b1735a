"""Real `datasets` and `transformers` loads through pulsys with the Hub down.

A warm cache answers everything a load asks, and what it cannot answer gets a status
no client retries (docs/architecture.md, "When the Hub is down"): so with every Hub
request failing (the fake Hub's `status(503)` fault), a load through a warm pulsys
takes about as long as with the Hub up. Each load runs with a fresh HF_HOME, so the
client's own cache answers nothing; --revision-ttl is short, so "main" and the info
documents are stale by the time the Hub goes down and pulsys would ask upstream first.
Also in the multi-process layout (--listeners 2).
"""

import json
import time

import pytest

from pulsys.testing.fake_hub_content import tiny_dataset_files, tiny_tokenizer_files

from .clients import client_env, client_venv, run_client

TTL = 1.0
DATASET, TOKENIZER = "org/tiny-ds", "org/tiny-tok"
TEXT = "hello world is down"


@pytest.fixture(scope="module")
def datasets_venv():
    return client_venv("datasets")


@pytest.fixture(scope="module")
def transformers_venv():
    return client_venv("transformers")


@pytest.fixture(scope="module")
def hub(make_hub):
    h = make_hub()
    h.add_repo(DATASET, files=tiny_dataset_files(), repo_type="dataset")
    h.add_repo(TOKENIZER, files=tiny_tokenizer_files())
    return h


def _result(doc):
    """What a load produced, without its timing and client description."""
    return {k: v for k, v in doc.items() if k not in ("seconds", "client")}


def _load(venv, script, args, server, new_hf_home):
    t0 = time.monotonic()
    cp = run_client(venv, script, args, env=client_env(server.url, new_hf_home()), check=False)
    seconds = time.monotonic() - t0
    assert cp.returncode == 0, "%s failed:\n%s\n%s\n%s" % (script, cp.stdout, cp.stderr[-6000:],
                                                       server.diagnostics())
    return json.loads(cp.stdout.strip().splitlines()[-1]), seconds


CASES = {
    "datasets": ("datasets_venv", "load_dataset", [DATASET]),
    "transformers": ("transformers_venv", "auto_tokenizer", [TOKENIZER, TEXT]),
}


# each library once, each layout once: the two layouts share the upstream plane's code,
# and a real load costs seconds
@pytest.mark.parametrize("library, listeners", [("datasets", 1), ("transformers", 2)],
                         ids=["datasets-1-listener", "transformers-2-listeners"])
def test_a_warm_load_is_as_fast_with_the_hub_down(library, listeners, request, hub, pulsys_server,
                                                   tmp_path_factory, new_hf_home):
    venv_fixture, script, args = CASES[library]
    venv = request.getfixturevalue(venv_fixture)
    server = pulsys_server(hub, tmp_path_factory.mktemp("pulsys-cache-down"), "--revision-ttl", str(TTL),
                           "--listeners", str(listeners))
    cold, _ = _load(venv, script, args, server, new_hf_home)
    hub.reset_counters()
    warm, warm_s = _load(venv, script, args, server, new_hf_home)
    assert _result(warm) == _result(cold)
    time.sleep(TTL + 0.2)                 # "main" and the info documents are stale now
    hub.faults.status(503, times=None)    # every Hub request fails from here
    try:
        down, down_s = _load(venv, script, args, server, new_hf_home)
        asked = hub.count()
    finally:
        hub.faults.clear()
    print("%s, %d listener(s): warm %.2f s, Hub down %.2f s, %d Hub requests while down"
          % (library, listeners, warm_s, down_s, asked))
    assert _result(down) == _result(cold)
    assert down_s <= 2 * warm_s + 10, (warm_s, down_s, server.diagnostics())
    v = server.debug_vars()
    assert v["stale_served"] >= 1            # the stale copies answered, not the Hub
