"""One upstream question at a time per key: concurrent askers wait for the first.

`join(key)` returns (flight, True) to the first caller, who must call `end(key, flight)`
when done, and (the same flight, False) to callers arriving meanwhile, who wait on it.
The leader may `set()` the flight early, as soon as what it learned is published, so the
others stop waiting before it finishes (a fill streams for minutes after its metadata
is known). Runs on pool threads only.
"""

import threading


class Flights:
    def __init__(self):
        self._lock = threading.Lock()
        self._flights = {}

    def join(self, key):
        with self._lock:
            f = self._flights.get(key)
            if f is not None:
                return f, False
            f = self._flights[key] = threading.Event()
            return f, True

    def end(self, key, flight):
        with self._lock:
            if self._flights.get(key) is flight:
                del self._flights[key]
        flight.set()

    def __len__(self):
        return len(self._flights)
