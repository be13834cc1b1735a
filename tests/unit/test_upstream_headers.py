import json

from pulsys.upstream.headers import bare_etag, client_headers, filter_link, rewrite_links, strip_xet_json

UP = "https://huggingface.co"


def test_xet_link_relations_are_removed_and_others_kept():
    v = ('<https://huggingface.co/api/models/o/n/xet-read-token/abc>; rel="xet-auth", '
         '<https://cas-server.xethub.hf.co/v1/reconstructions/h>; rel="xet-reconstruction-info", '
         '<https://huggingface.co/api/models/o/n/tree/main?cursor=x>; rel="next"')
    out = filter_link(v, UP, "http://cache:8080")
    assert "xet" not in out
    assert out == '<http://cache:8080/api/models/o/n/tree/main?cursor=x>; rel="next"'


def test_client_headers_whitelist_drops_xet_and_hop_headers():
    h = {"X-Xet-Hash": "h", "X-Xet-Refresh-Route": "/r", "Set-Cookie": "a=b", "Connection": "close",
         "X-Repo-Commit": "c" * 40, "X-Error-Code": "EntryNotFound", "X-Error-Message": "m",
         "Location": "/api/resolve-cache/models/o/n/x?%2F=&etag=%22e%22", "Transfer-Encoding": "chunked"}
    out = dict(client_headers(h, UP))
    assert set(out) == {"X-Repo-Commit", "X-Error-Code", "X-Error-Message", "Location"}
    assert out["Location"] == "/api/resolve-cache/models/o/n/x?%2F=&etag=%22e%22"


def test_absolute_same_origin_location_becomes_relative():
    out = dict(client_headers({"Location": UP + "/new/id/resolve/main/f?x=1"}, UP))
    assert out["Location"] == "/new/id/resolve/main/f?x=1"


def test_links_kept_in_upstream_form_until_served():
    h = {"Link": '<%s/api/models/o/n/tree/main?cursor=2>; rel="next"' % UP}
    stored = client_headers(h, UP)
    assert UP in dict(stored)["Link"]
    served = dict(rewrite_links(stored, UP, "http://127.0.0.1:9"))
    assert served["Link"] == '<http://127.0.0.1:9/api/models/o/n/tree/main?cursor=2>; rel="next"'


def test_strip_xet_json_removes_every_xethash_and_leaves_other_bodies_untouched():
    doc = [{"type": "file", "path": "a", "xetHash": "x", "lfs": {"oid": "o"}}, {"nested": [{"xetHash": 1}]}]
    out = json.loads(strip_xet_json(json.dumps(doc).encode()))
    assert "xetHash" not in json.dumps(out) and out[0]["lfs"] == {"oid": "o"}
    raw = b'[{"path": "a"}]'
    assert strip_xet_json(raw) is raw


def test_bare_etag():
    assert bare_etag('W/"abc"') == "abc" and bare_etag('"abc"') == "abc" and bare_etag("") == ""
