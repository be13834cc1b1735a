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
smaller, else as is (scheme 0). Hashes are made up (sha256 of the chunk): hf_xet checks
no hash on download (xet-protocol.md §5), only the structure.
"""

import hashlib
import hmac
import json
import threading

try:
    import lz4.frame as _lz4
except ImportError:          # LZ4 chunks need the lz4 package (pulsys[test]); scheme 0 works without
    _lz4 = None

CHUNK = 64 * 1024
XORB_CHUNKS = 16             # 1 MiB xorbs: a file of a few MiB spans several
NONE, LZ4 = 0, 1


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
    __slots__ = ("hash", "data", "starts")

    def __init__(self, chunks):
        self.hash = hashlib.sha256(b"xorb:" + b"".join(h.encode() for h, _ in chunks)).hexdigest()
        parts, starts, pos = [], [], 0
        for _, wire in chunks:
            starts.append(pos)
            parts.append(wire)
            pos += len(wire)
        starts.append(pos)
        self.data, self.starts = b"".join(parts), starts   # starts[i]: chunk i's first byte


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
                    x = Xorb([(h, wire) for h, (wire, _) in pending.items()])
                    self.xorbs[x.hash] = x
                    for i, (h, (_, ref)) in enumerate(pending.items()):
                        self._chunk_at[h] = (x.hash, i)
                        ref[0], ref[1] = x.hash, i
                    pending.clear()
            for off in range(0, len(data), CHUNK):
                piece = data[off:off + CHUNK]
                h = hashlib.sha256(b"chunk:" + piece).hexdigest()
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
