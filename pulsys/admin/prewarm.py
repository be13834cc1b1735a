"""Pre-warm jobs: fetch a repo's files into the cache before anyone asks for them.

Jobs are rows of prewarm_jobs (db/jobs.py). One runner thread in the process that owns
the upstream plane claims the oldest queued job and runs it through the same path a
client GET takes: it hands `submit` (the fill pool's) the Jobs a client's requests would
make, built by route.route() from the same URLs, so de-duplication with clients' fills,
verification, quota, resume and the shared tier all apply, and the repo's API answers end
up cached too. Steps:

  listing   GET /api/{type}s/{repo}/revision/{rev} -> the commit; then
            GET /api/{type}s/{repo}/tree/{commit}?recursive=true (following Link: next)
            -> files and sizes; include/exclude globs (fnmatch, like huggingface_hub's
            allow_patterns/ignore_patterns) choose among them
  fetching  GET /{repo}/resolve/{commit}/{path} for `parallel` files at a time
            (following relative redirects, as clients follow the Hub's 307 to
            /api/resolve-cache for regular files). A reply
            without a fill is a file already cached (done at once); with a fill, the
            runner watches the fill's spans until it is DONE (a FAILED fill is asked for
            once more: after a digest mismatch the service is already refetching)

Progress goes to the row every PROGRESS_INTERVAL seconds; a row that is no longer
`running` (cancelled through the API) stops the job. A job running when pulsys stops
stays `running`; the next start puts it back in the queue (requeue_running) and runs it
again, and the files it already fetched are then cache hits.
"""

import collections
import concurrent.futures
import fnmatch
import json
import threading
import time
import urllib.parse

from pulsys.cache.inflight import DONE, RUNNING
from pulsys.db import jobs
from pulsys.db.database import DatabaseError
from pulsys.model import target as T
from pulsys.model.entry import CANNED
from pulsys.model.job import Job
from pulsys.model.request import RequestHead
from pulsys.route import route

PROGRESS_INTERVAL = 0.5
FILL_POLL = 0.1
MAX_FILES = 100_000       # a listing larger than this fails the job (every load bounded)
MAX_PAGES = 1_000
MAX_REDIRECTS = 3
REPLY_TIMEOUT = 600.0     # a pool thread answers a Job within the upstream timeouts


class PrewarmError(Exception):
    """The job fails with this one-line message."""


class _Halted(Exception):
    """pulsys is stopping: leave the job running in the store (it resumes at next start)."""


def _head(path, query=""):
    h = RequestHead()
    h.method, h.path, h.query = "GET", path, query
    h.target = path + ("?" + query if query else "")
    return h


def _header(entry, name):
    for k, v in entry.headers:
        if k.lower() == name:
            return v
    return None


def _next_link(entry):
    """The path?query of a Link: <...>; rel="next" header, or None."""
    link = _header(entry, "link")
    if not link:
        return None
    for part in link.split(","):
        url, _, params = part.partition(";")
        if 'rel="next"' in params.replace(" ", ""):
            u = urllib.parse.urlsplit(url.strip().strip("<>"))
            return u.path, u.query
    return None


def _error_text(entry):
    msg = _header(entry, "x-error-message")
    if not msg:
        try:
            msg = json.loads(entry.body).get("error")
        except (ValueError, AttributeError):
            msg = None
    return "%d %s" % (entry.status, msg or "")


def selected(paths, include, exclude):
    """Paths matching any include glob (all when none) and no exclude glob. A glob that
    ends with / means everything below that directory."""
    inc = [g + "*" if g.endswith("/") else g for g in include]
    exc = [g + "*" if g.endswith("/") else g for g in exclude]
    return [p for p in paths
            if (not inc or any(fnmatch.fnmatchcase(p, g) for g in inc))
            and not any(fnmatch.fnmatchcase(p, g) for g in exc)]


class PrewarmRunner:
    def __init__(self, db, submit, worker, parallel, log, clock=time.time, poll=1.0):
        self.db = db
        self.submit = submit          # the fill pool's submit(Job)
        self.worker = worker          # claimed_by: this instance's node id
        self.parallel = max(1, parallel)
        self.log = log
        self.clock = clock
        self.poll = poll
        self.halt = threading.Event()
        self.wakeup = threading.Event()
        self.thread = threading.Thread(target=self._main, name="pulsys-prewarm", daemon=True)

    # -- life -------------------------------------------------------------------------

    def start(self):
        try:
            with self.db.transaction() as tx:
                n = jobs.requeue_running(tx, self.clock(), self.worker)
            if n:
                self.log.info("pre-warm jobs resumed after a restart", jobs=n)
        except DatabaseError as e:
            self.log.warning("pre-warm jobs not requeued", error=str(e))
        self.thread.start()
        return self

    def wake(self):
        self.wakeup.set()

    def stop(self):
        self.halt.set()
        self.wakeup.set()
        if self.thread.is_alive():
            self.thread.join(timeout=10)

    def _main(self):
        failing = False
        while not self.halt.is_set():
            try:
                with self.db.transaction() as tx:
                    job = jobs.claim_next(tx, self.worker, self.clock())
                failing = False
            except DatabaseError as e:
                if not failing:
                    self.log.warning("pre-warm queue unreadable", error=str(e))
                failing, job = True, None
            if job is None:
                self.wakeup.wait(self.poll)
                self.wakeup.clear()
                continue
            try:
                self._run(job)
            except Exception:
                self.log.exception("pre-warm job crashed", job=job["id"])
                self._finish(job["id"], "failed", "internal error in the pre-warm runner")

    # -- one job ----------------------------------------------------------------------

    def _progress(self, job_id, **fields):
        """-> False when the job is no longer running (cancelled)."""
        with self.db.transaction() as tx:
            return jobs.progress(tx, job_id, self.clock(), **fields)

    def _finish(self, job_id, state, error=""):
        try:
            with self.db.transaction() as tx:
                jobs.finish(tx, job_id, state, self.clock(), error[:500])
        except DatabaseError as e:
            self.log.warning("pre-warm job state not saved", job=job_id, error=str(e))

    def _run(self, job):
        jid = job["id"]
        self.log.info("pre-warm job started", job=jid, repo=job["repo"], revision=job["revision"])
        try:
            if not self._progress(jid, phase="listing", error="", current_file=""):
                return
            commit, files = self._list(job)
            chosen = set(selected([p for p, _ in files], job["include_globs"], job["exclude_globs"]))
            files = [(p, s) for p, s in files if p in chosen]
            if not self._progress(jid, phase="fetching", commit_sha=commit, files_total=len(files),
                                  bytes_total=sum(s for _, s in files), files_done=0, bytes_done=0):
                return
            if not self._fetch_all(job, commit, files):
                return               # cancelled
            self._progress(jid, current_file="", bytes_per_s=0)
            self._finish(jid, "done")
            self.log.info("pre-warm job done", job=jid, files=len(files))
        except PrewarmError as e:
            self._finish(jid, "failed", str(e))
            self.log.warning("pre-warm job failed", job=jid, error=str(e))
        except _Halted:
            self.log.info("pre-warm job interrupted; it resumes at the next start", job=jid)
        except DatabaseError as e:
            self.log.warning("pre-warm job stopped: the store failed; it resumes at the next start",
                             job=jid, error=str(e))

    def _ask(self, path, query="", stop=None):
        """Submit the Job a client GET of path?query would make; -> its Reply."""
        t = route(_head(path, query))
        if t.kind == T.REJECT:
            raise PrewarmError("%s: %s" % (path, t.message))
        box, done = [], threading.Event()

        def reply(r):
            box.append(r)
            done.set()
        self.submit(Job(t, "GET", "", b"", None, reply))
        deadline = time.monotonic() + REPLY_TIMEOUT
        while not done.wait(0.2):
            if self.halt.is_set() or (stop is not None and stop.is_set()):
                raise _Halted()
            if time.monotonic() > deadline:
                raise PrewarmError("%s: no answer from the fill pool in %d s" % (path, REPLY_TIMEOUT))
        return box[0]

    def _api_json(self, path, query=""):
        r = self._ask(path, query)
        e = r.entry
        if e.kind != CANNED or e.status != 200:
            raise PrewarmError("%s: upstream answered %s" % (path, _error_text(e)))
        try:
            return json.loads(e.body), e
        except ValueError:
            raise PrewarmError("%s: upstream answered with something that is not JSON" % path) from None

    def _list(self, job):
        rtype, repo = job["repo_type"], job["repo"]
        api = "/api/%ss/%s" % (rtype, repo)
        info, _ = self._api_json("%s/revision/%s" % (api, urllib.parse.quote(job["revision"], safe="")))
        commit = info.get("sha") if isinstance(info, dict) else None
        if not isinstance(commit, str) or not T.is_commit(commit):
            raise PrewarmError("%s@%s: upstream named no commit" % (repo, job["revision"]))
        files, link = [], ("%s/tree/%s" % (api, commit), "recursive=true")
        for _ in range(MAX_PAGES):
            page, entry = self._api_json(*link)
            if not isinstance(page, list):
                raise PrewarmError("%s: tree listing is not a list" % repo)
            for item in page:
                if isinstance(item, dict) and item.get("type") == "file" and isinstance(item.get("path"), str):
                    size = item.get("size")
                    files.append((item["path"], size if isinstance(size, int) and size >= 0 else 0))
            if len(files) > MAX_FILES:
                raise PrewarmError("%s has more than %d files; narrow it with --include" % (repo, MAX_FILES))
            link = _next_link(entry)
            if link is None:
                return commit, files
        raise PrewarmError("%s: tree listing has more than %d pages" % (repo, MAX_PAGES))

    def _fetch_all(self, job, commit, files):
        """-> True when every file is in the cache, False when the job was cancelled."""
        jid = job["id"]
        prefix = T.URL_PREFIX.get(job["repo_type"], "") + job["repo"]
        sizes = dict(files)
        partial = {}                  # path -> bytes on disk of a file being fetched
        done = {}                     # path -> size, files in the cache
        stop = threading.Event()

        def one(path):
            if stop.is_set():
                return
            partial[path] = 0
            try:
                self._fetch_file("/%s/resolve/%s/%s" % (prefix, commit, urllib.parse.quote(path)),
                                 path, partial, stop)
                done[path] = sizes[path]
            finally:
                partial.pop(path, None)

        ex = concurrent.futures.ThreadPoolExecutor(self.parallel, thread_name_prefix="pulsys-prewarm")
        futures = [ex.submit(one, p) for p, _ in files]
        window = collections.deque()
        try:
            while True:
                finished = all(f.done() for f in futures)
                err = next((f.exception() for f in futures if f.done() and f.exception() is not None), None)
                now = time.monotonic()
                # the fetch threads add and remove keys: read copies (made in C, under the GIL)
                nbytes = sum(list(done.values())) + sum(list(partial.values()))
                window.append((now, nbytes))
                while len(window) > 2 and now - window[0][0] > 3.0:
                    window.popleft()
                rate = (nbytes - window[0][1]) / (now - window[0][0]) if now > window[0][0] else 0.0
                current = next(iter(list(partial)), "")
                running = self._progress(jid, files_done=len(done), bytes_done=nbytes,
                                         bytes_per_s=round(rate, 1), current_file=current)
                if not running:
                    stop.set()
                    return False
                if self.halt.is_set():
                    stop.set()
                    raise _Halted()
                if err is not None:
                    stop.set()
                    if isinstance(err, _Halted):
                        raise err
                    raise err if isinstance(err, PrewarmError) else PrewarmError(str(err))
                if finished:
                    return True
                self.halt.wait(PROGRESS_INTERVAL)
        finally:
            stop.set()
            for f in futures:
                f.cancel()
            ex.shutdown(wait=False)

    def _ask_file(self, url, path, stop):
        """GET url, following relative redirects as clients do: the Hub answers a regular
        (non-LFS) file at /resolve with a 307 to /api/resolve-cache/... (hf-protocol.md)."""
        query = ""
        for _ in range(MAX_REDIRECTS + 1):
            r = self._ask(url, query, stop=stop)
            e = r.entry
            if e.kind != CANNED:
                return r
            loc = _header(e, "location")
            if not (300 <= e.status < 400 and loc and loc.startswith("/") and not loc.startswith("//")):
                raise PrewarmError("%s: %s" % (path, _error_text(e)))
            url, _, query = loc.partition("?")
        raise PrewarmError("%s: more than %d redirects" % (path, MAX_REDIRECTS))

    def _fetch_file(self, url, path, partial, stop):
        for attempt in (1, 2):
            r = self._ask_file(url, path, stop)
            fill = r.fill
            if fill is None:
                return                       # already in the cache
            while fill.state == RUNNING:
                partial[path] = sum(b - a for a, b in fill.spans)
                if self.halt.is_set() or stop.is_set():
                    raise _Halted()
                time.sleep(FILL_POLL)
            if fill.state == DONE:
                return
            if attempt == 2:
                raise PrewarmError("%s: %s" % (path, fill.error or "fill failed"))
