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


class PoolThreads:
    """The fill pool's threads: made first, so that the Upstream that runs its extra
    fetchers beside them (own_thread) and the FillPool that runs Jobs on them can each be
    given them when constructed."""

    def __init__(self, threads):
        self.ex = concurrent.futures.ThreadPoolExecutor(threads, thread_name_prefix="pulsys-fill")
        self.log = get_logger("pool")
        self.closed = False

    def run(self, fn):
        """Run fn() on a pool thread. Raises RuntimeError after shutdown."""
        self.ex.submit(self._run_fn, fn)

    def own_thread(self, fn):
        """Run fn() on a new thread (an extra fetcher of a fill: a hundred of them waiting
        on paced connections must not hold the pool's threads from metadata jobs).
        Raises RuntimeError after shutdown."""
        if self.closed:
            raise RuntimeError("the fill pool is shut down")
        threading.Thread(target=self._run_fn, args=(fn,), name="pulsys-fetcher", daemon=True).start()

    def _run_fn(self, fn):
        try:
            fn()
        except Exception:
            self.log.exception("pool task failed")

    def shutdown(self):
        self.closed = True
        self.ex.shutdown(wait=False, cancel_futures=True)


class FillPool:
    """Runs each Job with `handle` (Upstream.handle) on `threads` (a PoolThreads)."""

    def __init__(self, handle, threads):
        self.handle = handle
        self.threads = threads
        self.log = threads.log
        self.run = threads.run
        self.shutdown = threads.shutdown

    def submit(self, job):
        job.reply = _Once(job.reply)
        self.threads.ex.submit(self._run, job)

    def _run(self, job):
        try:
            self.handle(job)
        except Exception:
            self.log.exception("upstream job failed", target=repr(job.target))
            job.reply(internal_error_reply())
        finally:
            if not job.reply.done:
                job.reply(internal_error_reply())
