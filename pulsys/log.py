"""structlog setup and the buffered access log.

Loggers are configured once by app.py and used at setup and on slow paths. Reactors
never call structlog per request: they append one tuple to an AccessLog buffer that a
background thread drains into log events (docs/internals.md has the measured cost).
"""

import collections
import logging
import sys
import threading

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
    """Per-reactor buffer of (t0, method, target, status, bytes, outcome, seconds)."""

    __slots__ = ("buf", "append")

    def __init__(self):
        self.buf = collections.deque(maxlen=1 << 16)
        self.append = self.buf.append


class AccessLogWriter(threading.Thread):
    def __init__(self, buffers, interval=0.25):
        super().__init__(name="pulsys-access-log", daemon=True)
        self.buffers = buffers
        self.interval = interval
        self._halt = threading.Event()
        self.log = get_logger("access")

    def run(self):
        while not self._halt.wait(self.interval):
            self.flush()
        self.flush()

    def flush(self):
        info = self.log.info
        for b in self.buffers:
            buf = b.buf
            while buf:
                t0, method, target, status, nbytes, outcome, seconds = buf.popleft()
                info("request", method=method, path=target, status=status, bytes=nbytes,
                     cache=outcome, duration_ms=round(seconds * 1000, 3))

    def stop(self):
        self._halt.set()
