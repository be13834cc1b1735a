"""Client models for the fault run (test_fault_run.py): what the Hugging Face clients do
on the wire when a body breaks (shared/docs/hf-protocol.md §6), on raw sockets, so every
byte a client would have written to its file is known and can be checked against the
Hub's bytes.

- hf24_get: huggingface_hub 2.4 `http_get`. On a connect error, a timeout or a premature
  EOF it resumes with `Range: bytes=<written>-`, where <written> counts only whole 10 MiB
  units (httpx `iter_bytes(chunk_size=10 MiB)` loses the partial unit when the stream
  breaks); a 200 to that truncates the file and starts again from 0; a TCP RST mid-body
  (`ReadError`) and any status but 2xx/408/429 fail the download. Retries: 5, refilled
  whenever an attempt wrote something. It compares only the final size.
- hf_transfer_get: hf_transfer's closed ranges `bytes=s-min(s+chunk-1, TOTAL)` (the last
  one ends past EOF), a few in parallel, after a `bytes=0-0` probe that must be a 206 with
  a total. A chunk that fails (connect error, status >= 400, a body short of
  Content-Length) is retried whole, up to 5 times; a 2xx is taken as it comes (no check
  for 206), its body written at the chunk's start.
- partial_resume: a client holding a partial download (it read k bytes, then went away)
  that resumes with `Range: bytes=<have>-` at byte granularity (curl -C -, wget -c, an
  interrupted hf download's .incomplete file), restarting from 0 on a 200.
- head_check: the HEAD huggingface_hub sends for metadata, following the relative 307 of a
  regular file.

Every function returns an Outcome: what completed (a whole file of the right size, or
whole ranges) and, for each, the bytes the client ended up with.
"""

import socket
import time

MIB = 1 << 20
HF24_UNIT = 10 * MIB
READ_TIMEOUT = 8.0              # huggingface_hub's HF_HUB_DOWNLOAD_TIMEOUT is 10 s


class WireError(Exception):
    """kind: "connect" (refused, or no connection), "timeout", "eof" (closed before the
    head or short of Content-Length), "reset" (RST)."""

    def __init__(self, kind, detail=""):
        super().__init__("%s %s" % (kind, detail))
        self.kind = kind


class Response:
    __slots__ = ("status", "headers", "body", "error")

    def __init__(self, status, headers, body, error):
        self.status, self.headers, self.body, self.error = status, headers, body, error

    @property
    def complete(self):
        return self.error is None


def request(address, method, path, headers=(), stop_after=None, timeout=READ_TIMEOUT):
    """One request on a new connection (Connection: close). Raises WireError when no
    complete head arrives; otherwise returns a Response whose `error` says how the body
    broke (None: it reached Content-Length). stop_after: hang up after that many body
    bytes (a client that goes away)."""
    extra = "".join("%s: %s\r\n" % h for h in headers)
    try:
        s = socket.create_connection(address, timeout=timeout)
    except OSError as e:
        raise WireError("connect", str(e)) from None
    try:
        try:
            s.sendall(("%s %s HTTP/1.1\r\nHost: t\r\nConnection: close\r\n%s\r\n"
                       % (method, path, extra)).encode())
            buf = bytearray()
            while b"\r\n\r\n" not in buf:
                chunk = s.recv(65536)
                if not chunk:
                    raise WireError("eof", "before the head")
                buf += chunk
        except ConnectionResetError:
            raise WireError("reset", "before the head") from None
        except BrokenPipeError:
            raise WireError("reset", "sending the request") from None
        except socket.timeout:
            raise WireError("timeout", "before the head") from None
        head, _, rest = bytes(buf).partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        status = int(lines[0].split(" ")[1])
        hdrs = {}
        for line in lines[1:]:
            k, _, v = line.partition(":")
            hdrs[k.strip().lower()] = v.strip()
        if method == "HEAD" or status in (204, 304):
            return Response(status, hdrs, b"", None)
        want = int(hdrs.get("content-length", "0"))
        if stop_after is not None:
            want = min(want, stop_after)
        body = bytearray(rest[:want])
        error = None
        try:
            while len(body) < want:
                chunk = s.recv(min(1 << 20, want - len(body)))
                if not chunk:
                    error = "eof"
                    break
                body += chunk
        except ConnectionResetError:
            error = "reset"
        except socket.timeout:
            error = "timeout"
        if error is None and stop_after is not None and int(hdrs.get("content-length", "0")) > want:
            error = "abandoned"
        return Response(status, hdrs, bytes(body), error)
    finally:
        s.close()


def follow(address, method, path, headers=(), stop_after=None):
    """request(), following relative redirects (the 307 of a regular file) as
    huggingface_hub does. -> (Response, final path)."""
    for _ in range(5):
        r = request(address, method, path, headers, stop_after=stop_after)
        if r.status in (301, 302, 307, 308) and r.headers.get("location", "").startswith("/"):
            path = r.headers["location"]
            continue
        return r, path
    return r, path


class Outcome:
    """What one client operation brought: `files` [(body bytes)] completed whole files,
    `ranges` [(start, end incl. as asked, status, body)] completed ranges, `events` a log of
    attempts (for the report), `failed` why it gave up (None if it completed)."""

    def __init__(self, kind, name):
        self.kind, self.name = kind, name
        self.files, self.ranges, self.events = [], [], []
        self.failed = None
        self.heads = []         # (status, headers) of completed HEADs
        self.final = name       # where redirects led (head_check)


def hf24_get(address, path, size, deadline, sleep=0.5):
    """huggingface_hub 2.4's http_get for a file whose HEAD said `size` bytes."""
    out = Outcome("hf24", path)
    data = bytearray()
    resume, retries = 0, 5
    while True:
        if time.monotonic() > deadline:
            out.failed = "deadline"
            return out
        hdrs = [("Range", "bytes=%d-" % resume)] if resume else []
        try:
            r, _ = follow(address, "GET", path, hdrs)
        except WireError as e:
            out.events.append(("error", resume, e.kind))
            if e.kind == "reset":                   # httpx ReadError: not retried
                out.failed = "reset before the head"
                return out
            if retries <= 0:
                out.failed = "retries exhausted (%s)" % e.kind
                return out
            retries -= 1
            time.sleep(sleep)
            continue
        out.events.append((r.status, resume, r.headers.get("content-range"), len(r.body), r.error))
        if r.status in (408, 429) and retries > 0:    # the only statuses it retries
            retries -= 1
            time.sleep(sleep)
            continue
        if not 200 <= r.status < 300:
            out.failed = "status %d" % r.status
            return out
        if resume and r.status == 200:              # Range ignored: start the file again
            del data[:]
            resume = 0
        if r.error is None:
            data += r.body
            break
        if r.error == "reset":
            out.failed = "reset mid-body"
            return out
        kept = len(r.body) // HF24_UNIT * HF24_UNIT  # the partial 10 MiB unit is lost
        data += r.body[:kept]
        if kept:
            retries = 5
        resume = len(data)
        if retries <= 0:
            out.failed = "retries exhausted (%s)" % r.error
            return out
        retries -= 1
        time.sleep(sleep)
    if len(data) != size:
        out.failed = "consistency check: %d bytes, expected %d" % (len(data), size)
        return out
    out.files.append(bytes(data))
    return out


def hf_transfer_get(address, path, chunk, deadline, pool, parallel=3):
    """hf_transfer's download of `path` (already the final URL after redirects). `pool` is
    a concurrent.futures executor for the parallel chunks."""
    out = Outcome("hf_transfer", path)
    try:
        r = request(address, "GET", path, [("Range", "bytes=0-0")])
    except WireError as e:
        out.failed = "probe: %s" % e.kind
        return out
    cr = r.headers.get("content-range", "")
    if r.status != 206 or "/" not in cr or not r.complete:
        out.failed = "probe: no content length (status %d%s)" % (
            r.status, ", body %s after %d bytes" % (r.error, len(r.body)) if r.error else "")
        return out
    total = int(cr.rsplit("/", 1)[1])
    starts = list(range(0, total, chunk))

    def one(start):
        stop = min(start + chunk - 1, total)        # hf_transfer's bound: the last ends at TOTAL
        log = []
        for attempt in range(6):
            if time.monotonic() > deadline:
                return start, stop, None, None, log + ["deadline"]
            if attempt:
                time.sleep(min(0.3 * 2 ** (attempt - 1), 2.0))
            try:
                r = request(address, "GET", path, [("Range", "bytes=%d-%d" % (start, stop))])
            except WireError as e:
                log.append(e.kind)
                continue
            if r.status >= 400:
                log.append(r.status)
                continue
            if not r.complete:
                log.append((r.status, len(r.body), r.error))
                continue
            return start, stop, r.status, r.body, log
        return start, stop, None, None, log

    results = list(pool.map(one, starts)) if parallel > 1 else [one(s) for s in starts]
    f = bytearray()
    ok = True
    for start, stop, status, body, log in results:
        out.events.append((start, stop, status, log))
        if body is None:
            ok = False
            continue
        out.ranges.append((start, stop, status, body))
        end = start + len(body)
        if len(f) < end:
            f.extend(bytes(end - len(f)))
        f[start:end] = body
    if not ok:
        out.failed = "a chunk failed 6 times"
    elif len(f) != total:
        out.failed = "consistency check: %d bytes, expected %d" % (len(f), total)
    else:
        out.files.append(bytes(f))
    return out


def partial_resume(address, path, size, k, deadline, sleep=0.2):
    """Read k bytes of `path` and hang up, then resume with `bytes=<have>-` until the
    file is whole (restarting from 0 on a 200), 6 attempts without progress at most."""
    out = Outcome("resume", path)
    data = bytearray()
    try:
        r, path = follow(address, "GET", path, stop_after=k)
        if r.status == 200:
            data += r.body
        out.events.append(("first", r.status, len(r.body), r.error))
    except WireError as e:
        out.events.append(("first", e.kind))
    if len(data) > k:
        del data[k:]
    idle = 0
    while len(data) < size:
        if time.monotonic() > deadline or idle >= 6:
            out.failed = "gave up at %d of %d" % (len(data), size)
            return out
        have = len(data)
        try:
            r, path = follow(address, "GET", path, [("Range", "bytes=%d-" % have)] if have else [])
        except WireError as e:
            out.events.append((have, e.kind))
            idle += 1
            time.sleep(sleep)
            continue
        out.events.append((have, r.status, r.headers.get("content-range"), len(r.body), r.error))
        if r.status == 200:
            del data[:]
        elif r.status == 206:
            cr = r.headers.get("content-range", "")
            if cr.partition(" ")[2].partition("-")[0] != str(have):
                out.failed = "206 for bytes=%d- carries Content-Range %r" % (have, cr)
                return out
        else:
            idle += 1
            time.sleep(sleep)
            continue
        data += r.body
        idle = 0 if r.body else idle + 1
        if r.error is not None:
            time.sleep(sleep)
    if len(data) != size:
        out.failed = "ended with %d bytes of %d" % (len(data), size)
        return out
    out.files.append(bytes(data))
    return out


def head_check(address, path):
    """HEAD as huggingface_hub sends it for metadata, following a relative 307."""
    out = Outcome("head", path)
    try:
        r, out.final = follow(address, "HEAD", path)
    except WireError as e:
        out.failed = e.kind
        return out
    if r.status != 200:
        out.failed = "status %d" % r.status
        return out
    out.heads.append((r.status, r.headers))
    return out
