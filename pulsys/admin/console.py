"""The web console on the admin listener: server-rendered HTML pages under /console/,
one static script and one stylesheet (admin/static/), no build step.

Every page and action goes through the JSON API in-process (AdminApi.handle with the
session's key id), so the console can do exactly what the admin key that logged in can
do, and the audit log names that key.

Security (docs/admin.md, "The console"):
- login with an admin key; the session cookie is HttpOnly, SameSite=Strict, Path=/console,
  and Secure when the request came through a proxy that says `X-Forwarded-Proto: https`
  (the listener itself speaks plain HTTP, so it cannot know otherwise); the server keeps
  only the sha256 of the session id (admin/sessions.py);
- every POST carries a synchronizer token bound to the session (the login form: one bound
  to a short-lived cookie), and a POST whose Origin or Sec-Fetch-Site says another site
  sent it is refused before anything else;
- Content-Security-Policy with no inline script or style, frame-ancestors 'none',
  X-Frame-Options, nosniff, Referrer-Policy same-origin, and Cache-Control: no-store on every page;
- everything from the store is HTML-escaped where it is rendered (console_pages.py).
"""

import json
import os
import secrets
import urllib.parse
from http.cookies import CookieError, SimpleCookie

from pulsys.admin import console_pages as P
from pulsys.admin.errors import AdminError
from pulsys.admin.sessions import Sessions, same_token
from pulsys.auth.keys import key_id
from pulsys.http1.heads import clean

COOKIE = "pulsys_session"
LOGIN_COOKIE = "pulsys_login"       # binds the login form's token to this browser
MAX_FORM = 64 * 1024
STATIC_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "static")
STATIC_TYPES = {".js": "text/javascript; charset=utf-8", ".css": "text/css; charset=utf-8"}

SECURITY_HEADERS = (
    ("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; "
                                "img-src 'self'; connect-src 'self'; form-action 'self'; "
                                "frame-ancestors 'none'; base-uri 'none'"),
    ("X-Frame-Options", "DENY"),
    ("X-Content-Type-Options", "nosniff"),
    # same-origin, not no-referrer: with no-referrer Chromium sends `Origin: null` on our own
    # form posts, and the Origin check below could not tell them from a sandboxed attacker
    ("Referrer-Policy", "same-origin"),
    ("Cross-Origin-Opener-Policy", "same-origin"),
    ("Cross-Origin-Resource-Policy", "same-origin"),
)


class Console:
    def __init__(self, api):
        self.api = api              # admin.api.AdminApi
        self.sessions = Sessions()
        self.static = {}
        for name in os.listdir(STATIC_DIR):
            ext = os.path.splitext(name)[1]
            if ext in STATIC_TYPES:
                with open(os.path.join(STATIC_DIR, name), "rb") as f:
                    self.static[name] = (STATIC_TYPES[ext], f.read())
        self.pages = {
            "/console/": P.dashboard, "/console/repos": P.repos, "/console/jobs": P.jobs,
            "/console/keys": P.keys, "/console/audit": P.audit,
        }
        self.actions = {
            "/console/keys": P.create_key,
            "/console/keys/revoke": P.revoke_key, "/console/jobs": P.start_job,
            "/console/jobs/cancel": P.cancel_job, "/console/repos/purge": P.purge_repo,
        }
        self.feeds = {"/console/api/jobs": "/api/v1/jobs", "/console/api/stats": "/api/v1/stats",
                      "/console/api/history": "/api/v1/history"}

    @staticmethod
    def owns(path):
        return path == "/" or path == "/console" or path.startswith("/console/")

    # -- HTTP ---------------------------------------------------------------------------

    def handle(self, h):
        """Answer one request of the BaseHTTPRequestHandler h; never raises."""
        path, _, qs = h.path.partition("?")
        query = urllib.parse.parse_qs(qs)
        try:
            if h.command in ("GET", "HEAD"):
                self._get(h, path, query)
            elif h.command == "POST":
                self._post(h, path)
            else:
                raise AdminError(405, "method %s not allowed here" % h.command)
        except AdminError as e:
            self._send(h, e.status, P.error_page(e.status, e.message, self._session(h)))
        except Exception as e:        # a bug: one clear page, the listener keeps serving
            h.log_error("console: %r", e)
            self._send(h, 500, P.error_page(500, "internal error in the console: %s" % type(e).__name__, None))

    def _get(self, h, path, query):
        if path in ("/", "/console"):
            return self._redirect(h, "/console/")
        if path.startswith("/console/static/"):
            found = self.static.get(path[len("/console/static/"):])
            if found is None:
                raise AdminError(404, "no such file")
            return self._send(h, 200, found[1], found[0], cache="no-cache")
        if path == "/console/login":
            token = secrets.token_urlsafe(24)
            return self._send(h, 200, P.login_page(token, None),
                              cookies=[self._cookie(h, LOGIN_COOKIE, token, 600)])
        if path in self.feeds:
            s = self._session(h)
            if s is None:
                return self._send(h, 401, json.dumps({"error": "log in again"}).encode(), "application/json")
            res = self.call(s, "GET", self.feeds[path])
            status, doc = (404, {"error": "not available on this server"}) if res is None else res[:2]
            return self._send(h, status, json.dumps(doc).encode(), "application/json")
        page = self.pages.get(path)
        if page is None:
            raise AdminError(404, "no such page: %s" % path)
        s = self._session(h)
        if s is None:
            return self._redirect(h, "/console/login")
        self._send(h, 200, page(self, s, query))

    def _post(self, h, path):
        self._same_origin(h)
        form = self._form(h)
        if path == "/console/login":
            return self._login(h, form)
        action = self.actions.get(path)
        if action is None and path != "/console/logout":
            raise AdminError(404, "no such action: %s" % path)
        s = self._session(h)
        if s is None:
            raise AdminError(401, "your session has ended (logged out, expired, or its key was revoked); "
                                    "log in again")
        if not same_token(form.get("csrf"), s.csrf):
            raise AdminError(403, "this form is stale or was not sent by the console (CSRF token "
                                    "missing or wrong); reload the page and try again")
        if path == "/console/logout":
            self.sessions.drop(self._cookies(h).get(COOKIE))
            return self._redirect(h, "/console/login", cookies=[self._cookie(h, COOKIE, "", 0)])
        out = action(self, s, form)
        if isinstance(out, str):         # a path: Post/Redirect/Get
            return self._redirect(h, out)
        status, body = out
        self._send(h, status, body)

    def _login(self, h, form):
        if not same_token(form.get("csrf"), self._cookies(h).get(LOGIN_COOKIE)):
            raise AdminError(403, "the login form is stale or was not sent by the console; "
                                    "open /console/login again")
        key = (form.get("key") or "").strip()
        scope = self.api.gate.scope("Bearer " + key) if key else None
        if scope != "admin":
            token = secrets.token_urlsafe(24)
            msg = ("not an active pulsys API key" if scope is None else
                   "this key has scope %s; the console needs a key with scope admin" % scope)
            return self._send(h, 401, P.login_page(token, msg),
                              cookies=[self._cookie(h, LOGIN_COOKIE, token, 600)])
        sid, _ = self.sessions.create(key_id(key))
        self._redirect(h, "/console/", cookies=[self._cookie(h, COOKIE, sid, None),
                                                 self._cookie(h, LOGIN_COOKIE, "", 0)])

    # -- sessions, forms, cookies -----------------------------------------------------------

    def _session(self, h):
        sid = self._cookies(h).get(COOKIE)
        s = self.sessions.get(sid)
        if s is None:
            return None
        if s.key_id not in self.api.gate.table:      # the key was revoked since login
            self.sessions.drop(sid)
            return None
        return s

    @staticmethod
    def _cookies(h):
        jar = SimpleCookie()
        try:
            jar.load(h.headers.get("Cookie") or "")
        except CookieError:
            return {}
        return {k: m.value for k, m in jar.items()}

    @staticmethod
    def _cookie(h, name, value, max_age):
        c = "%s=%s; Path=/console; HttpOnly; SameSite=Strict" % (name, value)
        if max_age is not None:
            c += "; Max-Age=%d" % max_age
        if (h.headers.get("X-Forwarded-Proto") or "").lower() == "https":
            c += "; Secure"
        return c

    @staticmethod
    def _same_origin(h):
        """Refuse a POST that a browser says came from another site."""
        site = h.headers.get("Sec-Fetch-Site")
        if site is not None and site not in ("same-origin", "none"):
            raise AdminError(403, "cross-site form posts are refused (Sec-Fetch-Site: %s)" % site)
        origin = h.headers.get("Origin")
        if origin is not None:
            host = h.headers.get("Host") or ""
            if urllib.parse.urlsplit(origin).netloc != host:
                raise AdminError(403, "cross-origin form posts are refused (Origin %s, Host %s)" % (origin, host))

    @staticmethod
    def _form(h):
        try:
            n = int(h.headers.get("Content-Length") or 0)
        except ValueError:
            n = -1
        if n < 0 or n > MAX_FORM or h.headers.get("Transfer-Encoding"):
            h.close_connection = True
            raise AdminError(413 if n > MAX_FORM else 400, "the form must be sent with a Content-Length "
                               "of at most %d bytes" % MAX_FORM)
        raw = h.rfile.read(n) if n else b""
        try:
            pairs = urllib.parse.parse_qsl(raw.decode("utf-8"), keep_blank_values=True, max_num_fields=200)
        except (UnicodeDecodeError, ValueError):
            raise AdminError(400, "the form is not valid UTF-8 application/x-www-form-urlencoded") from None
        return dict(pairs)

    # -- the JSON API, in-process ---------------------------------------------------------------

    def call(self, s, method, target, doc=None):
        """-> (status, document, headers), or None when this server has no such route."""
        body = json.dumps(doc).encode() if doc is not None else b""
        return self.api.handle(method, target, None, body, as_key=s.key_id)

    # -- responses --------------------------------------------------------------------------------

    def _send(self, h, status, body, ctype="text/html; charset=utf-8", cookies=(), cache="no-store"):
        if isinstance(body, str):
            body = body.encode("utf-8")
        h.send_response(status)
        h.send_header("Content-Type", ctype)
        h.send_header("Content-Length", str(len(body)))
        h.send_header("Cache-Control", cache)
        for k, v in SECURITY_HEADERS:
            h.send_header(k, v)
        for c in cookies:
            h.send_header("Set-Cookie", clean(c))
        h.end_headers()
        if h.command != "HEAD":
            h.wfile.write(body)

    def _redirect(self, h, where, cookies=()):
        h.send_response(303)
        h.send_header("Location", where)
        h.send_header("Content-Length", "0")
        h.send_header("Cache-Control", "no-store")
        for k, v in SECURITY_HEADERS:
            h.send_header(k, v)
        for c in cookies:
            h.send_header("Set-Cookie", clean(c))
        h.end_headers()
