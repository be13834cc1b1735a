"""Response heads: rendered once per Entry, reused for every hit. Pure.

prepare(entry) renders the heads a FILE entry can need (200 and 304 for keep-alive and
close, and the fixed prefix of a 206) when the entry is published, so the warm path
only picks a bytes object; 206 and 416 add one small format per request. For a small
file whose body the Entry carries, the complete 200 response (head + body) is one
bytes object: a warm hit is a single send.
Canned error responses are memoised by (status, message, keep_alive).
"""

import functools
import json

REASONS = {
    200: "OK", 206: "Partial Content", 301: "Moved Permanently", 302: "Found", 303: "See Other",
    304: "Not Modified", 307: "Temporary Redirect", 308: "Permanent Redirect",
    400: "Bad Request", 401: "Unauthorized", 403: "Forbidden", 404: "Not Found",
    405: "Method Not Allowed", 408: "Request Timeout", 411: "Length Required",
    413: "Content Too Large", 414: "URI Too Long", 416: "Range Not Satisfiable",
    417: "Expectation Failed", 429: "Too Many Requests", 431: "Request Header Fields Too Large",
    500: "Internal Server Error", 501: "Not Implemented", 502: "Bad Gateway",
    503: "Service Unavailable", 504: "Gateway Timeout", 505: "HTTP Version Not Supported",
    507: "Insufficient Storage",
    599: "Upstream Unavailable",     # pulsys's own (upstream/negative.py DOWN_STATUS)
}

CONN_KA = b"Connection: keep-alive\r\n\r\n"
CONN_CLOSE = b"Connection: close\r\n\r\n"


def clean(value):
    """A header value safe to put on the wire: printable ASCII and tab only. Controls
    (CR, LF, NUL, ...) are dropped, so nothing a client or upstream sent can end a header
    line; other non-ASCII characters become backslash escapes (a name like "\u00e9.bin"
    stays recognisable without putting raw bytes into a header)."""
    s = str(value)
    if s.isascii() and s.isprintable():
        return s
    kept = "".join(c for c in s if c == "\t" or c.isprintable() and not "\x7f" <= c <= "\x9f")
    return kept.encode("ascii", "backslashreplace").decode("ascii")


def status_line(status):
    return ("HTTP/1.1 %d %s\r\n" % (status, REASONS.get(status, "Unknown"))).encode("latin-1")


_S200, _S206, _S304 = status_line(200), status_line(206), status_line(304)


def _hdr(name, value):
    return ("%s: %s\r\n" % (name, clean(value))).encode("ascii")


class FileHeads:
    """The heads of one FILE entry. The keep-alive 200 is rendered at once; the
    Connection: close variants, the 304s and the 206 prefix, which few requests need,
    when first asked for (an unset slot falls through to __getattr__): an index record
    decoded for one random hit renders one head, not six."""
    __slots__ = ("ok_ka", "ok_close", "nm_ka", "nm_close", "partial_prefix", "size",
                 "full_ka", "full_close", "common")

    def __getattr__(self, name):
        if name == "ok_close":              # Connection: close is rare (hf clients keep alive)
            self.ok_close = self.ok_ka[:-len(CONN_KA)] + CONN_CLOSE
            return self.ok_close
        if name == "full_close":
            full = self.full_ka
            self.full_close = None if full is None else self.ok_close + full[len(self.ok_ka):]
            return self.full_close
        if name == "partial_prefix":
            self.partial_prefix = _S206 + self.common
            return self.partial_prefix
        if name in ("nm_ka", "nm_close"):
            nm = _S304 + self.common
            self.nm_ka, self.nm_close = nm + CONN_KA, nm + CONN_CLOSE
            return getattr(self, name)
        raise AttributeError(name)


def file_common(e):
    """The head lines every response for FILE entry `e` shares (index records keep them)."""
    h = [_hdr("Content-Type", e.content_type or "application/octet-stream"),
         _hdr("ETag", '"%s"' % e.etag)]
    if e.commit:
        h.append(_hdr("X-Repo-Commit", e.commit))
    if e.lfs:
        h.append(_hdr("X-Linked-Etag", '"%s"' % e.etag))
        h.append(_hdr("X-Linked-Size", e.size))
    h.append(b"Accept-Ranges: bytes\r\n")
    if e.content_disposition:
        h.append(_hdr("Content-Disposition", e.content_disposition))
    h.append(b"X-Content-Type-Options: nosniff\r\n")
    for name, value in e.headers:       # --xet facade: X-Xet-Hash and its token route
        h.append(_hdr(name, value))
    return b"".join(h)


def prepare(entry, common=None):
    """Render the reusable heads of a FILE entry into entry.heads; returns the entry.
    common: file_common(entry) when the caller has it (an index record carries it)."""
    if common is None:
        common = file_common(entry)
    fh = FileHeads()
    fh.common = common
    fh.ok_ka = b"%s%sContent-Length: %d\r\n%s" % (_S200, common, entry.size, CONN_KA)
    fh.size = entry.size
    body = entry.body_mem
    # small file: the whole 200 response is one bytes object
    fh.full_ka = fh.ok_ka + body if body is not None else None
    entry.heads = fh
    return entry


def render_partial(fh, first, last, keep_alive):
    return b"%sContent-Range: bytes %d-%d/%d\r\nContent-Length: %d\r\n%s" % (
        fh.partial_prefix, first, last, fh.size, last - first + 1, CONN_KA if keep_alive else CONN_CLOSE)


def render_unsatisfiable(size, keep_alive):
    return b"%sContent-Range: bytes */%d\r\nContent-Length: 0\r\n%s" % (
        status_line(416), size, CONN_KA if keep_alive else CONN_CLOSE)


def render_canned(status, headers, body_len, keep_alive):
    """Head of a response whose body is in memory. headers: ((name, value), ...)."""
    parts = [status_line(status)]
    for name, value in headers:
        parts.append(_hdr(name, value))
    parts.append(b"Content-Length: %d\r\n" % body_len)
    parts.append(CONN_KA if keep_alive else CONN_CLOSE)
    return b"".join(parts)


@functools.lru_cache(maxsize=256)
def error_response(status, message, keep_alive=False, head_only=False, allow=""):
    """A complete pulsys-generated error (head + JSON body) in the Hub's style. `allow`:
    the Allow header of a 405 (RFC 9110 §15.5.6)."""
    body = json.dumps({"error": message}).encode()
    headers = (("Content-Type", "application/json"), ("X-Error-Message", message),
               ("X-Content-Type-Options", "nosniff"))
    if allow:
        headers += (("Allow", allow),)
    head = render_canned(status, headers, len(body), keep_alive)
    return head if head_only else head + body
