"""Last-served times from reactors to the Space that evicts (docs/decisions/0008).

A reactor records a warm hit with one dict store, `self.served[entry.blob_id] = t0`,
into a dict only it writes. Whoever needs the times swaps the dict for an empty one
and reads the old one:

- in one process, Space.collect() takes them from every reactor of the process
  (LocalReactors.served) when it must choose victims (and for the snapshot at
  shutdown);
- in a worker process, RecencyReporter does it every INTERVAL seconds and sends the
  batch to the parent over the existing link (ipc SERVED frame).

The swap takes no lock. In CPython 3.11 the reactor's `served[...] = t` runs between
two eval-breaker checks, so the GIL cannot pass to the swapping thread between its
load of `self.served` and the store. The reporter also reads each swapped dict one
interval later, so even a store that did land in the old dict after the swap is read;
take_served reads at once, and at worst one hit's time is lost (the blob then looks
one hit older than it is, which only changes eviction order).
"""

import threading

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


class RecencyReporter(threading.Thread):
    """Worker side: every `interval`, swap the reactor's dict and send the previous one."""

    def __init__(self, reactor, send, interval=INTERVAL, send_downloads=None):
        super().__init__(name="pulsys-recency", daemon=True)
        self.reactor = reactor
        self.send = send             # callable([(blob id, time)])
        self.send_downloads = send_downloads   # callable([(cache key, packed)]), cache/downloads.py
        self.interval = interval
        self.halt = threading.Event()
        self._prev = {}
        self._prev_dl = {}

    def tick(self):
        r = self.reactor
        prev, self._prev = self._prev, r.served
        r.served = {}
        prev.pop("", None)
        if prev:
            self.send(list(prev.items()))
        if self.send_downloads is not None:     # the same swap, one interval late, as above
            prev, self._prev_dl = self._prev_dl, r.downloads
            r.downloads = {}
            if prev:
                self.send_downloads(list(prev.items()))

    def run(self):
        while not self.halt.wait(self.interval):
            self.tick()
        self.tick()
        self.tick()
