"""Console sessions: an opaque random id in a cookie, kept server-side only as its
sha256, with the admin key id it acts for, a CSRF token and an expiry.

In memory, in the process that runs the admin listener (the parent with worker
processes): a restart logs everyone out, which for a console used by a few operators is
cheaper than a table to clean. A session ends at logout, after IDLE seconds without a
request, ABSOLUTE seconds after login, or as soon as its key is revoked (the console
checks the key against the key Gate on every request).
"""

import hashlib
import hmac
import secrets
import threading
import time

IDLE = 3600.0              # seconds without a request
ABSOLUTE = 12 * 3600.0     # seconds after login, whatever the activity
MAX_SESSIONS = 1000        # the oldest is dropped beyond this: logins cannot grow memory


def _digest(sid):
    return hashlib.sha256(sid.encode("ascii", "replace")).hexdigest()


class Session:
    __slots__ = ("key_id", "csrf", "created", "seen")

    def __init__(self, key_id, csrf, now):
        self.key_id, self.csrf, self.created, self.seen = key_id, csrf, now, now


class Sessions:
    def __init__(self, clock=time.monotonic):
        self.clock = clock
        self.lock = threading.Lock()
        self.by_digest = {}        # sha256(session id) -> Session, oldest first

    def create(self, key_id):
        """-> (session id for the cookie, Session)."""
        sid = secrets.token_urlsafe(32)
        s = Session(key_id, secrets.token_urlsafe(32), self.clock())
        with self.lock:
            while len(self.by_digest) >= MAX_SESSIONS:
                del self.by_digest[next(iter(self.by_digest))]
            self.by_digest[_digest(sid)] = s
        return sid, s

    def get(self, sid):
        """The live Session of a cookie value, or None (unknown, expired)."""
        if not sid:
            return None
        d = _digest(sid)
        now = self.clock()
        with self.lock:
            s = self.by_digest.get(d)
            if s is None:
                return None
            if now - s.seen > IDLE or now - s.created > ABSOLUTE:
                del self.by_digest[d]
                return None
            s.seen = now
            return s

    def drop(self, sid):
        with self.lock:
            self.by_digest.pop(_digest(sid or ""), None)

    def __len__(self):
        return len(self.by_digest)


def same_token(a, b):
    """Constant-time comparison of two CSRF tokens; False when either is missing."""
    return bool(a) and bool(b) and hmac.compare_digest(a.encode(), b.encode())
