"""Single byte-range requests (RFC 9110 §14) against a known size. Pure.

hf-protocol.md §4.2/§6: hf_transfer asks for `bytes=0-0` to learn the size and ends its
last chunk past EOF, so an end beyond the last byte is clamped, never refused.
Several ranges in one header, other units and syntax errors are ignored (RFC 9110
§14.2 lets a server ignore Range), which means a 200 with the whole body.
"""

UNSATISFIABLE = -1


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
    if not dash:
        return None
    first_s, last_s = first_s.strip(), last_s.strip()
    if not (first_s.isdigit() or first_s == "") or not (last_s.isdigit() or last_s == ""):
        return None
    if not first_s.isascii() or not last_s.isascii() or len(first_s) > 19 or len(last_s) > 19:
        return None
    if first_s == "":
        if last_s == "":
            return None
        n = int(last_s)
        if n == 0 or size == 0:
            return UNSATISFIABLE
        return (max(0, size - n), size - 1)
    first = int(first_s)
    if last_s and int(last_s) < first:
        return None
    if first >= size:
        return UNSATISFIABLE
    last = int(last_s) if last_s else size - 1
    return (first, min(last, size - 1))


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
