"""The admin listener's JSON API: routing, the admin-key check, request parsing.

Every route but /healthz, /debug/vars and /metrics (served by server.py) needs
`Authorization: Bearer <key>`; all of them need scope admin except /api/v1/whoami.
Errors are HF-style: status, `X-Error-Message` and a JSON body {"error": "..."}.
docs/admin.md documents the routes. A route is (method, path regex, handler); the
handler gets a Request and returns (status, JSON-serialisable document).
"""

import json
import re
import urllib.parse

from pulsys.admin.errors import AdminError, bad_request
from pulsys.admin.history import HISTORY_ROUTES
from pulsys.admin.jobs_api import JOB_ROUTES
from pulsys.admin.keys_api import KEY_ROUTES
from pulsys.admin.stats_api import STATS_ROUTES
from pulsys.auth.gate import MESSAGES, MISSING
from pulsys.auth.keys import bearer, key_id
from pulsys.db.database import DatabaseError


ADMIN_MISSING = "pulsys: the admin API needs an admin key: Authorization: Bearer hf_pulsys..."


class Request:
    __slots__ = ("method", "path", "query", "body", "match", "key_id", "scope")

    def __init__(self, method, path, query, body):
        self.method, self.path, self.query, self.body = method, path, query, body
        self.match = None
        self.key_id = self.scope = None

    @property
    def actor(self):
        return "key:%s" % self.key_id

    def json(self, allowed):
        """The body as a JSON object with only `allowed` fields (an empty body is {})."""
        if not self.body:
            return {}
        try:
            doc = json.loads(self.body)
        except (ValueError, UnicodeDecodeError):
            raise bad_request("request body is not valid JSON") from None
        if not isinstance(doc, dict):
            raise bad_request("request body must be a JSON object")
        unknown = sorted(set(doc) - set(allowed))
        if unknown:
            raise bad_request("unknown field %s; allowed: %s" % (", ".join(unknown), ", ".join(allowed)))
        return doc

    def arg(self, name, default=None, kind=str):
        values = self.query.get(name)
        if not values:
            return default
        try:
            return kind(values[-1])
        except ValueError:
            raise bad_request("query parameter %s=%r: expected %s" % (name, values[-1], kind.__name__)) from None


def whoami(api, req):
    return 200, {"id": req.key_id, "scope": req.scope}


class AdminApi:
    def __init__(self, keys, gate, sync, cache=None, vars_fn=None):
        """cache: the admin.plane.CachePlane, whose routes (stats, history, repos, purge,
        pre-warm jobs) are served only with one; vars_fn: the /debug/vars snapshot /api/v1/stats uses."""
        self.keys = keys          # admin.keys.KeyService
        self.gate = gate          # auth.gate.Gate, kept fresh by sync
        self.sync = sync          # admin.keysync.KeySync
        self.vars_fn = vars_fn
        self.cache = cache.view if cache is not None else None
        self.downloads = cache.downloads if cache is not None else None
        self.prewarm = cache.prewarm if cache is not None else None
        self.history = cache.history if cache is not None else None
        self.routes = [("GET", re.compile(r"/api/v1/whoami"), whoami, "read")] + list(KEY_ROUTES)
        if cache is not None:
            self.routes += STATS_ROUTES + HISTORY_ROUTES + JOB_ROUTES

    def handle(self, method, target, authorization, body, as_key=None):
        """-> (status, document, extra headers) or None when no route has this path.
        as_key: the id of a key the caller has already authenticated (the console's
        session, admin/console.py) instead of an Authorization header; it must still be
        active with the scope the route needs."""
        path, _, qs = target.partition("?")
        path = urllib.parse.unquote(path)
        found = [(r, m) for r in self.routes for m in (r[1].fullmatch(path),) if m]
        if not found:
            return None
        req = Request(method, path, urllib.parse.parse_qs(qs, keep_blank_values=True), body)
        for (meth, _, fn, need), m in found:
            if meth != method and not (meth == "GET" and method == "HEAD"):
                continue
            refused = (self._authorize(req, authorization, need) if as_key is None
                       else self._authorize_id(req, as_key, need))
            if refused is not None:
                return refused
            req.match = m
            try:
                status, doc = fn(self, req)
            except AdminError as e:
                return e.status, {"error": e.message}, ()
            except DatabaseError as e:
                return 503, {"error": "pulsys: %s" % e}, (("Retry-After", "1"),)
            return status, doc, ()
        allow = ", ".join(sorted({r[0] for r, _ in found}))
        return 405, {"error": "method %s not allowed here; allowed: %s" % (method, allow)}, (("Allow", allow),)

    def _authorize_id(self, req, kid, need):
        row = self.gate.table.get(kid)
        if row is None:
            return 401, {"error": "pulsys: the key of this session is no longer active"}, ()
        if need == "admin" and row[1] != "admin":
            return 403, {"error": "pulsys: this needs a key with scope admin; this key has scope %s" % row[1]}, ()
        req.key_id, req.scope = kid, row[1]
        return None

    def _authorize(self, req, authorization, need):
        scope = self.gate.scope(authorization)
        if scope is None:
            reason = self.gate.reason(authorization)
            msg = ADMIN_MISSING if reason == MISSING else MESSAGES[reason]
            return 401, {"error": msg}, (("WWW-Authenticate", 'Bearer realm="pulsys-admin"'),)
        if need == "admin" and scope != "admin":
            return 403, {"error": "pulsys: this needs a key with scope admin; this key has scope %s" % scope}, ()
        req.key_id, req.scope = key_id(bearer(authorization)), scope
        return None
