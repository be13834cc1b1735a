"""structlog setup and the buffered access log.

Loggers are configured once by app.py and used at setup and on slow paths. Reactors
never call structlog per request: they append one tuple to an AccessLog buffer that a
background thread drains into log events (docs/internals.md has the measured cost).
"""

import collections
import json
import logging
import operator
import os
import select
import stat
import sys
import threading
import time

import structlog

_LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING,
           "error": logging.ERROR}


def configure(fmt="console", level="info", stream=None):
    stream = stream or sys.stderr
    renderer = (structlog.processors.JSONRenderer() if fmt == "json"
                else structlog.dev.ConsoleRenderer(colors=False))
    structlog.configure(
        processors=[
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(_LEVELS[level]),
        logger_factory=structlog.PrintLoggerFactory(stream),
        cache_logger_on_first_use=True,
    )


def get_logger(component):
    return structlog.get_logger().bind(component=component)


class AccessLog:
    """Per-reactor buffer of access-log records: (t0, (method, target, status, bytes,
    outcome), seconds) tuples, t0 on the monotonic clock, one per request of the general
    step; and the texts of loop turns' fused hits, made at once (add_turns: a list of
    bytes a fold of turns).

    The reactor appends and, at the end of a loop turn that left at least BATCH lines,
    formats them itself (format_ready: ~1.1-1.4 us a record, cache-warm and without a GIL
    hand-off) into one chunk, a list of bytes (AccessLogWriter.lines); the writer thread
    only writes chunks (LineStream.write_parts), so a slow log reader never blocks the
    reactor, and formats what is left of a quiet reactor's records once per interval.
    Measured against the writer thread formatting every record (4 KiB hits, 64
    connections, one CPU): docs/benchmarks.md, issue 18. If the writer falls behind, the
    oldest records (more than `maxlen`) or chunks are dropped, never the reactor slowed."""

    __slots__ = ("buf", "append", "chunks", "lock", "lines", "add_turns", "held")
    BATCH = 256

    def __init__(self, maxlen=1 << 17):
        self.buf = collections.deque(maxlen=maxlen)
        self.append = self.buf.append
        self.chunks = collections.deque(maxlen=max(1, maxlen // self.BATCH))
        self.lock = threading.Lock()   # records leave buf and enter chunks in order
        self.lines = None              # the formatter of the writer that drains this buffer
        # add_turns(answers, marks, distinct): the fused hits of loop turns (warm.Answer
        # each, `.log` its record's fixed part; `distinct` holds each Answer among them
        # once), turn by turn: `marks` holds (t0, took, end) per turn, its hits being
        # answers[previous end:end], all begun at `t0` and sent `took` seconds later;
        # into the buffer in request order with the records around it. Until a writer
        # drains this buffer, as records (the general step's); the writer sets its own,
        # which adds one text for all of them (AccessLogWriter._turn_adder).
        self.add_turns = self._turn_records
        self.held = 0                  # lines in buf beyond one per item (turn texts)

    def buffered(self):
        """Lines waiting in buf (the reactor formats them once BATCH wait)."""
        return len(self.buf) + self.held

    def _turn_records(self, answers, marks, distinct):
        append, start = self.append, 0
        for t0, took, end in marks:
            for a in answers[start:end]:
                append((t0, a.log, took))
            start = end

    def format_ready(self):
        """Format every record buffered now into one chunk for the writer (the reactor's
        call, at the end of a turn; the writer's for leftovers)."""
        lines = self.lines
        if lines is None or not self.buf:
            return
        with self.lock:
            text = lines(self.buf)
            self.held = 0
            if text:
                self.chunks.append(text)


# A line is a memoised part (everything fixed by method, path, status, bytes, cache
# outcome), the duration and the timestamp: the hit lines of a busy cache repeat their
# fixed part, and json.dumps of the path alone cost ~1.3 us per line.
_JSON_FIXED = '{"method":"%s","path":%s,"status":%d,"bytes":%d,"cache":"%s","duration_ms":'
_JSON_LINE = '%s%s,"component":"access","event":"request","level":"info","timestamp":"%s.%06dZ"}\n'
_CONSOLE_FIXED = ("bytes=%d cache=%s component=access duration_ms=", " method=%s path=%s status=%d\n")
_CONSOLE_LINE = "%s.%06dZ [info     ] request                        %s%s%s"
# a turn's lines (AccessLogWriter._turn_adder) are these lines, put together by hand, in
# bytes: JSON: fixed part, duration, _JSON_STAMP, second, ".", microseconds, _JSON_END
_ENCODING = ("utf-8", "backslashreplace")     # what a log stream writes, text or bytes
_JSON_STAMP, _JSON_END = (x.encode() for x in _JSON_LINE[4:].split("%s.%06d"))
# console: second, ".", microseconds, _CONSOLE_EVENT, fixed part
_CONSOLE_EVENT = _CONSOLE_LINE[7:-6].encode()
_D3 = tuple(b"%03d" % i for i in range(1000))   # microseconds as two halves of three digits
_FIXED_MEMO = 4096
# Durations as text by whole microseconds below 2 ms (warm hits take a few hundred): an
# index into strings made once at import costs less than float formatting (~0.2 us of a
# ~0.7 us line), and the writer allocates none of them while it runs, so its memory stays
# flat under load (tests/floors: a memo that filled as durations came grew it by ~150 KB
# per 10,000 hits on a busy machine). 2,000 strings, ~110 KB, shared by forked workers;
# and the same again in bytes for the turns' lines, which are bytes.
_DURS = tuple("%d.%03d" % divmod(us, 1000) for us in range(2000))
_DURS_B = tuple(d.encode() for d in _DURS)
_NDURS = len(_DURS)
_LOGPART = operator.attrgetter("logpart")


class LineStream:
    """An access-log stream onto a file descriptor (stderr, which a server's processes
    share: one open file, whose lines must never interleave), for text or for the
    chunks the reactors make (write_parts: a list of bytes, whole lines in all).

    Where fd is a regular file or /dev/null a chunk goes in one writev(2) (one for each
    IOV_MAX of its parts, each part whole lines): on a regular file the offset update
    and the write are one atomic step between processes sharing the open file (write(2),
    NOTES: POSIX.1-2008 2.9.7, Linux >= 3.14; O_APPEND likewise). Anywhere else (a pipe,
    a socket such as journald's, a terminal) the chunk is cut after the last whole line
    that fits in PIPE_BUF bytes, the largest write a pipe keeps whole (pipe(7)); a line
    longer than that goes in PIPE_BUF pieces. Two workers on one CPU, 4 KiB hits, 64
    connections, stderr /dev/null: that CPU's system calls a request 0.110 -> 0.057
    against cutting everywhere, the server's CPU a request within noise
    (docs/benchmarks.md, issue 18, thirteenth day)."""

    IOV_MAX = 1024        # buffers a writev(2) takes at most (sysconf(_SC_IOV_MAX) on Linux)

    def __init__(self, fd):
        self.fd = fd
        self.limit = None if keeps_writes_whole(fd) else select.PIPE_BUF

    def write(self, text):
        self.write_bytes(text.encode(*_ENCODING))

    def write_parts(self, parts):
        if self.limit is not None:
            self.write_bytes(b"".join(parts))
            return
        fd, step = self.fd, self.IOV_MAX
        for i in range(0, len(parts), step):
            group = parts[i:i + step]
            n = os.writev(fd, group)
            total = sum(map(len, group))
            if n < total:        # (a regular file written in part: a full disk, a signal)
                self.write_bytes(b"".join(group)[n:])

    def write_bytes(self, data):
        view, fd, limit = memoryview(data), self.fd, self.limit
        start, n = 0, len(data)
        while start < n:
            cut = n
            if limit is not None and n - start > limit:
                nl = data.rfind(b"\n", start, start + limit)
                cut = nl + 1 if nl >= 0 else start + limit
            while start < cut:
                start += os.write(fd, view[start:cut])

    def flush(self):
        pass


def keeps_writes_whole(fd):
    """True if a write(2) of any size to fd stays whole among other processes' writes:
    fd is a regular file or /dev/null (LineStream)."""
    try:
        st = os.fstat(fd)
        if stat.S_ISREG(st.st_mode):
            return True
        return stat.S_ISCHR(st.st_mode) and st.st_rdev == os.stat(os.devnull).st_rdev
    except OSError:
        return False


def stderr_stream():
    """The access log's stream in a process that writes its own: fd 2 as a LineStream
    while sys.stderr is the process's own stderr (its lines and structlog's are whole
    lines on one open file: sys.stderr is line-buffered), else sys.stderr as it was
    replaced (a test's capture), written as text."""
    try:
        if sys.stderr is sys.__stderr__ and sys.stderr.fileno() == 2:
            return LineStream(2)
    except (AttributeError, OSError, ValueError):
        pass
    return sys.stderr


class AccessLogWriter(threading.Thread):
    """Writes every reactor's AccessLog to the log stream every `interval` seconds while
    lines come: the chunks the reactors formatted, then what is left of their records.

    Access events bypass structlog's processor chain: one %-format per record (C code)
    and one write per chunk, in the same keys and order the structlog renderers use. A
    stream with write_parts (LineStream) takes the chunks' bytes as they are; any other
    (a test's io.StringIO, a replaced sys.stderr) gets them decoded, as text.
    Measured in results/<machine>/access_log.json: the per-event structlog path halved
    4 KiB warm throughput on a 2-CPU machine; this path is the one benchmarked."""

    def __init__(self, buffers, fmt="console", stream=None, interval=0.25):
        super().__init__(name="pulsys-access-log", daemon=True)
        self.buffers = buffers
        self.interval = interval
        self.stream = stream or sys.stderr
        self.json = fmt == "json"
        self._halt = threading.Event()
        self._wake = threading.Event()   # set by nudge_hook when lines wait and run() sleeps
        self.idle = False
        self._memo = {}
        self._flush_lock = threading.Lock()   # flush() may also be called from outside
        self._secpair = (None, "")  # (a second, its text): one attribute, set at once
        self._clock = (0.0, 0.0)    # (monotonic time to read it again, wall minus monotonic)
        for b in buffers:
            b.lines = self.lines
            b.add_turns = self._turn_adder(b)

    def run(self):
        # Every `interval` while there are lines; with none, asleep until a reactor's tick
        # finds some (nudge) or stop(): an idle server's writer does not wake.
        halt, wake = self._halt, self._wake
        while not halt.is_set():
            if self.flush():
                halt.wait(self.interval)
                continue
            self.idle = True
            wake.wait()
            wake.clear()
            self.idle = False
        self.flush()

    def nudge_hook(self, log):
        """A tick hook for the reactor that fills `log` (ReactorBase.tick_hooks): wakes
        this writer when lines wait and it sleeps. -> True while lines wait."""
        wake = self._wake

        def nudge(now):
            if log.buf or log.chunks:
                if self.idle:
                    wake.set()
                return True
            return False
        return nudge

    def flush(self):
        """Write what every buffer holds. -> True when there was something."""
        wrote = False
        with self._flush_lock:
            stream = self.stream
            put = getattr(stream, "write_parts", None)
            if put is None:        # a text stream (sys.stderr replaced, io.StringIO)
                def put(parts, write=stream.write):
                    write(b"".join(parts).decode(*_ENCODING))
            for b in self.buffers:
                b.format_ready()
                chunks = b.chunks
                while chunks:
                    put(chunks.popleft())
                    wrote = True
            if not wrote:
                return False
            try:
                self.stream.flush()
            except (OSError, ValueError):
                pass
        return True

    def _fixed(self, key):
        method, target, status, nbytes, outcome = key
        if self.json:
            part = _JSON_FIXED % (method, json.dumps(target), status, nbytes, outcome)
        else:
            shown = target if target.isprintable() else repr(target)
            part = (_CONSOLE_FIXED[0] % (nbytes, outcome), _CONSOLE_FIXED[1] % (method, shown, status))
        if len(self._memo) >= _FIXED_MEMO:
            self._memo.clear()
        self._memo[key] = part
        return part

    def _second(self, s):
        pair = self._secpair
        if pair[0] != s:
            pair = self._secpair = (s, time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(s)))
        return pair[1]

    def lines(self, buf):
        """The lines of every record in `buf` (taken out of it), in order, as a list of
        bytes: the texts of folds of turns as they were made (no copy), and each run of
        records between them formatted and encoded at once. Called with the buffer's
        lock held, by its reactor or by this thread."""
        offset = time.time() - time.monotonic()
        memo, fixed, js, durs = self._memo, self._fixed, self.json, _DURS
        parts, out = [], []          # the chunk; the text lines of the current run of records
        sec, sec_text = self._secpair
        pop = buf.popleft
        for _ in range(len(buf)):
            rec = pop()
            if rec.__class__ is list:     # a fold's turns of fused hits, in bytes (add_turns)
                if out:
                    parts.append("".join(out).encode(*_ENCODING))
                    out = []
                parts += rec
                continue
            key = rec[1]
            part = memo.get(key)
            if part is None:
                part = fixed(key)
            wall = rec[0] + offset
            s = int(wall)
            if s != sec:
                sec, sec_text = s, self._second(s)
            us = int(rec[2] * 1e6 + 0.5)
            dur = durs[us] if us < len(durs) else "%d.%03d" % divmod(us, 1000)   # milliseconds
            if js:
                out.append(_JSON_LINE % (part, dur, sec_text, int((wall - s) * 1e6)))
            else:
                out.append(_CONSOLE_LINE % (sec_text, int((wall - s) * 1e6), part[0], dur, part[1]))
        if out:
            parts.append("".join(out).encode(*_ENCODING))
        return parts

    def _turn_adder(self, log):
        """-> log.add_turns (AccessLog) for this writer: the lines of loop turns' fused
        hits, in bytes, one text a turn. A turn's hits share its timestamp and duration,
        so only each answer's fixed part differs (kept on the Answer, encoded, set here
        for each of `distinct` that has none yet), and the JSON lines of a turn end in
        one shared tail: a turn's text is one bytes.join over a slice of the parts
        (~0.05 us a line against ~1.1 for a line of its own). One closure, its state in
        cells, the timestamp's text made by concatenation from bytes made once a second
        and at import (a %-format of the tail alone was ~3,700 of the ~13,500
        instructions a turn's text took as a method: valgrind, docs/benchmarks.md, issue
        18). The texts go into the buffer as one list a fold, and from there to the
        stream as they are: a line's bytes are made once, where a fold's join, the
        chunk's join and the stream's encode copied them three more times. The server's
        CPU a 4 KiB hit stayed within noise of that (accesslog_bytes_c64.json,
        docs/benchmarks.md, issue 18, fifteenth day). Called by the reactor, for its
        own Answers."""
        append, memo, fixed, js, second = log.buf.append, self._memo, self._fixed, self.json, self._second
        durs, ndurs, d3, getpart = _DURS_B, _NDURS, _D3, _LOGPART
        until = off = 0.0      # when to read the wall clock's offset from the monotonic one again
        sec, prefix = None, b""  # the second of the last turn, and its text with what precedes it

        def add_turns(answers, marks, distinct):
            nonlocal until, off, sec, prefix
            for a in distinct:
                if a.logpart is None:
                    part = memo.get(a.log) or fixed(a.log)
                    a.logpart = (part.encode(*_ENCODING) if js
                                 else (part[0].encode(*_ENCODING), part[1].encode(*_ENCODING)))
            parts = list(map(getpart, answers))
            out = []
            start = 0
            for t0, took, end in marks:
                if t0 >= until:
                    off = time.time() - time.monotonic()
                    until = t0 + 1.0
                wall = t0 + off
                s = int(wall)
                if s != sec:
                    sec = s
                    prefix = (_JSON_STAMP if js else b"") + second(s).encode() + b"."
                u = int((wall - s) * 1e6)
                us = int(took * 1e6 + 0.5)
                dur = durs[us] if us < ndurs else b"%d.%03d" % divmod(us, 1000)
                if js:
                    tail = dur + prefix + d3[u // 1000] + d3[u % 1000] + _JSON_END
                    out.append(tail.join(parts[start:end]))
                    out.append(tail)
                else:
                    head = prefix + d3[u // 1000] + d3[u % 1000] + _CONSOLE_EVENT
                    out.append(b"".join([head + p[0] + dur + p[1] for p in parts[start:end]]))
                start = end
            append(out)
            log.held += len(answers) - 1
        return add_turns

    def stop(self):
        self._halt.set()
        self._wake.set()
