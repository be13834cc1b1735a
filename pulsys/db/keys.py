"""api_keys: rows for keys (digests only) and the `keys` generation counter.

Every function takes a Tx. Each change bumps the counter in the same transaction, so a
process that sees a new generation reads a table that includes the change.
"""

import json

COLUMNS = ("id, scope, name, created_at, created_by, revoked_at, revoked_by, repos, "
           "hub_token IS NOT NULL AS has_hub_token")


def _bump(tx):
    tx.execute("UPDATE counters SET value = value + 1 WHERE name = 'keys'")


def _row(r):
    """A row as callers use it: `repos` a list of patterns, or None (every repo)."""
    if r is not None:
        r = dict(r)
        r["repos"] = json.loads(r["repos"]) if r["repos"] else None
        r["has_hub_token"] = bool(r["has_hub_token"])
    return r


def insert(tx, key_id, digest, scope, name, actor, now, repos=None, hub_token=None):
    """repos: the key's repo patterns as text (a list), or None for every repo;
    hub_token: the owner's Hub token sealed (auth/sealed.py), or None."""
    tx.execute("INSERT INTO api_keys (id, digest, scope, name, created_at, created_by, repos, hub_token) "
               "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
               (key_id, digest, scope, name, now, actor, json.dumps(repos) if repos else None, hub_token))
    _bump(tx)


def set_hub_token(tx, key_id, sealed):
    """Replace an active key's sealed Hub token (None removes it). -> True when the key
    is active. No generation bump: the key table the data plane checks is unchanged."""
    cur = tx.execute("UPDATE api_keys SET hub_token = ? WHERE id = ? AND revoked_at IS NULL",
                     (sealed, key_id))
    return cur.rowcount == 1


def sealed_hub_token(tx, key_id):
    """The sealed Hub token of an active key, or None (no token, unknown or revoked)."""
    r = tx.one("SELECT hub_token FROM api_keys WHERE id = ? AND revoked_at IS NULL", (key_id,))
    return r["hub_token"] if r is not None else None


def get(tx, key_id):
    """The key's row without its digest, or None."""
    return _row(tx.one("SELECT %s FROM api_keys WHERE id = ?" % COLUMNS, (key_id,)))


def revoke(tx, key_id, actor, now):
    """True when an active key was revoked now; False when unknown or already revoked."""
    cur = tx.execute("UPDATE api_keys SET revoked_at = ?, revoked_by = ? "
                     "WHERE id = ? AND revoked_at IS NULL", (now, actor, key_id))
    if cur.rowcount != 1:
        return False
    _bump(tx)
    return True


def listing(tx, include_revoked=True):
    """Every key (no digests), oldest first."""
    where = "" if include_revoked else " WHERE revoked_at IS NULL"
    return [_row(r) for r in tx.all("SELECT %s FROM api_keys%s ORDER BY created_at, id" % (COLUMNS, where))]


def active_table(tx):
    """{key id: (digest, scope, repo patterns or None)} of the keys not revoked: what the
    data plane checks (the patterns as text; admin/keys.py compiles them)."""
    rows = tx.all("SELECT id, digest, scope, repos FROM api_keys WHERE revoked_at IS NULL")
    return {r["id"]: (r["digest"], r["scope"], json.loads(r["repos"]) if r["repos"] else None)
            for r in rows}


def count(tx):
    """Keys ever created, revoked ones included."""
    return tx.one("SELECT COUNT(*) AS n FROM api_keys")["n"]


def generation(tx):
    return tx.one("SELECT value FROM counters WHERE name = 'keys'")["value"]
