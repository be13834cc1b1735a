"""audit_log: append-only record of admin actions, read newest first in pages."""

import json

MAX_PAGE = 1000


def append(tx, actor, action, target, detail, now):
    """detail: a JSON-serialisable dict. -> the event id."""
    row = tx.one("INSERT INTO audit_log (at, actor, action, target, detail) VALUES (?, ?, ?, ?, ?) "
                 "RETURNING id", (now, actor, action, target, json.dumps(detail or {}, sort_keys=True)))
    return row["id"]


def page(tx, limit=100, before=None, action=None):
    """Events newest first: at most `limit`, with id < `before` when given, of one
    `action` when given. detail comes back as a dict."""
    limit = max(1, min(int(limit), MAX_PAGE))
    where, params = [], []
    if before is not None:
        where.append("id < ?")
        params.append(int(before))
    if action:
        where.append("action = ?")
        params.append(action)
    sql = "SELECT id, at, actor, action, target, detail FROM audit_log"
    if where:
        sql += " WHERE " + " AND ".join(where)
    rows = tx.all(sql + " ORDER BY id DESC LIMIT ?", tuple(params) + (limit,))
    for r in rows:
        r["detail"] = json.loads(r["detail"])
    return rows
