"""The routes of --xet facade (pulsys/route.py): the token route, the CAS's
reconstructions and xorb ranges, and hf_xet's telemetry."""

from pulsys.model import target as T

from test_route import r

H = "0a" * 32


def test_token_route_names_its_repo_and_revision():
    t = r("GET", "/api/datasets/org/ds/xet-read-token/refs%2Fpr%2F2")
    assert (t.kind, t.rtype, t.repo, t.rev) == (T.XET_TOKEN, "dataset", "org/ds", "refs/pr/2")
    assert t.upstream_path == "/api/datasets/org/ds/xet-read-token/refs%2Fpr%2F2"
    assert r("POST", "/api/models/gpt2/xet-read-token/main").status == 405
    assert r("GET", "/api/models/gpt2/xet-read-token/main/extra").kind == T.API_OTHER


def test_cas_routes():
    t = r("GET", "/cas/v2/reconstructions/" + H)
    assert (t.kind, t.rev, t.path) == (T.XET_RECON, "2", H)
    t = r("GET", "/cas/xorbs/%s/3-17?e=1&s=x" % H)
    assert (t.kind, t.repo, t.path, t.query) == (T.XET_XORB, H, "3-17", "e=1&s=x")
    assert r("POST", "/v1/telemetry").kind == T.XET_TELEMETRY
    for bad in ("/cas/v3/reconstructions/" + H, "/cas/v2/reconstructions/" + H[:-1] + "G",
                "/cas/xorbs/%s/9-3" % H, "/cas/xorbs/%s/a-b" % H, "/cas/xorbs/short/0-1", "/cas/other"):
        assert r("GET", bad).kind == T.REJECT and r("GET", bad).status == 404, bad
    assert r("GET", "/v1/telemetry").status == 405
    assert r("DELETE", "/cas/xorbs/%s/0-1" % H).status == 405
