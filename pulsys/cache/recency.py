"""Last-served times from reactors to the Space that evicts (docs/decisions/0008).

A reactor records a warm hit with one dict store, `self.served[entry.blob_id] = t0`,
into a dict only it writes. Whoever needs the times swaps the dict for an empty one
and reads the old one:

- in one process, Space.collect() takes them from every reactor of the process
  (LocalReactors.served) when it must choose victims (and for the snapshot at
  shutdown);
- in a worker process, RecencyReporter does it on the reactor's own thread (a tick
  hook) every INTERVAL seconds while hits come, and sends the batch to the parent over
  the existing link (ipc SERVED frame).

Space.collect's swap takes no lock. In CPython 3.11 the reactor's `served[...] = t`
runs between two eval-breaker checks, so the GIL cannot pass to the swapping thread
between its load of `self.served` and the store; at worst one hit's time is lost (the
blob then looks one hit older than it is, which only changes eviction order).
"""

INTERVAL = 0.5     # seconds between a worker's reports


def take_served(reactor):
    """-> [(blob id, monotonic time)] recorded since the last take; empty ids dropped."""
    d = reactor.served
    reactor.served = {}
    d.pop("", None)          # CANNED entries (redirects, errors) have no blob
    return list(d.items())


class LocalReactors:
    """The reactors of this process, which the Space and the per-repo Downloads pull from
    (a worker's reactor reports over its link instead: RecencyReporter). Made before
    either of them, which take its `served` / `downloads` at construction; each reactor
    joins once it is built (app.Server)."""

    def __init__(self):
        self.reactors = []

    def join(self, reactor):
        self.reactors.append(reactor)

    def served(self):
        """-> [(blob id, monotonic time)] every reactor recorded since the last take."""
        out = []
        for r in self.reactors:
            out += take_served(r)
        return out

    def downloads(self):
        """-> [(cache key, packed value)] every reactor recorded since the last take."""
        out = []
        for r in self.reactors:
            d = r.downloads
            r.downloads = {}
            out += d.items()
        return out


class RecencyReporter:
    """Worker side: a tick hook of the worker's reactor (ReactorBase.tick_hooks), so the
    swap runs on the only thread that writes the dicts. At most one report per
    `interval`: a hit reaches the parent within `interval` and a tick of its record."""

    def __init__(self, reactor, send, interval=INTERVAL, send_downloads=None):
        self.reactor = reactor
        self.send = send             # callable([(blob id, time)])
        self.send_downloads = send_downloads   # callable([(cache key, packed)]), cache/downloads.py
        self.interval = interval
        self.due = 0.0               # monotonic time of the next report

    def __call__(self, now):
        """-> True while something waits to be reported (the reactor then ticks on time)."""
        r = self.reactor
        if not (r.served or r.downloads):
            return False
        if now < self.due:
            return True
        self.flush()
        self.due = now + self.interval
        return False

    def flush(self):
        """Send what was recorded since the last report."""
        r = self.reactor
        d, r.served = r.served, {}
        d.pop("", None)
        if d:
            self.send(list(d.items()))
        if self.send_downloads is not None:
            d, r.downloads = r.downloads, {}
            if d:
                self.send_downloads(list(d.items()))
