"""How long a 429 says to wait (upstream/ratelimit.py): Retry-After as seconds or an
HTTP-date, the RateLimit header's t when no requests are left, bounded."""

import pytest

from pulsys.upstream.ratelimit import DEFAULT_WAIT, MAX_WAIT, RateLimit, retry_after, wait_of


@pytest.mark.parametrize("headers, wait", [
    ({"Retry-After": "17"}, 17.0),
    ({"Retry-After": "Thu, 01 Jan 1970 00:01:40 GMT"}, 40.0),       # an HTTP-date, 40 s ahead
    ({"RateLimit": '"api";r=0;t=55'}, 55.0),
    ({"RateLimit": '"api";r=12;t=55'}, DEFAULT_WAIT),                # requests left: no wait named
    ({"Retry-After": "soon"}, DEFAULT_WAIT),
    ({"Retry-After": "99999"}, MAX_WAIT),
    ({}, DEFAULT_WAIT),
])
def test_the_wait_a_429_names(headers, wait):
    assert wait_of(headers, 60.0) == wait


def test_the_window_runs_on_the_clock_it_is_given():
    now = [100.0]
    rl = RateLimit(clock=lambda: now[0], wall=lambda: 0.0)
    assert rl.left() == 0.0
    assert rl.note({"Retry-After": "3"}) == 3.0 and rl.left() == 3.0
    rl.note({"Retry-After": "1"})                  # a shorter wait does not shorten the window
    now[0] = 102.5
    assert rl.left() == 0.5 and retry_after(rl.left()) == "1"
    now[0] = 103.0
    assert rl.left() == 0.0
