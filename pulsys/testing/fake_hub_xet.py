"""The fake Hub's Xet CAS (xet-protocol.md): files stored as xorbs of chunks, the
reconstruction API (v1 and v2) with its exact range algorithm, and xorb bytes behind
signed, expiring URLs.

A file is cut into CHUNK-byte chunks (fixed-size: enough for a fake, and two revisions
that change bytes in place share every other chunk). A chunk already stored in some xorb
(by its hash) is referenced, not stored again, so a second revision of a model costs
only its new chunks: what a cache that fetches by xorb range can save. New chunks go
into xorbs of at most XORB_CHUNKS chunks, serialized as the wire has them: an 8-byte
header (version 0, compressed length as 24-bit little-endian, scheme, uncompressed
length as 24-bit little-endian) then the data, LZ4 frame (scheme 1) where that is
smaller, else as is (scheme 0). A stored xorb is its chunks then its footer, as the
Hub's CAS stores them (xet-core `xorb_object_format.rs`: `XorbObjectInfoV1`, then its
length as a u32); reconstructions name byte ranges of the chunks only.

Hashes are real (xet-protocol.md §6; xet-core `merklehash/`): a chunk's is BLAKE3 keyed
with DATA_KEY, a xorb's the Merkle root over its chunks' (hash, size), a file's that
root over the file's chunks keyed again with 32 zero bytes. Only the chunk boundaries
differ from the Hub's (fixed, not content-defined), so a file's hash is not the one the
Hub would give the same bytes. This module computes them on its own, apart from
pulsys's checker (upstream/xet_hash.py), and both are tested against xet-core's and
hf_xet's values.
"""

import hashlib
import hmac
import json
import threading

import blake3

try:
    import lz4.frame as _lz4
except ImportError:          # LZ4 chunks need the lz4 package (pulsys[test]); scheme 0 works without
    _lz4 = None

CHUNK = 64 * 1024
XORB_CHUNKS = 16             # 1 MiB xorbs: a file of a few MiB spans several
NONE, LZ4 = 0, 1

# xet-core merklehash/data_hash.rs: DATA_KEY, INTERNAL_NODE_HASH
DATA_KEY = bytes((102, 151, 245, 119, 91, 149, 80, 222, 49, 53, 203, 172, 165, 151, 24, 28,
                  157, 228, 33, 16, 155, 235, 43, 88, 180, 208, 176, 75, 147, 173, 242, 41))
NODE_KEY = bytes((1, 126, 197, 199, 165, 71, 41, 150, 253, 148, 102, 102, 180, 138, 2, 230,
                  93, 221, 83, 111, 55, 199, 109, 210, 248, 99, 82, 230, 74, 83, 113, 63))


def chunk_hash(data):
    return blake3.blake3(data, key=DATA_KEY).digest()


def hash_hex(h):
    """Xet's hex form: four little-endian u64 words, each as 16 hex digits."""
    return "".join(h[i:i + 8][::-1].hex() for i in range(0, 32, 8))


def merkle(nodes):
    """Root of Xet's aggregated hash tree over [(hash, size)] (xet-core
    merklehash/aggregated_hashes.rs): levels of groups of 2 to 9 nodes, a group closed
    after its third or later node whose last 8 bytes, as a little-endian number, are a
    multiple of 4; a group's node hashes its children's "{hex} : {size}" lines."""
    if not nodes:
        return bytes(32)
    while len(nodes) > 1:
        groups, cur = [], []
        for k, node in enumerate(nodes):
            cur.append(node)
            cut = len(cur) >= 3 and int.from_bytes(node[0][24:], "little") % 4 == 0
            if cut or len(cur) == 9 or k == len(nodes) - 1:
                groups.append(cur)
                cur = []
        nodes = [(blake3.blake3("".join("%s : %d\n" % (hash_hex(h), n) for h, n in g).encode(),
                                key=NODE_KEY).digest(), sum(n for _, n in g)) for g in groups]
    return nodes[0][0]


def file_hash(data):
    """The Xet hash of a file cut into CHUNK-byte chunks (all zeros when empty)."""
    nodes = [(chunk_hash(data[i:i + CHUNK]), len(data[i:i + CHUNK])) for i in range(0, len(data), CHUNK)]
    return hash_hex(blake3.blake3(merkle(nodes), key=bytes(32)).digest() if nodes else bytes(32))


def footer(xorb_hash, hashes, ends, sizes):
    """A xorb's footer (`XorbObjectInfoV1`, little-endian) and its u32 length after it:
    the xorb hash; the chunk hash section; the boundary section (each chunk's end in the
    xorb, headers counted, then in the uncompressed data); the chunk count again; the
    distance from each section's start to the footer's end; 16 reserved bytes."""
    n = len(hashes)

    def u32s(xs):
        return b"".join(x.to_bytes(4, "little") for x in xs)
    hash_part = b"XBLBHSH\x00" + u32s([n]) + b"".join(hashes)
    unpacked = [sum(sizes[:i + 1]) for i in range(n)]
    bound_part = b"XBLBBND\x01" + u32s([n]) + u32s(ends) + u32s(unpacked)
    tail_len = 12 + 16
    body = (b"XETBLOB\x01" + xorb_hash + hash_part + bound_part
            + u32s([n, len(hash_part) + len(bound_part) + tail_len, len(bound_part) + tail_len]) + bytes(16))
    return body + u32s([len(body)])


def encode_chunk(data, compress=True):
    """One chunk as the wire carries it: header, then the data (LZ4 frame when smaller)."""
    scheme, body = NONE, data
    if compress and _lz4 is not None:
        packed = _lz4.compress(data)
        if len(packed) < len(data):
            scheme, body = LZ4, packed
    return (bytes([0]) + len(body).to_bytes(3, "little") + bytes([scheme])
            + len(data).to_bytes(3, "little") + body)


def decode_chunks(data):
    """The uncompressed bytes of chunks laid end to end (what a client does with a xorb
    range). Raises ValueError on a malformed header."""
    return b"".join(chunk_list(data))


def chunk_list(data):
    """Each chunk's uncompressed bytes, in order."""
    out, pos = [], 0
    while pos < len(data):
        if len(data) - pos < 8 or data[pos] != 0:
            raise ValueError("bad chunk header at %d" % pos)
        clen = int.from_bytes(data[pos + 1:pos + 4], "little")
        scheme = data[pos + 4]
        ulen = int.from_bytes(data[pos + 5:pos + 8], "little")
        body = data[pos + 8:pos + 8 + clen]
        if len(body) != clen:
            raise ValueError("chunk at %d cut short" % pos)
        if scheme == LZ4:
            body = _lz4.decompress(body)
        elif scheme != NONE:
            raise ValueError("chunk scheme %d" % scheme)
        if len(body) != ulen:
            raise ValueError("chunk at %d holds %d bytes, its header says %d" % (pos, len(body), ulen))
        out.append(body)
        pos += 8 + clen
    return out


class Xorb:
    """Chunks [(hash, uncompressed size, wire bytes)] stored as one xorb: `data` is the
    chunks then the footer, `starts[i]` chunk i's first byte (starts[-1]: the footer's)."""
    __slots__ = ("hash", "data", "starts")

    def __init__(self, chunks):
        root = merkle([(h, n) for h, n, _ in chunks])
        self.hash = hash_hex(root)
        starts, pos = [], 0
        for _, _, wire in chunks:
            starts.append(pos)
            pos += len(wire)
        starts.append(pos)
        self.starts = starts
        self.data = b"".join(w for _, _, w in chunks) + footer(
            root, [h for h, _, _ in chunks], starts[1:], [n for _, n, _ in chunks])


class XetStore:
    """xorbs by hash, files by Xet hash: each a list of [xorb hash, chunk index, length]."""

    def __init__(self, compress=True):
        self.compress = compress
        self.xorbs = {}
        self.files = {}
        self._chunk_at = {}        # chunk hash -> (xorb hash, index)
        self._lock = threading.Lock()

    def add(self, file_hash, data):
        with self._lock:
            if file_hash in self.files:
                return
            refs, pending = [], {}     # chunk hash -> (wire bytes, its ref), in order

            def flush():
                if pending:
                    x = Xorb([(h, ref[2], wire) for h, (wire, ref) in pending.items()])
                    self.xorbs[x.hash] = x
                    for i, (h, (_, ref)) in enumerate(pending.items()):
                        self._chunk_at[h] = (x.hash, i)
                        ref[0], ref[1] = x.hash, i
                    pending.clear()
            for off in range(0, len(data), CHUNK):
                piece = data[off:off + CHUNK]
                h = chunk_hash(piece)
                if h in self._chunk_at:
                    refs.append([*self._chunk_at[h], len(piece)])
                elif h in pending:
                    refs.append(pending[h][1])      # the same list: filled when flushed
                else:
                    ref = [None, None, len(piece)]
                    refs.append(ref)
                    pending[h] = (encode_chunk(piece, self.compress), ref)
                    if len(pending) == XORB_CHUNKS:
                        flush()
            flush()
            self.files[file_hash] = refs

    def reconstruction(self, file_hash, first, last, version, url_for):
        """The answer to GET /v{version}/reconstructions/{file_hash} for bytes
        [first, last] (inclusive), or None when the file is unknown. Only chunks that
        overlap the range; a term per run of chunks of one xorb; url_for(xorb hash)
        signs a xorb's URL (xet-protocol.md §3)."""
        refs = self.files.get(file_hash)
        if refs is None:
            return None
        terms, begin, pos = [], None, 0
        for xh, idx, length in refs:
            start, pos = pos, pos + length
            if pos <= first or start > last:
                continue
            if begin is None:
                begin = start
            t = terms[-1] if terms else None
            if t is not None and t["hash"] == xh and t["range"]["end"] == idx:
                t["range"]["end"] += 1
                t["unpacked_length"] += length
            else:
                terms.append({"hash": xh, "unpacked_length": length, "range": {"start": idx, "end": idx + 1}})
        fetch, seen = {}, set()
        for t in terms:
            xh, a, b = t["hash"], t["range"]["start"], t["range"]["end"]
            if (xh, a, b) in seen:
                continue
            seen.add((xh, a, b))
            starts = self.xorbs[xh].starts
            fetch.setdefault(xh, []).append((a, b, starts[a], starts[b] - 1))
        answer = {"offset_into_first_range": first - (begin or 0), "terms": terms}
        if version == 1:
            answer["fetch_info"] = {xh: [{"range": {"start": a, "end": b}, "url": url_for(xh),
                                          "url_range": {"start": s, "end": e}} for a, b, s, e in f]
                                    for xh, f in fetch.items()}
        else:
            answer["xorbs"] = {xh: [{"url": url_for(xh), "ranges": [
                {"chunks": {"start": a, "end": b}, "bytes": {"start": s, "end": e}} for a, b, s, e in f]}]
                for xh, f in fetch.items()}
        return answer

    def size(self, file_hash):
        return sum(r[2] for r in self.files[file_hash])


class XorbSigner:
    """Xorb URLs carry their own authorization (hf_xet sends no Authorization header to
    them): `{cdn}/xorbs/{hash}?Expires=..&Signature=..`, an HMAC of the two."""

    def __init__(self, secret, clock):
        self._secret, self._clock = secret, clock

    def url(self, cdn_url, xorb_hash, ttl):
        expires = int(self._clock() + ttl)
        return "%s/xorbs/%s?Expires=%d&Signature=%s" % (cdn_url, xorb_hash, expires,
                                                        self._mac(xorb_hash, expires))

    def check(self, xorb_hash, query):
        """None when the URL is authentic and unexpired, else why not."""
        fields = dict(p.partition("=")[::2] for p in query.split("&") if p)
        try:
            expires = int(fields.get("Expires", ""))
        except ValueError:
            return "no expiry"
        if not hmac.compare_digest(fields.get("Signature", ""), self._mac(xorb_hash, expires)):
            return "bad signature"
        if expires < self._clock():
            return "expired"
        return None

    def _mac(self, xorb_hash, expires):
        return hmac.new(self._secret, ("%s:%d" % (xorb_hash, expires)).encode(), hashlib.sha256).hexdigest()


def to_json(obj):
    return json.dumps(obj, separators=(",", ":")).encode()
