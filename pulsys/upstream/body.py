"""A fill's body bytes, read straight into one buffer per fetcher.

urllib3's `stream(n)` hands out each chunk as a new bytes object, made by http.client's
`read(n)` (a bytearray, then a copy into bytes) and urllib3's own buffer: two copies of
every byte above the one from the socket, and an allocation per chunk. Measured on
loopback from a sendfile origin, 512 MiB: 0.74 s of client CPU per GB with
`stream(256 KiB)`, 0.38 s with `readinto` into a reused 1 MiB buffer (the kernel's copy
is most of what is left). So for a body that is neither chunked nor content-encoded,
`views()` reads the http.client response under urllib3's (`resp.raw._fp`, keeping its
`length` up to date) into the fetcher's buffer and yields memoryviews of it; anything
else goes through urllib3 as before. A view is valid until the next one is asked for:
it is written and hashed first.

Each view holds what one or more `readinto1` calls (one recv each) brought, until a goal
that starts at 64 KiB and doubles up to the buffer's size: a first view of 1 MiB from a
CDN pacing 50 MB/s would hold the first byte back 20 ms, 64 KiB holds it 1.3 ms. What
arrived before a timeout or a reset is yielded before the error, so a resume starts
after the last byte received, as with urllib3's chunks.

Errors are urllib3's, as with `stream()`: a socket error or timeout is a ProtocolError /
ReadTimeoutError; a body cut short before its Content-Length ends the views early, and
the fill resumes it as before. A body read to its end gives its connection back to the
pool (what urllib3 does at the end of `stream()`), so the next piece reuses it rather
than connecting (and, over TLS, shaking hands) again.
"""

import http.client
import socket

import urllib3.exceptions as X

FIRST_READ = 64 * 1024
BUFFER = 1 << 20


def new_buffer():
    return memoryview(bytearray(BUFFER))


def views(resp, wanted, buf):
    """Yield the body of requests.Response `resp` (streamed) as memoryviews of `buf`, each
    at most `wanted()` bytes (what the caller still wants, asked before every read: a
    fill's piece can be cut short meanwhile); or, where readinto cannot be used, as
    urllib3's chunks."""
    raw = resp.raw
    fp = getattr(raw, "_fp", None)
    encoded = bool(resp.headers.get("Content-Encoding", "").strip())
    br = getattr(fp, "fp", None)
    if (encoded or not isinstance(fp, http.client.HTTPResponse) or fp.chunked or fp.length is None
            or not hasattr(br, "readinto1") or raw._decoded_buffer):
        yield from raw.stream(len(buf), decode_content=encoded)
        return
    left, goal = fp.length, FIRST_READ
    while left > 0:
        limit = wanted()
        if limit <= 0:
            return
        cap = min(len(buf), limit, left)
        got, broke = _fill(br, buf, min(goal, cap), cap)
        left -= got
        fp.length = left
        if left == 0:
            # read to its end: the connection can serve again. Given back before the last
            # view, since a caller that has all it wants stops asking for more
            fp.close()
            raw.release_conn()
        if got:
            yield buf[:got]
        if broke is not None:
            raise broke
        if got < min(goal, cap):
            return                          # the body ended early: the caller resumes
        goal = min(goal * 2, len(buf))


def _fill(br, buf, goal, cap):
    """Read into buf[0:cap] until at least `goal` bytes (each readinto1 is one recv: a TLS
    socket gives one 16 KiB record per call). -> (bytes read, the error that stopped it
    or None): bytes that arrived before a timeout or a reset are kept, not lost."""
    got = 0
    while got < goal:
        try:
            n = br.readinto1(buf[got:cap])
        except socket.timeout as e:
            return got, X.ReadTimeoutError(None, None, "read timed out: %s" % e)
        except OSError as e:
            return got, X.ProtocolError("upstream body broke: %s" % (e or type(e).__name__), e)
        if not n:
            break
        got += n
    return got, None


def more_left(resp):
    """After views() stopped at its limit: the response announced more body than that."""
    fp = getattr(resp.raw, "_fp", None)
    return isinstance(fp, http.client.HTTPResponse) and not fp.isclosed() and bool(fp.length)
