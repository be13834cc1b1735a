"""A rate-limited Hub through pulsys, with the real huggingface_hub 2.x (hf-protocol.md
§6: its HEAD /resolve is retried on 429 with a backoff that honours Retry-After). The
Hub answers one 429 with `Retry-After: 3`; pulsys passes it on and asks the Hub nothing
more until the time is up, answering the client's retries meanwhile with its own 429
(upstream/ratelimit.py). The download completes, and the Hub hears no retry storm."""

import time

import pytest

from .clients import client_env, json_out, run_client
from .conftest import MODEL, populate

pytestmark = pytest.mark.clients


def test_hf_hub_download_waits_out_the_hubs_rate_limit(latest_venv, make_hub, pulsys_server,
                                                         tmp_path_factory, new_hf_home):
    hub = make_hub()
    corpus = populate(hub)
    server = pulsys_server(hub, tmp_path_factory.mktemp("pulsys-cache-429"))
    hub.reset_counters()
    hub.faults.status(429, times=1, match="/resolve/", headers=(("Retry-After", "3"),))
    t0 = time.monotonic()
    cp = run_client(latest_venv, "hf_hub_download", [MODEL, "config.json"],
                    client_env(server.url, new_hf_home()), timeout=120, check=False)
    took = time.monotonic() - t0
    assert cp.returncode == 0, cp.stderr[-4000:]
    assert json_out(cp)["sha256"] == corpus.sha256(MODEL, "config.json")
    v = server.debug_vars()
    assert v["upstream_rate_limited"] == 1
    # every request the client made inside the window was answered by pulsys itself:
    # the Hub heard the rate-limited request, then only what the download needed
    resolves = hub.count(path_contains="/resolve/")
    assert resolves <= 3, (resolves, v["rate_limited_answers"])
    assert took >= 2.5, took              # the client did wait: it did not get through early
