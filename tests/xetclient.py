"""A small Xet download client for tests that need to see each step hf_xet takes
(xet-protocol.md §2-§5): the token route, one reconstruction, each xorb range at the URL
the answer names, the file rebuilt from the terms. Raises AssertionError on anything a
real client would refuse."""

import json
import urllib.error
import urllib.request

from pulsys.testing.fake_hub_xet import chunk_list

_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def get(url, token=None, headers=None):
    """(status, headers, body) of a GET, without proxies; errors are answers too."""
    h = dict(headers or {})
    if token:
        h["Authorization"] = "Bearer " + token
    try:
        with _OPENER.open(urllib.request.Request(url, headers=h), timeout=30) as r:
            return r.status, r.headers, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.headers, e.read()


def cas_token(endpoint, repo, rev="main", hub_token=None):
    st, _, body = get("%s/api/models/%s/xet-read-token/%s" % (endpoint, repo, rev), hub_token)
    assert st == 200, (st, body)
    d = json.loads(body)
    return d["casUrl"], d["accessToken"]


def xet_hash(endpoint, repo, path, rev="main", hub_token=None):
    st, _, body = get("%s/api/models/%s/tree/%s" % (endpoint, repo, rev), hub_token)
    assert st == 200, (st, body)
    return [e["xetHash"] for e in json.loads(body) if e["path"] == path][0]


def reconstruction(cas, token, file_hash, version=2):
    st, _, body = get("%s/v%d/reconstructions/%s" % (cas, version, file_hash), token)
    assert st == 200, (st, body)
    return json.loads(body)


def download(answer, version=2):
    """The file an answer describes, each xorb range fetched as hf_xet does (a GET of
    the URL with Range = its byte span, no Authorization)."""
    ranges = {}
    if version == 1:
        items = [(x, f["range"], f["url"], f["url_range"]) for x, fs in answer["fetch_info"].items() for f in fs]
    else:
        items = [(x, r["chunks"], f["url"], r["bytes"]) for x, fs in answer["xorbs"].items() for f in fs
                 for r in f["ranges"]]
    for xorb, chunks, url, span in items:
        st, _, body = get(url, headers={"Range": "bytes=%d-%d" % (span["start"], span["end"])})
        assert st in (200, 206) and len(body) == span["end"] - span["start"] + 1, (st, url, len(body))
        decoded = chunk_list(body)
        assert len(decoded) == chunks["end"] - chunks["start"], url
        ranges[(xorb, chunks["start"], chunks["end"])] = decoded
    out = []
    for t in answer["terms"]:
        a, b = t["range"]["start"], t["range"]["end"]
        (x, c, _), decoded = next(((k, v) for k, v in ranges.items()
                                   if k[0] == t["hash"] and k[1] <= a and b <= k[2]))
        data = b"".join(decoded[a - c:b - c])
        assert len(data) == t["unpacked_length"]
        out.append(data)
    return b"".join(out)[answer["offset_into_first_range"]:]
