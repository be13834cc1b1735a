"""/metrics latency histograms and /healthz, /readyz on the admin listener, against a
running pulsys (in-process for --listeners 1, real worker processes for 2) and the fake
Hub: the histogram counts move with real warm, cold and API requests."""

import psycopg2
import pytest
import requests
from prometheus_client.parser import text_string_to_metric_families

from tests.auth.conftest import admin_url, call
from tests.conftest import wait_until

BODY = bytes(range(256)) * 1024          # 256 KiB, LFS
WARM = 5


def histogram(base):
    """{route: {"count": n, "sum": s, "buckets": [(le, n), ...]}} from /metrics."""
    text = requests.get(base + "/metrics", timeout=10).text
    fams = {f.name: f for f in text_string_to_metric_families(text)}
    out = {}
    for s in fams["pulsys_request_duration_seconds"].samples:
        h = out.setdefault(s.labels["route"], {"buckets": []})
        if s.name.endswith("_bucket"):
            h["buckets"].append((float(s.labels["le"]), s.value))
        elif s.name.endswith("_count"):
            h["count"] = s.value
        elif s.name.endswith("_sum"):
            h["sum"] = s.value
    return out, fams


@pytest.mark.parametrize("listeners", [1, 2])
def test_latency_histograms_count_warm_cold_and_api_requests(hub, make_server, listeners):
    hub.add_repo("org/m", files={"model.safetensors": BODY, "config.json": b'{"a": 1}\n'})
    srv = make_server(hub, admin_listen="127.0.0.1:0")
    base = admin_url(srv)
    before, fams = histogram(base)
    assert set(before) == {"warm", "cold", "api"} and all(h["count"] == 0 for h in before.values())
    for name in ("pulsys_upstream_body_bytes", "pulsys_upstream_errors", "pulsys_fills_in_flight",
                 "pulsys_cache_bytes", "pulsys_cache_max_bytes", "pulsys_cache_quota_used_ratio"):
        assert name in fams, name

    url = srv.url + "/org/m/resolve/main/model.safetensors"
    assert requests.get(url, timeout=30).content == BODY                  # cold: fetched from the Hub
    for _ in range(WARM):
        assert requests.get(url, timeout=10).content == BODY              # warm hits
    assert requests.get(srv.url + "/api/models/org/m", timeout=10).status_code == 200
    fetched = hub.total_body_bytes()

    def moved():
        h, _ = histogram(base)
        return h if h["warm"]["count"] >= WARM and h["cold"]["count"] >= 1 and h["api"]["count"] >= 1 else None
    assert wait_until(moved, timeout=5), histogram(base)[0]
    after = moved()
    for route, h in after.items():
        counts = [n for _, n in sorted(h["buckets"])]
        assert counts == sorted(counts), "buckets are cumulative"
        assert h["buckets"][-1][0] == float("inf") and counts[-1] == h["count"]
        assert h["sum"] >= 0
    assert after["warm"]["count"] == WARM
    # a cold request waited for the Hub, so its latency is above the fastest bucket
    assert after["cold"]["sum"] > 0
    _, fams = histogram(base)
    up = {s.name: s.value for s in fams["pulsys_upstream_body_bytes"].samples}
    assert up["pulsys_upstream_body_bytes_total"] >= len(BODY) and fetched >= len(BODY)


@pytest.mark.parametrize("listeners", [1, 2])
def test_healthz_and_readyz(hub, make_server, listeners):
    srv = make_server(hub, admin_listen="127.0.0.1:0")
    base = admin_url(srv)
    st, _, doc = call(base + "/healthz")
    assert st == 200 and doc == {"status": "ok"}
    st, _, doc = call(base + "/readyz")
    assert st == 200 and doc == {"status": "ready", "checks": {"index": True, "serving": True, "store": True}}


def test_readyz_is_503_when_the_store_does_not_answer(hub, make_server, postgres):
    url = postgres.create_database()
    srv = make_server(hub, admin_listen="127.0.0.1:0", db=url)
    base = admin_url(srv)
    assert call(base + "/readyz")[0] == 200
    dbname = url.rsplit("/", 1)[1]

    def sql(stmt):
        conn = psycopg2.connect(postgres.url("postgres"), connect_timeout=5)
        conn.autocommit = True
        try:
            with conn.cursor() as cur:
                cur.execute(stmt)
        finally:
            conn.close()
    # no new connections to pulsys's database, and its open one cut: the store is gone
    sql('ALTER DATABASE "%s" ALLOW_CONNECTIONS false' % dbname)
    try:
        sql("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '%s'" % dbname)
        st, _, doc = call(base + "/readyz")
        assert st == 503 and doc["checks"] == {"index": True, "serving": True, "store": False}
        assert call(base + "/healthz")[0] == 200          # alive all the same
    finally:
        sql('ALTER DATABASE "%s" ALLOW_CONNECTIONS true' % dbname)
    assert call(base + "/readyz")[0] == 200


def test_readyz_is_503_when_a_reactor_has_stopped(hub, make_server):
    srv = make_server(hub, admin_listen="127.0.0.1:0")
    base = admin_url(srv)
    assert call(base + "/readyz")[0] == 200
    srv.reactors[0].stop()
    assert wait_until(lambda: not srv.threads[0].is_alive(), timeout=5)
    st, _, doc = call(base + "/readyz")
    assert st == 503 and doc["checks"]["serving"] is False and doc["status"] == "not ready"
