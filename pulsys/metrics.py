"""Counters: one preallocated list of ints per thread, summed when scraped.

A reactor increments `c[HITS] += 1` on its own list (no lock, no allocation for small
ints... and a CPython int above 256 is one short-lived object). Readers sum lists from
any thread; a torn read only makes a counter momentarily behind.

Code that many threads run (the fill pool, admin request threads, the pre-warm runner)
counts into one PerThread object instead: `c[i] += n` there is a read and a write that
another thread may run between, so on one shared list increments would be lost; a
PerThread gives each thread a list of its own (tests/unit/test_metrics_pool_counters.py).
"""

import threading
import weakref
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
    # readers of a fill that failed verification: went on from the refetch / were cut (ADR 0012)
    "carried_over", "carry_cuts",
    # --shared-store (upstream/shared_tier.py)
    "shared_meta_hits", "shared_fills", "shared_requests", "shared_body_bytes", "shared_uploads",
    "shared_upload_bytes", "shared_meta_uploads", "shared_errors", "shared_corrupt",
    # negative answers (cache/negatives.py, upstream/service.py)
    "negative_evictions", "missing_from_file_list",
    # the Hub's 429s (upstream/ratelimit.py): received; answered 429 by pulsys without asking
    "upstream_rate_limited", "rate_limited_answers",
    # requests of keys limited to some repos, for another repo (auth/repos.py)
    "repo_refusals",
    # --upstream-auth client (auth/access.py): cached files a reactor did not serve without
    # the Hub's fresh verdict; verdicts the Hub was asked for; clients refused as it refused
    "access_checks", "access_asked", "access_refusals",
    # --xet facade (upstream/xet.py): CAS tokens minted; reconstructions answered from the
    # index / asked upstream; xorb ranges answered from the cache / fetched, and their bytes;
    # plain-file bytes assembled from xorb ranges (upstream/xet_plain.py); xorb ranges kept
    # without chunk hashes, their xorb's footer not to be had (structure checked only)
    "xet_tokens", "xet_recon_hits", "xet_recon_misses", "xet_xorb_hits", "xet_xorb_fills",
    "xet_xorb_bytes_fetched", "xet_assembled_bytes", "xet_unverified_ranges",
)
INDEX = {n: i for i, n in enumerate(NAMES)}

# Each counter's index in a counter list, by name (NAMES[i].upper(); a test checks that the
# two agree, so a counter added to one and not the other fails CI).
REQUESTS = 0
CACHE_HITS = 1
CACHE_MISSES = 2
FILLS_STARTED = 3
FILLS_COMPLETED = 4
FILLS_FAILED = 5
BYTES_SERVED = 6
UPSTREAM_REQUESTS = 7
UPSTREAM_BODY_BYTES = 8
UPSTREAM_ERRORS = 9
STALE_SERVED = 10
OFFLINE_REFUSALS = 11
PROTOCOL_ERRORS = 12
CONNECTIONS_ACCEPTED = 13
CONNECTIONS_CLOSED = 14
PEER_RESETS = 15
SENDFILE_EAGAIN = 16
INTEGRITY_FAILURES = 17
PASSTHROUGH = 18
FUSED_HEAD_BODY = 19
INTERNAL_ERRORS = 20
URING_ENTER = 21
URING_SQES = 22
UPSTREAM_REFUSED = 23
CONNECTIONS_REFUSED = 24
QUOTA_REJECTS = 25
EVICTIONS = 26
EVICTED_BYTES = 27
UPSTREAM_RETRIES = 28
FILL_FETCHERS = 29
FILL_REFETCHES = 30
AUTH_REFUSALS = 31
CARRIED_OVER = 32
CARRY_CUTS = 33
SHARED_META_HITS = 34
SHARED_FILLS = 35
SHARED_REQUESTS = 36
SHARED_BODY_BYTES = 37
SHARED_UPLOADS = 38
SHARED_UPLOAD_BYTES = 39
SHARED_META_UPLOADS = 40
SHARED_ERRORS = 41
SHARED_CORRUPT = 42
NEGATIVE_EVICTIONS = 43
MISSING_FROM_FILE_LIST = 44
UPSTREAM_RATE_LIMITED = 45
RATE_LIMITED_ANSWERS = 46
REPO_REFUSALS = 47
ACCESS_CHECKS = 48
ACCESS_ASKED = 49
ACCESS_REFUSALS = 50
XET_TOKENS = 51
XET_RECON_HITS = 52
XET_RECON_MISSES = 53
XET_XORB_HITS = 54
XET_XORB_FILLS = 55
XET_XORB_BYTES_FETCHED = 56
XET_ASSEMBLED_BYTES = 57
XET_UNVERIFIED_RANGES = 58

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
H_WARM_SUM = H_WARM + _PER_KIND - 1     # warm hits' summed microseconds


def observe(c, base, seconds, _bisect=bisect_left, _bounds=LATENCY_BOUNDS, _sum=_PER_KIND - 1):
    """Count a request of the kind at `base` (H_WARM, H_COLD or H_API) that took
    `seconds`, in list c (observe_turns: a fold's many)."""
    c[base + _bisect(_bounds, seconds)] += 1
    c[base + _sum] += int(seconds * 1e6)


def observe_turns(c, base, marks, _bisect=bisect_left, _bounds=LATENCY_BOUNDS, _sum=_PER_KIND - 1):
    """observe() for loop turns of requests: `marks` holds (t0, seconds, end) per turn,
    the turn's requests being those from the previous turn's `end` (0 for the first)
    up to its own, each taking `seconds` (UringReactor.fold_hits)."""
    start = total = 0
    for _, seconds, end in marks:
        n = end - start
        c[base + _bisect(_bounds, seconds)] += n
        total += int(seconds * 1e6) * n
        start = end
    c[base + _sum] += total


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
    ("negative_entries", "negative answers (4xx) in the index, at most --max-negative-entries"),
    ("access_verdicts", "--upstream-auth client: (token, repo) answers of the Hub remembered"),
    ("rate_limited_identities", "identities (tokens, anonymous, the service token) the Hub rate-limits now"),
)


def new():
    return [0] * WIDTH


class PerThread:
    """A counter list that any number of threads increment with `c[i] += n`: indexing
    reads and writes the calling thread's own list (created on its first use), so no
    thread's read-modify-write can overwrite another's, without a lock per increment.
    Reading `c[i]` gives only the calling thread's count; totals come from lists(). A
    thread that ends has its counts folded into one retired list, so short-lived threads
    (one per admin request) do not pile up lists."""

    def __init__(self):
        self._local = threading.local()
        self._lock = threading.RLock()
        self._lists = []
        self._retired = new()

    def _mine(self):
        c = new()
        holder = _Holder(c)
        f = weakref.finalize(holder, self._retire, c)    # when the thread's locals go
        f.atexit = False
        with self._lock:
            self._lists.append(c)
        self._local.h = holder
        return c

    def _retire(self, c):
        with self._lock:
            r = self._retired
            for i, v in enumerate(c):
                r[i] += v
            # by identity: list.remove compares by ==, and two threads' lists are equal
            # whenever their counts are (all zeros, say): it would drop the wrong one
            self._lists = [x for x in self._lists if x is not c]

    def __getitem__(self, i):
        try:
            return self._local.h.c[i]
        except AttributeError:
            return self._mine()[i]

    def __setitem__(self, i, v):
        try:
            self._local.h.c[i] = v
        except AttributeError:
            self._mine()[i] = v

    def __len__(self):
        return WIDTH

    def lists(self):
        """Copies of every thread's list and the retired totals, for summed()/merged()."""
        with self._lock:
            out = [list(self._retired)]
            out.extend(list(c) for c in tuple(self._lists))
        return out


class _Holder:
    """What a thread's local slot holds: its finalizer folds the list when the thread ends."""
    __slots__ = ("c", "__weakref__")

    def __init__(self, c):
        self.c = c


def summed(lists):
    """Element-wise sum of counter lists (one per reactor, pool or worker process)."""
    total = [0] * len(NAMES)
    for c in lists:
        for i, v in enumerate(c[:len(NAMES)]):
            total[i] += v
    return total


def merged(lists):
    """{name: total, "request_seconds": histograms} over counter lists; a PerThread
    stands for all of its threads' lists."""
    lists = [x for c in lists for x in (c.lists() if isinstance(c, PerThread) else (c,))]
    d = dict(zip(NAMES, summed(lists)))
    d["request_seconds"] = histograms(lists)
    return d
