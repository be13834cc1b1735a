"""The in-memory index: key -> Entry, and (repo, revision) -> commit.

Reactor threads only read; the fill pool publishes by replacing whole objects (a dict
store is atomic in CPython, and a published Entry is never mutated), so the warm path
takes no lock. Freshness uses a monotonic clock passed in by the caller.
"""

import itertools

from pulsys.http1.heads import prepare
from pulsys.model import target as T
from pulsys.model.entry import FILE
from pulsys.model.key import rev_key, target_key

FOREVER = float("inf")


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
        # A new value after every change made through these methods (stored after the
        # change, each value once: next() on a count is atomic under the GIL), so an
        # answer remembered with the gen read before its lookup holds while gen is equal.
        self._gens = itertools.count(1)
        self.gen = 0

    def __len__(self):
        return len(self.entries)

    def lookup(self, t, now):
        """Fresh Entry for a RESOLVE target, or None (miss or stale)."""
        return self.lookup_until(t, now)[0]

    def lookup_until(self, t, now):
        """(fresh Entry, monotonic time it stops being fresh) or (None, 0)."""
        entries = self.entries
        k = t.key
        if k is None:
            k = t.key = target_key(t)
        e = entries.get(k)
        if e is not None and (e.expires == 0 or e.expires > now):
            if t.body_url and e.kind != FILE and 300 <= e.status < 400:
                return None, 0   # /resolve/<commit>/f may redirect here; this URL must not loop
            return e, e.expires or FOREVER
        rk = t.rkey
        if rk is None:
            if T.is_commit(t.rev):
                return None, 0
            rk = t.rkey = rev_key(t.rtype, t.repo, t.rev)
        r = self.revs.get(rk)
        if r is None or r.expires <= now:
            return None, 0
        ck = t.ckey
        if ck is None or ck[0] != r.commit:
            ck = t.ckey = (r.commit, target_key(t, r.commit))
        e = entries.get(ck[1])
        if e is None:
            return None, 0
        return e, r.expires

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
        self.gen = next(self._gens)

    def remove(self, key):
        self.entries.pop(key, None)
        self.gen = next(self._gens)

    def drop_rev(self, key):
        self.revs.pop(key, None)
        self.gen = next(self._gens)

    def set_rev(self, rtype, repo, rev, commit, expires, fetched_at):
        self.revs[rev_key(rtype, repo, rev)] = RevRecord(commit, expires, fetched_at)
        self.gen = next(self._gens)

    def rev(self, rtype, repo, rev):
        return self.revs.get(rev_key(rtype, repo, rev))
