"""Counters: one preallocated list of ints per thread, summed when scraped.

A reactor increments `c[HITS] += 1` on its own list (no lock, no allocation for small
ints... and a CPython int above 256 is one short-lived object). Readers sum lists from
any thread; a torn read only makes a counter momentarily behind.
"""

NAMES = (
    "requests", "cache_hits", "cache_misses", "fills_started", "fills_completed", "fills_failed",
    "bytes_served", "upstream_requests", "upstream_body_bytes", "upstream_errors",
    "stale_served", "offline_refusals", "protocol_errors", "connections_accepted",
    "connections_closed", "peer_resets", "sendfile_eagain", "integrity_failures",
    "passthrough", "fused_head_body", "internal_errors", "uring_enter", "uring_sqes",
)
INDEX = {n: i for i, n in enumerate(NAMES)}
for _i, _n in enumerate(NAMES):
    globals()[_n.upper()] = _i
del _i, _n


# Gauges every snapshot (/debug/vars) carries besides the counters; /metrics exports them.
GAUGES = (
    ("index_entries", "entries in the parent's (authoritative) cache index"),
    ("fills_in_flight", "upstream body fills running now"),
    ("open_connections", "client connections open on the data plane"),
    ("listeners", "listening sockets, one reactor each"),
)


def new():
    return [0] * len(NAMES)


def summed(lists):
    """Element-wise sum of counter lists (one per reactor, pool or worker process)."""
    total = [0] * len(NAMES)
    for c in lists:
        for i, v in enumerate(c[:len(NAMES)]):
            total[i] += v
    return total


def merged(lists):
    return dict(zip(NAMES, summed(lists)))
