"""structlog setup and the buffered access log.

Loggers are configured once by app.py and used at setup and on slow paths. Reactors
never call structlog per request: they append one tuple to an AccessLog buffer that a
background thread drains into log events (docs/internals.md has the measured cost).
"""

import collections
import json
import logging
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
    """Per-reactor buffer of (t0, method, target, status, bytes, outcome, seconds).

    The reactor appends one tuple per request (t0 on the monotonic clock); nothing is
    formatted on the reactor thread. If the writer falls behind by more than `maxlen`
    records the oldest are dropped, never the reactor slowed."""

    __slots__ = ("buf", "append")

    def __init__(self, maxlen=1 << 17):
        self.buf = collections.deque(maxlen=maxlen)
        self.append = self.buf.append


_JSON_LINE = ('{"method":"%s","path":%s,"status":%d,"bytes":%d,"cache":"%s","duration_ms":%.3f,'
              '"component":"access","event":"request","level":"info","timestamp":"%s.%06dZ"}\n')
_CONSOLE_LINE = ("%s.%06dZ [info     ] request                        bytes=%d cache=%s "
                 "component=access duration_ms=%.3f method=%s path=%s status=%d\n")


class AccessLogWriter(threading.Thread):
    """Drains every reactor's AccessLog into the log stream every `interval` seconds.

    Access events bypass structlog's processor chain: one %-format per record (C code)
    and one write per slice, in the same keys and order the structlog renderers use.
    Measured in results/<machine>/access_log.json: the per-event structlog path halved
    4 KiB warm throughput on a 2-CPU machine; this path is the one benchmarked."""

    SLICE = 512

    def __init__(self, buffers, fmt="console", stream=None, interval=0.25):
        super().__init__(name="pulsys-access-log", daemon=True)
        self.buffers = buffers
        self.interval = interval
        self.stream = stream or sys.stderr
        self.json = fmt == "json"
        self._halt = threading.Event()
        self._sec = None
        self._sec_text = ""
        self._flush_lock = threading.Lock()   # flush() may also be called from outside

    def run(self):
        while not self._halt.wait(self.interval):
            self.flush()
        self.flush()

    def _stamp(self, wall):
        sec = int(wall)
        if sec != self._sec:
            self._sec = sec
            self._sec_text = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(sec))
        return self._sec_text, int((wall - sec) * 1e6)

    def flush(self):
        with self._flush_lock:
            self._flush()

    def _flush(self):
        offset = time.time() - time.monotonic()
        dumps, stamp, out = json.dumps, self._stamp, []
        for b in self.buffers:
            buf = b.buf
            while buf:
                for _ in range(min(len(buf), self.SLICE)):
                    t0, method, target, status, nbytes, outcome, seconds = buf.popleft()
                    ts, us = stamp(t0 + offset)
                    if self.json:
                        out.append(_JSON_LINE % (method, dumps(target), status, nbytes, outcome,
                                                 seconds * 1000, ts, us))
                    else:
                        out.append(_CONSOLE_LINE % (ts, us, nbytes, outcome, seconds * 1000,
                                                    method, target if target.isprintable() else repr(target),
                                                    status))
                self.stream.write("".join(out))
                out.clear()
        try:
            self.stream.flush()
        except (OSError, ValueError):
            pass

    def stop(self):
        self._halt.set()
