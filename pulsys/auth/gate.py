"""The data plane's key check: an in-memory table of active keys, and the answers
already given per Authorization header value.

    table     {key id: (sha256 digest, scope)}  replaced whole by load() when keys change
    verdicts  {Authorization header value: scope} filled by scope() on first use,
              replaced by an empty dict on every load(), so a revoked key stops working
              at the next request after the new table arrives

A reactor asks `header in gate.verdicts` first (one dict lookup on the warm path; the
whole check adds 0.05-0.12 us to a warm hit, ADR 0009) and calls scope() only for a header it has not accepted before: parse, one table
lookup and one sha256, on the reactor thread, no I/O. Rejections are not remembered,
so random tokens cannot grow memory. Who loads the table, and how fast a revocation
reaches every process: docs/decisions/0009.

Threads: load() runs on a refresher or IPC thread while reactors read. It assigns the
table before the verdicts, so a reader that sees the new verdicts also sees the new
table; a verdict computed from the old table lands in the old, discarded dict.
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


class Gate:
    def __init__(self, table=None):
        self.table = dict(table or {})
        self.verdicts = {}

    def load(self, table):
        """Replace the active keys: {key id: (digest, scope)}."""
        self.table = dict(table)
        self.verdicts = {}

    def scope(self, header):
        """'read' or 'admin' for an accepted Authorization header value, else None."""
        verdicts = self.verdicts
        s = verdicts.get(header)
        if s is not None:
            return s
        key = bearer(header)
        kid = key_id(key) if key is not None else None
        row = self.table.get(kid) if kid is not None else None
        if row is None or not matches(key, row[0]):
            return None
        if len(verdicts) >= MAX_VERDICTS:
            verdicts.clear()
        verdicts[header] = row[1]
        return row[1]

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
def refusal(reason, keep_alive=True, head_only=False):
    """The complete 401 response (head + JSON body) for a refused request."""
    body = json.dumps({"error": MESSAGES[reason]}).encode()
    head = render_canned(401, (("Content-Type", "application/json"),
                               ("X-Error-Message", MESSAGES[reason]),
                               ("WWW-Authenticate", 'Bearer realm="pulsys"'),
                               ("X-Content-Type-Options", "nosniff")), len(body), keep_alive)
    return head if head_only else head + body
