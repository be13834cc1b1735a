"""No client ends up with a complete body, or a complete range, whose bytes differ from
the Hub's (ADR 0012), while readers still stream from the part file as it fills.

The fake Hub flips one byte in the middle of one upstream body. Readers that joined the
fill received that byte; the digest check fails at the end and the blob is fetched once
more. What each kind of reader must see:
- a Range that ends before EOF: never a complete 206 before the blob is verified (its last
  byte waits), so it is cut short and its client asks again;
- a whole-file reader cut one byte short that resumes with `Range: bytes=<have>-` (as
  huggingface_hub, curl -C - and wget -c do): a 200 with the whole body, so it starts
  over instead of appending the right tail to a wrong head;
- a closed range asked later (hf_transfer's chunks, which a 200 would corrupt): 206.
"""

import hashlib
import os
import threading
import time

import pytest
import requests

from pulsys.testing.fake_hub import sha256_hex

SIZE = 4 * 1024 * 1024 + 3
BODY = os.urandom(SIZE)
SHA = sha256_hex(BODY)
URL = "/org/i/resolve/main/w.safetensors"


# what only the reactor decides runs in one layout; what crosses processes (fill
# progress, flags on entries, replies with a fill) in both
ONE_LAYOUT = {"test_curl_and_wget_resumes_of_a_suspect_blob_refuse_rather_than_append",
              "test_clean_fills_keep_streaming_before_they_complete"}


def pytest_generate_tests(metafunc):
    if "listeners" in metafunc.fixturenames:
        if metafunc.function.__name__ in ONE_LAYOUT:
            metafunc.parametrize("listeners", [1], ids=["1-listener"])
        else:
            metafunc.parametrize("listeners", [1, 2], ids=["1-listener", "2-listeners"])


@pytest.fixture
def corrupting(hub):
    hub.add_repo("org/i", files={"w.safetensors": BODY})
    hub.faults.throttle(6 * 1024 * 1024)        # the fill takes ~0.7 s: readers join it
    hub.faults.corrupt(times=1, match="/repos/")  # the first CDN body has one flipped byte
    return hub


def _read(srv, headers=None):
    """(status, bytes received, completed): completed = the body reached Content-Length."""
    try:
        r = requests.get(srv.url + URL, headers=headers or {}, stream=True, timeout=30)
    except requests.RequestException:
        return 0, b"", False
    got = bytearray()
    try:
        for chunk in r.raw.stream(65536, decode_content=False):
            got += chunk
    except Exception:                      # cut short: urllib3 ProtocolError / IncompleteRead
        return r.status_code, bytes(got), False
    return r.status_code, bytes(got), len(got) == int(r.headers["Content-Length"])


def _resuming_download(srv, tries=6):
    """Like huggingface_hub 2.x: after a short body, resume with `bytes=<have>-`; a 200
    to that restarts from byte 0; only the final size is checked."""
    have = b""
    for _ in range(tries):
        hdr = {"Range": "bytes=%d-" % len(have)} if have else {}
        st, got, done = _read(srv, hdr)
        if st == 200:
            have = got
        elif st == 206:
            have += got
        if done and len(have) == SIZE:
            return have
        time.sleep(0.05)
    raise AssertionError("download did not complete in %d tries" % tries)


def test_a_range_ending_before_eof_never_completes_with_unverified_bytes(corrupting, make_server):
    srv = make_server(corrupting)
    results = {}

    def whole():
        results["whole"] = _read(srv)
    t = threading.Thread(target=whole)
    t.start()
    time.sleep(0.15)                        # the fill runs; the range joins it
    first, last = 0, 3 * 1024 * 1024        # holds the flipped byte (the middle of the body)
    st, got, done = _read(srv, {"Range": "bytes=%d-%d" % (first, last)})
    t.join(30)
    assert st == 206
    assert not done or got == BODY[first:last + 1], "a complete 206 carried bytes the Hub never sent"
    assert not done, "the range completed before its blob was verified"
    # its client asks again and gets the verified bytes of the refetched blob
    st, got, done = _read(srv, {"Range": "bytes=%d-%d" % (first, last)})
    assert st == 206 and done and got == BODY[first:last + 1]
    assert corrupting.body_fetches(SHA) == 2          # the bad copy, then the good one


def test_a_resume_after_a_failed_verification_restarts_from_byte_0(corrupting, make_server):
    srv = make_server(corrupting)
    data = _resuming_download(srv)
    assert hashlib.sha256(data).hexdigest() == SHA, "right size, wrong bytes: a poisoned resume"


def test_after_a_failed_verification_closed_ranges_still_get_206_and_resumes_200(
        corrupting, make_server, tmp_path):
    cache = str(tmp_path / "c")
    srv = make_server(corrupting, cache_dir=cache)
    _resuming_download(srv)
    st, got, done = _read(srv, {"Range": "bytes=1000-1999"})        # hf_transfer's kind
    assert (st, got, done) == (206, BODY[1000:2000], True)
    st, got, done = _read(srv, {"Range": "bytes=0-"})               # nothing to restart
    assert (st, done) == (206, True) and got == BODY
    st, got, done = _read(srv, {"Range": "bytes=%d-" % (SIZE - 10)})
    assert (st, done) == (200, True) and got == BODY
    srv.stop()
    srv.shutdown()
    # remembered across a restart: an .incomplete file can be resumed days later
    srv = make_server(corrupting, cache_dir=cache)
    st, got, done = _read(srv, {"Range": "bytes=%d-" % (SIZE - 10)})
    assert (st, done) == (200, True) and got == BODY
    st, got, done = _read(srv, {"Range": "bytes=10-19"})
    assert (st, got) == (206, BODY[10:20])


def test_clean_fills_keep_streaming_before_they_complete(hub, make_server):
    """The common case is unchanged: a cold reader gets bytes long before the fill ends,
    and a blob that verified serves `bytes=N-` as 206."""
    hub.add_repo("org/i", files={"w.safetensors": BODY})
    hub.faults.throttle(3 * 1024 * 1024)
    srv = make_server(hub)
    t0 = time.monotonic()
    r = requests.get(srv.url + URL, stream=True, timeout=30)
    first = next(r.iter_content(65536))
    t_first = time.monotonic() - t0
    rest = b"".join(r.iter_content(1 << 20))
    t_all = time.monotonic() - t0
    hub.faults.clear()
    assert first + rest == BODY and t_first < t_all / 3, (t_first, t_all)
    st, got, done = _read(srv, {"Range": "bytes=%d-" % (SIZE - 10)})
    assert (st, got, done) == (206, BODY[-10:], True)


@pytest.mark.parametrize("tool", ["curl", "wget"])
def test_curl_and_wget_resumes_of_a_suspect_blob_refuse_rather_than_append(
        corrupting, make_server, tmp_path, tool):
    """What `curl -C -` and `wget -c` do with the 200 a suspect blob's resume gets: they
    refuse to resume and keep the partial file as it was, instead of appending the
    right tail to a possibly wrong head. Run again without resuming, they get it whole."""
    import shutil
    import subprocess
    exe = shutil.which(tool)
    if exe is None:
        pytest.fail("%s is not installed (Debian package %s)" % (tool, tool))
    srv = make_server(corrupting)
    _resuming_download(srv)                       # the fill failed verification once
    partial = bytearray(BODY[:SIZE // 2])
    partial[100] ^= 0xFF                          # what a cut reader may hold
    out = tmp_path / "w.safetensors"
    out.write_bytes(bytes(partial))
    url = srv.url + URL
    cmd = ([exe, "-sS", "-C", "-", "-o", str(out), url] if tool == "curl"
           else [exe, "-q", "-c", "-O", str(out), url])
    p = subprocess.run(cmd, capture_output=True, timeout=60, cwd=str(tmp_path))
    data = out.read_bytes()
    assert p.returncode != 0 or hashlib.sha256(data).hexdigest() == SHA, (p.returncode, p.stderr)
    assert data == bytes(partial) or data == BODY, (p.returncode, len(data), p.stderr)
    out.unlink()
    cmd = [exe, "-sS", "-o", str(out), url] if tool == "curl" else [exe, "-q", "-O", str(out), url]
    p = subprocess.run(cmd, capture_output=True, timeout=60, cwd=str(tmp_path))
    assert p.returncode == 0 and out.read_bytes() == BODY


def test_a_reader_that_got_no_body_byte_yet_waits_for_the_refetch(corrupting, make_server):
    """hf_transfer's first request, `bytes=0-0`: its one byte is its last, so it waits for
    the verified blob; when the fill fails verification it has received only a head,
    which the refetched blob answers the same way, so it is answered from the refetch
    instead of being cut (cut, hf_transfer fails the whole download)."""
    srv = make_server(corrupting)
    st, got, done = _read(srv, {"Range": "bytes=0-0"})
    assert (st, got, done) == (206, BODY[:1], True)
    assert corrupting.body_fetches(SHA) == 2          # it waited through the bad copy
    st, got, done = _read(srv, {"Range": "bytes=0-0"})
    assert (st, got, done) == (206, BODY[:1], True)


def test_readers_of_a_failed_fill_go_on_from_the_refetch_unless_they_got_a_wrong_byte(
        corrupting, make_server):
    """Every reader of the fill is in flight when verification fails (hf_transfer's
    chunks: more than 3 failing at once make it give up). Each is carried over to the
    refetch: the bytes it already sent are compared with the refetched ones, and only a
    reader that got the flipped byte (the middle of the body) is cut."""
    srv = make_server(corrupting)
    flip = SIZE // 2
    clean = (flip + 100_000, SIZE - 5000)           # after the flipped byte
    dirty = (flip - 100_000, flip + 100_000)        # holds it
    out = {}

    def read(name, span):
        out[name] = _read(srv, {"Range": "bytes=%d-%d" % span})
    ts = [threading.Thread(target=read, args=a) for a in (("clean", clean), ("dirty", dirty))]
    for t in ts:
        t.start()
    for t in ts:
        t.join(30)
    st, got, done = out["clean"]
    assert (st, done) == (206, True) and got == BODY[clean[0]:clean[1] + 1]
    st, got, done = out["dirty"]
    assert st == 206 and not done and got != BODY[dirty[0]:dirty[1] + 1][:len(got)]
    v = srv.vars()
    assert v["carried_over"] >= 1 and v["carry_cuts"] >= 1, v


def test_an_open_ended_resume_in_flight_when_verification_fails_is_cut_not_carried_over(
        corrupting, make_server):
    """`bytes=N-` is how a client resumes a body it holds the first N bytes of; if those
    came from this fill, they may be wrong whatever this response sends (seen in a fault
    run: the byte flipped before N, the resume joined the fill before it failed). So such
    a reader is cut rather than carried over, and its next resume gets the whole body."""
    srv = make_server(corrupting)
    start = SIZE // 2 + 100_000                    # after the flipped byte
    st, got, done = _read(srv, {"Range": "bytes=%d-" % start})
    assert st == 206 and not done and got == BODY[start:start + len(got)]
    st, got, done = _read(srv, {"Range": "bytes=%d-" % start})
    assert (st, done) == (200, True) and got == BODY            # starts over from byte 0
