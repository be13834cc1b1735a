"""Xet hashes and xorb footers (pulsys/upstream/xet_hash.py) against values from outside
this project: xet-core's reference vectors and hashes the real hf_xet computes; footers
as the fake Hub writes them (pulsys/testing/fake_hub_xet.py, its own implementation)."""

import os

import blake3
import pytest

from pulsys.testing import fake_hub_xet as F
from pulsys.upstream import xet_hash as XH

# xet-core xet_core_structures/src/merklehash/aggregated_hashes.rs `test_correctness`:
# node i is (R[i], 100 * i), R[0] all zeros, R[1..7] fixed random hashes.
R = ["0" * 64,
     "cfc5d07f6f03c29bbf424132963fe08d19a37d5757aaf520bf08119f05cd56d6",
     "c3e67584b5c4fc2a89837ec39e40f2c8a6bb0b2987ac94cd4b31e5fbdd210a72",
     "0d2beb91b9196929a5ddec9f6e306924ddf4a24268e3e59fd8464738d525af37",
     "adf8773496a9b7319b2e50dc98093f344053b17d8ad37100b9c07d9805988784",
     "4ac202caf347fc1e9c874b1ef6a1c5e619141eb775a6f43f0f0124ccd0060d9e",
     "b3b28636f65c149ea52eb1f94669466f70f033b54cea792824c696ba6ef3c389",
     "0e2c1a002aae913d2c0fc8ddfa4e9e14b7b311b3b0d458726d5d9f6a6318013c"]
# (node indices, xorb hash, file hash with the zero salt) from the same test
VECTORS = [
    ([], "0" * 64, "0" * 64),
    ([1], R[1], "8e16257caa3fe079d484d872a8975264b2ff683b0d6db9028cc7c0f968a45661"),
    ([1, 2, 3], "71ec1275fca074724e2dd666921b3277c7cee603e4d025bcab2d4050015be2bc",
     "54e55dccc6653c612bdb5576c5d3cb34bb31bc4e100248abccf4c908b3ef7715"),
    (list(range(8)), "f62abe77e3fb9c954fe52b0028027ddc90c064c45951a4fd2211d87e5c0011db", None),
    ([i % 8 for i in range(64)], "6554007c9b5d0a5e7918f79596a1b68815c1407535585435f5735db761f21b88",
     "a8640ab81d48854e00078e12b1ea8be5d90be0ffb5f73a15b7009981d093ddd8"),
    ([1] * 32, "0a0123c1617921883b7e13902095fcb86676e77c49120c33b233003b0af0e0a6", None),
    (list(range(8)) + [1] * 4, "e7fc30b73ec9930593f80fe777b334e9d3bb73e45e6a79fa5784b2603446158b",
     "69e1af2fd6023ce133e0d1b90e32d1d42ef79f5a710f2b0accfc3a735e98de9d"),
    ([h for h in range(8) for _ in (0, 1)], "636c65db520ec16e8166f9ec7a0cf9f74b26369077ac60160ec0221c86bc9f77",
     "6a90ad0d6f5246ac61f1de898c6944c03e14004a1368e6fb23387108c4d039e0"),
]


def _nodes(idx):
    return [(XH.from_hex(R[i]), 100 * i) for i in idx]


@pytest.mark.parametrize("idx,xorb,file", VECTORS)
def test_merkle_roots_match_xet_cores_reference_vectors(idx, xorb, file):
    nodes = _nodes(idx)
    assert XH.to_hex(XH.merkle_root(nodes)) == xorb
    assert F.hash_hex(F.merkle(nodes)) == xorb              # the fake's own tree agrees
    if file is not None and nodes:
        assert _file_hash(nodes) == file


def test_hex_form_is_little_endian_words():
    # data_hash.rs `test_hash_hex_string_endianness`
    raw = bytes((22, 175, 58, 132, 4, 75, 131, 214, 190, 153, 138, 66, 226, 3, 153, 242, 204, 86, 80, 234, 249,
                 153, 80, 99, 159, 80, 65, 138, 236, 231, 149, 78))
    hx = "d6834b04843aaf16f29903e2428a99be635099f9ea5056cc4e95e7ec8a41509f"
    assert XH.to_hex(raw) == F.hash_hex(raw) == hx
    assert XH.from_hex(hx) == raw
    with pytest.raises(ValueError):
        XH.from_hex("ab")


def test_chunk_and_file_hashes_match_what_hf_xet_computes():
    """hf_xet 1.8.0's `hash_files` (the Hub's client, content-defined chunking) gave
    these file hashes: 11 bytes are one chunk; 1,000,000 bytes of 59 are cut at every
    131072 bytes (the chunker's maximum, as draft-denis-xet's reference test
    "chunking 1MB const data (value 59)" also expects)."""
    one = [(XH.chunk_hash(b"hello world"), 11)]
    assert _file_hash(one) == "f15edd43b7e85cfd25e2758ffe13b99fdd09dfa817e8d9f6548722a7a126db7f"
    assert F.file_hash(b"hello world") == "f15edd43b7e85cfd25e2758ffe13b99fdd09dfa817e8d9f6548722a7a126db7f"
    const = bytes([59]) * 1_000_000
    nodes = [(XH.chunk_hash(const[i:i + 131072]), len(const[i:i + 131072])) for i in range(0, len(const), 131072)]
    assert _file_hash(nodes) == "53f845640fcd1c7440befff65bd93434c83a30c6559a705597d61f2ef64e2f88"


def _file_hash(nodes):
    """xet-protocol.md §6: the root, BLAKE3 keyed with 32 zero bytes."""
    return XH.to_hex(blake3.blake3(XH.merkle_root(nodes), key=bytes(32)).digest())


def _xorb(pieces):
    return F.Xorb([(F.chunk_hash(p), len(p), F.encode_chunk(p)) for p in pieces])


def _footer_bytes(data):
    n = int.from_bytes(data[-4:], "little")
    return data[-4 - n:-4]


def test_a_footer_parses_and_authenticates_its_chunk_list():
    pieces = [os.urandom(5000), b"w" * 9000, os.urandom(100)]
    x = _xorb(pieces)
    f = XH.parse_footer(_footer_bytes(x.data))
    assert f.authentic(x.hash) and not f.authentic("0" * 64)
    assert f.hashes == [XH.chunk_hash(p) for p in pieces] and f.sizes == [5000, 9000, 100]
    assert f.ends == x.starts[1:] and len(_footer_bytes(x.data)) == 92 + 40 * 3
    assert f.span(1, 3) == [(XH.chunk_hash(pieces[1]), 9000), (XH.chunk_hash(pieces[2]), 100)]
    assert f.span(2, 4) is None
    # a chunk hash changed in the footer: it no longer hashes to the xorb's name
    raw = bytearray(_footer_bytes(x.data))
    raw[60] ^= 1
    assert not XH.parse_footer(bytes(raw)).authentic(x.hash)


def test_malformed_footers_are_refused():
    raw = _footer_bytes(_xorb([b"a" * 100, b"b" * 200]).data)
    for bad in (raw[:-1], b"XETBLOX" + raw[7:], raw[:7] + b"\x02" + raw[8:], b"", raw + b"\0"):
        with pytest.raises(ValueError):
            XH.parse_footer(bad)
    swapped = bytearray(raw)
    end = 52 + 64 + 12                    # the boundary section's chunk ends: make them go backwards
    swapped[end:end + 8] = swapped[end + 4:end + 8] + swapped[end:end + 4]
    with pytest.raises(ValueError):
        XH.parse_footer(bytes(swapped))


def test_a_version_0_footer_parses_but_cannot_be_authenticated():
    """The legacy layout (xorb_object_format.rs `XorbObjectInfoV0`) has no chunk sizes,
    which the Merkle root needs: its list is not taken as proof."""
    hashes = [XH.chunk_hash(b"a"), XH.chunk_hash(b"b")]
    root = XH.merkle_root([(hashes[0], 1), (hashes[1], 1)])
    raw = (b"XETBLOB\x00" + root + (2).to_bytes(4, "little") + (9).to_bytes(4, "little")
           + (18).to_bytes(4, "little") + b"".join(hashes) + bytes(16))
    f = XH.parse_footer(raw)
    assert f.hashes == hashes and f.ends == [9, 18] and f.sizes is None
    assert not f.authentic(XH.to_hex(root))
