"""The upstream requests session (upstream/session.py): redirects are not prepared for
following (pulsys follows them by hand), yet a redirect's connection is reused, and
~/.netrc is never read (its credentials would go to any host it names)."""

import http.server
import threading

import pytest

from pulsys.upstream.session import make_session


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    connections = []

    def setup(self):
        super().setup()
        _Handler.connections.append(self.client_address)

    def do_GET(self):
        body = b"moved"
        self.send_response(302)
        self.send_header("Location", "http://example.invalid/elsewhere")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *a):
        pass


@pytest.fixture
def server():
    _Handler.connections = []
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield "http://127.0.0.1:%d" % srv.server_address[1]
    srv.shutdown()
    srv.server_close()


def test_a_redirect_is_not_prepared_for_following_and_its_connection_serves_again(server, tmp_path, monkeypatch):
    netrc = tmp_path / "netrc"
    netrc.write_text("machine 127.0.0.1 login someone password secret\n")
    netrc.chmod(0o600)
    monkeypatch.setenv("NETRC", str(netrc))
    s = make_session(4)
    for _ in range(3):
        r = s.request("GET", server + "/a", stream=True, allow_redirects=False, timeout=5)
        assert r.status_code == 302 and r.next is None and r.content == b"moved"
        assert "Authorization" not in r.request.headers       # the netrc's login is not used
        r.close()
    assert len(_Handler.connections) == 1                     # one keep-alive connection
