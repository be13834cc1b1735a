"""The fake Hub's Xet CAS (pulsys/testing/fake_hub_xet.py) over real sockets, read the way
hf_xet reads it (xet-protocol.md §3-§5): a token from the repo's token route, a
reconstruction for a byte range, xorb ranges from signed URLs, chunks decoded. The
real hf_xet is run against it in tests/integration/test_clients_direct.py."""

import os
import random

import pytest
import requests

from pulsys.testing.fake_hub import FakeHub
from pulsys.testing.fake_hub_xet import CHUNK, LZ4, NONE, chunk_list, encode_chunk, file_hash
from pulsys.upstream import xet_hash as XH

PATH = "/org/m/resolve/main/model.safetensors"


@pytest.fixture
def hub():
    now = [1_800_000_000.0]
    h = FakeHub(clock=lambda: now[0]).start()
    h.now = now
    yield h
    h.stop()


def token(hub, repo="org/m"):
    return requests.get(hub.url + "/api/models/%s/xet-read-token/main" % repo, timeout=10).json()


def xet_hash(hub, path=PATH):
    return requests.head(hub.url + path, allow_redirects=False, timeout=10).headers["X-Xet-Hash"]


def fetch(hub, tok, file_hash, version, first=None, last=None):
    """Bytes [first, last] of the file as a client rebuilds them, and the answer."""
    h = {"Authorization": "Bearer " + tok["accessToken"]}
    if first is not None:
        h["Range"] = "bytes=%d-%d" % (first, last)
    r = requests.get("%s/v%d/reconstructions/%s" % (tok["casUrl"], version, file_hash), headers=h, timeout=10)
    assert r.status_code == 200, r.text
    rec = r.json()
    out = []
    for t in rec["terms"]:
        a, b = t["range"]["start"], t["range"]["end"]
        if version == 1:
            e = [f for f in rec["fetch_info"][t["hash"]] if f["range"]["start"] <= a and b <= f["range"]["end"]][0]
            url, span, c0 = e["url"], (e["url_range"]["start"], e["url_range"]["end"]), e["range"]["start"]
        else:
            (entry,) = rec["xorbs"][t["hash"]]
            rr = [x for x in entry["ranges"] if x["chunks"]["start"] <= a and b <= x["chunks"]["end"]][0]
            url, span, c0 = entry["url"], (rr["bytes"]["start"], rr["bytes"]["end"]), rr["chunks"]["start"]
        x = requests.get(url, headers={"Range": "bytes=%d-%d" % span}, timeout=10)   # no Authorization
        assert x.status_code == 206 and len(x.content) == span[1] - span[0] + 1
        data = b"".join(chunk_list(x.content)[a - c0:b - c0])
        assert len(data) == t["unpacked_length"]          # exact, as the client requires
        out.append(data)
    return b"".join(out)[rec["offset_into_first_range"]:], rec


def test_a_chunk_is_a_header_and_lz4_where_smaller():
    text, noise = b"abc" * 20000, os.urandom(20000)
    for data, scheme in ((text, LZ4), (noise, NONE)):
        wire = encode_chunk(data)
        assert wire[0] == 0 and wire[4] == scheme
        assert int.from_bytes(wire[5:8], "little") == len(data)
        assert int.from_bytes(wire[1:4], "little") == len(wire) - 8
        assert chunk_list(wire + wire) == [data, data]
    assert len(encode_chunk(text)) < len(text) // 10


@pytest.mark.parametrize("version", [1, 2])
def test_any_range_rebuilds_exactly_from_the_chunks_that_overlap_it(hub, version):
    rng = random.Random(version)
    data = b"".join([b"weights " * 40000, os.urandom(700_000), b"\0" * 300_000])   # LZ4 and raw chunks
    hub.add_repo("org/m", files={"model.safetensors": data}, lfs={"model.safetensors"})
    tok, fh = token(hub), xet_hash(hub)
    whole, rec = fetch(hub, tok, fh, version)
    assert whole == data and rec["offset_into_first_range"] == 0
    for _ in range(25):
        first = rng.randrange(len(data))
        last = min(len(data) - 1, first + rng.choice((0, 1, 5000, CHUNK, 3 * CHUNK + 7, 10 ** 6)))
        got, rec = fetch(hub, tok, fh, version, first, last)
        assert got[:last - first + 1] == data[first:last + 1]
        # only chunks that overlap the range: what is sent past it is less than a chunk
        assert rec["offset_into_first_range"] < CHUNK and len(got) - (last - first + 1) < CHUNK
    r = requests.get("%s/v%d/reconstructions/%s" % (tok["casUrl"], version, fh), timeout=10,
                     headers={"Authorization": "Bearer " + tok["accessToken"], "Range": "bytes=%d-" % len(data)})
    assert r.status_code == 416


def test_a_second_revision_stores_only_its_new_chunks(hub):
    base = os.urandom(40 * CHUNK)
    changed = bytearray(base)
    changed[5 * CHUNK + 10:5 * CHUNK + 20] = b"fine-tuned"   # one chunk differs
    hub.add_repo("org/m", files={"model.safetensors": base}, lfs={"model.safetensors"})
    tok = token(hub)
    assert fetch(hub, tok, xet_hash(hub), 2)[0] == base
    before = sum(x.starts[-1] for x in hub._xet.xorbs.values())     # chunk bytes (footers aside)
    hub.commit("org/m", {"model.safetensors": bytes(changed)}, lfs={"model.safetensors"})
    tok = token(hub)
    assert fetch(hub, tok, xet_hash(hub), 2)[0] == bytes(changed)
    added = sum(x.starts[-1] for x in hub._xet.xorbs.values()) - before
    assert 0 < added <= CHUNK + 8                          # one chunk, with its header


def test_the_cas_answers_only_a_valid_token_for_the_files_repo(hub):
    hub.add_repo("org/m", files={"model.safetensors": os.urandom(3 * CHUNK)}, lfs={"model.safetensors"})
    hub.add_repo("org/other", files={"w.safetensors": os.urandom(CHUNK)}, lfs={"w.safetensors"})
    fh, url = xet_hash(hub), token(hub)["casUrl"] + "/v2/reconstructions/"
    assert requests.get(url + fh, timeout=10).status_code == 401
    other = token(hub, "org/other")["accessToken"]
    assert requests.get(url + fh, headers={"Authorization": "Bearer " + other}, timeout=10).status_code == 401
    mine = token(hub)["accessToken"]
    assert requests.get(url + fh, headers={"Authorization": "Bearer " + mine}, timeout=10).status_code == 200
    hub.now[0] += hub.xet_token_ttl + 1
    assert requests.get(url + fh, headers={"Authorization": "Bearer " + mine}, timeout=10).status_code == 401


def test_xorb_urls_are_signed_and_expire(hub):
    hub.add_repo("org/m", files={"model.safetensors": os.urandom(2 * CHUNK)}, lfs={"model.safetensors"})
    tok, fh = token(hub), xet_hash(hub)
    rec = requests.get("%s/v2/reconstructions/%s" % (tok["casUrl"], fh), timeout=10,
                       headers={"Authorization": "Bearer " + tok["accessToken"]}).json()
    url = next(iter(rec["xorbs"].values()))[0]["url"]
    assert url.startswith(hub.xorb_url + "/xorbs/") and hub.xorb_url != tok["casUrl"]   # a host of its own
    assert requests.get(url, timeout=10).status_code == 200
    assert requests.get(url.replace("Signature=", "Signature=0"), timeout=10).status_code == 403
    hub.now[0] += hub.xorb_url_ttl + 1
    assert requests.get(url, timeout=10).status_code == 403


def test_the_bridge_refuses_files_over_its_limit(hub):
    hub.add_repo("org/m", files={"model.safetensors": os.urandom(3 * CHUNK)}, lfs={"model.safetensors"})
    assert requests.get(hub.url + PATH, timeout=10).status_code == 200
    hub.bridge_limit = 2 * CHUNK
    assert requests.get(hub.url + PATH, timeout=10).status_code == 400
    tok = token(hub)
    assert len(fetch(hub, tok, xet_hash(hub), 2)[0]) == 3 * CHUNK     # Xet still serves it


def test_hashes_are_real_and_each_xorb_ends_in_its_footer(hub):
    """xet-protocol.md §6: the file's Xet hash is the Merkle hash of its chunks; each
    xorb is named by the Merkle root of its own and stored as chunks, footer, footer
    length (xet-core xorb_object_format.rs), its end readable with a suffix Range."""
    data = os.urandom(3 * CHUNK + 5)
    hub.add_repo("org/m", files={"model.safetensors": data}, lfs={"model.safetensors"})
    fh = xet_hash(hub)
    assert fh == file_hash(data)
    tok = token(hub)
    rec = requests.get("%s/v2/reconstructions/%s" % (tok["casUrl"], fh), timeout=10,
                       headers={"Authorization": "Bearer " + tok["accessToken"]}).json()
    (xorb, (entry,)), = rec["xorbs"].items()
    tail = requests.get(entry["url"], headers={"Range": "bytes=-4"}, timeout=10)
    assert tail.status_code == 206 and len(tail.content) == 4
    n = int.from_bytes(tail.content, "little")
    raw = requests.get(entry["url"], headers={"Range": "bytes=-%d" % (n + 4)}, timeout=10).content
    footer = XH.parse_footer(raw[:-4])
    assert footer.authentic(xorb) and footer.sizes == [CHUNK] * 3 + [5]
    pieces = [data[i:i + CHUNK] for i in range(0, len(data), CHUNK)]
    assert footer.hashes == [XH.chunk_hash(p) for p in pieces]
    # reconstructions name the chunks' bytes only, never the footer's
    assert entry["ranges"][0]["bytes"]["end"] + 1 + n + 4 == len(hub._xet.xorbs[xorb].data)
    hub.xorb_suffix_ranges = False                  # a CDN that refuses suffix ranges
    assert requests.get(entry["url"], headers={"Range": "bytes=-4"}, timeout=10).status_code == 416
