"""`--upstream-auth client`: the Hub decides who reads what (ADR 0016).

In client mode each client's own token (the Authorization it sends, what HF_TOKEN
holds) is what pulsys asks the Hub with for that client's metadata, and what the Hub
answers becomes a verdict, remembered per (token, repo type, repo) for --access-ttl
seconds. Cached bytes stay shared by content; a verdict decides who may be served them.

Levels. The Hub restricts two things differently (hf-protocol.md §4.1, §4.3): a private
repo hides everything from those without access (401 anonymous, 404 with a token,
`RepoNotFound`), a gated repo shows its metadata (`/api/models/{repo}`, tree,
paths-info) to anyone and its files only to those whose request was accepted (401/403
`GatedRepo`). So a verdict says how far a token may read: META (the /api routes) or
CONTENT (/resolve too, which implies META).

Public repos. A verdict learned for the anonymous client ("" here) holds for every
client: anyone may read what an anonymous client may. It is learned from an anonymous
request, or from a `/api/{type}s/{repo}` answer whose JSON says `"private": false`
(META) and also `"gated": false` (CONTENT), an answer pulsys fetches anyway. A client
with an invalid token is then served a public repo's files, which the Hub would refuse
with 401: nothing is disclosed that an anonymous request would not get.

Two tables:
  Verdicts  (the upstream plane, parent process) digest(token) -> what the Hub said:
            allowed up to a level, or refused with the Hub's exact answer to replay;
            kept past the TTL (bounded) so that while the Hub is down or rate-limits,
            a client the Hub last said yes to is still served from cache.
  Grants    (each reactor) Authorization header value -> until of fresh CONTENT
            verdicts, filled from Replies; the warm path asks it once per hit
            on a /resolve target (one or two dict lookups), and a hit without a grant
            becomes a Job, so a warm hit inside the TTL costs no upstream request and a
            revoked access stops within it.
Tokens never leave these tables: logs, metrics, the console and the index see digests.
"""

import hashlib
import threading

from pulsys.model import target as T

META, CONTENT = 1, 2
PUBLIC = ""                      # the anonymous client's key: its grants hold for everyone
MAX_GRANTS = 4096                # per reactor; cleared when full (as gate.py's verdicts)
MAX_VERDICTS = 100_000           # per node; the oldest half dropped when full
DENIED_CODES = frozenset(("GatedRepo", "RepoNotFound"))


def digest(header):
    """What stands for a client's token anywhere but in these tables: 16 hex digits of
    blake2b (enough to tell identities apart in logs; not reversible)."""
    if not header:
        return PUBLIC
    return hashlib.blake2b(header.encode("latin-1", "replace"), digest_size=8).hexdigest()


def need_of(kind):
    """The level a route needs (None: not one repo's route, the Hub decides each time)."""
    if kind == T.RESOLVE or kind == T.XET_TOKEN:     # a Xet token reads the repo's files
        return CONTENT
    if kind == T.API_INFO or kind == T.API_TREE or kind == T.API_PATHS_INFO:
        return META
    return None


def classify(status, headers):
    """What an upstream answer for one repo says of the token that asked:
    True (may read at the level asked), False (refused: replay this answer) or None
    (it says nothing: a redirect to another repo name, a 429, a 5xx)."""
    if 200 <= status < 300 or status == 304:
        return True
    if 300 <= status < 400:
        # a CDN redirect of a file is the Hub's yes; a relative one (a renamed repo,
        # resolve-cache) is asked again under its new name
        loc = headers.get("Location") or ""
        return None if loc.startswith("/") else True
    if status == 401 or status == 403:
        return False
    if status == 404:
        # RepoNotFound: the repo is hidden from this token; EntryNotFound and
        # RevisionNotFound come after the Hub let the token see the repo
        return False if headers.get("X-Error-Code") == "RepoNotFound" else True
    return None


class Verdicts:
    """The upstream plane's table (see the module docstring). Thread-safe."""

    def __init__(self, ttl, clock):
        self.ttl = ttl
        self.clock = clock
        self._lock = threading.Lock()
        # (digest, rtype, repo) -> [yes until at META, at CONTENT, no until at META, at
        # CONTENT, the Hub's answer to replay at META, at CONTENT]
        self._v = {}

    def __len__(self):
        return len(self._v)

    def check(self, who, rtype, repo, need, now):
        """-> ("yes", grant) | ("no", answer Entry) | ("ask", stale_ok). "yes": a fresh
        yes for `who` (a digest) or for everyone; grant: (public, rtype, repo, until) for
        the reactor when need is CONTENT, else None. "ask": no fresh verdict; stale_ok
        when an expired yes may still serve a cached copy while the Hub cannot be asked."""
        v = self._v
        stale_ok = False
        for who_ in (PUBLIC, who):
            row = v.get((who_, rtype, repo))
            if row is None:
                continue
            until = row[need - 1]
            if until > now:
                return "yes", (who_ == PUBLIC, rtype, repo, until) if need == CONTENT else None
            if until:
                stale_ok = True
            if who_ == who and row[need + 1] > now:
                return "no", row[need + 3]
        return "ask", stale_ok

    def allow(self, who, rtype, repo, level):
        """The Hub let `who` read at `level` (CONTENT implies META). -> the grant for the
        Reply (CONTENT only: the reactors check nothing else), or None."""
        until = self.clock() + self.ttl
        with self._lock:
            row = self._row(who, rtype, repo)
            for lv in range(META, level + 1):
                row[lv - 1] = until
                row[lv + 1], row[lv + 3] = 0.0, None      # a yes ends an older no
        return (who == PUBLIC, rtype, repo, until) if level == CONTENT else None

    def refuse(self, who, rtype, repo, level, answer):
        """The Hub refused `who` at `level` with `answer` (an Entry kept to replay). A
        META refusal (a hidden repo) refuses CONTENT too."""
        until = self.clock() + self.ttl
        with self._lock:
            row = self._row(who, rtype, repo)
            for lv in range(level, CONTENT + 1):
                row[lv + 1], row[lv + 3] = until, answer
                row[lv - 1] = 0.0                         # a no ends an older yes

    def _row(self, who, rtype, repo):
        v = self._v
        key = (who, rtype, repo)
        row = v.get(key)
        if row is None:
            if len(v) >= MAX_VERDICTS:
                for k in list(v)[:MAX_VERDICTS // 2]:     # insertion order: the oldest
                    del v[k]
            row = v[key] = [0.0, 0.0, 0.0, 0.0, None, None]
        return row


class Grants:
    """A reactor's view of fresh CONTENT verdicts (see the module docstring). Only its
    reactor thread reads and writes it."""

    __slots__ = ("table",)

    def __init__(self):
        self.table = {}       # (header value or PUBLIC, rtype, repo) -> until

    def until(self, header, rtype, repo, now):
        """Until when a client sending `header` may read this repo's files (0.0: ask)."""
        table = self.table
        until = table.get((PUBLIC, rtype, repo), 0.0)
        if until > now:
            return until
        until = table.get((header or PUBLIC, rtype, repo), 0.0)
        return until if until > now else 0.0

    def learn(self, header, grant):
        """A Reply's grant (public, rtype, repo, until) for a request that sent `header`."""
        public, rtype, repo, until = grant
        table = self.table
        if len(table) >= MAX_GRANTS:
            table.clear()
        table[(PUBLIC if public else header or PUBLIC, rtype, repo)] = until
