"""--xet facade with --auth required, one process and two worker processes: the token
route takes the client's key like any repo route; the CAS routes take none (hf_xet sends
pulsys's key to neither: a CAS token or a signed URL is the proof); /api/v1/stats and
the console's dashboard count what the facade did."""

import os

import pytest

from tests import xetclient
from tests.admin.test_console_http import login
from tests.auth.conftest import admin_url, call


@pytest.fixture(params=[1, 2], ids=["one-process", "two-workers"])
def listeners(request):
    return request.param


def test_keys_guard_the_token_route_and_stats_count_xet(auth_server, hub, tmp_path, listeners):
    data = os.urandom(3 << 20)
    hub.add_repo("org/x", files={"model.safetensors": data})
    server, admin, read = auth_server(xet="facade",
                                      allow_upstream_host=[hub.cdn_netloc, hub.xorb_url[len("http://"):]])
    route = server.url + "/api/models/org/x/xet-read-token/main"
    assert xetclient.get(route)[0] == 401                      # no key
    assert xetclient.get(route, "hf_not_a_key")[0] == 401
    cas, token = xetclient.cas_token(server.url, "org/x", hub_token=read)
    assert cas == server.url + "/cas"
    file_hash = xetclient.xet_hash(server.url, "org/x", "model.safetensors", hub_token=read)
    answer = xetclient.reconstruction(cas, token, file_hash)   # the CAS token, not the key
    assert xetclient.download(answer) == data                  # xorb URLs carry no key at all
    assert xetclient.get("%s/v2/reconstructions/%s" % (cas, file_hash), read)[0] == 401   # a key is no CAS token

    base = admin_url(server)
    st, _, s = call(base + "/api/v1/stats", key=admin)
    assert st == 200
    xet = s["xet"]
    assert xet["tokens"] == 1 and xet["xorb_fills"] >= 3 and xet["xorb_bytes_fetched"] == hub.xorb_bytes()
    session, r = login(base, admin)
    page = session.get(base + "/console/", timeout=10).text
    assert "Xet (facade)" in page and "%d xorb ranges fetched" % xet["xorb_fills"] in page
