"""`--upstream-auth client` with `--auth required`: a client sends its pulsys key, and
pulsys asks the Hub with the Hub token that key carries (ADR 0017).

`upstream_auth(header)` turns the Authorization a client sent (a key the reactor's Gate
has already accepted) into what the Hub is sent for it: "Bearer <the owner's token>",
or "" (anonymous) for a key that carries none. Everything after that (verdicts, grants,
rate limits per identity) works as with tokens sent directly (client_access.py): the
identity is the Hub token's digest, so two keys of one person share one verdict.

The store is read once per key per --access-ttl seconds (at most MAX_REFRESH): a token
set or removed takes effect within that, as do the grants reactors hold. While the store cannot
be read, the last token read is used; a key never read is anonymous meanwhile (never
more access than its owner's token had). Opened tokens stay in this process's memory
only: no log, metric or index sees one.
"""

import threading
import time

from pulsys.auth.keys import bearer, key_id
from pulsys.auth.sealed import Unsealable
from pulsys.db.database import DatabaseError

MAX_REFRESH = 10.0        # most seconds a key's token is used before the store is read again
MAX_KEYS = 10_000         # keys remembered; all forgotten when full


class KeyTokens:
    def __init__(self, token_of, refresh, log, clock=time.monotonic):
        """token_of(key id) -> the Hub token the key carries or None (admin/keys.py
        KeyService.hub_token_of); it raises DatabaseError or Unsealable."""
        self.token_of = token_of
        self.refresh = min(refresh, MAX_REFRESH)
        self.log = log
        self.clock = clock
        self._known = {}          # key id -> (read at, token or None)
        self._lock = threading.Lock()

    def upstream_auth(self, header):
        kid = key_id(bearer(header) or "")
        if kid is None:
            return ""
        now = self.clock()
        known = self._known.get(kid)
        if known is not None and now - known[0] < self.refresh:
            return _auth(known[1])
        try:
            token = self.token_of(kid)
        except (DatabaseError, Unsealable) as e:
            self.log.warning("the Hub token of a key cannot be read; asking with the last one read"
                             if known is not None else
                             "the Hub token of a key cannot be read; asking the Hub anonymously",
                             key=kid, error=str(e))
            return _auth(known[1]) if known is not None else ""
        with self._lock:
            if len(self._known) >= MAX_KEYS:
                self._known.clear()
            self._known[kid] = (now, token)
        return _auth(token)


def _auth(token):
    return "Bearer " + token if token else ""
