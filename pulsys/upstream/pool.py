"""FillPool: the threads that run upstream Jobs. Every Job gets exactly one Reply, even
when the handler has a bug (logged once with context, answered 500)."""

import concurrent.futures
import threading

from pulsys.log import get_logger
from pulsys.upstream.service import internal_error_reply


class _Once:
    __slots__ = ("fn", "done", "lock")

    def __init__(self, fn):
        self.fn, self.done, self.lock = fn, False, threading.Lock()

    def __call__(self, reply):
        with self.lock:
            if self.done:
                return
            self.done = True
        self.fn(reply)


class FillPool:
    def __init__(self, service, threads):
        self.service = service
        self.ex = concurrent.futures.ThreadPoolExecutor(threads, thread_name_prefix="pulsys-fill")
        self.log = get_logger("pool")

    def submit(self, job):
        job.reply = _Once(job.reply)
        self.ex.submit(self._run, job)

    def _run(self, job):
        try:
            self.service.handle(job)
        except Exception:
            self.log.exception("upstream job failed", target=repr(job.target))
            job.reply(internal_error_reply())
        finally:
            if not job.reply.done:
                job.reply(internal_error_reply())

    def run(self, fn):
        """Run fn() on a pool thread (extra fill fetchers). Raises RuntimeError after shutdown."""
        self.ex.submit(self._run_fn, fn)

    def _run_fn(self, fn):
        try:
            fn()
        except Exception:
            self.log.exception("pool task failed")

    def shutdown(self):
        self.ex.shutdown(wait=False, cancel_futures=True)
