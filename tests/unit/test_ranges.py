import pytest

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
    ("bytes=5-1", 100, None),                  # invalid: ignored, whole body
    ("bytes=0-1,5-6", 100, None),              # multi-range: ignored
    ("items=0-1", 100, None),
    ("bytes=a-b", 100, None),
    ("bytes=-", 100, None),
    ("bytes=١-٢", 100, None),                  # non-ASCII digits are not digits here
    (None, 100, None),
])
def test_parse_range(value, size, want):
    assert parse_range(value, size) == want


def test_etag_matches():
    assert etag_matches('"abc"', "abc")
    assert etag_matches('W/"abc"', "abc")
    assert etag_matches('"x", "abc"', "abc")
    assert etag_matches("*", "abc")
    assert not etag_matches('"abd"', "abc")
    assert not etag_matches(None, "abc")
