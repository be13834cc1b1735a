"""Replay the request corpus through pulsys.http1.parse.

requests/valid/NNN.http holds one request head (raw bytes, real CRLFs); NNN.json holds
every RequestHead field it must produce. requests/invalid/NNN.http must be rejected;
NNN.json holds {"status": ..., "must_close": true, "note": ...}.

Each file is replayed whole, one byte at a time, and in seeded random splits, always
followed by trailing bytes (a pipelined request) that must not change the outcome, and
at a nonzero `start` in a reused buffer.
"""

import json
import pathlib
import random
import zlib

import pytest

from pulsys.errors import ProtocolError
from pulsys.http1.parse import parse_request_head
from pulsys.model.request import RequestHead

HERE = pathlib.Path(__file__).parent / "requests"
TRAILING = b"GET /pipelined HTTP/1.1\r\nHost: x\r\n\r\n"
SPLITS_PER_FILE = 5


def _cases(kind):
    paths = sorted((HERE / kind).glob("*.http"))
    return [pytest.param(p, id="%s/%s" % (kind, p.stem)) for p in paths]


def _load(path):
    return path.read_bytes(), json.loads(path.with_suffix(".json").read_text())


def _outcome(buf, start, end):
    """None (need data), the head's fields, or {"status", "must_close"}."""
    try:
        head = parse_request_head(buf, start, end)
    except ProtocolError as e:
        return {"status": e.status_hint, "must_close": e.must_close}
    if head is None:
        return None
    assert type(head) is RequestHead
    return {name: getattr(head, name) for name in RequestHead.__slots__}


def _stream(chunks, offset=b""):
    """Feed chunks into one growing buffer like a reactor would; first non-None outcome."""
    buf = bytearray(offset)
    for chunk in chunks:
        buf += chunk
        result = _outcome(buf, len(offset), len(buf))
        if result is not None:
            return result, len(buf) - len(offset)
    return None, len(buf) - len(offset)


def _random_chunks(data, rng):
    cuts = sorted(rng.sample(range(1, len(data)), min(len(data) - 1, rng.randint(1, 8))))
    return [data[a:b] for a, b in zip([0] + cuts, cuts + [len(data)])]


def _expected(meta):
    return {k: v for k, v in meta.items() if k != "note"}


def _replay(data, expected):
    stream = data + TRAILING
    assert _outcome(data, 0, len(data)) == expected, "whole"
    assert _outcome(stream, 0, len(stream)) == expected, "whole + trailing"
    assert _outcome(memoryview(b"junk" + stream), 4, 4 + len(stream)) == expected, "offset"

    one_byte = [stream[i:i + 1] for i in range(len(stream))]
    result, seen = _stream(one_byte, offset=b"previous request bytes")
    assert result == expected, "byte at a time"
    assert seen <= len(data), "decided only after the trailing bytes arrived"

    rng = random.Random(zlib.crc32(data))
    for _ in range(SPLITS_PER_FILE):
        result, seen = _stream(_random_chunks(stream, rng))
        assert result == expected, "random split"


@pytest.mark.parametrize("path", _cases("valid"))
def test_valid(path):
    data, meta = _load(path)
    expected = _expected(meta)
    assert "status" not in expected
    assert expected["head_len"] == len(data)
    _replay(data, expected)
    # A valid head is never decided before its last byte.
    for end in range(len(data)):
        assert parse_request_head(data, 0, end) is None


@pytest.mark.parametrize("path", _cases("invalid"))
def test_invalid(path):
    data, meta = _load(path)
    expected = _expected(meta)
    assert expected["status"] in (400, 414, 417, 431, 501, 505)
    assert expected["must_close"] is True
    _replay(data, expected)


def test_corpus_size():
    assert len(_cases("valid")) >= 20
    assert len(_cases("invalid")) >= 30
