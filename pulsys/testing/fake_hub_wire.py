"""HTTP/1.1 plumbing shared by the fake Hub's two origins (Hub and CDN).

Every response carries Content-Length or is chunked, so keep-alive works with
requests/httpx; `Connection: close` from the client is honoured. Blob bodies go
through `send_blob`, which counts bytes per blob and applies the fault plan
(fake_hub_faults). Stdlib only.
"""

import json
import re
import socket
import struct
from http.server import BaseHTTPRequestHandler
from urllib.parse import quote

PIECE = 1 << 20  # bytes per send() when unthrottled
_RANGE = re.compile(r"^\s*bytes\s*=\s*(\d*)\s*-\s*(\d*)\s*$", re.IGNORECASE)
_UNSAFE_HEADER_CHARS = re.compile(r"[\x00-\x1f\x7f]")


def parse_range(header, size):
    """One `Range` header against a body of `size` bytes (§4.2).

    Returns None (ignore it, answer 200: absent, malformed or multi-range),
    "unsatisfiable" (416), or (start, end) inclusive with the end clamped to EOF.
    """
    if not header:
        return None
    m = _RANGE.match(header)
    if not m or (not m.group(1) and not m.group(2)):
        return None
    first, last = m.group(1), m.group(2)
    if not first:  # suffix: the last n bytes
        n = int(last)
        if n == 0 or size == 0:
            return "unsatisfiable"
        return (max(0, size - n), size - 1)
    start = int(first)
    end = int(last) if last else size - 1
    if last and end < start:
        return None
    if start >= size:
        return "unsatisfiable"
    return (start, min(end, size - 1))


def content_disposition(filename):
    ascii_name = filename.encode("ascii", "replace").decode().replace('"', "_").replace("?", "_")
    return "inline; filename*=UTF-8''%s; filename=\"%s\";" % (quote(filename), ascii_name)


def header_value(value):
    """Header values are latin-1 on the wire and must never smuggle CR/LF."""
    value = _UNSAFE_HEADER_CHARS.sub("", str(value))
    return value.encode("latin-1", "replace").decode("latin-1")


class FakeHandler(BaseHTTPRequestHandler):
    """Base of both origins: records the request, applies `status` faults, then `route()`."""

    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True
    server_label = "?"
    server_version = "FakeHub/1.0"
    sys_version = ""

    def log_message(self, format, *args):
        pass

    def do_GET(self):
        self._dispatch()

    do_HEAD = do_POST = do_PUT = do_DELETE = do_OPTIONS = do_PATCH = do_GET

    def _dispatch(self):
        self.hub = self.server.hub
        self.raw_path, _, self.raw_query = self.path.partition("?")
        self.hub._record(self.server_label, self.command, self.raw_path, self.raw_query, self.headers)
        try:
            self.body = self._read_request_body()
        except ValueError:
            self.close_connection = True
            self.send_json(400, {"error": "malformed request body"})
            return
        try:
            delay = self.hub.faults.take_delay(self.path)
            if delay and self.hub._stop_event.wait(delay):
                return
            fault = self.hub.faults.take_status(self.path)
            if fault:
                code, headers = fault
                self.send_json(code, {"error": "injected fault: status %d" % code}, headers)
            else:
                self.route()
        except OSError:  # the peer went away, or a fault closed the socket under us
            self.close_connection = True

    def _read_request_body(self):
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            chunks = []
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    return b"".join(chunks)
                chunks.append(self.rfile.read(size))
                self.rfile.readline()
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length > 0 else b""

    def route(self):
        raise NotImplementedError

    # -- responses -------------------------------------------------------

    def send_head(self, status, headers, content_length=None, chunked=False):
        self.send_response(status)
        for name, value in headers:
            self.send_header(name, header_value(value))
        if chunked:
            self.send_header("Transfer-Encoding", "chunked")
        elif content_length is not None:
            self.send_header("Content-Length", str(content_length))
        if self.close_connection:
            self.send_header("Connection", "close")
        self.end_headers()

    def send_simple(self, status, headers, body=b""):
        """A small non-blob response; HEAD gets the same head without the body."""
        self.send_head(status, headers, content_length=len(body))
        if self.command != "HEAD" and body:
            self.wfile.write(body)

    def send_json(self, status, obj, headers=()):
        body = json.dumps(obj).encode()
        self.send_simple(status, [("Content-Type", "application/json; charset=utf-8"), *headers], body)

    def send_blob(self, status, headers, payload, blob_key, chunked=False):
        """Send `payload` (bytes or memoryview) as the body of blob `blob_key`, applying faults."""
        self.send_head(status, headers, content_length=None if chunked else len(payload), chunked=chunked)
        if self.command == "HEAD":
            return
        plan = self.hub.faults.take_body(self.path)
        if plan.kind == "corrupt" and len(payload):
            flipped = bytearray(payload)
            flipped[len(flipped) // 2] ^= 0xFF
            payload = flipped
        view = memoryview(payload)
        self._fetch_counted = False
        self.hub._sending(blob_key, 1)
        try:
            if plan.kind in ("drop", "reset", "hang"):
                cut = min(plan.nbytes, len(view))
                self._send_paced(view[:cut], plan, chunked, blob_key)
                if plan.kind == "drop":
                    self.connection.shutdown(socket.SHUT_WR)
                    self.close_connection = True
                    return
                if plan.kind == "reset":
                    self._abort_with_rst()
                    return
                if self.hub._stop_event.wait(plan.seconds):
                    raise ConnectionAbortedError("fake hub stopping")
                view = view[cut:]
            self._send_paced(view, plan, chunked, blob_key)
        finally:
            self.hub._sending(blob_key, -1)
        if chunked:
            self.wfile.write(b"0\r\n\r\n")

    def _send_paced(self, view, plan, chunked, blob_key):
        rate = plan.rate
        piece = PIECE if not rate else max(1, min(64 * 1024, int(rate / 20)))
        clock = self.hub._monotonic
        started = clock()
        sent = 0
        while sent < len(view):
            chunk = view[sent:sent + piece]
            # counted before the write: a client that has read the whole body may ask the
            # counters at once, before this thread runs again
            new_fetch = not self._fetch_counted
            self.hub._count_body(blob_key, len(chunk), new_fetch=new_fetch)
            self._fetch_counted = True
            try:
                if chunked:
                    self.wfile.write(b"%x\r\n" % len(chunk) + bytes(chunk) + b"\r\n")
                else:
                    self.wfile.write(chunk)
            except OSError:
                self.hub._count_body(blob_key, -len(chunk), new_fetch=False)
                if new_fetch:
                    self.hub._uncount_fetch(blob_key)
                    self._fetch_counted = False
                raise
            sent += len(chunk)
            if rate:
                delay = started + sent / rate - clock()
                if delay > 0 and self.hub._stop_event.wait(delay):
                    raise ConnectionAbortedError("fake hub stopping")

    def _abort_with_rst(self):
        """close() with SO_LINGER {on, 0} sends RST instead of FIN. The rfile holds a
        reference to the socket (makefile), so it must be closed first or the close is deferred."""
        self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.rfile.close()
        self.connection.close()
        self.close_connection = True
