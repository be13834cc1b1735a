"""Sans-I/O HTTP/1.1 request-head parser: bytes in, `RequestHead` or None out.

Contract:
  * `parse_request_head(buf, start, end)` looks at `buf[start:end]` only (bytes, bytearray
    or a format-"B" memoryview; 0 <= start <= end <= len(buf)). It returns None while the
    head is incomplete, a fresh `RequestHead` once the final CRLFCRLF is in, and raises
    `ProtocolError(status_hint, reason, must_close=True)` for anything unacceptable.
    It raises nothing else, whatever the bytes (tests/fuzz proves it with Hypothesis).
  * Bytes after the head (a body, a pipelined request) are never looked at; `head_len`
    says where they start: `start + head.head_len`.
  * Errors are raised before the terminator arrives where the bytes allow it: a request
    line over MAX_REQUEST_LINE (414), a head over MAX_HEAD_BYTES (431), and any invalid
    prefix of the request line or header lines while the incomplete head is at most
    _EAGER_BYTES long (longer incomplete heads are rechecked only at a limit, so a client
    dripping bytes cannot make every call rescan kilobytes). Every early error is one the
    complete head fails with the same status, so any split gives the whole input's outcome.
  * At most MAX_EMPTY_LINES empty lines before the request line are skipped (RFC 9112
    §2.2) and counted in head_len; one more reads as an empty request line → 400.
  * Strict where leniency enables request smuggling: CRLF only (no bare CR or LF), no
    obs-fold, no whitespace before ":", one Content-Length of plain digits, no
    Transfer-Encoding at all (this server takes no chunked bodies), one Host of the form
    _HOST describes, a method of upper-case letters, "-" and "_".
  * Pure: imports only `re` and pulsys vocabulary; no socket, selectors, os, time, log.
"""

import re

from pulsys.errors import ProtocolError
from pulsys.model.request import RequestHead

__all__ = ["parse_request_head", "MAX_REQUEST_LINE", "MAX_HEAD_BYTES", "MAX_HEADERS",
           "MAX_EMPTY_LINES"]

MAX_REQUEST_LINE = 8192   # request-line bytes, CRLF excluded; longer → 414
MAX_HEAD_BYTES = 16384    # head_len (leading empty lines and final CRLFCRLF included); longer → 431
MAX_HEADERS = 100         # header field lines; more → 431
MAX_EMPTY_LINES = 32      # CRLFs skipped before the request line; one more → 400
_EAGER_BYTES = 4096       # incomplete heads up to this size are checked on every call

# RFC 9110 §5.6.2 tchar; field-value chars are VCHAR / obs-text / SP / HTAB (no CTL, no DEL).
_T = rb"[!#$%&'*+\-.^_`|~0-9A-Za-z]"
_V = rb"[\t\x20-\x7e\x80-\xff]"
_FIELD = _T + rb"+:" + _V + rb"*"

_REQUEST_LINE = re.compile(_T + rb"+ [\x21-\x7e]+ HTTP/[0-9]\.[0-9]")
# The request lines we accept (str): method, origin-form target without '#', HTTP/1.x.
# A method is upper-case letters, "-" and "_", as nginx parses it (anything else there is
# 400 "client sent invalid method"): methods are case-sensitive (RFC 9110 §9.1), so "get"
# is no GET, and a peer that folds case would read another request than pulsys does.
_RL = re.compile(r"([A-Z_\-]+) (/[\x21\x22\x24-\x7e]*) HTTP/1\.([01])")
_METHOD = re.compile(r"[A-Z_\-]+")
# Host (RFC 9110 §7.2, RFC 3986 §3.2.2), kept stricter than the grammar: a name of ASCII
# letters, digits, ".", "-", "_" (an IPv4 address is one) or a bracketed IPv6 literal,
# then an optional ":" and a port of 1-5 digits up to 65535. No userinfo, "/", spaces,
# pct-encoding or empty parts: RFC 9112 §3.2 makes an invalid Host a 400. One fullmatch,
# 0.36 us for "hf.local:8080" (timeit, 2-CPU development VM), paid the first time a head
# is seen only: remembered heads skip the parser (reactor/step.py HEAD_MEMO).
_HOST = re.compile(r"(?:[A-Za-z0-9._\-]+|\[[0-9A-Fa-f.]*:[0-9A-Fa-f:.]*\])"
                   r"(?::(?:[0-9]{1,4}|[0-5][0-9]{4}|6[0-4][0-9]{3}|65[0-4][0-9]{2}|655[0-2][0-9]"
                   r"|6553[0-5]))?")
# Every prefix of a string _REQUEST_LINE accepts, and nothing else.
_REQUEST_LINE_PREFIX = re.compile(
    _T + rb"*|" + _T + rb"+ [\x21-\x7e]*|" + _T
    + rb"+ [\x21-\x7e]+ (?:H(?:T(?:T(?:P(?:/(?:[0-9](?:\.[0-9]?)?)?)?)?)?)?)?")
_FIELDS = re.compile(_FIELD + rb"(?:\r\n" + _FIELD + rb")*+")  # header block, final CRLF excluded
# Every prefix of a header block still waiting for its terminator. A trailing CR may be the
# start of a CRLF, a bare "\r" may be the start of the final empty line.
_FIELDS_PREFIX = re.compile(
    rb"(?:" + _FIELD + rb"\r\n)*+(?:\r|" + _T + rb"+:" + _V + rb"*\r?|" + _T + rb"*)")
# The header lines the parser extracts: "\n" name ":" OWS value (up to the line's CR).
_WANTED = re.compile(
    r"\n((?ai:host|connection|authorization|range|content-length|content-type|if-none-match"
    r"|if-range|transfer-encoding|expect|user-agent)):[ \t]*([^\r]*)")
_TOKEN = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
_NAME = re.compile(_T + rb"+")
_EMPTY_LINES = re.compile(b"(?:\r\n){0,%d}" % MAX_EMPTY_LINES)
_CRLF = re.compile(b"\r\n")
_CRLFCRLF = re.compile(b"\r\n\r\n")

_new_head = RequestHead.__new__


def _view_find(view):
    """`find` for a memoryview, which has none: the same search through a bytes regex."""
    searches = {b"\r\n": _CRLF.search, b"\r\n\r\n": _CRLFCRLF.search}

    def find(sub, lo, hi):
        m = searches[sub](view, lo, hi)
        return -1 if m is None else m.start()
    return find


def _bad(reason, status=400):
    return ProtocolError(status, reason, True)


def _field_error(lines):
    """The reason the first bad header line is bad. Only called once a line failed."""
    for line in lines:
        if _FIELDS.fullmatch(line) is not None:
            continue
        if line[:1] in (b" ", b"\t"):
            return _bad("obs-fold (header line starting with whitespace)")
        name, colon, _ = line.partition(b":")
        if not colon:
            return _bad("header line without a colon")
        if name[-1:] in (b" ", b"\t"):
            return _bad("whitespace between header name and colon")
        if _NAME.fullmatch(name) is None:
            return _bad("invalid header name")
        return _bad("invalid character in header value (CTL, NUL, bare CR or LF)")
    return _bad("malformed header block")


def _request_line_error(line):
    """The ProtocolError for a complete request line (str) that _RL rejected."""
    if not line:
        return _bad("more than %d empty lines before the request line" % MAX_EMPTY_LINES)
    if _REQUEST_LINE.fullmatch(line.encode("latin-1")) is None:
        return _bad("malformed request line")
    method, target, version = line.split(" ")
    if version not in ("HTTP/1.1", "HTTP/1.0"):
        return _bad("HTTP version not supported", 505)
    if target[0] != "/":
        return _bad("request-target must be origin-form (starting with '/')")
    if _METHOD.fullmatch(method) is None:
        return _bad("invalid method (upper-case letters, '-' and '_' only)")
    return _bad("'#' in request-target")


def parse_request_head(buf, start, end):
    """Parse the request head at buf[start:end] → RequestHead | None; see the module doc."""
    find = buf.find if type(buf) is not memoryview else _view_find(buf)
    limit = start + MAX_HEAD_BYTES
    at_limit = end >= limit
    stop = limit if at_limit else end
    s = start
    # RFC 9112 §2.2: ignore empty lines (CRLF) received before the request line. The cap
    # bounds the work per call; one more empty line becomes an empty request line → 400.
    if s < stop and buf[s] == 13:
        s = _EMPTY_LINES.match(buf, s, stop).end()

    # Incomplete heads: checking what has arrived costs O(its length) per call, so it is
    # done while the head is short (_EAGER_BYTES) and once more at a limit, never in
    # between. Either way the request line is judged before the header lines, as for a
    # complete head, and a limit only after both: splits never change the outcome.
    rl_stop = s + MAX_REQUEST_LINE + 2
    if rl_stop > stop:
        rl_stop = stop
    c = find(b"\r\n", s, rl_stop)
    if c < 0:
        too_long = rl_stop - s >= MAX_REQUEST_LINE + 2
        if rl_stop - s <= _EAGER_BYTES or too_long or at_limit:
            # A final CR may be the start of the CRLF.
            part = rl_stop - 1 if rl_stop > s and buf[rl_stop - 1] == 13 else rl_stop
            if _REQUEST_LINE_PREFIX.fullmatch(buf, s, part) is None:
                raise _bad("malformed request line")
        if too_long:
            raise _bad("request line too long", 414)
        if at_limit:
            raise _bad("request head too large", 431)
        return None

    t = find(b"\r\n\r\n", c, stop)
    if t < 0:
        if stop - s <= _EAGER_BYTES or at_limit:
            line = str(buf[s:c], "latin-1")
            if _RL.fullmatch(line) is None:
                raise _request_line_error(line)
            if _FIELDS_PREFIX.fullmatch(buf, c + 2, stop) is None:
                raise _field_error(bytes(buf[c + 2:stop]).split(b"\r\n"))
        if at_limit:
            raise _bad("request head too large", 431)
        return None

    # Complete head. `text` is every line with its CRLF; header lines follow a "\n".
    text = str(buf[s:t + 2], "latin-1")
    m = _RL.fullmatch(text, 0, c - s)
    if m is None:
        raise _request_line_error(text[:c - s])
    method, target, minor = m.groups()
    http11 = minor == "1"
    if t > c:
        if _FIELDS.fullmatch(buf, c + 2, t) is None:
            raise _field_error(bytes(buf[c + 2:t]).split(b"\r\n"))
        # A header line takes at least 4 bytes ("a:" CRLF): short blocks need no count.
        if t - c > 4 * MAX_HEADERS and text.count("\n") > MAX_HEADERS + 1:
            raise _bad("too many header lines", 431)
    host = rng = auth = ctype = cl = inm = ifr = ua = None
    te = close = ka = False
    for name, value in _WANTED.findall(text, c - s):
        name = name.lower()
        value = value.rstrip(" \t")
        if name == "host":
            if host is not None:
                raise _bad("duplicate Host")
            host = value
        elif name == "connection":
            for tok in value.lower().split(","):
                tok = tok.strip(" \t")
                if tok == "close":
                    close = True
                elif tok == "keep-alive":
                    ka = True
                elif tok and _TOKEN.fullmatch(tok) is None:
                    raise _bad("invalid Connection header")
        elif name == "authorization":
            if auth is not None:
                raise _bad("duplicate Authorization")
            auth = value
        elif name == "range":
            if rng is not None:
                raise _bad("duplicate Range")
            rng = value
        elif name == "content-length":
            if cl is not None:
                raise _bad("duplicate Content-Length")
            if not (0 < len(value) <= 18 and value.isascii() and value.isdigit()):
                raise _bad("invalid Content-Length")
            cl = int(value)
        elif name == "content-type":
            if ctype is not None:
                raise _bad("duplicate Content-Type")
            ctype = value
        elif name == "if-none-match":
            inm = value if inm is None else inm + ", " + value
        elif name == "if-range":
            if ifr is not None:         # one validator (RFC 9110 §13.1.5), not a list
                raise _bad("duplicate If-Range")
            ifr = value
        elif name == "transfer-encoding":
            te = True
        elif name == "user-agent":
            if ua is None:
                ua = value
        elif value.lower() != "100-continue":   # Expect
            raise _bad("unsupported Expect", 417)
    if te:
        if cl is not None:
            raise _bad("both Content-Length and Transfer-Encoding")
        raise _bad("Transfer-Encoding not supported", 501)
    if host is None:
        if http11:
            raise _bad("missing Host header")
        host = ""
    elif _HOST.fullmatch(host) is None:
        raise _bad("invalid Host header")

    h = _new_head(RequestHead)
    h.method = method
    h.target = target
    q = target.find("?")
    if q < 0:
        h.path = target
        h.query = ""
    else:
        h.path = target[:q]
        h.query = target[q + 1:]
    h.http11 = http11
    h.keep_alive = not close if http11 else (ka and not close)
    h.host = host
    h.range = rng
    h.if_none_match = inm
    h.if_range = ifr
    h.user_agent = ua
    h.authorization = auth
    h.content_length = 0 if cl is None else cl
    h.content_type = ctype
    h.head_len = t + 4 - start
    return h
