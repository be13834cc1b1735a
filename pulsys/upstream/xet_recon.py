"""Reconstructions and xorb ranges as `--xet facade` handles them (xet-protocol.md §3-§6).
Pure: no I/O but the file a caller hands to `verify_range`.

The upstream CAS answers a reconstruction with terms (runs of chunks of one xorb) and
where to fetch them: v1 `fetch_info`, v2 `xorbs`, each a chunk range [start, end) of a
xorb and its bytes at a signed upstream URL. pulsys keeps that answer as it came and,
for each client, `rewrite`s the fetch part so that every chunk range becomes one cached
blob of pulsys's own, at a URL pulsys signs, its bytes counted from 0. The terms are
left exactly as upstream computed them (their trimming to the asked range is what
hf_xet checks to the byte).
"""

import lz4.frame

from pulsys.upstream import xet_hash as XH

MAX_CHUNK_STORED = 262144      # §5: compressed chunk bound
MAX_CHUNK_DATA = 131072        # §5: uncompressed chunk bound
HEADER = 8


class BadAnswer(ValueError):
    """The upstream answer is not a reconstruction pulsys can serve."""


def sources(answer, version):
    """[(xorb, first, end, upstream url, byte start, byte end inclusive)] of an upstream
    answer. Raises BadAnswer on a malformed one."""
    out = []
    try:
        if version == 1:
            for xorb, entries in answer["fetch_info"].items():
                for f in entries:
                    out.append((xorb, int(f["range"]["start"]), int(f["range"]["end"]), f["url"],
                                int(f["url_range"]["start"]), int(f["url_range"]["end"])))
        else:
            for xorb, entries in answer["xorbs"].items():
                for f in entries:
                    for r in f["ranges"]:
                        out.append((xorb, int(r["chunks"]["start"]), int(r["chunks"]["end"]), f["url"],
                                    int(r["bytes"]["start"]), int(r["bytes"]["end"])))
        for t in answer["terms"]:
            int(t["range"]["start"]), int(t["range"]["end"]), int(t["unpacked_length"]), t["hash"]
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        raise BadAnswer("reconstruction answer malformed: %r" % e) from None
    for xorb, first, end, url, s, e in out:
        if not (isinstance(xorb, str) and isinstance(url, str) and 0 <= first < end and 0 <= s <= e):
            raise BadAnswer("reconstruction answer has a bad fetch range for %s" % xorb)
    return out


def rewrite(answer, version, place):
    """The client's copy of `answer`: each chunk range [first, end) of a xorb where
    place(xorb, first, end, upstream byte size) says it is: (url, first byte, last
    byte) in one of pulsys's cached xorb ranges (its own, from byte 0; or a cached
    range around it, which is how a new revision reuses the chunks of an old one)."""
    out = {"offset_into_first_range": answer["offset_into_first_range"], "terms": answer["terms"]}
    fetch = {}
    for xorb, a, b, _, s, e in sources(answer, version):
        url, first, last = place(xorb, a, b, e - s + 1)
        if version == 1:
            fetch.setdefault(xorb, []).append({"range": {"start": a, "end": b}, "url": url,
                                               "url_range": {"start": first, "end": last}})
        else:
            fetch.setdefault(xorb, []).append({"url": url, "ranges": [
                {"chunks": {"start": a, "end": b}, "bytes": {"start": first, "end": last}}]})
    out["fetch_info" if version == 1 else "xorbs"] = fetch
    return out


def term_lengths(answer, xorb, first, end):
    """{(start, end): unpacked length} of the answer's terms that lie in chunks
    [first, end) of `xorb`: what those chunks must decode to."""
    out = {}
    for t in answer.get("terms", ()):
        a, b = int(t["range"]["start"]), int(t["range"]["end"])
        if t["hash"] == xorb and first <= a and b <= end:
            out[(a - first, b - first)] = int(t["unpacked_length"])
    return out


def verify_range(f, size, chunks, terms, expect=None):
    """Check that the open file `f` of `size` bytes holds exactly `chunks` chunks as the
    wire carries them (§5: version 0 headers, known schemes, each decoding to its
    header's length within the format's bounds) and that each of `terms` ({(first, end)
    chunk indices: unpacked length}) sums to its length. `expect`, when given: [(hash,
    size)] of those chunks from the xorb's footer, authenticated by its Merkle root
    (xet_hash.Footer): then each chunk's uncompressed bytes must also have that size and
    that keyed BLAKE3, which covers every byte. -> (None, where each chunk starts in the
    file and, last, its size), or (what is wrong, None)."""
    if expect is not None and len(expect) != chunks:
        return "the footer lists %d chunks for a range of %d" % (len(expect), chunks), None
    lengths, starts = [], []
    pos = 0
    while pos < size:
        head = f.read(HEADER)
        if len(head) != HEADER or head[0] != 0:
            return "chunk %d: bad header at byte %d" % (len(lengths), pos), None
        stored = int.from_bytes(head[1:4], "little")
        scheme, unpacked = head[4], int.from_bytes(head[5:8], "little")
        if stored > MAX_CHUNK_STORED or unpacked > MAX_CHUNK_DATA:
            return "chunk %d: lengths beyond the format's bounds" % len(lengths), None
        data = f.read(stored)
        if len(data) != stored:
            return "chunk %d: cut short" % len(lengths), None
        try:
            plain = _decode(scheme, data)
        except (ValueError, RuntimeError) as e:      # lz4 raises RuntimeError on bad frames
            return "chunk %d: %s" % (len(lengths), e), None
        if len(plain) != unpacked:
            return "chunk %d: decodes to %d bytes, its header says %d" % (len(lengths), len(plain), unpacked), None
        if expect is not None and len(lengths) < chunks:
            want_hash, want_size = expect[len(lengths)]
            if unpacked != want_size:
                return "chunk %d: %d bytes, the xorb's footer says %d" % (len(lengths), unpacked, want_size), None
            if XH.chunk_hash(plain) != want_hash:
                return "chunk %d: its BLAKE3 hash is not the one in the xorb's footer" % len(lengths), None
        lengths.append(unpacked)
        starts.append(pos)
        pos += HEADER + stored
    if len(lengths) != chunks:
        return "holds %d chunks, the reconstruction names %d" % (len(lengths), chunks), None
    for (a, b), want in terms.items():
        if sum(lengths[a:b]) != want:
            return "chunks %d-%d decode to %d bytes, the term says %d" % (a, b, sum(lengths[a:b]), want), None
    return None, starts + [pos]


def decode_chunk(raw):
    """The uncompressed bytes of one chunk as the wire carries it (header, then data)."""
    return _decode(raw[4], raw[HEADER:])


def _decode(scheme, data):
    if scheme == 0:
        return data
    if scheme == 1:
        return lz4.frame.decompress(data)
    if scheme == 2:
        return ungroup4(lz4.frame.decompress(data))
    raise ValueError("unknown compression scheme %d" % scheme)


def ungroup4(grouped):
    """Undo byte grouping (§5 scheme 2): byte i of the data went to group i % 4, the
    groups were concatenated, the first n % 4 groups one byte longer."""
    n = len(grouped)
    out = bytearray(n)
    at = 0
    for g in range(4):
        size = n // 4 + (1 if g < n % 4 else 0)
        out[g::4] = grouped[at:at + size]
        at += size
    return bytes(out)
