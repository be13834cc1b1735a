"""Two tiny real HTTP origins on loopback for the SSRF tests: a Hub that answers every
/resolve of an LFS file with a 302 to whatever Location the test sets, and a body
origin that counts every TCP connection it accepts (so a test can prove that pulsys
never even connected)."""

import hashlib
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

COMMIT = "c" * 40


class _Quiet(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass


class _HubHandler(_Quiet):
    def do_HEAD(self):
        self._redirect()

    def do_GET(self):
        self._redirect()

    def _redirect(self):
        o = self.server.origin
        self.send_response(302)
        self.send_header("Location", o.location)
        self.send_header("X-Repo-Commit", COMMIT)
        self.send_header("X-Linked-Etag", '"%s"' % hashlib.sha256(o.body).hexdigest())
        self.send_header("X-Linked-Size", str(len(o.body)))
        self.send_header("Content-Length", "0")
        self.end_headers()


class _BodyHandler(_Quiet):
    def do_GET(self):
        body = self.server.origin.body
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def verify_request(self, request, client_address):
        with self.origin.lock:
            self.origin.connections += 1
        return True


class Origin:
    """One loopback origin: `kind` "hub" (302 to .location) or "body" (200 with .body)."""

    def __init__(self, kind, body, host="127.0.0.1", port=0):
        self.body = body
        self.location = ""
        self.connections = 0
        self.lock = threading.Lock()
        self.server = _Server((host, port), _HubHandler if kind == "hub" else _BodyHandler)
        self.server.origin = self
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05},
                                       daemon=True)
        self.thread.start()

    @property
    def port(self):
        return self.server.server_address[1]

    @property
    def url(self):
        return "http://%s:%d" % self.server.server_address[:2]

    def stop(self):
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=10)
