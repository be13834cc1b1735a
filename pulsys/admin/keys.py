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
from pulsys.auth.sealed import Unsealable, check_hub_token
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


NO_SEALER = ("pulsys: this store keeps no Hub tokens: they are sealed with --token-secret-file, "
             "which the server makes when it runs with --upstream-auth client --auth required")


class KeyService:
    def __init__(self, db, clock=time.time, sealer=None):
        """sealer: auth.sealed.Sealer for keys that carry their owner's Hub token
        (ADR 0017), or None: such keys cannot be made here."""
        self.db = db
        self.clock = clock
        self.sealer = sealer

    def _seal(self, kid, hub_token):
        if hub_token is None:
            return None
        if self.sealer is None:
            raise bad_request(NO_SEALER)
        try:
            return self.sealer.seal(kid, check_hub_token(hub_token))
        except ValueError as e:
            raise bad_request(str(e)) from None

    def create(self, scope, name, actor, repos=None, hub_token=None):
        """-> (key, row). The key is in no row and no log: show it once. repos: patterns
        the key is limited to (auth/repos.py), or None for every repo; hub_token: the
        owner's Hugging Face token, kept sealed (never shown again), or None."""
        scope, name, repos = _check_scope(scope), _check_name(name), _check_repos(repos)
        key, kid, digest = new_key()
        sealed = self._seal(kid, hub_token)
        now = self.clock()
        with self.db.transaction() as tx:
            rows.insert(tx, kid, digest, scope, name, actor, now, repos, sealed)
            event = {"scope": scope, "name": name}
            if repos:
                event["repos"] = repos
            if sealed:
                event["hub_token"] = True
            audit.append(tx, actor, "key.create", kid, event, now)
            return key, rows.get(tx, kid)

    def set_hub_token(self, key_id, hub_token, actor):
        """Give an active key its owner's Hub token (None takes it away). -> the row.
        404 when unknown, 409 when revoked; the token itself is in no event."""
        _check_id(key_id)
        sealed = self._seal(key_id, hub_token)
        now = self.clock()
        with self.db.transaction() as tx:
            row = rows.get(tx, key_id)
            if row is None:
                raise not_found("no key with id %s" % key_id)
            if not rows.set_hub_token(tx, key_id, sealed):
                raise conflict("key %s is revoked" % key_id)
            audit.append(tx, actor, "key.hub_token." + ("set" if sealed else "remove"), key_id,
                         {"scope": row["scope"], "name": row["name"]}, now)
            return rows.get(tx, key_id)

    def hub_token_of(self, key_id):
        """The Hub token an active key carries, opened; None when it has none (or is
        unknown or revoked). Unsealable when this secret cannot open it."""
        with self.db.transaction(write=False) as tx:
            sealed = rows.sealed_hub_token(tx, key_id)
        if sealed is None:
            return None
        if self.sealer is None:
            raise Unsealable(NO_SEALER)
        return self.sealer.open(key_id, sealed)

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
