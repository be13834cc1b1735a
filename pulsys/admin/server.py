"""Admin HTTP listener: GET /healthz, GET /debug/vars (JSON counters summed over every
reactor, worker process and the fill pool) and GET /metrics (the same snapshot in the
Prometheus text format), open to anyone who can reach the listener; everything else is
the JSON API in admin/api.py (admin key required, docs/admin.md). Runs on its own
threads; never touches a reactor."""

import json
import selectors
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, InfoMetricFamily
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from pulsys import metrics as M
from pulsys.admin.console import Console
from pulsys.admin.metrics_export import extra_families
from pulsys.http1.heads import clean

MAX_BODY = 64 * 1024        # admin requests are small JSON documents


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
        yield from extra_families(d)
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

    timeout = 30            # seconds a client may take to send its request

    def _json(self, status, doc, headers=()):
        body = json.dumps(doc, indent=1, sort_keys=True).encode() + b"\n"
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.send_header("X-Content-Type-Options", "nosniff")
        names = {k.lower() for k, _ in headers}
        if status >= 400 and "x-error-message" not in names and isinstance(doc.get("error"), str):
            headers = tuple(headers) + (("X-Error-Message", doc["error"]),)
        for k, v in headers:
            self.send_header(k, clean(v).encode("latin-1", "replace").decode("latin-1"))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _api(self):
        """Any route of the JSON API (admin/api.py), or 404."""
        if self.headers.get("Transfer-Encoding"):
            self.close_connection = True
            return self._json(411, {"error": "send the request body with Content-Length"})
        try:
            n = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            n = -1
        if n < 0:
            self.close_connection = True
            return self._json(400, {"error": "bad Content-Length"})
        if n > MAX_BODY:
            self.close_connection = True
            return self._json(413, {"error": "request body larger than %d bytes" % MAX_BODY})
        body = self.rfile.read(n) if n else b""
        api = self.server.api
        res = api.handle(self.command, self.path, self.headers.get("Authorization"), body) if api else None
        if res is None:
            return self._json(404, {"error": "not found"})
        self._json(*res)

    def do_GET(self):
        path = self.path.split("?", 1)[0]
        if path == "/healthz":
            self._json(200, {"status": "ok"})
        elif path == "/readyz":
            ok, checks = self.server.ready_fn() if self.server.ready_fn else (True, {})
            self._json(200 if ok else 503, {"status": "ready" if ok else "not ready", "checks": checks})
        elif self.server.console is not None and self.server.console.owns(path):
            self.server.console.handle(self)
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
            self._api()

    do_HEAD = do_GET
    do_PUT = do_PATCH = do_DELETE = _api

    def do_POST(self):
        if self.server.console is not None and self.server.console.owns(self.path.split("?", 1)[0]):
            return self.server.console.handle(self)
        self._api()


class AdminServer:
    def __init__(self, host, port, vars_fn, api=None, ready_fn=None):
        self.httpd = ThreadingHTTPServer((host, port), _Handler)
        self.httpd.daemon_threads = True
        self.httpd.vars_fn = vars_fn
        self.httpd.api = api            # admin.api.AdminApi, or None: no JSON API
        self.httpd.ready_fn = ready_fn  # () -> (ready, {check: bool}) for /readyz (admin/readiness.py)
        self.httpd.console = Console(api) if api is not None else None    # the web console
        # handle_request() waits at most this for the connection select() saw (it may be
        # gone by then); serve_forever is not used: it polls its stop flag (0.5 s by
        # default), this loop sleeps until a connection or stop() comes
        self.httpd.timeout = 1.0
        self._wake_r, self._wake_w = socket.socketpair()
        self.thread = threading.Thread(target=self._serve, name="pulsys-admin", daemon=True)
        self.started = time.time()

    def _serve(self):
        with selectors.DefaultSelector() as sel:
            sel.register(self.httpd.socket, selectors.EVENT_READ)
            sel.register(self._wake_r, selectors.EVENT_READ)
            while True:
                for key, _ in sel.select():
                    if key.fileobj is self._wake_r:
                        return
                self.httpd.handle_request()

    @property
    def address(self):
        return self.httpd.server_address

    def start(self):
        self.thread.start()
        return self

    def stop(self):
        try:
            self._wake_w.send(b"x")
        except OSError:            # stopped before
            return
        if self.thread.is_alive():
            self.thread.join(timeout=5)
        self.httpd.server_close()
        self._wake_r.close()
        self._wake_w.close()
