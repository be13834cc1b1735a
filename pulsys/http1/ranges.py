"""Single byte-range requests (RFC 9110 §14) against a known size. Pure.

hf-protocol.md §4.2/§6: hf_transfer asks for `bytes=0-0` to learn the size and ends its
last chunk past EOF, so an end beyond the last byte is clamped, never refused.

Policy (docs/security.md, "Ranges"):
  * no Range, or a unit other than bytes: the whole body, 200 (RFC 9110 §14.2: a server
    MUST ignore a range unit it does not understand);
  * several ranges in one header ("bytes=0-1,5-6"): the whole body, 200 (§14.2 lets a
    server ignore Range; no multipart/byteranges bodies, so no amplification);
  * one range that is malformed (no digits, a sign, "-", last < first, non-ASCII digits)
    or starts at or past the end, however large the number: 416 with
    `Content-Range: bytes */SIZE` (§15.5.17 allows 416 for invalid ranges; a 200 would
    corrupt a client that writes the body at the offset it asked for, as hf_transfer
    does, hf-protocol.md §6);
  * a last-pos past the end is clamped; a suffix longer than the body is the whole body;
  * an If-Range that is not our strong ETag: the Range is ignored (if_range_matches).
Digit strings longer than 19 characters are never converted (int() of a 5,000-digit
string raises ValueError in CPython ≥ 3.11 and costs quadratic time before that): a
first-pos that long is past any real size, a last-pos that long is clamped.
"""

UNSATISFIABLE = -1
_DIGITS = 19      # 10**19 - 1 > 2**63: longer numbers are past the end of any file


def parse_range(value, size):
    """-> None (serve the whole body), UNSATISFIABLE (416) or (first, last) inclusive."""
    if value is None:
        return None
    v = value.strip()
    if v[:6].lower() != "bytes=":
        return None
    spec = v[6:].strip()
    if "," in spec:
        return None
    first_s, dash, last_s = spec.partition("-")
    first_s, last_s = first_s.strip(), last_s.strip()
    if not dash or not _digits(first_s) or not _digits(last_s) or not (first_s or last_s):
        return UNSATISFIABLE
    if first_s == "":
        if size == 0 or last_s.strip("0") == "":
            return UNSATISFIABLE
        if len(last_s) > _DIGITS:
            return (0, size - 1)
        return (max(0, size - int(last_s)), size - 1)
    if len(first_s) > _DIGITS:
        return UNSATISFIABLE
    first = int(first_s)
    if last_s and len(last_s) <= _DIGITS and int(last_s) < first:
        return UNSATISFIABLE
    if first >= size:
        return UNSATISFIABLE
    last = size - 1 if not last_s or len(last_s) > _DIGITS else min(int(last_s), size - 1)
    return (first, last)


def _digits(s):
    """"" or ASCII digits only (str.isdigit also accepts "²" and Arabic-Indic digits)."""
    return s == "" or (s.isascii() and s.isdigit())


def if_range_matches(if_range, etag_value):
    """If-Range (RFC 9110 §13.1.5) against our bare etag: true only for that strong tag,
    quoted. The comparison is strong, so a weak tag (W/"...") never matches; an HTTP-date
    never does either, because pulsys sends no Last-Modified and §13.1.5 lets a date
    match only a Last-Modified the client was given. Not matching: ignore the Range."""
    return if_range == '"%s"' % etag_value


def etag_matches(if_none_match, etag_value):
    """If-None-Match (weak comparison, RFC 9110 §13.1.2) against our quoted etag."""
    if if_none_match is None:
        return False
    inm = if_none_match.strip()
    if inm == "*":
        return True
    bare = etag_value.strip('"')
    for tag in inm.split(","):
        tag = tag.strip()
        if tag.startswith("W/"):
            tag = tag[2:]
        if tag.strip('"') == bare:
            return True
    return False
