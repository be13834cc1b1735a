"""The bound on negative entries: CANNED 4xx answers in the index (EntryNotFound,
RepoNotFound, ...). A client may ask for any number of paths that do not exist, and each
answer is cached (docs/architecture.md "What is cached"), so without a bound a scan of
a million made-up names would grow the index without limit.

Negatives keeps their keys in least-recently-used order and says which to drop once
there are more than `cap` (--max-negative-entries); the upstream service removes those
from the index (which every process reads). "Used" means published, or answered by the upstream plane
(pool threads): a warm hit in a reactor is not reported, so an entry that only reactors
answer ages as if idle, and when it is dropped the next request asks upstream once and
caches it again. Thread-safe; imports only model.
"""

import threading
from collections import OrderedDict

from pulsys.model.entry import CANNED


def is_negative(entry):
    return is_negative_record(entry.kind, entry.status) and bool(entry.key)


def is_negative_record(kind, status):
    return kind == CANNED and 400 <= status < 500 and status != 429


class Negatives:
    def __init__(self, cap):
        self.cap = cap
        self._keys = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self):
        return len(self._keys)

    def note(self, entry):
        """`entry` was published (or answered): -> keys to drop, oldest first. A positive
        entry under a key that held a negative one takes it off the list."""
        key = entry.key
        with self._lock:
            keys = self._keys
            if not is_negative(entry):
                if keys:
                    keys.pop(key, None)
                return ()
            keys[key] = None
            keys.move_to_end(key)
            victims = []
            while len(keys) > self.cap:
                victims.append(keys.popitem(last=False)[0])
            return victims

    def note_key(self, key):
        """A negative entry under `key` is in the index (the scan at start)."""
        with self._lock:
            keys = self._keys
            keys[key] = None
            victims = []
            while len(keys) > self.cap:
                victims.append(keys.popitem(last=False)[0])
            return victims

    def discard(self, key):
        with self._lock:
            self._keys.pop(key, None)
