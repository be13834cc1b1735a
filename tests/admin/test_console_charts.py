"""The console's charts of the throughput history in a real headless Chromium: after a
cold download and warm hits, the dashboard draws the last hour and the last day as
inline SVG (console.js, from /api/v1/history) with the API's values, and the page
reports no Content-Security-Policy violation (a watcher that does see one, provoked at
the end, proves the watch works)."""

import requests
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

from tests.admin.browser import log_in, watch_csp
from tests.admin.helpers import get_file
from tests.auth.conftest import admin_url, call
from tests.conftest import wait_until

BODY = bytes(range(256)) * 2048          # 512 KiB
WAIT = 30                                 # seconds any one step in the browser may take
CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; "
       "form-action 'self'; frame-ancestors 'none'; base-uri 'none'")


def series(b, selector):
    """(number of points, the chart's top value, the points' y) of one polyline."""
    el = b.find_element(By.CSS_SELECTOR, selector)
    ys = [float(p.split(",")[1]) for p in el.get_attribute("points").split()]
    return int(el.get_attribute("data-points")), float(el.get_attribute("data-max")), ys


def test_the_dashboard_draws_the_history_as_svg_without_csp_violations(hub, auth_server, browser):
    hub.add_repo("org/charts", files={"model.safetensors": BODY})
    server, admin, read = auth_server(history_interval="0.1")
    base = admin_url(server)
    for _ in range(3):                     # a miss that fills, then two hits
        assert get_file(server, "org/charts", "model.safetensors", read) == BODY

    def recorded():
        st, _, doc = call(base + "/api/v1/history", key=admin)
        assert st == 200
        hits = sum(x["hits"] for x in doc["hour"]["buckets"])
        fills = sum(x["fills_started"] for x in doc["hour"]["buckets"])
        served = sum(x["bytes_served"] for x in doc["hour"]["buckets"])
        # all three answers counted (a body's bytes are counted once it is sent)
        return doc if hits >= 2 and fills >= 1 and served >= 3 * len(BODY) else None
    assert wait_until(recorded, timeout=10)
    doc = recorded()

    b, wait = browser, WebDriverWait(browser, WAIT, poll_frequency=0.1)
    watch_csp(b)
    log_in(b, base, admin, wait)
    wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "#chart-day-fills svg polyline"))

    n, top, ys = series(b, "#chart-hour-throughput polyline.served")
    assert n == 60 and len(ys) == 60
    # the chart's top is the busiest minute of either line, in bytes per second
    want = max(max(x["bytes_served"], x["upstream_body_bytes"]) for x in doc["hour"]["buckets"]) / 60
    assert abs(top - want) < 1e-6 * want
    assert min(ys) < max(ys)               # the traffic rises above the baseline
    n, _, _ = series(b, "#chart-hour-throughput polyline.upstream")
    assert n == 60
    n, top, ys = series(b, "#chart-hour-hit_ratio polyline.ratio")
    assert top == 100 and n == sum(1 for x in doc["hour"]["buckets"] if x["hit_ratio"] is not None) >= 1
    assert len(b.find_elements(By.CSS_SELECTOR, "#chart-hour-hit_ratio circle.dot")) == n
    n, top, _ = series(b, "#chart-hour-fills polyline.fills")
    assert n == 60 and top >= 1
    n, _, _ = series(b, "#chart-day-throughput polyline.served")
    assert n == 96
    assert len(b.find_elements(By.CSS_SELECTOR, "figure.chart svg")) == 6
    legend = b.find_element(By.CSS_SELECTOR, "#chart-hour-throughput .legend").text
    assert "served" in legend and "from upstream" in legend

    assert b.execute_script("return window.cspViolations") == []
    r = requests.get(base + "/console/login", timeout=10)
    assert r.headers["Content-Security-Policy"] == CSP
    # the watch sees a violation when there is one: an inline script, which the CSP refuses
    b.execute_script("var s = document.createElement('script'); s.textContent = 'window.ran = 1';"
                     "document.body.appendChild(s);")
    wait.until(lambda d: d.execute_script("return window.cspViolations.length") > 0)
    assert b.execute_script("return window.ran") is None
