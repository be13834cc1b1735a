from pulsys.http1.heads import prepare
from pulsys.model.entry import CANNED, FILE, Entry
from pulsys.model.request import RequestHead
from pulsys.warm import WarmPlan, plan_warm

SHA256 = "a" * 64
COMMIT = "c" * 40


def entry(blob="/blob", size=1000):
    e = Entry(FILE, "k", size, SHA256, COMMIT, True, "sha256/" + SHA256, blob)
    prepare(e)
    return e


def head(method="GET", rng=None, inm=None, ka=True, if_range=None):
    h = RequestHead()
    h.method, h.range, h.if_none_match, h.keep_alive = method, rng, inm, ka
    h.if_range = if_range
    return h


def plan(h, e):
    p = WarmPlan()
    ok = plan_warm(h, e, p)
    return ok, p


def test_full_get_has_hf_headers_and_the_whole_body():
    ok, p = plan(head(), entry())
    assert ok and p.status == 200 and (p.offset, p.count) == (0, 1000)
    text = p.head.decode()
    assert text.startswith("HTTP/1.1 200 OK\r\n") and text.endswith("\r\n\r\n")
    for line in ("X-Repo-Commit: " + COMMIT, 'X-Linked-Etag: "%s"' % SHA256, "X-Linked-Size: 1000",
                 'ETag: "%s"' % SHA256, "Content-Length: 1000", "Accept-Ranges: bytes",
                 "Connection: keep-alive"):
        assert line + "\r\n" in text


def test_head_sends_no_body_but_the_same_length():
    ok, p = plan(head("HEAD"), entry())
    assert ok and p.count == 0 and b"Content-Length: 1000\r\n" in p.head


def test_range_206_and_clamped_end():
    ok, p = plan(head(rng="bytes=990-5000"), entry())
    assert ok and p.status == 206 and (p.offset, p.count) == (990, 10)
    assert b"Content-Range: bytes 990-999/1000\r\n" in p.head and b"Content-Length: 10\r\n" in p.head


def test_zero_zero_range_gives_size():
    ok, p = plan(head(rng="bytes=0-0"), entry())
    assert p.status == 206 and p.count == 1 and b"bytes 0-0/1000" in p.head


def test_416_unsatisfiable():
    ok, p = plan(head(rng="bytes=1000-"), entry())
    assert ok and p.status == 416 and p.count == 0 and b"Content-Range: bytes */1000\r\n" in p.head


def test_if_none_match_304_wins_over_range():
    ok, p = plan(head(rng="bytes=0-1", inm='"%s"' % SHA256), entry())
    assert ok and p.status == 304 and p.count == 0 and b"Content-Length" not in p.head


def test_if_range_with_the_entrys_etag_keeps_the_range():
    ok, p = plan(head(rng="bytes=990-", if_range='"%s"' % SHA256), entry())
    assert ok and p.status == 206 and (p.offset, p.count) == (990, 10)


def test_if_range_that_does_not_match_sends_the_whole_body():
    for validator in ('"%s"' % ("b" * 64), "W/\"%s\"" % SHA256, SHA256, '"%s' % SHA256, "",
                      "Sat, 29 Oct 1994 19:43:31 GMT"):
        for rng in ("bytes=990-", "bytes=0-0", "bytes=1000-", "bytes=x"):   # 206, 206, 416, 416
            ok, p = plan(head(rng=rng, if_range=validator), entry())
            assert ok and p.status == 200 and (p.offset, p.count) == (0, 1000), (validator, rng)
            assert b"Content-Range" not in p.head
        ok, p = plan(head("HEAD", rng="bytes=0-0", if_range=validator), entry())
        assert p.status == 200 and b"Content-Length: 1000\r\n" in p.head
        e = small_entry()
        ok, p = plan(head(rng="bytes=2-4", if_range=validator), e)
        assert p.status == 200 and p.head.endswith(b"\r\n\r\n0123456789")


def test_if_range_without_range_changes_nothing_and_304_still_wins():
    ok, p = plan(head(if_range='"other"'), entry())
    assert p.status == 200 and p.count == 1000
    ok, p = plan(head(rng="bytes=0-1", inm='"%s"' % SHA256, if_range='"other"'), entry())
    assert p.status == 304


def test_connection_close_variant():
    ok, p = plan(head(ka=False), entry())
    assert p.head.endswith(b"Connection: close\r\n\r\n")


def test_get_without_blob_is_a_miss_but_head_is_answered():
    assert plan(head(), entry(blob=None))[0] is False
    assert plan(head("HEAD"), entry(blob=None))[0] is True


def test_canned_redirect_kept_verbatim_and_head_has_no_body():
    e = Entry(CANNED, "k", status=307, headers=(("Location", "/api/resolve-cache/x?a=%2F&b="),), body=b"")
    ok, p = plan(head(), e)
    assert ok and p.status == 307 and b"Location: /api/resolve-cache/x?a=%2F&b=\r\n" in p.head
    e2 = Entry(CANNED, "k", status=404, headers=(("X-Error-Code", "EntryNotFound"),), body=b"{}")
    ok, p = plan(head("HEAD"), e2)
    assert p.body == b"" and b"Content-Length: 2\r\n" in p.head
    ok, p = plan(head(), e2)
    assert p.body == b"{}"


def test_header_values_from_upstream_cannot_inject_lines():
    e = Entry(CANNED, "k", status=307, headers=(("Location", "/x\r\nSet-Cookie: a=b"),))
    ok, p = plan(head(), e)
    assert b"\r\nSet-Cookie" not in p.head


def small_entry(body=b"0123456789"):
    e = Entry(FILE, "k", len(body), SHA256, COMMIT, True, "sha256/" + SHA256, "/blob")
    e.body_mem = body
    prepare(e)
    return e


def test_small_body_in_memory_is_one_send_for_200_and_a_slice_for_206():
    e = small_entry()
    ok, p = plan(head(), e)
    assert ok and p.count == 0 and p.head.endswith(b"\r\n\r\n0123456789")
    ok, p = plan(head(rng="bytes=2-4"), e)
    assert ok and p.status == 206 and p.count == 0 and p.body == b"234"
    ok, p = plan(head("HEAD"), e)
    assert ok and p.count == 0 and p.head.endswith(b"\r\n\r\n") and p.body == b""
