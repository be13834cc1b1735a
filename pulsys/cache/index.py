"""The in-memory index: key -> Entry, and (repo, revision) -> commit.

Reactor threads only read; the fill pool publishes by replacing whole objects (a dict
store is atomic in CPython, and a published Entry is never mutated), so the warm path
takes no lock. Freshness uses a monotonic clock passed in by the caller.
"""

from pulsys.http1.heads import prepare
from pulsys.model import target as T
from pulsys.model.entry import FILE
from pulsys.model.key import rev_key, target_key


class RevRecord:
    __slots__ = ("commit", "expires", "fetched_at")

    def __init__(self, commit, expires, fetched_at):
        self.commit = commit
        self.expires = expires        # monotonic deadline
        self.fetched_at = fetched_at  # wall clock, for persistence


class Index:
    def __init__(self):
        self.entries = {}
        self.revs = {}

    def __len__(self):
        return len(self.entries)

    def lookup(self, t, now):
        """Fresh Entry for a RESOLVE target, or None (miss or stale)."""
        entries = self.entries
        k = t.key
        if k is None:
            k = t.key = target_key(t)
        e = entries.get(k)
        if e is not None and (e.expires == 0 or e.expires > now):
            if t.body_url and e.kind != FILE and 300 <= e.status < 400:
                return None   # /resolve/<commit>/f may redirect here; this URL must not loop
            return e
        rk = t.rkey
        if rk is None:
            if T.is_commit(t.rev):
                return None
            rk = t.rkey = rev_key(t.rtype, t.repo, t.rev)
        r = self.revs.get(rk)
        if r is None or r.expires <= now:
            return None
        ck = t.ckey
        if ck is None or ck[0] != r.commit:
            ck = t.ckey = (r.commit, target_key(t, r.commit))
        return entries.get(ck[1])

    def lookup_stale(self, t):
        """Best Entry regardless of age (offline fallback), or None."""
        e = self.entries.get(target_key(t))
        if e is not None and not (t.body_url and e.kind != FILE and 300 <= e.status < 400):
            return e
        r = self.revs.get(rev_key(t.rtype, t.repo, t.rev))
        if r is None:
            return None
        return self.entries.get(target_key(t, r.commit))

    def get(self, key):
        return self.entries.get(key)

    def publish(self, entry):
        if entry.kind == FILE and entry.heads is None:
            prepare(entry)
        self.entries[entry.key] = entry

    def remove(self, key):
        self.entries.pop(key, None)

    def set_rev(self, rtype, repo, rev, commit, expires, fetched_at):
        self.revs[rev_key(rtype, repo, rev)] = RevRecord(commit, expires, fetched_at)

    def rev(self, rtype, repo, rev):
        return self.revs.get(rev_key(rtype, repo, rev))
