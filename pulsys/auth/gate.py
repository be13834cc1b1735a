"""The data plane's key check: an in-memory table of active keys, and the answers
already given per Authorization header value.

    table     {key id: (sha256 digest, scope, repo patterns or None)}  replaced whole by
              load() when keys change (patterns compiled by auth/repos.py)
    verdicts  {Authorization header value: scope} of keys that read every repo, filled
              by check() on first use, replaced by an empty dict on every load(), so a
              revoked key stops working at the next request after the new table arrives
    limited   {Authorization header value: (scope, patterns)} the same for keys limited
              to some repos: never in `verdicts`, so every request of theirs takes the
              general step, which checks its repo (check() gives the patterns), and the
              fused hit never serves it

A reactor asks `header in gate.verdicts` first (one dict lookup on the warm path; the
whole check adds 0.05-0.12 us to a warm hit, ADR 0009) and calls check() only for a header it has not accepted before: parse, one table
lookup and one sha256, on the reactor thread, no I/O. Rejections are not remembered,
so random tokens cannot grow memory. Who loads the table, and how fast a revocation
reaches every process: docs/decisions/0009.

Threads: load() runs on a refresher or IPC thread while reactors read. It assigns the
table before the verdicts, and check() takes both answer dicts before it reads the
table, so a check that holds the new dicts also reads the new table, and a verdict
computed from the old table lands in an old, discarded dict. (Reading self.verdicts
again after the table lookup would put a revoked key's verdict into the new dict,
where it would stay: tests/unit/test_auth.py.)
"""

import functools
import json

from pulsys.auth.keys import bearer, key_id, looks_like_a_key, matches
from pulsys.http1.heads import render_canned

MAX_VERDICTS = 4096           # distinct accepted header values remembered per process
MISSING, NOT_BEARER, NOT_PULSYS, INVALID = "missing", "not-bearer", "not-pulsys", "invalid"

# huggingface_hub shows a 401's X-Error-Message (and the JSON body's "error" when there
# is a body: not for the HEAD that hf_hub_download sends first), so both carry the
# explanation (utils/_http.py _format, checked by tests/integration/test_clients_auth.py).
MESSAGES = {
    MISSING: "pulsys: this server needs an API key: set HF_TOKEN=hf_pulsys... "
             "(the request had no Authorization header)",
    NOT_BEARER: "pulsys: send the API key as 'Authorization: Bearer hf_pulsys...' (what HF_TOKEN does)",
    NOT_PULSYS: "pulsys: the token sent is not a pulsys API key; this server needs an hf_pulsys... key "
                "from its admin in HF_TOKEN (a Hugging Face token is not needed here)",
    INVALID: "pulsys: invalid API key (unknown, revoked or mistyped)",
}


REPO_NOT_FOUND = "Repository not found"          # the Hub's words (hf-protocol.md §4.3)
ROUTE_NOT_ALLOWED = ("pulsys: this key may read only some repos, and this route is not one "
                     "repo's (ask the admin for a key without repo limits)")


def _table(table):
    """Rows as (digest, scope, patterns or None); two-field rows read every repo."""
    return {k: (v[0], v[1], v[2] if len(v) > 2 else None) for k, v in (table or {}).items()}


def _remember(answers, header, value):
    """answers[header] = value, within MAX_VERDICTS (rejections are never remembered, so
    only keys that exist can fill it). -> value"""
    if len(answers) >= MAX_VERDICTS:
        answers.clear()
    answers[header] = value
    return value


class Gate:
    def __init__(self, table=None):
        self.table = _table(table)
        self.verdicts = {}
        self.limited = {}

    def load(self, table):
        """Replace the active keys: {key id: (digest, scope[, compiled patterns])}."""
        self.table = _table(table)
        self.verdicts = {}
        self.limited = {}

    def scope(self, header):
        """'read' or 'admin' for an accepted Authorization header value, else None."""
        found = self.check(header)
        return found[0] if found is not None else None

    def check(self, header):
        """-> (scope, repo patterns or None) for an accepted header value, else None; the
        patterns in one answer with the scope, so a load() between two calls cannot pair
        a limited key with no limits."""
        verdicts, limited = self.verdicts, self.limited     # both before the table
        s = verdicts.get(header)
        if s is not None:
            return s, None
        found = limited.get(header)
        if found is not None:
            return found
        key = bearer(header)
        kid = key_id(key) if key is not None else None
        row = self.table.get(kid) if kid is not None else None
        if row is None or not matches(key, row[0]):
            return None
        if row[2] is not None:
            return _remember(limited, header, (row[1], row[2]))
        _remember(verdicts, header, row[1])
        return row[1], None

    @staticmethod
    def reason(header):
        """Why a header was refused: MISSING, NOT_BEARER, NOT_PULSYS or INVALID."""
        if header is None or not header.strip():
            return MISSING
        key = bearer(header)
        if key is None:
            return NOT_BEARER
        return INVALID if looks_like_a_key(key) else NOT_PULSYS


@functools.lru_cache(maxsize=16)
def not_this_repo(has_repo, keep_alive=True, head_only=False):
    """A limited key asked for a repo it may not read: the Hub's answer to a repo the
    caller cannot see (404 RepoNotFound, so huggingface_hub raises
    RepositoryNotFoundError); or, for a route that is not one repo's, 403."""
    status, code, message = (404, "RepoNotFound", REPO_NOT_FOUND) if has_repo else \
        (403, "Forbidden", ROUTE_NOT_ALLOWED)
    body = json.dumps({"error": message}).encode()
    head = render_canned(status, (("Content-Type", "application/json; charset=utf-8"),
                                  ("X-Error-Code", code), ("X-Error-Message", message)), len(body), keep_alive)
    return head if head_only else head + body


@functools.lru_cache(maxsize=16)
def refusal(reason, keep_alive=True, head_only=False):
    """The complete 401 response (head + JSON body) for a refused request."""
    body = json.dumps({"error": MESSAGES[reason]}).encode()
    head = render_canned(401, (("Content-Type", "application/json"),
                               ("X-Error-Message", MESSAGES[reason]),
                               ("WWW-Authenticate", 'Bearer realm="pulsys"'),
                               ("X-Content-Type-Options", "nosniff")), len(body), keep_alive)
    return head if head_only else head + body
