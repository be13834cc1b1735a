"""Per-repo download totals outlast restarts: loaded from the store's counters table at
start, increments added to it every SAVE_INTERVAL seconds and at shutdown (one upsert
per repo that changed; db/counters.py). Several pulsys sharing a Postgres database add
their increments to the same rows, so /api/v1/stats shows what this instance counted
since it started on top of the fleet's totals as they were then."""

import threading

from pulsys.db import counters
from pulsys.db.database import DatabaseError

SAVE_INTERVAL = 30.0


class RepoStatsSaver:
    def __init__(self, db, downloads, log, interval=SAVE_INTERVAL):
        self.db = db
        self.downloads = downloads      # cache.downloads.Downloads
        self.log = log
        self.interval = interval
        self.halt = threading.Event()
        self.thread = threading.Thread(target=self._main, name="pulsys-repo-stats", daemon=True)

    def load(self):
        try:
            with self.db.transaction(write=False) as tx:
                self.downloads.load(counters.repo_stats(tx))
        except DatabaseError as e:
            self.log.warning("saved download statistics not loaded", error=str(e))

    def save(self):
        unsaved = self.downloads.take_unsaved()
        if not unsaved:
            return
        try:
            with self.db.transaction() as tx:
                counters.add_repo_stats(tx, unsaved)
        except DatabaseError as e:
            self.downloads.restore(unsaved)      # kept for the next try
            self.log.warning("download statistics not saved", error=str(e))

    def start(self):
        self.thread.start()
        return self

    def _main(self):
        while not self.halt.wait(self.interval):
            self.save()

    def stop(self):
        self.halt.set()
        if self.thread.is_alive():
            self.thread.join(timeout=5)
        self.save()
