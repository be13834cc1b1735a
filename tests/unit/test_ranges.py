import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pulsys.http1.ranges import UNSATISFIABLE, etag_matches, parse_range


@pytest.mark.parametrize("value,size,want", [
    ("bytes=0-0", 100, (0, 0)),
    ("bytes=0-99", 100, (0, 99)),
    ("bytes=10-", 100, (10, 99)),
    ("bytes=90-1000", 100, (90, 99)),          # hf_transfer's last chunk ends past EOF
    ("bytes=-10", 100, (90, 99)),
    ("bytes=-1000", 100, (0, 99)),
    ("bytes=100-", 100, UNSATISFIABLE),
    ("bytes=100-200", 100, UNSATISFIABLE),
    ("bytes=-0", 100, UNSATISFIABLE),
    ("bytes=0-0", 0, UNSATISFIABLE),
    ("BYTES=1-2", 100, (1, 2)),
    (" bytes=1 - 2 ", 100, (1, 2)),           # OWS tolerated
    ("bytes=0-1,5-6", 100, None),              # multi-range: ignored, whole body (200)
    ("bytes=0-,0-,0-", 100, None),
    ("bytes=0-1,junk", 100, None),
    ("items=0-1", 100, None),                  # unknown unit: MUST be ignored (RFC 9110 §14.2)
    ("bytes=5-1", 100, UNSATISFIABLE),         # invalid single ranges: 416, never a 200
    ("bytes=a-b", 100, UNSATISFIABLE),
    ("bytes=-", 100, UNSATISFIABLE),
    ("bytes=5", 100, UNSATISFIABLE),
    ("bytes=", 100, UNSATISFIABLE),
    ("bytes=١-٢", 100, UNSATISFIABLE),         # non-ASCII digits are not digits here
    ("bytes=1²-", 100, UNSATISFIABLE),
    (None, 100, None),
])
def test_parse_range(value, size, want):
    assert parse_range(value, size) == want


HUGE = "9" * 25                   # > 2**64
ENORMOUS = "9" * 5000             # int() of this raises ValueError on CPython 3.11+


@pytest.mark.parametrize("value,want", [
    ("bytes=%s-" % HUGE, UNSATISFIABLE),
    ("bytes=%s-%s" % (HUGE, HUGE), UNSATISFIABLE),
    ("bytes=%s-" % ENORMOUS, UNSATISFIABLE),
    ("bytes=18446744073709551616-", UNSATISFIABLE),    # 2**64
    ("bytes=9223372036854775808-", UNSATISFIABLE),     # 2**63
    ("bytes=0-%s" % HUGE, (0, 99)),                    # an end past EOF is clamped
    ("bytes=0-%s" % ENORMOUS, (0, 99)),
    ("bytes=-%s" % HUGE, (0, 99)),                     # a suffix longer than the body
    ("bytes=-%s" % ENORMOUS, (0, 99)),
    ("bytes=10-%s" % HUGE, (10, 99)),
    ("bytes=-0000", UNSATISFIABLE),
    ("bytes=--5", UNSATISFIABLE),                      # negative numbers
    ("bytes=-5-10", UNSATISFIABLE),
    ("bytes=5--1", UNSATISFIABLE),
    ("bytes=+5-10", UNSATISFIABLE),
    ("bytes=0x10-", UNSATISFIABLE),
    ("bytes=1e3-", UNSATISFIABLE),
])
def test_huge_negative_and_overflowing_ranges_are_416_or_clamped(value, want):
    assert parse_range(value, 100) == want


def test_etag_matches():
    assert etag_matches('"abc"', "abc")
    assert etag_matches('W/"abc"', "abc")
    assert etag_matches('"x", "abc"', "abc")
    assert etag_matches("*", "abc")
    assert not etag_matches('"abd"', "abc")
    assert not etag_matches(None, "abc")


RANGE_SOUP = st.lists(st.sampled_from(["bytes=", "BYTES=", "items=", "-", ",", " ", "0", "1", "9",
                                       "99999999999999999999", "+", "a", "²", "١"]), max_size=12)


@settings(max_examples=500, deadline=None)
@given(RANGE_SOUP.map("".join), st.integers(min_value=0, max_value=1 << 63))
def test_parse_range_never_raises_and_every_range_it_returns_is_inside_the_body(value, size):
    r = parse_range(value, size)
    assert r is None or r == UNSATISFIABLE or (isinstance(r, tuple) and 0 <= r[0] <= r[1] < size)
