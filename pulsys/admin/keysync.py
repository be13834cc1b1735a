"""Keeps a process's key Gate, and its workers', equal to the store's active keys.

refresh() reads the `keys` generation counter and, when it moved, the active keys, then
loads them into the Gate and hands them to `publish(table, generation)` (the parent
broadcasts them to its worker processes and waits, bounded, until each has applied
them). The admin API calls refresh() right after it changes a key, so when it answers,
the change is in force in every local process; the thread
polls every `interval` seconds for changes made elsewhere (another pulsys on the same
Postgres, `pulsys keys` on the store). Why this design: docs/decisions/0009.

When the store is unreachable the last table stays in force (fail static) and one
warning is logged per outage.
"""

import threading

from pulsys.db.database import DatabaseError
from pulsys.log import get_logger

POLL_INTERVAL = 0.5     # seconds; a revocation made elsewhere is in force within this + a broadcast


class KeySync:
    def __init__(self, service, gate, publish=None, interval=POLL_INTERVAL):
        self.service = service
        self.gate = gate
        self.publish = publish
        self.interval = interval
        self.generation = None
        self._lock = threading.Lock()
        self._halt = threading.Event()
        self._thread = None
        self._failing = False
        self.log = get_logger("keysync")

    def refresh(self, force=False):
        """Load the active keys if they changed (or `force`). -> True when loaded now."""
        with self._lock:
            gen = self.service.generation()
            if gen == self.generation and not force:
                return False
            gen, table = self.service.snapshot()
            self.gate.load(table)
            self.generation = gen
            if self.publish is not None:
                self.publish(table, gen)
            return True

    def start(self, publish=None):
        """Poll the store in a thread; each new table also goes to `publish(table, generation)`."""
        self.publish = publish
        self._thread = threading.Thread(target=self._run, name="pulsys-keysync", daemon=True)
        self._thread.start()
        return self

    def _run(self):
        while not self._halt.wait(self.interval):
            try:
                self.refresh()
                if self._failing:
                    self._failing = False
                    self.log.info("key store reachable again")
            except DatabaseError as e:
                if not self._failing:
                    self._failing = True
                    self.log.warning("cannot read keys; the last known keys stay in force", reason=str(e))
            except Exception:
                self.log.exception("key refresh failed")

    def stop(self):
        self._halt.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
