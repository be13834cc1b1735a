"""The Hub's rate limit as this cache meets it (issue 16; hf-protocol.md §6, §9).

The Hub limits requests per identity and answers 429 with how long to wait: a
`Retry-After` header (delta-seconds or an HTTP-date, RFC 9110 §10.2.3) or a `RateLimit`
header whose `t` is the seconds until the window resets (`"api";r=0;t=55`;
draft-ietf-httpapi-ratelimit-headers, what huggingface_hub 2.x reads). A cache that
asked again for every client request meanwhile would make a retry storm of its own
clients' retries, each answered 429 and each pushing the window out. So after a 429
nothing is asked upstream for metadata until that time has passed: a cached copy is
served however old (counted as stale), and a request nothing cached answers gets a 429
of pulsys's own with `Retry-After`, which huggingface_hub honours before it retries.
"""

import email.utils
import math
import re
import threading
import time

DEFAULT_WAIT = 5.0       # a 429 that names no time
MAX_WAIT = 900.0         # a longer named wait is taken as this (a clock skew or a typo)
_RATELIMIT_T = re.compile(r"(?:^|;)\s*t\s*=\s*(\d+)")
_RATELIMIT_R = re.compile(r"(?:^|;)\s*r\s*=\s*(\d+)")


def wait_of(headers, now_wall):
    """Seconds a 429's headers say to wait (DEFAULT_WAIT when they say nothing usable),
    within [0, MAX_WAIT]."""
    ra = headers.get("Retry-After")
    if ra:
        ra = ra.strip()
        if ra.isdigit():
            return min(float(ra), MAX_WAIT)
        try:
            when = email.utils.parsedate_to_datetime(ra)
        except (TypeError, ValueError):
            when = None
        if when is not None and when.tzinfo is not None:
            return min(max(0.0, when.timestamp() - now_wall), MAX_WAIT)
    rl = headers.get("RateLimit")
    if rl:
        t, r = _RATELIMIT_T.search(rl), _RATELIMIT_R.search(rl)
        if t is not None and (r is None or r.group(1) == "0"):
            return min(float(t.group(1)), MAX_WAIT)
    return DEFAULT_WAIT


class RateLimit:
    """Until when the Hub is not to be asked (one identity: the service token)."""

    def __init__(self, clock=time.monotonic, wall=time.time):
        self.clock, self.wall = clock, wall
        self.until = 0.0
        self.lock = threading.Lock()

    def note(self, headers):
        """A 429 arrived with these headers. -> the seconds from now it asks for."""
        wait = wait_of(headers, self.wall())
        with self.lock:
            self.until = max(self.until, self.clock() + wait)
        return wait

    def left(self):
        """Seconds until the Hub may be asked again; 0.0 when it may be now."""
        until = self.until
        if not until:
            return 0.0
        left = until - self.clock()
        return left if left > 0 else 0.0


def retry_after(left):
    """The Retry-After value (whole seconds, at least 1) for `left` seconds."""
    return str(max(1, math.ceil(left)))
