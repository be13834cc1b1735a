"""Throughput over time: a thread that samples the counters pulsys already keeps every
--history-interval seconds and adds what they grew by to the store's rings of buckets
(db/history.py), and GET /api/v1/history, which reads them back for the console's
charts (docs/admin.md, "Charts over time").

The warm path does nothing for this: the sampler sums the same counter lists /debug/vars
sums (one per reactor, worker row and pool thread) on its own thread. What it could not
write (the store down) is kept per minute and written into its own buckets at the next
sample, for as long as those buckets are inside the hour ring.
"""

import re
import threading
import time

from pulsys import metrics as M
from pulsys.admin.errors import bad_request
from pulsys.db import history
from pulsys.db.database import DatabaseError

SAMPLE_INTERVAL = 10.0
# each stored field and the counter it is taken from
COUNTERS = {"bytes_served": M.BYTES_SERVED, "upstream_body_bytes": M.UPSTREAM_BODY_BYTES,
            "hits": M.CACHE_HITS, "misses": M.CACHE_MISSES, "fills_started": M.FILLS_STARTED}
_MINUTE = history.RINGS["hour"][0]
_KEEP = history.RINGS["hour"][0] * history.RINGS["hour"][1]     # seconds unsaved samples are kept


class HistorySampler:
    """counter_lists(): the lists of counters to sum (they start at zero with the process,
    so the first sample adds everything counted since the start)."""

    def __init__(self, db, counter_lists, log, interval=SAMPLE_INTERVAL, clock=time.time):
        self.db = db
        self.counter_lists = counter_lists
        self.log = log
        self.interval = interval
        self.clock = clock
        self.last = dict.fromkeys(COUNTERS, 0)
        self.unsaved = {}               # minute bucket start: {field: increment}
        self.halt = threading.Event()
        self.stopped = False
        self.lock = threading.Lock()    # sample() runs on the thread and once more at stop()
        self.thread = threading.Thread(target=self._main, name="pulsys-history", daemon=True)

    def sample(self):
        with self.lock:
            totals = M.summed(self.counter_lists())
            now = self.clock()
            grown = {}
            for field, i in COUNTERS.items():
                # a counter never goes down; if one did, count from where it is now
                grown[field] = max(0, totals[i] - self.last[field])
                self.last[field] = totals[i]
            if any(grown.values()):
                slot = self.unsaved.setdefault(history.bucket_of(now, _MINUTE), dict.fromkeys(COUNTERS, 0))
                for field, n in grown.items():
                    slot[field] += n
            self._save(now)

    def _save(self, now):
        if not self.unsaved:
            return
        try:
            with self.db.transaction() as tx:
                for at, deltas in sorted(self.unsaved.items()):
                    history.add(tx, at, deltas)
        except DatabaseError as e:
            self.unsaved = {at: d for at, d in self.unsaved.items() if at > now - _KEEP}
            self.log.warning("throughput history not saved", error=str(e))
            return
        self.unsaved = {}

    def start(self):
        self.thread.start()
        return self

    def _main(self):
        while not self.halt.wait(self.interval):
            self.sample()

    def stop(self):
        """Stop the thread and take a last sample; later calls do nothing (the server
        stops it while its counters can still be read, then the plane stops it again)."""
        if self.stopped:
            return
        self.stopped = True
        self.halt.set()
        if self.thread.is_alive():
            self.thread.join(timeout=5)
        self.sample()


def _bucket(b):
    seen = b["hits"] + b["misses"]
    return {**b, "hit_ratio": round(b["hits"] / seen, 4) if seen else None}


def get_history(api, req):
    """GET /api/v1/history[?window=hour|day]."""
    window = req.arg("window")
    if window is not None and window not in history.RINGS:
        raise bad_request("query parameter window=%r: choose one of %s" % (window, ", ".join(history.RINGS)))
    now = time.time()
    with api.history.db.transaction(write=False) as tx:
        doc = {"now": round(now, 3), "sample_seconds": api.history.interval}
        for ring, (width, _) in history.RINGS.items():
            if window in (None, ring):
                doc[ring] = {"resolution_seconds": width, "buckets": [_bucket(b) for b in history.series(tx, ring, now)]}
    return 200, doc


HISTORY_ROUTES = (("GET", re.compile(r"/api/v1/history"), get_history, "admin"),)
