"""Xet hashes and the xorb footer, as `--xet facade` checks a xorb range against them
(xet-protocol.md §6). Pure: bytes in, bytes out.

Read in xet-core (snapshot af1a3ff): `xet_core_structures/src/merklehash/data_hash.rs`
(the two BLAKE3 keys, the hex form), `merklehash/aggregated_hashes.rs` (the tree: how
nodes are grouped and what a parent hashes), `xorb_object/xorb_object_format.rs` (the
footer, `XorbObjectInfoV1` and the legacy V0, and `validate_xorb_object`, which is the
check done here for a range: each chunk's keyed BLAKE3 against the footer's list, the
list's Merkle root against the xorb hash). The hashes are checked against xet-core's
own reference vectors and hashes the real hf_xet computes (tests/unit/test_xet_hash.py).

A hash is kept as its 32 raw bytes (what BLAKE3 gives and what the footer stores).
"""

import blake3

# data_hash.rs DATA_KEY (chunk hashes) and INTERNAL_NODE_HASH (Merkle parents)
DATA_KEY = bytes((102, 151, 245, 119, 91, 149, 80, 222, 49, 53, 203, 172, 165, 151, 24, 28,
                  157, 228, 33, 16, 155, 235, 43, 88, 180, 208, 176, 75, 147, 173, 242, 41))
NODE_KEY = bytes((1, 126, 197, 199, 165, 71, 41, 150, 253, 148, 102, 102, 180, 138, 2, 230,
                  93, 221, 83, 111, 55, 199, 109, 210, 248, 99, 82, 230, 74, 83, 113, 63))
MAX_GROUP = 9          # aggregated_hashes.rs: a parent has 2 to 2 * 4 + 1 children

IDENT = b"XETBLOB"
HASHES_IDENT = b"XBLBHSH"
BOUNDS_IDENT = b"XBLBBND"
MAX_FOOTER = 8 << 20   # bytes: 8192 chunks (xet-core's MAX_XORB_CHUNKS) take 328 KiB


def chunk_hash(data):
    """A chunk's hash: BLAKE3 of its uncompressed bytes, keyed with DATA_KEY."""
    return blake3.blake3(data, key=DATA_KEY).digest()


def to_hex(h):
    """The hex form Xet names hashes by (reconstructions, X-Xet-Hash): the 32 bytes read
    as four little-endian u64 words, each printed as %016x (data_hash.rs `hex`)."""
    return "".join("%016x" % int.from_bytes(h[i:i + 8], "little") for i in (0, 8, 16, 24))


def from_hex(s):
    """The raw bytes of a hash named in hex (to_hex's inverse). Raises ValueError."""
    if len(s) != 64:
        raise ValueError("a Xet hash is 64 hex digits")
    return b"".join(int(s[i:i + 16], 16).to_bytes(8, "little") for i in (0, 16, 32, 48))


def merkle_root(nodes):
    """The root of Xet's Merkle tree over [(hash, size)]: the xorb hash when the nodes
    are a xorb's chunks (aggregated_hashes.rs `xorb_hash`; all zeros for none).
    Each level cuts the list into groups, left to right: a rest of at most 2 nodes is
    one group; else the group ends after the first node at index 2 to 8 whose hash
    (bytes 24-32 as a little-endian u64) is divisible by 4, or after 9 nodes. A group
    becomes one node: BLAKE3 keyed with NODE_KEY over a line "{hex} : {size}\\n" per
    child, and the children's summed size."""
    if not nodes:
        return bytes(32)
    level = list(nodes)
    while len(level) > 1:
        parents, i = [], 0
        while i < len(level):
            end = _group_end(level, i)
            text = "".join("%s : %d\n" % (to_hex(h), n) for h, n in level[i:end])
            parents.append((blake3.blake3(text.encode(), key=NODE_KEY).digest(),
                            sum(n for _, n in level[i:end])))
            i = end
        level = parents
    return level[0][0]


def _group_end(level, i):
    rest = len(level) - i
    if rest <= 2:
        return len(level)
    last = i + min(MAX_GROUP, rest)
    for j in range(i + 2, last):
        if int.from_bytes(level[j][0][24:32], "little") % 4 == 0:
            return j + 1
    return last


class Footer:
    """A xorb's footer: the xorb hash it states, each chunk's hash, where each chunk
    ends in the xorb (its header counted) and, from format version 1, each chunk's
    uncompressed size (None for version 0)."""
    __slots__ = ("xorb_hash", "hashes", "ends", "sizes")

    def __init__(self, xorb_hash, hashes, ends, sizes):
        self.xorb_hash, self.hashes, self.ends, self.sizes = xorb_hash, hashes, ends, sizes

    def authentic(self, xorb_hex):
        """Whether the chunk list is the one the xorb named `xorb_hex` is made of: its
        (hash, size) nodes Merkle-hash to that name (and the footer says the same). A
        version 0 footer has no sizes, so it cannot be checked: False."""
        return (self.sizes is not None and to_hex(self.xorb_hash) == xorb_hex
                and to_hex(merkle_root(list(zip(self.hashes, self.sizes)))) == xorb_hex)

    def span(self, first, end):
        """[(hash, size)] of chunks [first, end), or None when the xorb has fewer."""
        if not 0 <= first < end <= len(self.hashes):
            return None
        return list(zip(self.hashes[first:end], self.sizes[first:end]))


def parse_footer(raw):
    """The Footer in `raw`: the footer's bytes without the u32 length that follows it
    at the xorb's very end (xorb_object_format.rs `XorbObject`: chunks, footer, its
    length). Raises ValueError when it is not one.

    Version 1 (`XorbObjectInfoV1::serialize`), integers little-endian:
      "XETBLOB" 1 | xorb hash (32) |
      "XBLBHSH" 0 | n u32 | n chunk hashes (32 each) |
      "XBLBBND" 1 | n u32 | n chunk ends (u32, headers counted) | n unpacked ends (u32) |
      n u32 | bytes from the hash section's start to the end u32 |
      bytes from the boundary section's start to the end u32 | 16 reserved bytes
    Version 0 (`XorbObjectInfoV0`): "XETBLOB" 0 | xorb hash | n u32 | n chunk ends |
      n chunk hashes | 16 reserved bytes."""
    raw = bytes(raw)
    if len(raw) < 60 or raw[:7] != IDENT:
        raise ValueError("not a xorb footer")
    version, xorb_hash = raw[7], raw[8:40]
    if version == 0:
        n = _u32(raw, 40)
        if len(raw) != 60 + 36 * n:
            raise ValueError("footer (version 0) is %d bytes, %d chunks need %d" % (len(raw), n, 60 + 36 * n))
        ends = _u32s(raw, 44, n)
        return Footer(xorb_hash, _hashes(raw, 44 + 4 * n, n), _rising(ends), None)
    if version != 1:
        raise ValueError("xorb footer version %d is unknown" % version)
    if raw[40:47] != HASHES_IDENT or raw[47] != 0:
        raise ValueError("xorb footer: no chunk hash section")
    n = _u32(raw, 48)
    if len(raw) != 92 + 40 * n:
        raise ValueError("footer is %d bytes, %d chunks need %d" % (len(raw), n, 92 + 40 * n))
    b = 52 + 32 * n
    if raw[b:b + 7] != BOUNDS_IDENT or raw[b + 7] != 1 or _u32(raw, b + 8) != n:
        raise ValueError("xorb footer: no boundary section for %d chunks" % n)
    ends, unpacked = _u32s(raw, b + 12, n), _u32s(raw, b + 12 + 4 * n, n)
    t = b + 12 + 8 * n
    if (_u32(raw, t), _u32(raw, t + 4), _u32(raw, t + 8)) != (n, len(raw) - 40, len(raw) - b):
        raise ValueError("xorb footer: its section offsets disagree with its length")
    sizes = [e - s for s, e in zip([0] + _rising(unpacked)[:-1], unpacked)]
    return Footer(xorb_hash, _hashes(raw, 52, n), _rising(ends), sizes)


def _u32(raw, at):
    return int.from_bytes(raw[at:at + 4], "little")


def _u32s(raw, at, n):
    return [int.from_bytes(raw[i:i + 4], "little") for i in range(at, at + 4 * n, 4)]


def _hashes(raw, at, n):
    return [raw[i:i + 32] for i in range(at, at + 32 * n, 32)]


def _rising(ends):
    if any(a > b for a, b in zip([0] + ends, ends)):
        raise ValueError("xorb footer: chunk offsets go backwards")
    return ends
