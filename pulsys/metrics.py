"""Counters: one preallocated list of ints per thread, summed when scraped.

A reactor increments `c[HITS] += 1` on its own list (no lock, no allocation for small
ints... and a CPython int above 256 is one short-lived object). Readers sum lists from
any thread; a torn read only makes a counter momentarily behind.
"""

from bisect import bisect_left

NAMES = (
    "requests", "cache_hits", "cache_misses", "fills_started", "fills_completed", "fills_failed",
    "bytes_served", "upstream_requests", "upstream_body_bytes", "upstream_errors",
    "stale_served", "offline_refusals", "protocol_errors", "connections_accepted",
    "connections_closed", "peer_resets", "sendfile_eagain", "integrity_failures",
    "passthrough", "fused_head_body", "internal_errors", "uring_enter", "uring_sqes",
    "upstream_refused", "connections_refused",
    "quota_rejects", "evictions", "evicted_bytes",
    "upstream_retries", "fill_fetchers", "fill_refetches", "auth_refusals",
    # --shared-store (upstream/shared_tier.py)
    "shared_meta_hits", "shared_fills", "shared_requests", "shared_body_bytes", "shared_uploads",
    "shared_upload_bytes", "shared_meta_uploads", "shared_errors", "shared_corrupt",
)
INDEX = {n: i for i, n in enumerate(NAMES)}

# Request latency histograms, per route kind, in the same list after the named counters
# (so a worker's counter row carries them too, workers.CounterTable): for each kind, one
# int per bucket (not cumulative; the last one is +Inf), then the sum in microseconds.
# A reactor records a request with observe(): a C bisect and two int stores, no lock, no
# object kept (tests/floors). /metrics exports them as Prometheus histograms
# (admin/metrics_export.py).
ROUTE_KINDS = ("warm", "cold", "api")   # a warm hit; a /resolve that went upstream; an /api/ call
LATENCY_BOUNDS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
                  0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)     # seconds, Prometheus `le`
_PER_KIND = len(LATENCY_BOUNDS) + 2
HIST = len(NAMES)                       # where the histograms start in a counter list
H_WARM, H_COLD, H_API = (HIST + i * _PER_KIND for i in range(len(ROUTE_KINDS)))
WIDTH = HIST + len(ROUTE_KINDS) * _PER_KIND     # length of a counter list
H_WARM_SUM = H_WARM + _PER_KIND - 1     # warm hits' summed microseconds (the fused hit's own observe)


def observe(c, base, seconds, _bisect=bisect_left, _bounds=LATENCY_BOUNDS, _sum=_PER_KIND - 1):
    """Count one request of the kind at `base` (H_WARM, H_COLD or H_API) in list c."""
    c[base + _bisect(_bounds, seconds)] += 1
    c[base + _sum] += int(seconds * 1e6)


def histograms(lists):
    """{kind: {"buckets": [[le, cumulative count], ...], "count": n, "sum": seconds}}
    summed over counter lists (one per reactor or worker row)."""
    out = {}
    for k, name in enumerate(ROUTE_KINDS):
        base = HIST + k * _PER_KIND
        raw = [0] * _PER_KIND
        for c in lists:
            if len(c) >= WIDTH:
                for i in range(_PER_KIND):
                    raw[i] += c[base + i]
        cum, buckets = 0, []
        for i, le in enumerate(LATENCY_BOUNDS + (float("inf"),)):
            cum += raw[i]
            buckets.append(["+Inf" if le == float("inf") else le, cum])
        out[name] = {"buckets": buckets, "count": cum, "sum": raw[-1] / 1e6}
    return out
for _i, _n in enumerate(NAMES):
    globals()[_n.upper()] = _i
del _i, _n


# Gauges every snapshot (/debug/vars) carries besides the counters; /metrics exports them.
GAUGES = (
    ("index_entries", "entries in the parent's (authoritative) cache index"),
    ("fills_in_flight", "upstream body fills running now"),
    ("open_connections", "client connections open on the data plane"),
    ("listeners", "listening sockets, one reactor each"),
    ("cache_bytes", "bytes of verified blobs in the cache"),
    ("cache_reserved_bytes", "bytes reserved by fills in progress"),
    ("cache_max_bytes", "--cache-max-bytes (0 = unlimited)"),
    ("shared_uploads_pending", "blobs and metadata documents waiting for, or in, upload to --shared-store"),
)


def new():
    return [0] * WIDTH


def summed(lists):
    """Element-wise sum of counter lists (one per reactor, pool or worker process)."""
    total = [0] * len(NAMES)
    for c in lists:
        for i, v in enumerate(c[:len(NAMES)]):
            total[i] += v
    return total


def merged(lists):
    lists = list(lists)
    d = dict(zip(NAMES, summed(lists)))
    d["request_seconds"] = histograms(lists)
    return d
