"""Admin API routes for keys and the audit log (docs/admin.md). Each changes the store
through KeyService, then refreshes the key table so every process of this pulsys
applies the change at once (docs/decisions/0009)."""

import re

from pulsys.admin.errors import bad_request, forbidden
from pulsys.db.database import DatabaseError

AUDIT_PAGE = 100


def _apply_now(api):
    """Load the change into every process now. If the store fails right after the
    change committed, the key sync's next poll applies it (within 0.5 s); the answer
    still reports the change, which happened."""
    try:
        api.sync.refresh()
    except DatabaseError:
        pass


def _key_doc(row):
    return {"id": row["id"], "scope": row["scope"], "name": row["name"],
            "created_at": row["created_at"], "created_by": row["created_by"],
            "revoked_at": row["revoked_at"], "revoked_by": row["revoked_by"],
            "active": row["revoked_at"] is None, "repos": row.get("repos"),
            "has_hub_token": bool(row.get("has_hub_token"))}


def list_keys(api, req):
    include = req.arg("revoked", "1") not in ("0", "false", "no")
    return 200, {"keys": [_key_doc(r) for r in api.keys.listing(include)]}


def create_key(api, req):
    doc = req.json(("scope", "name", "repos", "hub_token"))
    key, row = api.keys.create(doc.get("scope", "read"), doc.get("name", ""), req.actor, doc.get("repos"),
                               doc.get("hub_token"))
    _apply_now(api)
    out = _key_doc(row)
    out["key"] = key
    return 201, out


def get_key(api, req):
    return 200, _key_doc(api.keys.get(req.match.group(1)))


def revoke_key(api, req):
    row = api.keys.revoke(req.match.group(1), req.actor)
    _apply_now(api)
    return 200, _key_doc(row)


def _own_or_admin(req):
    """The key id a hub-token route acts on: any key for an admin key, else only the
    caller's own (`self` names it): a person gives their key their own Hub token, and
    no admin needs to see it."""
    kid = req.match.group(1)
    if kid == "self":
        return req.key_id
    if req.scope != "admin" and kid != req.key_id:
        raise forbidden("pulsys: a key without scope admin may set only its own Hub token "
                        "(/api/v1/keys/self/hub-token)")
    return kid


def set_hub_token(api, req):
    doc = req.json(("hub_token",))
    if "hub_token" not in doc:
        raise bad_request('body must be {"hub_token": "hf_..."} (DELETE removes the token)')
    return 200, _key_doc(api.keys.set_hub_token(_own_or_admin(req), doc["hub_token"], req.actor))


def remove_hub_token(api, req):
    return 200, _key_doc(api.keys.set_hub_token(_own_or_admin(req), None, req.actor))


def audit_log(api, req):
    limit = req.arg("limit", AUDIT_PAGE, int)
    before = req.arg("before", None, int)
    events = api.keys.audit(limit, before, req.arg("action"))
    nxt = None
    if len(events) == max(1, min(limit, 1000)) and events:
        nxt = "/api/v1/audit?limit=%d&before=%d" % (limit, events[-1]["id"])
    return 200, {"events": events, "next": nxt}


_KEY = re.compile(r"/api/v1/keys/([^/]+)")
_HUB_TOKEN = re.compile(r"/api/v1/keys/([^/]+)/hub-token")
KEY_ROUTES = (
    ("GET", re.compile(r"/api/v1/keys"), list_keys, "admin"),
    ("POST", re.compile(r"/api/v1/keys"), create_key, "admin"),
    ("GET", _KEY, get_key, "admin"),
    ("DELETE", _KEY, revoke_key, "admin"),
    ("PUT", _HUB_TOKEN, set_hub_token, "read"),          # admin, or the key itself
    ("DELETE", _HUB_TOKEN, remove_hub_token, "read"),
    ("GET", re.compile(r"/api/v1/audit"), audit_log, "admin"),
)
