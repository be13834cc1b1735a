"""prewarm_jobs: durable queue rows for pre-warm jobs, with their progress.

States: queued -> running -> done | failed; queued or running -> cancelled.
A worker claims the oldest queued job (claim_next), writes progress as it goes, and
finishes it. At startup, requeue_running() puts back jobs a stopped process was
running, so they resume. The runner itself is not part of this module.
"""

import json

STATES = ("queued", "running", "done", "failed", "cancelled")
REPO_TYPES = ("model", "dataset", "space")
PROGRESS_FIELDS = ("phase", "commit_sha", "files_done", "files_total", "bytes_done", "bytes_total",
                   "bytes_per_s", "current_file", "error")
COLUMNS = ("id, repo_type, repo, revision, include_globs, exclude_globs, state, phase, commit_sha, "
           "files_done, files_total, bytes_done, bytes_total, bytes_per_s, current_file, error, "
           "claimed_by, created_at, created_by, started_at, finished_at, updated_at")


def _decode(row):
    if row is not None:
        row["include_globs"] = json.loads(row["include_globs"])
        row["exclude_globs"] = json.loads(row["exclude_globs"])
    return row


def create(tx, repo_type, repo, revision, include, exclude, actor, now):
    """Queue a job; -> its id."""
    if repo_type not in REPO_TYPES:
        raise ValueError("repo type %r: expected one of %s" % (repo_type, ", ".join(REPO_TYPES)))
    row = tx.one("INSERT INTO prewarm_jobs (repo_type, repo, revision, include_globs, exclude_globs, "
                 "created_at, created_by, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?) RETURNING id",
                 (repo_type, repo, revision, json.dumps(list(include)), json.dumps(list(exclude)),
                  now, actor, now))
    return row["id"]


def get(tx, job_id):
    return _decode(tx.one("SELECT %s FROM prewarm_jobs WHERE id = ?" % COLUMNS, (job_id,)))


def listing(tx, states=None, limit=100):
    """Newest first, optionally only some states."""
    sql, params = "SELECT %s FROM prewarm_jobs" % COLUMNS, []
    if states:
        sql += " WHERE state IN (%s)" % ", ".join("?" for _ in states)
        params.extend(states)
    rows = tx.all(sql + " ORDER BY id DESC LIMIT ?", tuple(params) + (max(1, min(int(limit), 1000)),))
    return [_decode(r) for r in rows]


def claim_next(tx, worker, now):
    """Mark the oldest queued job running for `worker`; -> the job, or None when none is
    queued (or another claimer took it first)."""
    row = tx.one("SELECT id FROM prewarm_jobs WHERE state = 'queued' ORDER BY id LIMIT 1")
    if row is None:
        return None
    cur = tx.execute("UPDATE prewarm_jobs SET state = 'running', claimed_by = ?, "
                     "started_at = COALESCE(started_at, ?), updated_at = ? WHERE id = ? AND state = 'queued'",
                     (worker, now, now, row["id"]))
    return get(tx, row["id"]) if cur.rowcount == 1 else None


def progress(tx, job_id, now, **fields):
    """Update progress fields (PROGRESS_FIELDS) of a running job; False if it is not running."""
    bad = set(fields) - set(PROGRESS_FIELDS)
    if bad:
        raise ValueError("not progress fields: %s" % ", ".join(sorted(bad)))
    sets = ", ".join("%s = ?" % k for k in fields)
    cur = tx.execute("UPDATE prewarm_jobs SET %s%supdated_at = ? WHERE id = ? AND state = 'running'"
                     % (sets, ", " if sets else ""), tuple(fields.values()) + (now, job_id))
    return cur.rowcount == 1


def finish(tx, job_id, state, now, error=""):
    """running -> done | failed; queued/running -> cancelled. False if not allowed now."""
    allowed = {"done": ("running",), "failed": ("running",), "cancelled": ("queued", "running")}
    if state not in allowed:
        raise ValueError("cannot finish a job as %r" % state)
    cur = tx.execute("UPDATE prewarm_jobs SET state = ?, error = ?, finished_at = ?, updated_at = ? "
                     "WHERE id = ? AND state IN (%s)" % ", ".join("?" for _ in allowed[state]),
                     (state, error, now, now, job_id) + allowed[state])
    return cur.rowcount == 1


def requeue_running(tx, now, worker=None):
    """Jobs left running by a process that stopped go back to the queue; -> how many.
    worker: only the jobs it had claimed (instances sharing a Postgres database each
    requeue their own at start, not the ones another instance is running)."""
    if worker is None:
        cur = tx.execute("UPDATE prewarm_jobs SET state = 'queued', claimed_by = NULL, updated_at = ? "
                         "WHERE state = 'running'", (now,))
    else:
        cur = tx.execute("UPDATE prewarm_jobs SET state = 'queued', claimed_by = NULL, updated_at = ? "
                         "WHERE state = 'running' AND claimed_by = ?", (now, worker))
    return cur.rowcount
