"""Property tests for pulsys.http1.parse (Hypothesis) and a differential test against h11.

Invariants:
  * any bytes, any (start, end) → None, a RequestHead, or ProtocolError; nothing else;
  * one-shot ≡ chunked: however the bytes are split, the parser never takes two different
    decisions (head or error status) along the way, a decision taken on a prefix is the
    one every completed longer input gets, and trailing bytes after a decided head change
    nothing. Within the eager window (_EAGER_BYTES) this is exact equivalence: the first
    decision of any split equals the whole input's outcome, None included;
  * differential: if h11 rejects a request head, we reject it too (we may be stricter).
    Known, intended difference: we skip leading empty lines (RFC 9112 §2.2), h11 rejects
    them, so the generator never starts a head with CRLF.
"""

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pulsys.errors import ProtocolError
from pulsys.http1.parse import parse_request_head
from pulsys.model.request import RequestHead

h11 = pytest.importorskip("h11")

FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# Pieces of HTTP/1.1 that steer random bytes into the parser's deeper branches.
FRAGMENTS = [
    b"GET", b"HEAD", b"POST", b" ", b"  ", b"/", b"/a?b=c", b"*", b"http://h/", b"#",
    b"HTTP/1.1", b"HTTP/1.0", b"HTTP/2.0", b"HTTP/1.", b"\r\n", b"\r", b"\n", b"\r\n\r\n",
    b"Host: h", b"host:", b":", b" :", b"\t", b"\x00", b"\x7f", b"\xe9",
    b"Content-Length: 5", b"Content-Length: +5", b"content-length:", b"Transfer-Encoding: chunked",
    b"Connection: close", b"Connection: keep-alive", b"Expect: 100-continue", b"Expect: x",
    b"Range: bytes=0-0", b"Authorization: Bearer t", b"If-None-Match: \"e\"", b"Content-Type: a",
    b"X-A: v",
]
soup = st.lists(st.one_of(st.sampled_from(FRAGMENTS), st.binary(max_size=6)), max_size=30) \
    .map(b"".join)
SEEDS = [
    b"GET / HTTP/1.1\r\nHost: h\r\n\r\n",
    b"HEAD /gpt2/resolve/main/config.json HTTP/1.1\r\nHost: hf.local\r\nAccept-Encoding: identity"
    b"\r\nConnection: keep-alive\r\nAuthorization: Bearer t\r\n\r\n",
    b"GET /f?x=1 HTTP/1.1\r\nhost: cdn\r\nrange: bytes=0-0\r\n\r\n",
    b"POST /api/x HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\nContent-Type: a/b\r\n\r\nhello",
    b"GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n",
]


@st.composite
def mutated(draw):
    """A real request head with a few bytes inserted, deleted or replaced."""
    data = bytearray(draw(st.sampled_from(SEEDS)))
    for _ in range(draw(st.integers(0, 3))):
        at = draw(st.integers(0, len(data)))
        op = draw(st.sampled_from(["insert", "delete", "replace"]))
        if op == "insert":
            data[at:at] = draw(st.one_of(st.sampled_from(FRAGMENTS), st.binary(min_size=1, max_size=3)))
        elif op == "delete":
            del data[at:at + draw(st.integers(1, 4))]
        else:
            data[at:at + 1] = draw(st.binary(min_size=1, max_size=1))
    return bytes(data)


@st.composite
def padded(draw):
    """A mutated head pushed across the eager window, MAX_REQUEST_LINE or MAX_HEAD_BYTES."""
    data = draw(mutated())
    pad = draw(st.sampled_from([4000, 4090, 4200, 8190, 16300, 16370, 16400]))
    where = draw(st.sampled_from(["target", "header"]))
    at = data.find(b" /") + 2 if where == "target" else data.find(b"\r\n") + 2
    filler = b"p" * pad if where == "target" else b"X-Pad: " + b"p" * pad + b"\r\n"
    return data[:at] + filler + data[at:]


request_bytes = st.one_of(st.binary(max_size=200), soup, mutated())


def outcome(buf, start, end):
    try:
        head = parse_request_head(buf, start, end)
    except ProtocolError as e:
        assert e.must_close is True
        assert e.status_hint in (400, 414, 417, 431, 501, 505)
        assert isinstance(e.reason, str) and e.reason
        return ("error", e.status_hint)
    except Exception as e:  # pragma: no cover - the property under test
        raise AssertionError("parser raised %r" % (e,)) from e
    if head is None:
        return None
    assert type(head) is RequestHead
    values = tuple(getattr(head, name) for name in RequestHead.__slots__)
    assert 0 < head.head_len <= end - start
    return ("head", values)


@FUZZ
@given(request_bytes, st.data())
def test_any_bytes_give_head_none_or_protocol_error(data, draw):
    start = draw.draw(st.integers(0, len(data)))
    end = draw.draw(st.integers(start, len(data)))
    for buf in (data, bytearray(data), memoryview(data)):
        outcome(buf, start, end)


def _split_ends(length, sizes):
    ends, pos = [], 0
    for size in sizes:
        pos += size
        if pos >= length:
            break
        ends.append(pos)
    return ends + [length]


def _check_splits(data, sizes, extra):
    whole = outcome(data, 0, len(data))
    seen = [outcome(data, 0, end) for end in _split_ends(len(data), sizes)]
    decided = [o for o in seen if o is not None]
    assert all(o == decided[0] for o in decided), decided
    if not decided:
        return
    first = decided[0]
    if len(data) <= 4096:
        assert first == whole
    # A decided prefix: every completed longer input gets the same decision, and trailing
    # bytes (a body, a pipelined request) never turn it into another decision.
    assert outcome(data + b"\r\n\r\n", 0, len(data) + 4) == first
    for longer in (data + extra, data + b"\r\n\r\n" + extra):
        assert outcome(longer, 0, len(longer)) in (None, first)
        assert outcome(b"xx" + longer, 2, 2 + len(longer)) in (None, first)


@FUZZ
@given(request_bytes, st.lists(st.integers(1, 40), max_size=12), st.binary(max_size=20))
def test_one_shot_equals_chunked(data, sizes, extra):
    _check_splits(data, sizes, extra)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(padded(), st.lists(st.integers(1, 6000), max_size=8), st.binary(max_size=20))
def test_one_shot_equals_chunked_for_big_heads(data, sizes, extra):
    _check_splits(data, sizes, extra)


# ---- differential against h11 --------------------------------------------------------

def mostly(good, bad):
    """`good` nine times out of ten, `bad` otherwise."""
    return st.integers(0, 9).flatmap(lambda i: bad if i == 0 else good)


tchar = st.sampled_from("!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")
tokens = st.text(tchar, min_size=1, max_size=8)
methods = mostly(st.one_of(st.sampled_from(["GET", "HEAD", "POST"]), tokens),
                 st.sampled_from(["get", "G(T", "", "GET\x00"]))
targets = mostly(
    st.text(st.characters(min_codepoint=0x21, max_codepoint=0x7e), max_size=12).map("/".__add__),
    st.sampled_from(["*", "http://h/x", "h:443", "/a#b", "/caf\xe9", "/a b", "/\x7f", "", "/\x00"]))
versions = mostly(st.sampled_from(["HTTP/1.1", "HTTP/1.1", "HTTP/1.0"]),
                  st.sampled_from(["HTTP/2.0", "HTTP/1.2", "HTTP/0.9", "http/1.1", "HTTP/1",
                                   "HTTP/1.1 ", "HTTP/11.1", ""]))
names = mostly(
    st.one_of(st.sampled_from(["Host", "host", "Content-Length", "Transfer-Encoding",
                               "Connection", "Expect", "Range", "Authorization",
                               "If-None-Match", "Content-Type"]), tokens),
    st.sampled_from(["X A", "", " Host", "Host ", "Host\t", "X\x00", "\tX", "X\xe9"]))
values = mostly(
    st.one_of(st.sampled_from(["h", "hf.local:8080", "5", "05", "", "close", "keep-alive",
                               "Upgrade, close", "100-continue", "\t x \t", "caf\xe9",
                               "bytes=0-0", "Bearer t", '"etag"']),
              st.text(st.characters(min_codepoint=0x20, max_codepoint=0x7e), max_size=10)),
    st.one_of(st.sampled_from(["+5", "-1", "5, 5", "5 5", "0x5", "chunked", "chunked, identity",
                               "a\x00b", "a\rb", "a\nb", "a\x7f", "\x0b", "1234567890123456789"]),
              st.text(st.characters(min_codepoint=0x0, max_codepoint=0xff), max_size=10)))
eols = mostly(st.just("\r\n"), st.sampled_from(["\n", "\r", " \r\n", "\r\n "]))
fields = st.tuples(names, mostly(st.just(":"), st.sampled_from([" :", "", "\t:"])), values, eols)


@st.composite
def request_heads(draw):
    sp = draw(mostly(st.just(" "), st.sampled_from(["  ", "\t", ""])))
    line = draw(methods) + sp + draw(targets) + " " + draw(versions) + draw(eols)
    headers = draw(st.lists(fields, max_size=5))
    if draw(st.integers(0, 4)):
        headers.insert(draw(st.integers(0, len(headers))), ("Host", ": ", "h", "\r\n"))
    for name, colon, value, eol in headers:
        line += name + colon + value + eol
    line += draw(mostly(st.just("\r\n"), st.just("\n")))
    return line.encode("latin-1")


def h11_verdict(data):
    conn = h11.Connection(h11.SERVER)
    try:
        conn.receive_data(data)
        event = conn.next_event()
    except h11.RemoteProtocolError:
        return "reject", None
    if isinstance(event, h11.Request):
        return "accept", event
    return "undecided", None


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(request_heads())
def test_h11_rejects_implies_we_reject(data):
    verdict, event = h11_verdict(data)
    ours = outcome(data, 0, len(data))
    if verdict == "reject":
        assert ours is not None and ours[0] == "error", (data, ours)
    elif verdict == "accept" and ours is not None and ours[0] == "head":
        head = parse_request_head(data, 0, len(data))
        assert head.method == event.method.decode("latin-1")
        assert head.target == event.target.decode("latin-1")
        assert head.http11 == (event.http_version == b"1.1")
        headers = {}
        for name, value in event.headers:
            headers.setdefault(name.decode(), value.decode("latin-1"))
        assert head.host == headers.get("host", "")
        assert head.range == headers.get("range")
        assert head.authorization == headers.get("authorization")
        assert head.content_type == headers.get("content-type")
        assert head.content_length == int(headers.get("content-length", "0"))


def test_differential_sanity():
    # The harness itself: h11 and we agree on a plain request and on a smuggling classic.
    assert h11_verdict(b"GET / HTTP/1.1\r\nHost: h\r\n\r\n")[0] == "accept"
    assert h11_verdict(b"GET / HTTP/1.1\r\nHost: h\r\nContent-Length: 1, 2\r\n\r\n")[0] == "reject"
    assert outcome(b"GET / HTTP/1.1\r\nHost: h\r\nContent-Length: 1, 2\r\n\r\n", 0, 49)[0] == "error"
