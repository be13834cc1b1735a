"""Admin HTTP listener: GET /healthz and GET /debug/vars (JSON counters summed over
every reactor and the fill pool). Runs on its own thread; never touches a reactor."""

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


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
        else:
            self._json(404, {"error": "not found"})

    do_HEAD = do_GET


class AdminServer:
    def __init__(self, host, port, vars_fn):
        self.httpd = ThreadingHTTPServer((host, port), _Handler)
        self.httpd.daemon_threads = True
        self.httpd.vars_fn = vars_fn
        self.thread = threading.Thread(target=self.httpd.serve_forever, name="pulsys-admin",
                                       kwargs={"poll_interval": 0.5}, daemon=True)
        self.started = time.time()

    @property
    def address(self):
        return self.httpd.server_address

    def start(self):
        self.thread.start()
        return self

    def stop(self):
        self.httpd.shutdown()
        self.httpd.server_close()
