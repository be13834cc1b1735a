"""deploy/grafana/pulsys-dashboard.json against a running pulsys: every metric its
queries select (PromQL read by tests/admin/promql.py) is one that pulsys's /metrics
exports, after real hits, misses and errors through two worker processes and the fake
Hub; what a panel takes rate() of is a counter or a histogram's series. The dashboard
is importable: a Prometheus datasource variable that every query uses, panels on
Grafana's 24-column grid without overlaps."""

import json
import os

import pytest
import requests
from prometheus_client.parser import text_string_to_metric_families

from tests.admin.promql import PromQLError, label_values_metric, metric_names
from tests.auth.conftest import admin_url
from tests.conftest import ROOT, wait_until

DASHBOARD = os.path.join(ROOT, "deploy", "grafana", "pulsys-dashboard.json")
DATASOURCE = {"type": "prometheus", "uid": "${DS_PROMETHEUS}"}
BODY = bytes(range(256)) * 1024


def load():
    with open(DASHBOARD, encoding="utf-8") as f:
        return json.load(f)


def queried(dash):
    """{metric: under rate()/increase()} over every target of every panel and the
    templating's label_values() queries."""
    out = {}

    def note(names):
        for name, counted in (names or {}).items():
            out[name] = out.get(name, False) or counted
    for p in dash["panels"]:
        for t in p.get("targets", []):
            note(metric_names(t["expr"]))
    for v in dash["templating"]["list"]:
        if v["type"] == "query":
            q = v["query"]["query"] if isinstance(v["query"], dict) else v["query"]
            note(label_values_metric(q))
    return out


def exported(text):
    """{sample name: its family's type} of a Prometheus text exposition: counters'
    samples end in _total, a histogram's in _bucket, _sum and _count."""
    return {s.name: f.type for f in text_string_to_metric_families(text) for s in f.samples}


def problems(dash, samples):
    """What in the dashboard's queries the exposition does not back: -> [message]."""
    out = []
    for name, counted in sorted(queried(dash).items()):
        if name not in samples:
            out.append("%s: not exported" % name)
        elif counted and samples[name] not in ("counter", "histogram"):
            out.append("%s: a %s under rate()/increase()" % (name, samples[name]))
    return out


# -- the extractor ---------------------------------------------------------------------------------


def test_the_extractor_finds_the_metrics_under_functions_aggregations_and_matchers():
    q = ('histogram_quantile(0.99, sum by (le, route) (rate(pulsys_request_duration_seconds_bucket'
         '{instance=~"$instance", route="warm"}[$__rate_interval])))')
    assert metric_names(q) == {"pulsys_request_duration_seconds_bucket": True}
    q = ("sum(rate(a_total[5m])) / clamp_min(sum(rate(a_total[5m])) + sum without (job) (increase(b_total[1h:1m])), "
         "1e-9)")
    assert metric_names(q) == {"a_total": True, "b_total": True}
    q = ("sum by (instance) (pulsys_fills_in_flight offset 5m) > bool 0.5 "
         "and on (instance) group_left (version) pulsys_backend_info")
    assert metric_names(q) == {"pulsys_fills_in_flight": False, "pulsys_backend_info": False}
    q = 'label_replace(max(x:recorded), "dst", "$1", "src", "(.*)") unless sum(rate(y_sum[1m])) by (route)'
    assert metric_names(q) == {"x:recorded": False, "y_sum": True}
    assert label_values_metric("label_values(pulsys_uptime_seconds, instance)") == {"pulsys_uptime_seconds": False}


@pytest.mark.parametrize("expr", [
    '{__name__=~"pulsys_.*_total"}',             # names chosen by a regex: nothing to check
    "sum(rate(pulsys_requests_total[5m])",        # unbalanced
    "rat(pulsys_requests_total[5m])",             # no such function
    "sum(rate($metric[5m]))",                     # a variable where the name would be
    'pulsys_requests_total{route="warm}',          # unterminated string
    "rate(pulsys_requests_total[5 minutes])",     # not a duration
    "sum by (route)",                             # an aggregation without its argument
    "1 + 2",                                      # selects nothing
])
def test_the_extractor_refuses_what_it_cannot_check(expr):
    with pytest.raises(PromQLError):
        metric_names(expr)


# -- the dashboard ---------------------------------------------------------------------------------


def test_the_dashboard_is_importable_by_grafana():
    dash = load()
    assert isinstance(dash["schemaVersion"], int) and dash["schemaVersion"] >= 36
    assert dash["uid"] and dash["title"]
    ds = [v for v in dash["templating"]["list"] if v["name"] == "DS_PROMETHEUS"]
    assert ds and ds[0]["type"] == "datasource" and ds[0]["query"] == "prometheus"
    ids = [p["id"] for p in dash["panels"]]
    assert len(ids) == len(set(ids))
    cells = set()
    for p in dash["panels"]:
        g = p["gridPos"]
        assert all(isinstance(g[k], int) for k in ("x", "y", "w", "h")) and 0 <= g["x"] and g["x"] + g["w"] <= 24
        mine = {(x, y) for x in range(g["x"], g["x"] + g["w"]) for y in range(g["y"], g["y"] + g["h"])}
        assert not mine & cells, "panel %r overlaps another" % p["title"]
        cells |= mine
        if p["type"] == "row":
            continue
        assert p["datasource"] == DATASOURCE and p["targets"], p["title"]
        refs = [t["refId"] for t in p["targets"]]
        assert len(refs) == len(set(refs)), p["title"]
        for t in p["targets"]:
            assert t["datasource"] == DATASOURCE and t["expr"].strip(), p["title"]
            assert '$instance' in t["expr"], "%r: every query follows the instance variable" % p["title"]
    kinds = {p["type"] for p in dash["panels"]}
    assert {"timeseries", "stat", "gauge", "heatmap"} <= kinds


def test_the_check_fails_a_panel_that_queries_a_metric_pulsys_does_not_export():
    samples = {"pulsys_requests_total": "counter", "pulsys_open_connections": "gauge"}
    dash = {"templating": {"list": []}, "panels": [{"targets": [
        {"expr": 'sum(rate(pulsys_requests_total[5m])) + sum(rate(pulsys_no_such_thing_total[5m]))'},
        {"expr": "rate(pulsys_open_connections[5m])"}]}]}
    assert problems(dash, samples) == ["pulsys_no_such_thing_total: not exported",
                                       "pulsys_open_connections: a gauge under rate()/increase()"]


@pytest.mark.parametrize("listeners", [2])
def test_every_metric_the_dashboard_queries_is_exported_by_a_running_pulsys(hub, make_server, listeners):
    hub.add_repo("org/m", files={"model.safetensors": BODY})
    srv = make_server(hub, admin_listen="127.0.0.1:0")
    url = srv.url + "/org/m/resolve/main/model.safetensors"
    for _ in range(3):                                    # a miss that fills, then hits
        assert requests.get(url, timeout=30).content == BODY
    assert requests.get(srv.url + "/org/m/resolve/main/missing.txt", timeout=10).status_code == 404
    hub.faults.status(500, times=100, match="/org/broken/")
    assert requests.get(srv.url + "/org/broken/resolve/main/x.bin", timeout=30).status_code >= 500
    base = admin_url(srv)

    def scraped():
        text = requests.get(base + "/metrics", timeout=10).text
        fams = {f.name: f for f in text_string_to_metric_families(text)}
        value = {s.name: s.value for f in fams.values() for s in f.samples if not s.labels}
        moved = value.get("pulsys_cache_hits_total", 0) >= 2 and value.get("pulsys_cache_misses_total", 0) >= 1 \
            and value.get("pulsys_upstream_errors_total", 0) >= 1
        return text if moved else None
    assert wait_until(scraped, timeout=10), requests.get(base + "/metrics", timeout=10).text
    samples = exported(scraped())
    names = queried(load())
    assert len(names) >= 30 and "pulsys_request_duration_seconds_bucket" in names
    assert problems(load(), samples) == []
