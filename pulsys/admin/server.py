"""Admin HTTP listener: GET /healthz, GET /debug/vars (JSON counters summed over every
reactor, worker process and the fill pool) and GET /metrics (the same snapshot in the
Prometheus text format). Runs on its own thread; never touches a reactor."""

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, InfoMetricFamily
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from pulsys import metrics as M


class _Snapshot:
    """A prometheus_client collector over one /debug/vars snapshot."""

    def __init__(self, doc):
        self.doc = doc

    def collect(self):
        d = self.doc
        for name in M.NAMES:
            yield CounterMetricFamily("pulsys_" + name, name.replace("_", " "), value=d.get(name, 0))
        for name, doc in M.GAUGES:
            yield GaugeMetricFamily("pulsys_" + name, doc, value=d.get(name, 0))
        yield GaugeMetricFamily("pulsys_uptime_seconds", "seconds since start",
                                value=d.get("uptime_seconds", 0))
        workers = d.get("workers")
        if workers:
            yield CounterMetricFamily("pulsys_worker_restarts", "worker processes restarted",
                                      value=sum(w["restarts"] for w in workers))
        yield InfoMetricFamily("pulsys_backend", "reactor backend and body sender",
                               value={"backend": str(d.get("backend")), "sender": str(d.get("sender")),
                                      "version": str(d.get("version"))})


def metrics_text(doc):
    """Prometheus text exposition of a /debug/vars snapshot."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Snapshot(doc))
    return generate_latest(registry)


class _Handler(BaseHTTPRequestHandler):
    server_version = "pulsys-admin"
    sys_version = ""

    def log_message(self, fmt, *args):
        pass

    def _json(self, status, doc):
        body = json.dumps(doc, indent=1, sort_keys=True).encode() + b"\n"
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.send_header("X-Content-Type-Options", "nosniff")
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def do_GET(self):
        path = self.path.split("?", 1)[0]
        if path == "/healthz":
            self._json(200, {"status": "ok"})
        elif path == "/debug/vars":
            self._json(200, self.server.vars_fn())
        elif path == "/metrics":
            body = metrics_text(self.server.vars_fn())
            self.send_response(200)
            self.send_header("Content-Type", CONTENT_TYPE_LATEST)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)
        else:
            self._json(404, {"error": "not found"})

    do_HEAD = do_GET


class AdminServer:
    def __init__(self, host, port, vars_fn):
        self.httpd = ThreadingHTTPServer((host, port), _Handler)
        self.httpd.daemon_threads = True
        self.httpd.vars_fn = vars_fn
        self.thread = threading.Thread(target=self.httpd.serve_forever, name="pulsys-admin",
                                       kwargs={"poll_interval": 0.1}, daemon=True)
        self.started = time.time()

    @property
    def address(self):
        return self.httpd.server_address

    def start(self):
        self.thread.start()
        return self

    def stop(self):
        if self.thread.is_alive():      # shutdown() waits for serve_forever, which may never have run
            self.httpd.shutdown()
        self.httpd.server_close()
