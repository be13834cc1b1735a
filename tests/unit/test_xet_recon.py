"""Reconstruction answers rewritten for clients, and xorb ranges checked chunk by chunk
(pulsys/upstream/xet_recon.py), against the fake Hub's own encoder."""

import io
import os

import pytest

from pulsys.testing import fake_hub_xet as F
from pulsys.testing.fake_hub_xet import CHUNK, XetStore, encode_chunk
from pulsys.upstream import xet_hash as XH
from pulsys.upstream import xet_recon as XR

X = "ab" * 32


def _answer(version):
    store = XetStore()
    data = bytes(range(256)) * (CHUNK * 5 // 256) + b"tail"
    store.add("f" * 64, data)
    return store, store.reconstruction("f" * 64, 100, len(data) - 1, version, lambda x: "http://up/" + x)


@pytest.mark.parametrize("version", [1, 2])
def test_rewrite_keeps_terms_and_points_every_range_where_place_says(version):
    _, answer = _answer(version)
    srcs = XR.sources(answer, version)
    assert srcs and all(url.startswith("http://up/") for _, _, _, url, _, _ in srcs)
    out = XR.rewrite(answer, version, lambda x, a, b, size: ("http://pulsys/%s/%d-%d" % (x, a, b), 7, 7 + size - 1))
    assert out["terms"] == answer["terms"]
    assert out["offset_into_first_range"] == answer["offset_into_first_range"]
    again = XR.sources(out, version)
    assert [(x, a, b) for x, a, b, _, _, _ in again] == [(x, a, b) for x, a, b, _, _, _ in srcs]
    assert all(url.startswith("http://pulsys/") and s == 7 for _, _, _, url, s, _ in again)


def test_a_malformed_answer_is_refused():
    with pytest.raises(XR.BadAnswer):
        XR.sources({"terms": [], "fetch_info": {X: [{"range": {"start": 5, "end": 2}, "url": "u",
                                                     "url_range": {"start": 0, "end": 1}}]}}, 1)
    with pytest.raises(XR.BadAnswer):
        XR.sources({"xorbs": {}}, 2)


def _range(*chunks):
    return b"".join(encode_chunk(c) for c in chunks)


def test_verify_accepts_real_chunks_and_reports_where_they_start():
    chunks = [b"a" * 1000, bytes(range(256)) * 40, b"z"]     # LZ4 for the first, stored for others
    data = _range(*chunks)
    bad, starts = XR.verify_range(io.BytesIO(data), len(data), 3, {(0, 2): 1000 + 10240})
    assert bad is None and starts[0] == 0 and starts[-1] == len(data) and len(starts) == 4


def test_verify_refuses_wrong_count_length_term_and_corruption():
    chunks = [b"a" * 1000, b"b" * 2000]
    data = _range(*chunks)
    assert "2 chunks" in XR.verify_range(io.BytesIO(data), len(data), 3, {})[0]
    assert "term" in XR.verify_range(io.BytesIO(data), len(data), 2, {(0, 1): 999})[0]
    cut = data[:-5]
    assert XR.verify_range(io.BytesIO(cut), len(cut), 2, {})[0] is not None
    flipped = bytearray(data)
    flipped[5] ^= 1                 # the first chunk's uncompressed length
    assert XR.verify_range(io.BytesIO(bytes(flipped)), len(data), 2, {})[0] is not None
    garbage = bytearray(data)
    garbage[12:20] = b"\xff" * 8     # inside the LZ4 frame
    assert XR.verify_range(io.BytesIO(bytes(garbage)), len(data), 2, {})[0] is not None


def test_a_changed_byte_inside_an_uncompressed_chunk_is_caught_only_by_its_hash():
    """Random bytes do not compress, so they travel as is (scheme 0): a changed byte
    leaves every header, length and count right. Only the chunk's keyed BLAKE3 against
    the xorb's authenticated footer (xet_hash.py) tells."""
    pieces = [os.urandom(4000), os.urandom(3000)]
    x = F.Xorb([(F.chunk_hash(p), len(p), F.encode_chunk(p)) for p in pieces])
    assert x.data[4] == F.NONE
    n = int.from_bytes(x.data[-4:], "little")
    footer = XH.parse_footer(x.data[-4 - n:-4])
    assert footer.authentic(x.hash)
    wire = x.data[:x.starts[-1]]
    flipped = bytearray(wire)
    flipped[8 + 2000] ^= 0x01                   # inside chunk 0's data
    flipped = bytes(flipped)
    assert XR.verify_range(io.BytesIO(flipped), len(flipped), 2, {(0, 2): 7000})[0] is None   # structure: fine
    bad = XR.verify_range(io.BytesIO(flipped), len(flipped), 2, {(0, 2): 7000}, footer.span(0, 2))[0]
    assert "chunk 0" in bad and "BLAKE3" in bad
    assert XR.verify_range(io.BytesIO(wire), len(wire), 2, {}, footer.span(0, 2))[0] is None
    # a range of the xorb's second chunk alone is checked against that chunk's entry
    second = wire[x.starts[1]:]
    assert XR.verify_range(io.BytesIO(second), len(second), 1, {}, footer.span(1, 2))[0] is None
    assert "footer" in XR.verify_range(io.BytesIO(second), len(second), 1, {}, footer.span(0, 1))[0]
