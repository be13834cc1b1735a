"""What /metrics adds to the counters and gauges of a /debug/vars snapshot: the request
latency histograms per route kind (recorded by the reactors into their counter lists,
metrics.observe) and the quota in use as a ratio."""

from prometheus_client.core import GaugeMetricFamily, HistogramMetricFamily


def extra_families(doc):
    hist = doc.get("request_seconds")
    if hist:
        fam = HistogramMetricFamily(
            "pulsys_request_duration_seconds",
            "data-plane request latency by route kind: warm (a hit served from the cache), "
            "cold (a /resolve that asked upstream), api (an /api/ call); from the request head "
            "parsed to the last byte handed to the kernel", labels=["route"])
        for kind, h in sorted(hist.items()):
            fam.add_metric([kind], [(str(le), n) for le, n in h["buckets"]], sum_value=h["sum"])
        yield fam
    used, limit = doc.get("cache_bytes", 0) + doc.get("cache_reserved_bytes", 0), doc.get("cache_max_bytes", 0)
    yield GaugeMetricFamily("pulsys_cache_quota_used_ratio",
                            "(cache_bytes + cache_reserved_bytes) / --cache-max-bytes; 0 when unlimited",
                            value=(used / limit) if limit else 0.0)
