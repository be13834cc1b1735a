"""Unit tests for pulsys.http1.parse: fields, pipelining, keep-alive, every error status.

Every case goes through `tr()` / `tr_error()`, which run it three ways (h11's `tr()`):
whole, one byte at a time (growing `end`, must stay None until the head is complete), and
with trailing bytes after the head (a body or a pipelined request, never consumed). Each
way also runs at a nonzero `start` and on bytes, bytearray and memoryview.
"""

import pytest

from pulsys.errors import ProtocolError
from pulsys.http1.parse import (
    MAX_EMPTY_LINES, MAX_HEAD_BYTES, MAX_REQUEST_LINE, parse_request_head)
from pulsys.model.request import RequestHead

TRAILING = b"POST /next HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc"
PREFIX = b"leftover bytes of the previous request\r\n\r\n"
FIELDS = RequestHead.__slots__


def fields(head):
    return {name: getattr(head, name) for name in FIELDS}


def _buffers(data):
    yield data
    yield bytearray(data)
    yield memoryview(data)


def tr(data, **expected):
    """Parse `data` (one complete head) three ways; check `expected` fields; return them."""
    results = []
    for buf in _buffers(data):
        results.append(fields(parse_request_head(buf, 0, len(buf))))
    for buf in _buffers(PREFIX + data + TRAILING):
        results.append(fields(parse_request_head(buf, len(PREFIX), len(buf))))
    buf = PREFIX + data + TRAILING
    for end in range(len(PREFIX), len(PREFIX) + len(data)):
        assert parse_request_head(buf, len(PREFIX), end) is None, end
    results.append(fields(parse_request_head(buf, len(PREFIX), len(PREFIX) + len(data))))
    for r in results[1:]:
        assert r == results[0]
    got = results[0]
    assert got["head_len"] == len(data)
    for name, value in expected.items():
        assert got[name] == value, name
    return got


def tr_error(data, status):
    """`data` must be rejected with `status`, however it arrives; return the reason."""
    reasons = []
    for buf in _buffers(data):
        with pytest.raises(ProtocolError) as info:
            parse_request_head(buf, 0, len(buf))
        assert info.value.status_hint == status
        assert info.value.must_close is True
        reasons.append(info.value.reason)
    for buf in _buffers(PREFIX + data + TRAILING):
        with pytest.raises(ProtocolError) as info:
            parse_request_head(buf, len(PREFIX), len(buf))
        assert info.value.status_hint == status
    buf = PREFIX + data + TRAILING
    for end in range(len(PREFIX), len(buf) + 1):
        try:
            result = parse_request_head(buf, len(PREFIX), end)
        except ProtocolError as e:
            assert e.status_hint == status, end
            break
        assert result is None, end
        assert end < len(PREFIX) + len(data), "not rejected once all of it arrived"
    return reasons[0]


HF_HEAD = (
    b"HEAD /gpt2/resolve/main/config.json HTTP/1.1\r\n"
    b"Host: hf.local:8080\r\n"
    b"user-agent: unknown/None; hf_hub/0.26.2; python/3.11.7; torch/2.5.1\r\n"
    b"Accept-Encoding: identity\r\n"
    b"Accept: */*\r\n"
    b"Connection: keep-alive\r\n"
    b"X-Amzn-Trace-Id: 3f1c7a9e-1b2c-4d5e-8f90-0a1b2c3d4e5f\r\n"
    b"authorization: Bearer hf_abcDEF123\r\n"
    b"\r\n")


def test_huggingface_hub_head():
    got = tr(HF_HEAD)
    assert got == {
        "method": "HEAD", "target": "/gpt2/resolve/main/config.json",
        "path": "/gpt2/resolve/main/config.json", "query": "", "http11": True,
        "keep_alive": True, "host": "hf.local:8080", "range": None, "if_none_match": None,
        "if_range": None, "authorization": "Bearer hf_abcDEF123", "content_length": 0, "content_type": None,
        "user_agent": "unknown/None; hf_hub/0.26.2; python/3.11.7; torch/2.5.1", "head_len": len(HF_HEAD)}


def test_hf_transfer_probe_range():
    tr(b"GET /api/resolve-cache/models/gpt2/abc/model.safetensors?X-Amz-Signature=ab%2Fc&x=1"
       b" HTTP/1.1\r\nhost: cdn-lfs.hf.local\r\nrange: bytes=0-0\r\nuser-agent: hf_transfer/0.1.8"
       b"\r\n\r\n",
       method="GET", path="/api/resolve-cache/models/gpt2/abc/model.safetensors",
       query="X-Amz-Signature=ab%2Fc&x=1", host="cdn-lfs.hf.local", range="bytes=0-0",
       keep_alive=True, authorization=None, user_agent="hf_transfer/0.1.8")


def test_user_agent_is_the_first_one_sent():
    tr(b"GET / HTTP/1.1\r\nHost: h\r\nUser-Agent: Wget/1.21.3\r\nuser-agent: other\r\n\r\n",
       user_agent="Wget/1.21.3")
    tr(b"GET / HTTP/1.1\r\nHost: h\r\n\r\n", user_agent=None)


def test_post_paths_info_with_content_length():
    tr(b"POST /api/models/gpt2/paths-info/main HTTP/1.1\r\nHost: hf.local\r\n"
       b"Content-Type: application/x-www-form-urlencoded\r\nContent-Length: 41\r\n"
       b"Authorization: Bearer hf_x\r\n\r\n",
       method="POST", path="/api/models/gpt2/paths-info/main", content_length=41,
       content_type="application/x-www-form-urlencoded", authorization="Bearer hf_x")


def test_if_none_match_and_ows():
    tr(b"GET /a?b HTTP/1.1\r\nHost:\t h \t\r\nIf-None-Match:  \"abc\" \r\n"
       b"if-none-match: W/\"d\"\r\n\r\n",
       host="h", if_none_match='"abc", W/"d"', path="/a", query="b")


def test_if_range_is_extracted_as_sent():
    tr(b"GET /a HTTP/1.1\r\nHost: h\r\nRange: bytes=5-\r\nif-range:  W/\"abc\" \r\n\r\n",
       range="bytes=5-", if_range='W/"abc"')
    tr(b"GET /a HTTP/1.1\r\nHost: h\r\nIf-Range: Sat, 29 Oct 1994 19:43:31 GMT\r\n\r\n",
       range=None, if_range="Sat, 29 Oct 1994 19:43:31 GMT")
    tr(b"GET /a HTTP/1.1\r\nHost: h\r\n\r\n", if_range=None)


@pytest.mark.parametrize("host", [
    "h", "hf.local", "HF.Local:8080", "127.0.0.1", "127.0.0.1:65535", "h:0", "h:00080",
    "[::1]", "[::1]:8080", "[2001:db8::192.0.2.1]", "under_score.example", "xn--bcher-kva.example.",
    "a-b.c"])
def test_valid_hosts(host):
    tr(b"GET / HTTP/1.1\r\nHost: " + host.encode() + b"\r\n\r\n", host=host)


@pytest.mark.parametrize("host", [
    b"a b", b"a\tb", b"a/b", b"/", b"user@h", b"u:p@h", b"h:", b"h:65536", b"h:99999", b"h:123456",
    b"h:8o", b"h:-1", b"h::80", b":80", b"{h}", b"h%20", b"h\\x", b"h,i", b"h;i", b"h?", b"h#",
    b"[::1", b"::1]", b"[zz::1]", b"[::1]x", b"[::1]:", b"[]", b"::1", b"caf\xe9"])
def test_invalid_hosts_are_400(host):
    for version in (b"1.1", b"1.0"):
        reason = tr_error(b"GET / HTTP/" + version + b"\r\nHost: " + host + b"\r\n\r\n", 400)
        assert "Host" in reason


@pytest.mark.parametrize("method", [b"get", b"Get", b"gET", b"GET1", b"G.T", b"G!T", b"G~T"])
def test_method_other_than_upper_case_letters_is_400(method):
    reason = tr_error(method + b" / HTTP/1.1\r\nHost: h\r\n\r\n", 400)
    assert "method" in reason


def test_unknown_upper_case_methods_parse():
    # the router answers them 501 (route.py); "-" and "_" are allowed as nginx allows them
    for method in ("BREW", "PROPFIND", "M-SEARCH", "X_Y"):
        tr(method.encode() + b" / HTTP/1.1\r\nHost: h\r\n\r\n", method=method)


def test_empty_query_and_obs_text_value():
    tr(b"GET /a? HTTP/1.1\r\nHost: h\r\nX-Note: caf\xe9\r\nX-Empty:\r\n\r\n",
       path="/a", query="", target="/a?")


def test_http10_without_host():
    tr(b"GET / HTTP/1.0\r\n\r\n", http11=False, keep_alive=False, host="")


def test_leading_empty_lines_are_skipped_and_counted():
    head = b"GET / HTTP/1.1\r\nHost: h\r\n\r\n"
    got = tr(b"\r\n\r\n" + head, method="GET")
    assert got["head_len"] == 4 + len(head)
    got = tr(b"\r\n" * MAX_EMPTY_LINES + head, method="GET")
    assert got["head_len"] == 2 * MAX_EMPTY_LINES + len(head)


def test_header_names_case_insensitive():
    tr(b"GET / HTTP/1.1\r\nhOsT: h\r\nCONTENT-LENGTH: 0007\r\nRANGE: bytes=1-\r\n\r\n",
       host="h", content_length=7, range="bytes=1-")


def test_expect_100_continue_is_accepted():
    tr(b"PUT /x HTTP/1.1\r\nHost: h\r\nExpect: 100-Continue\r\nContent-Length: 5\r\n\r\n",
       content_length=5)


def test_lookalike_header_names_are_not_confused():
    tr(b"GET / HTTP/1.1\r\nX-Host: evil\r\nHost: h\r\nHosts: x\r\nX-Range: bytes=0-1\r\n"
       b"Content-Lengths: 5\r\nX-Transfer-Encoding: chunked\r\n\r\n",
       host="h", range=None, content_length=0)


def test_pipelined_heads_in_one_buffer():
    first = b"GET /a HTTP/1.1\r\nHost: h\r\n\r\n"
    second = b"HEAD /b HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n"
    buf = bytearray(first + second + b"GET /c")
    a = parse_request_head(buf, 0, len(buf))
    assert (a.method, a.path, a.head_len) == ("GET", "/a", len(first))
    b = parse_request_head(buf, a.head_len, len(buf))
    assert (b.method, b.path, b.keep_alive, b.head_len) == ("HEAD", "/b", False, len(second))
    assert parse_request_head(buf, a.head_len + b.head_len, len(buf)) is None


def test_every_result_is_a_fresh_head():
    a = parse_request_head(HF_HEAD, 0, len(HF_HEAD))
    b = parse_request_head(HF_HEAD, 0, len(HF_HEAD))
    assert a is not b and fields(a) == fields(b)


def test_empty_and_partial_input_need_data():
    for data in (b"", b"\r", b"\r\n", b"G", b"GET / HTTP/1.1\r", b"GET / HTTP/1.1\r\nHost: h\r\n\r"):
        assert parse_request_head(data, 0, len(data)) is None


@pytest.mark.parametrize("version, connection, keep_alive", [
    ("1.1", None, True),
    ("1.1", "close", False),
    ("1.1", "Close", False),
    ("1.1", "keep-alive", True),
    ("1.1", "Keep-Alive, Upgrade", True),
    ("1.1", "upgrade, close", False),
    ("1.1", " , close ,", False),
    ("1.0", None, False),
    ("1.0", "keep-alive", True),
    ("1.0", "KEEP-ALIVE", True),
    ("1.0", "close", False),
    ("1.0", "keep-alive, close", False),
    ("1.0", "upgrade", False),
])
def test_keep_alive_rules(version, connection, keep_alive):
    data = b"GET / HTTP/" + version.encode() + b"\r\nHost: h\r\n"
    if connection is not None:
        data += b"Connection: " + connection.encode() + b"\r\n"
    tr(data + b"\r\n", keep_alive=keep_alive, http11=version == "1.1")


def test_two_connection_headers_combine():
    tr(b"GET / HTTP/1.1\r\nHost: h\r\nConnection: keep-alive\r\nConnection: close\r\n\r\n",
       keep_alive=False)


OK = b"GET / HTTP/1.1\r\nHost: h\r\n"

ERRORS = [
    # request line
    (b"GET  / HTTP/1.1\r\nHost: h\r\n\r\n", 400),
    (b"GET / HTTP/1.1 \r\nHost: h\r\n\r\n", 400),
    (b" GET / HTTP/1.1\r\nHost: h\r\n\r\n", 400),
    (b"GET\t/ HTTP/1.1\r\nHost: h\r\n\r\n", 400),
    (b"G(T / HTTP/1.1\r\nHost: h\r\n\r\n", 400),
    (b"GET /\x7f HTTP/1.1\r\nHost: h\r\n\r\n", 400),
    (b"GET /caf\xe9 HTTP/1.1\r\nHost: h\r\n\r\n", 400),
    (b"GET /a#frag HTTP/1.1\r\nHost: h\r\n\r\n", 400),
    (b"GET * HTTP/1.1\r\nHost: h\r\n\r\n", 400),
    (b"OPTIONS * HTTP/1.1\r\nHost: h\r\n\r\n", 400),
    (b"GET http://h/ HTTP/1.1\r\nHost: h\r\n\r\n", 400),
    (b"CONNECT h:443 HTTP/1.1\r\nHost: h\r\n\r\n", 400),
    (b"GET / HTTP/2.0\r\nHost: h\r\n\r\n", 505),
    (b"GET / HTTP/1.2\r\nHost: h\r\n\r\n", 505),
    (b"GET / HTTP/0.9\r\nHost: h\r\n\r\n", 505),
    (b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", 505),
    (b"GET / http/1.1\r\nHost: h\r\n\r\n", 400),
    (b"GET / HTTP/1\r\nHost: h\r\n\r\n", 400),
    (b"GET / HTTP/1.10\r\nHost: h\r\n\r\n", 400),
    (b"GET /\r\nHost: h\r\n\r\n", 400),
    (b"GET / HTTP/1.1\nHost: h\r\n\r\n", 400),
    (b"GET / HTTP/1.1\rHost: h\r\n\r\n", 400),
    (b"\n\nGET / HTTP/1.1\r\nHost: h\r\n\r\n", 400),
    (b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03", 400),      # a TLS ClientHello
    (b"GET /" + b"a" * MAX_REQUEST_LINE + b" HTTP/1.1\r\nHost: h\r\n\r\n", 414),
    # header lines
    (OK + b"X-A : b\r\n\r\n", 400),
    (OK + b"X-A\t: b\r\n\r\n", 400),
    (OK + b"X A: b\r\n\r\n", 400),
    (OK + b"X-A b\r\n\r\n", 400),
    (OK + b": b\r\n\r\n", 400),
    (OK + b"X-A: b\r\n c\r\n\r\n", 400),
    (OK + b"X-A: b\r\n\tc\r\n\r\n", 400),
    (b"GET / HTTP/1.1\r\n Host: h\r\n\r\n", 400),
    (OK + b"X-A: b\x00c\r\n\r\n", 400),
    (OK + b"X-A: b\x7fc\r\n\r\n", 400),
    (OK + b"X-A: b\x0bc\r\n\r\n", 400),
    (OK + b"X-A: b\rc\r\n\r\n", 400),
    (OK + b"X-A: b\nX-B: c\r\n\r\n", 400),
    (OK + b"X-A: b\n\r\n", 400),
    (OK + b"X-A: b\n\n", 400),
    (OK + b"X-\xe9: b\r\n\r\n", 400),
    (OK + b"X-A: b\r\r\n\r\n", 400),
    # fields with meaning
    (b"GET / HTTP/1.1\r\n\r\n", 400),
    (b"GET / HTTP/1.1\r\nX-Host: h\r\n\r\n", 400),
    (OK + b"Host: h\r\n\r\n", 400),
    (b"GET / HTTP/1.1\r\nHost:\r\n\r\n", 400),
    (b"GET / HTTP/1.0\r\nHost: a b\r\n\r\n", 400),
    (OK + b"If-Range: \"a\"\r\nIf-Range: \"a\"\r\n\r\n", 400),
    (OK + b"Content-Length: 5\r\nContent-Length: 5\r\n\r\n", 400),
    (OK + b"Content-Length: 5, 5\r\n\r\n", 400),
    (OK + b"Content-Length: +5\r\n\r\n", 400),
    (OK + b"Content-Length: -1\r\n\r\n", 400),
    (OK + b"Content-Length: 5 5\r\n\r\n", 400),
    (OK + b"Content-Length: 0x10\r\n\r\n", 400),
    (OK + b"Content-Length: \r\n\r\n", 400),
    (OK + b"Content-Length: \xb2\r\n\r\n", 400),               # latin-1 superscript two
    (OK + b"Content-Length: 1234567890123456789\r\n\r\n", 400),
    (OK + b"Transfer-Encoding: chunked\r\n\r\n", 501),
    (OK + b"Transfer-Encoding: identity\r\n\r\n", 501),
    (OK + b"transfer-encoding: gzip, chunked\r\n\r\n", 501),
    (OK + b"Transfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n", 400),
    (OK + b"Content-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n", 400),
    (OK + b"Transfer-Encoding : chunked\r\n\r\n", 400),
    (OK + b"Transfer-Encoding: x\r\n chunked\r\n\r\n", 400),
    (OK + b"Authorization: a\r\nAuthorization: b\r\n\r\n", 400),
    (OK + b"Range: bytes=0-1\r\nrange: bytes=0-1\r\n\r\n", 400),
    (OK + b"Content-Type: a\r\nContent-Type: b\r\n\r\n", 400),
    (OK + b"Connection: close;x\r\n\r\n", 400),
    (OK + b"Expect: 200-ok\r\n\r\n", 417),
    (OK + b"Expect: 100-continue\r\nExpect: x\r\n\r\n", 417),
    # limits
    (OK + b"".join(b"X-%d: v\r\n" % i for i in range(100)) + b"\r\n", 431),
    (OK + b"X-Big: " + b"v" * MAX_HEAD_BYTES + b"\r\n\r\n", 431),
    (b"\r\n" * (MAX_EMPTY_LINES + 1) + b"GET / HTTP/1.1\r\nHost: h\r\n\r\n", 400),
    (b"\r\n" * (MAX_HEAD_BYTES // 2) + b"GET / HTTP/1.1\r\nHost: h\r\n\r\n", 400),
]


@pytest.mark.parametrize("data, status", ERRORS, ids=[repr(d[:40]) for d, _ in ERRORS])
def test_errors(data, status):
    assert tr_error(data, status)


def test_error_reasons_name_the_problem():
    assert tr_error(OK + b"Transfer-Encoding: chunked\r\n\r\n", 501) == \
        "Transfer-Encoding not supported"
    assert tr_error(OK + b"Transfer-Encoding: chunked\r\nContent-Length: 1\r\n\r\n", 400) == \
        "both Content-Length and Transfer-Encoding"
    assert "obs-fold" in tr_error(OK + b"X: a\r\n b\r\n\r\n", 400)
    assert "whitespace" in tr_error(OK + b"X : a\r\n\r\n", 400)


def test_limits_are_inclusive():
    # A 100-line header block and a head of exactly MAX_HEAD_BYTES are accepted.
    tr(OK + b"".join(b"X-%d: v\r\n" % i for i in range(99)) + b"\r\n")
    base = OK + b"X-Pad: \r\n\r\n"
    data = base[:-4] + b"v" * (MAX_HEAD_BYTES - len(base)) + b"\r\n\r\n"
    assert len(data) == MAX_HEAD_BYTES
    tr(data)
    line = b"GET /" + b"a" * (MAX_REQUEST_LINE - 14) + b" HTTP/1.1"
    assert len(line) == MAX_REQUEST_LINE
    tr(line + b"\r\nHost: h\r\n\r\n")
    line = b"GET /" + b"a" * (MAX_REQUEST_LINE - 13) + b" HTTP/1.1"
    tr_error(line + b"\r\nHost: h\r\n\r\n", 414)


def test_limits_raise_before_the_terminator():
    long_line = b"GET /" + b"a" * (MAX_REQUEST_LINE + 10)
    with pytest.raises(ProtocolError) as info:
        parse_request_head(long_line, 0, len(long_line))
    assert info.value.status_hint == 414
    big = OK + b"X-Big: " + b"v" * MAX_HEAD_BYTES
    with pytest.raises(ProtocolError) as info:
        parse_request_head(big, 0, len(big))
    assert info.value.status_hint == 431


def test_invalid_prefix_raises_before_the_terminator():
    for data in (b"GET / HTTP/1.1\r\nHost: h\r\nX-A: \x00", b"\x16\x03\x01",
                 b"GET / HTTP/1.1\r\nHost: h\n", b"GET / HTTP/1.1\r\n Host"):
        with pytest.raises(ProtocolError) as info:
            parse_request_head(data, 0, len(data))
        assert info.value.status_hint == 400


def test_bytes_outside_start_end_are_ignored():
    buf = b"\x00garbage" + HF_HEAD + b"\x00garbage"
    head = parse_request_head(buf, 8, 8 + len(HF_HEAD))
    assert head.head_len == len(HF_HEAD)
    assert parse_request_head(buf, 8, 8 + len(HF_HEAD) - 1) is None


def test_long_incomplete_heads_are_judged_at_completion_or_limit():
    # Within the eager window a bad line is rejected at once; past it, an incomplete head
    # waits (no rescanning per call), and the same error comes once it completes or hits
    # the limit. Never a different status.
    bad = OK + b"X-A: \x00\r\nX-Pad: " + b"p" * 5000
    with pytest.raises(ProtocolError) as info:
        parse_request_head(bad, 0, 100)
    assert info.value.status_hint == 400
    assert parse_request_head(bad, 0, len(bad)) is None
    for data in (bad + b"\r\n\r\n", bad + b"p" * MAX_HEAD_BYTES):
        with pytest.raises(ProtocolError) as info:
            parse_request_head(data, 0, len(data))
        assert info.value.status_hint == 400
