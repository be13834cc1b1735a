"""Per-repo downloads and bytes served, counted on the reactors and summed here.

A reactor records each GET it answers with a file (warm hit or cold) with one dict
update into a dict only it writes, keyed by the entry's cache key:

    tally[key] = tally.get(key, 0) + (ONE + bytes)

One int carries both numbers: the count in the bits from 2**48 up, the bytes below
(2**48 bytes is 256 TiB, more than a reactor sends between two swaps, so the bytes never
carry into the count). So a hit costs one dict store, like the last-served record of
ADR 0008, instead of two; the int add allocates a small object (CPython ints above 256
are objects), which the hit already pays for its byte counter (metrics.py).

Whoever needs the numbers swaps the dict for an empty one and reads the old one, as for
last-served times (cache/recency.py): `LocalReactors.downloads()` in one process, the
RecencyReporter's DOWNLOADS frame from a worker process. Downloads (the parent) turns keys
into (repo type, repo) and keeps running totals per repo.
"""

import threading

ONE = 1 << 48
BYTES = ONE - 1


def record(tally, key, nbytes):
    """What the reactor does per file answer (inlined there; this is the reference)."""
    tally[key] = tally.get(key, 0) + (ONE + nbytes)


def repo_of_key(key):
    """(repo type, repo) of a cache key (model/key.py: "kind|type|repo|rev|path|extra"),
    or None for keys without a repo."""
    parts = key.split("|")
    if len(parts) < 3 or not parts[2] or parts[1] == "xet":
        return None         # a xorb range (--xet facade) is content, of no one repo
    repo = parts[2]
    if "%" in repo:
        repo = repo.replace("%7C", "|").replace("%25", "%")
    return parts[1], repo


class Downloads:
    """Totals per (repo type, repo): [downloads, bytes]. Thread-safe; parent only."""

    def __init__(self, source=None):
        self.lock = threading.Lock()
        self.totals = {}
        self.unsaved = {}          # increments not yet written to the store
        self.source = source       # callable -> [(key, packed)] (in-process reactors)

    def add(self, items):
        """[(cache key, packed value)] from a reactor or a worker's report."""
        with self.lock:
            for key, v in items:
                repo = repo_of_key(key)
                if repo is None:
                    continue
                for d in (self.totals, self.unsaved):
                    rec = d.get(repo)
                    if rec is None:
                        rec = d[repo] = [0, 0]
                    rec[0] += v >> 48
                    rec[1] += v & BYTES

    def load(self, totals):
        """{(type, repo): (downloads, bytes)} saved by an earlier run."""
        with self.lock:
            for repo, (n, b) in totals.items():
                rec = self.totals.setdefault(repo, [0, 0])
                rec[0] += n
                rec[1] += b

    def collect(self):
        if self.source is not None:
            items = self.source()
            if items:
                self.add(items)

    def by_repo(self):
        """{(type, repo): (downloads, bytes served)}"""
        self.collect()
        with self.lock:
            return {r: tuple(v) for r, v in self.totals.items()}

    def take_unsaved(self):
        """Increments since the last take, for the store; give back with restore() when
        the store could not take them."""
        self.collect()
        with self.lock:
            out, self.unsaved = self.unsaved, {}
        return out

    def restore(self, unsaved):
        with self.lock:
            for repo, (n, b) in unsaved.items():
                rec = self.unsaved.setdefault(repo, [0, 0])
                rec[0] += n
                rec[1] += b
