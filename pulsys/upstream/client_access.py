"""`--upstream-auth client` in the upstream plane: each client's Hub token asks the Hub
for that client, and the Hub's answers become verdicts (auth/access.py, ADR 0016).

For a Job that came from a client (Job.auth is not None) on one repo's route,
`begin(job)` looks the verdict up:
  no     the Hub refused this token lately: its exact answer is replayed (status,
         X-Error-Code GatedRepo / RepoNotFound, X-Error-Message, body), nothing asked;
  yes    the job is answered as in service mode (from the cache where it can), with the
         client's token on whatever it asks upstream; a /resolve answer carries the
         grant to the reactor, whose later warm hits need no Job until it expires;
  ask    the job must reach the Hub with the client's token before anything cached is
         served: Upstream skips its cache, bucket and file-list shortcuts (job.ask.decide)
         and calls `heard()` with the Hub's answer, which decides. While the Hub cannot
         be asked (down, --offline, rate-limited), a cached copy is served only to a
         client the Hub said yes to before (an expired yes: `stale_ok`).
Refusals are never published in the index: they are one token's, not the repo's.

Rate limits are per identity: the Hub limits each token (and anonymous requests, which
all come from pulsys's address) on its own, so each has its own RateLimit window here.
"""

import threading

from pulsys import metrics as M
from pulsys.auth.access import CONTENT, META, PUBLIC, Verdicts, classify, digest, need_of
from pulsys.model.job import Reply
from pulsys.upstream.ratelimit import RateLimit

ANSWERED = object()
MAX_IDENTITIES = 10_000          # rate-limit windows kept; the oldest half dropped when full


class Ask:
    """A client's job in client mode: who asks (a digest), the level it needs, whether
    the Hub must decide first, whether an expired yes may serve a stale copy, and the
    grant to send to the reactor with the reply."""
    __slots__ = ("who", "need", "decide", "stale_ok", "grant")

    def __init__(self, who, need, decide, stale_ok, grant):
        self.who, self.need, self.decide, self.stale_ok, self.grant = who, need, decide, stale_ok, grant


class _WithGrant:
    """job.reply for a /resolve job in client mode: adds the grant known at reply time."""
    __slots__ = ("reply", "ask")

    def __init__(self, reply, ask):
        self.reply, self.ask = reply, ask

    def __call__(self, r):
        if r.grant is None and r.outcome != "refused":
            r.grant = self.ask.grant
        self.reply(r)


class ClientAccess:
    def __init__(self, ttl, clock, wall, counters, log):
        self.verdicts = Verdicts(ttl, clock)
        self.clock, self.wall = clock, wall
        self.c = counters
        self.log = log
        self.rates = {}           # digest -> RateLimit of that identity
        self._lock = threading.Lock()

    def begin(self, job):
        """The verdict for a client's job: ANSWERED (refused, replied), or None (not one
        repo's route: the Hub decides as it answers), or the Ask set as job.ask."""
        t = job.target
        need = need_of(t.kind)
        if need is None:
            return None
        who = digest(job.auth)
        state, x = self.verdicts.check(who, t.rtype, t.repo, need, self.clock())
        if state == "no" and (job.method == "HEAD" or not x.head_only):
            self.c[M.ACCESS_REFUSALS] += 1
            job.reply(Reply(x, None, "refused"))
            return ANSWERED
        if state == "yes":
            ask = Ask(who, need, False, True, x)
        else:      # "ask"; or a no learned from a HEAD, which has no body for this GET
            ask = Ask(who, need, True, state == "ask" and x, None)
        job.ask = ask
        if need == CONTENT:
            job.reply = _WithGrant(job.reply, ask)
        return ask

    def heard(self, job, status, headers):
        """The Hub answered `status` with `headers` to this job's token. -> True (it may
        read: remembered), False (refused: the caller replays it through refused()), or
        None (the answer says neither)."""
        ask = job.ask
        if ask is None:
            return None
        said = classify(status, headers)
        if ask.decide:
            self.c[M.ACCESS_ASKED] += 1
        if said:
            t = job.target
            ask.grant = self.verdicts.allow(ask.who, t.rtype, t.repo, ask.need)
            ask.decide = False
        return said

    def refused(self, job, entry):
        """Remember the Hub's refusal `entry` (not published) and count it."""
        ask, t = job.ask, job.target
        self.verdicts.refuse(ask.who, t.rtype, t.repo, ask.need, entry)
        ask.grant = None
        self.c[M.ACCESS_REFUSALS] += 1
        self.log.info("the Hub refused a client", client=ask.who or "anonymous", repo=t.repo,
                      status=entry.status)

    def learn_public(self, t, info):
        """An /api/{type}s/{repo} answer's JSON object `info`: `"private": false` means
        anyone may read its metadata, and with `"gated": false` its files too."""
        if not isinstance(info, dict) or info.get("private") is not False:
            return
        self.verdicts.allow(PUBLIC, t.rtype, t.repo, CONTENT if info.get("gated") is False else META)

    def limited(self):
        """How many identities the Hub rate-limits now."""
        return sum(1 for r in list(self.rates.values()) if r.left() > 0)

    def rate(self, auth):
        """The RateLimit window of the identity that sends `auth`."""
        who = digest(auth)
        r = self.rates.get(who)
        if r is None:
            with self._lock:
                rates = self.rates
                if len(rates) >= MAX_IDENTITIES:
                    for k in list(rates)[:MAX_IDENTITIES // 2]:
                        del rates[k]
                r = rates.setdefault(who, RateLimit(self.clock, self.wall))
        return r
