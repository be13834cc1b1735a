"""Byte spans of a file: a sorted tuple of disjoint, non-touching half-open (start, end)
pairs. Pure functions; a fill has a handful of spans (one per fetcher at most), so
linear scans are the fast choice.
"""


def add(spans, a, b):
    """`spans` with [a, b) added; spans it overlaps or touches are merged into one."""
    out = []
    for s, e in spans:
        if e < a or s > b:
            out.append((s, e))
        else:
            a, b = (s if s < a else a), (e if e > b else b)
    out.append((a, b))
    out.sort()
    return tuple(out)


def end_at(spans, offset):
    """End of the span holding byte `offset`; `offset` itself when that byte is not held."""
    for s, e in spans:
        if s > offset:
            break
        if offset < e:
            return e
    return offset


def holds(spans, offset):
    return end_at(spans, offset) > offset


def next_start(spans, offset, size):
    """First start of a span after `offset`, else `size`."""
    for s, _ in spans:
        if s > offset:
            return s if s < size else size
    return size


def first_gap(spans, offset, size):
    """First byte at or after `offset` (< size) that no span holds, else None."""
    while offset < size:
        e = end_at(spans, offset)
        if e == offset:
            return offset
        offset = e
    return None


def total(spans):
    return sum(e - s for s, e in spans)
