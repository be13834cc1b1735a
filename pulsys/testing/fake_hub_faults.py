"""Fault switches of the fake Hub: broken, slow or wrong answers on demand.

The body faults reproduce what clients meet in the field and react to
differently (hf-protocol.md §6): a premature EOF (2.4.0 resumes with `Range`,
0.36.2 fails), a TCP RST mid-body (neither retries), a stall, a slow link, a
5xx, and silently corrupted bytes (no client checks the sha256, §2.1).

Body faults apply to responses that carry blob bytes (resolve-cache and CDN
GETs); `status` applies to any request on either origin. Each is limited to
`times` responses (None = until cleared) and to targets (path?query) that
contain `match`. Thread-safe.
"""

import threading
from typing import NamedTuple


class BodyPlan(NamedTuple):
    """What to do to one blob body: `kind` is None, "drop", "reset", "hang" or "corrupt"."""

    kind: object = None
    nbytes: int = 0
    seconds: float = 0.0
    rate: float = 0.0  # bytes per second; 0 = unthrottled


NO_FAULT = BodyPlan()


class _Fault:
    __slots__ = ("kind", "nbytes", "seconds", "rate", "code", "times", "match", "headers")

    def __init__(self, kind, times, match, nbytes=0, seconds=0.0, rate=0.0, code=0, headers=()):
        if times is not None and times < 1:
            raise ValueError("times must be >= 1 or None")
        if nbytes < 0 or seconds < 0:
            raise ValueError("nbytes and seconds must be >= 0")
        self.kind, self.times, self.match = kind, times, match
        self.nbytes, self.seconds, self.rate, self.code = nbytes, seconds, rate, code
        self.headers = tuple(headers)

    def matches(self, target):
        return self.match is None or self.match in target


class Faults:
    def __init__(self):
        self._lock = threading.Lock()
        self._faults = []

    def drop_after(self, nbytes, times=1, match=None):
        """Send the head and `nbytes` of body, then close cleanly (FIN): a premature EOF."""
        self._add(_Fault("drop", times, match, nbytes=nbytes))

    def reset_after(self, nbytes, times=1, match=None):
        """Send the head and `nbytes` of body, then abort with a TCP RST (SO_LINGER 0)."""
        self._add(_Fault("reset", times, match, nbytes=nbytes))

    def hang_after(self, nbytes, seconds, times=1, match=None):
        """Send `nbytes` of body, stall `seconds` (cut short by stop()), then send the rest."""
        self._add(_Fault("hang", times, match, nbytes=nbytes, seconds=seconds))

    def throttle(self, bytes_per_second, match=None):
        """Pace matching blob bodies at `bytes_per_second` until cleared."""
        if bytes_per_second <= 0:
            raise ValueError("bytes_per_second must be > 0")
        self._add(_Fault("throttle", None, match, rate=float(bytes_per_second)))

    def status(self, code, times=1, match=None, headers=()):
        """Answer `code` (e.g. 500/502/503) with a small JSON body instead of the real
        response, with these extra headers (a 429's `Retry-After` or `RateLimit`)."""
        if not 200 <= code <= 599:
            raise ValueError("status code must be 200..599")
        self._add(_Fault("status", times, match, code=code, headers=headers))

    def slow(self, seconds, times=None, match=None):
        """Wait `seconds` before answering a matching request (any route): a slow Hub, so
        that concurrent requests overlap."""
        self._add(_Fault("slow", times, match, seconds=seconds))

    def take_delay(self, target):
        """Seconds to wait before answering this request (0.0: none); consumes one use."""
        with self._lock:
            fault = self._take(target, ("slow",))
            return fault.seconds if fault else 0.0

    def corrupt(self, times=1, match=None):
        """Flip one byte in the middle of the body actually sent (a range is corrupted within itself)."""
        self._add(_Fault("corrupt", times, match))

    def clear(self):
        with self._lock:
            self._faults.clear()

    def take_status(self, target):
        """The injected (status, headers) for this request, or None; consumes one use."""
        with self._lock:
            fault = self._take(target, ("status",))
            return (fault.code, fault.headers) if fault else None

    def take_body(self, target):
        """The BodyPlan for one blob body response; consumes one use of a body fault."""
        with self._lock:
            if not self._faults:
                return NO_FAULT
            rate = 0.0
            for f in self._faults:
                if f.kind == "throttle" and f.matches(target):
                    rate = f.rate
            fault = self._take(target, ("drop", "reset", "hang", "corrupt"))
            if fault is None:
                return BodyPlan(rate=rate) if rate else NO_FAULT
            return BodyPlan(fault.kind, fault.nbytes, fault.seconds, rate)

    def _add(self, fault):
        with self._lock:
            self._faults.append(fault)

    def _take(self, target, kinds):
        for f in self._faults:
            if f.kind in kinds and f.matches(target):
                if f.times is not None:
                    f.times -= 1
                    if f.times == 0:
                        self._faults.remove(f)
                return f
        return None
