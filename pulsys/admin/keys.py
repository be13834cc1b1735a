"""API keys as an operation: create, list, revoke, each with its audit event in the
same transaction; the first key on first start. Used by the admin API and by
`pulsys keys` when it talks to the store directly.

actor names who acts: `key:<id>` (an admin key on the API), `cli:<user>` (the CLI on
the store), `pulsys` (first start).
"""

import time

from pulsys.admin.errors import bad_request, conflict, not_found
from pulsys.auth.keys import SCOPES, new_key
from pulsys.auth.repos import compile_patterns, text_of
from pulsys.db import audit
from pulsys.db import keys as rows

MAX_NAME = 200


def _check_name(name):
    if not isinstance(name, str):
        raise bad_request("key name must be a string")
    if len(name) > MAX_NAME or not name.isprintable():
        raise bad_request("key name must be printable and at most %d characters" % MAX_NAME)
    return name.strip()


def _check_scope(scope):
    if scope not in SCOPES:
        raise bad_request("scope %r: choose one of %s" % (scope, ", ".join(SCOPES)))
    return scope


def _check_repos(repos):
    """None (every repo), or the patterns as the store keeps them."""
    if repos is None:
        return None
    try:
        return text_of(compile_patterns(repos))
    except ValueError as e:
        raise bad_request(str(e)) from None


def _check_id(key_id):
    if not isinstance(key_id, str) or not key_id or len(key_id) > 64 or not key_id.isalnum():
        raise bad_request("key id %r: expected the hex id shown by `pulsys keys list`" % (key_id,))
    return key_id


def _compiled(repos):
    if not repos:
        return None
    try:
        return compile_patterns(repos)
    except ValueError:
        return ()          # a stored pattern this pulsys cannot read: the key reads nothing


class KeyService:
    def __init__(self, db, clock=time.time):
        self.db = db
        self.clock = clock

    def create(self, scope, name, actor, repos=None):
        """-> (key, row). The key is in no row and no log: show it once. repos: patterns
        the key is limited to (auth/repos.py), or None for every repo."""
        scope, name, repos = _check_scope(scope), _check_name(name), _check_repos(repos)
        key, kid, digest = new_key()
        now = self.clock()
        with self.db.transaction() as tx:
            rows.insert(tx, kid, digest, scope, name, actor, now, repos)
            event = {"scope": scope, "name": name}
            if repos:
                event["repos"] = repos
            audit.append(tx, actor, "key.create", kid, event, now)
            return key, rows.get(tx, kid)

    def get(self, key_id):
        with self.db.transaction(write=False) as tx:
            row = rows.get(tx, _check_id(key_id))
        if row is None:
            raise not_found("no key with id %s" % key_id)
        return row

    def listing(self, include_revoked=True):
        with self.db.transaction(write=False) as tx:
            return rows.listing(tx, include_revoked)

    def revoke(self, key_id, actor):
        """-> the revoked key's row. 404 when unknown, 409 when already revoked."""
        _check_id(key_id)
        now = self.clock()
        with self.db.transaction() as tx:
            row = rows.get(tx, key_id)
            if row is None:
                raise not_found("no key with id %s" % key_id)
            if not rows.revoke(tx, key_id, actor, now):
                raise conflict("key %s was already revoked at %s by %s"
                               % (key_id, time.strftime("%Y-%m-%d %H:%M:%S UTC",
                                                        time.gmtime(row["revoked_at"])), row["revoked_by"]))
            audit.append(tx, actor, "key.revoke", key_id, {"scope": row["scope"], "name": row["name"]}, now)
            return rows.get(tx, key_id)

    def ensure_first_key(self):
        """On a store that never had a key: create an admin key and -> it; else None.
        Keys that were all revoked do not count as none: no new key is made then."""
        with self.db.transaction() as tx:
            if tx.dialect == "postgres":
                # two instances starting at once on one database: only one creates it
                tx.execute("LOCK TABLE api_keys IN SHARE ROW EXCLUSIVE MODE")
            if rows.count(tx):
                return None
            key, kid, digest = new_key()
            now = self.clock()
            rows.insert(tx, kid, digest, "admin", "first start", "pulsys", now)
            audit.append(tx, "pulsys", "key.create", kid, {"scope": "admin", "name": "first start"}, now)
            return key

    def generation(self):
        with self.db.transaction(write=False) as tx:
            return rows.generation(tx)

    def snapshot(self):
        """-> (generation, {key id: (digest, scope, compiled repo patterns or None)}) read
        in one transaction."""
        with self.db.transaction(write=False) as tx:
            gen, table = rows.generation(tx), rows.active_table(tx)
        return gen, {kid: (d, s, _compiled(r)) for kid, (d, s, r) in table.items()}

    def audit(self, limit=100, before=None, action=None):
        with self.db.transaction(write=False) as tx:
            return audit.page(tx, limit, before, action)
