"""Plain files assembled from xorb ranges (--xet facade; ADR 0019 point 4).

A plain-HTTP client (curl, hf_transfer, huggingface.js, HF_HUB_DISABLE_XET=1) asking for
a Xet file gets it through the usual fill (pieces, readers streaming from the part file,
sha256 verified before the last byte, then committed), but the fill's Origin is this
module, not the Hub's bridge: each piece [start, end) is the file's reconstruction (asked
upstream once for the whole file and kept) walked term by term, each term's chunks read
from a cached xorb range (fetched once through the facade when missing) and decoded. So
one upstream download serves both kinds of client in either order, and a plain client
of a new revision fetches only the chunks that changed, as hf_xet does.

open_range() and body.views() see a 206 whose raw.stream() yields exactly the bytes
asked for, in blocks of at most a chunk (128 KiB).
"""

import json

from pulsys.errors import UpstreamError
from pulsys.upstream import xet_recon as XR


class Plan:
    """A file's whole reconstruction: its terms with their file offsets, and where each
    term's chunks can be fetched (fetch ranges of the same answer)."""
    __slots__ = ("terms", "size", "fetch")

    def __init__(self, answer, size):
        self.size = size
        self.terms = []           # (file offset, xorb, first chunk, end chunk, unpacked length)
        pos = -int(answer.get("offset_into_first_range", 0))
        for t in answer["terms"]:
            n = int(t["unpacked_length"])
            self.terms.append((pos, t["hash"], int(t["range"]["start"]), int(t["range"]["end"]), n))
            pos += n
        if pos < size:
            raise XR.BadAnswer("the reconstruction covers %d of the file's %d bytes" % (pos, size))
        self.fetch = {}           # xorb -> [(first, end)] of the answer's fetch ranges
        for xorb, a, b, _, _, _ in XR.sources(answer, 1):
            self.fetch.setdefault(xorb, []).append((a, b))


class XetBody:
    """The answer open_range() takes for bytes [start, end) of the file."""

    def __init__(self, blocks, start, end, size):
        self.status_code = 206
        self.headers = {"Content-Range": "bytes %d-%d/%d" % (start, end - 1, size)}
        self.raw = _Raw(blocks)

    def close(self):
        self.raw.blocks.close()


class _Raw:
    __slots__ = ("blocks",)

    def __init__(self, blocks):
        self.blocks = blocks

    def stream(self, n, decode_content=False):
        return self.blocks


def request_for(plan, chunks_of):
    """An Origin.request for the file of `plan`. chunks_of(xorb, first, end, fetch
    ranges) -> the decoded chunks [first, end) of that xorb, in order (fetching and
    verifying what is not cached); raises UpstreamError when it cannot."""
    def request(method, url, headers):
        spec = headers.get("Range", "")
        if not spec.startswith("bytes="):
            raise UpstreamError("a Xet file is assembled by ranges")
        first, last = (int(x) for x in spec[len("bytes="):].split("-"))
        return XetBody(_blocks(plan, chunks_of, first, last + 1), first, last + 1, plan.size)
    return request


def _blocks(plan, chunks_of, start, end):
    for off, xorb, a, b, n in plan.terms:
        if off + n <= start:
            continue
        if off >= end:
            return
        pos = off
        for data in chunks_of(xorb, a, b, plan.fetch.get(xorb, ())):
            lo, hi = max(start - pos, 0), min(end - pos, len(data))
            if lo < hi:
                yield memoryview(data)[lo:hi]
            pos += len(data)
            if pos >= end:
                return
        if pos != off + n:
            raise UpstreamError("xorb %s chunks %d-%d decode to %d bytes, the term says %d"
                                % (xorb, a, b, pos - off, n))


def read_chunks(path, starts, first, end):
    """Decoded chunks [first, end) of a cached xorb range file whose chunk `i` starts at
    byte starts[i] (ends at starts[i + 1])."""
    with open(path, "rb") as f:
        f.seek(starts[first])
        for i in range(first, end):
            raw = f.read(starts[i + 1] - starts[i])
            yield XR.decode_chunk(raw)


def parse(body, size):
    return Plan(json.loads(body), size)
