"""Admin API routes for pre-warm jobs (docs/admin.md): create, list, get, cancel. Each
change and its audit event commit in one transaction; the runner (admin/prewarm.py) is
woken when a job is queued."""

import re
import time

from pulsys.admin.errors import bad_request, conflict, not_found
from pulsys.db import audit, jobs

JOB_TYPES = ("model", "dataset", "space")
MAX_GLOBS = 100
MAX_GLOB = 500
_REPO = re.compile(r"[A-Za-z0-9][A-Za-z0-9._\-]{0,95}(/[A-Za-z0-9][A-Za-z0-9._\-]{0,95})?")


def check_repo(repo):
    if not isinstance(repo, str) or not _REPO.fullmatch(repo) or ".." in repo:
        raise bad_request("repo %r: expected ORG/NAME (letters, digits, '.', '_', '-')" % (repo,))
    return repo


def _check_revision(rev):
    if not isinstance(rev, str) or not rev or len(rev) > 255 or not rev.isprintable() \
            or rev.startswith("/") or ".." in rev:
        raise bad_request("revision %r: expected a branch, tag or commit" % (rev,))
    return rev


def _check_globs(name, globs):
    if globs is None:
        return []
    if isinstance(globs, str):
        globs = [globs]
    if not isinstance(globs, list) or len(globs) > MAX_GLOBS or not all(
            isinstance(g, str) and 0 < len(g) <= MAX_GLOB and g.isprintable() for g in globs):
        raise bad_request("%s: expected a list of at most %d glob strings" % (name, MAX_GLOBS))
    return globs


def job_doc(row):
    state = row["state"]
    phase = (row["phase"] or "listing") if state == "running" else state
    return {"id": row["id"], "repo": row["repo"], "type": row["repo_type"], "revision": row["revision"],
            "include": row["include_globs"], "exclude": row["exclude_globs"], "phase": phase,
            "state": state, "commit": row["commit_sha"],
            "files_done": row["files_done"], "files_total": row["files_total"],
            "bytes_done": row["bytes_done"], "bytes_total": row["bytes_total"],
            "bytes_per_s": row["bytes_per_s"], "current_file": row["current_file"], "error": row["error"],
            "created_at": row["created_at"], "started_at": row["started_at"],
            "finished_at": row["finished_at"], "created_by": row["created_by"]}


def _job_id(req):
    try:
        return int(req.match.group(1))
    except ValueError:
        raise bad_request("job id %r: expected a number" % req.match.group(1)) from None


def create_job(api, req):
    doc = req.json(("repo", "type", "revision", "include", "exclude"))
    repo = check_repo(doc.get("repo"))
    rtype = doc.get("type", "model")
    if rtype not in JOB_TYPES:
        raise bad_request("type %r: choose one of %s" % (rtype, ", ".join(JOB_TYPES)))
    rev = _check_revision(doc.get("revision", "main"))
    inc, exc = _check_globs("include", doc.get("include")), _check_globs("exclude", doc.get("exclude"))
    now = time.time()
    with api.keys.db.transaction() as tx:
        jid = jobs.create(tx, rtype, repo, rev, inc, exc, req.actor, now)
        audit.append(tx, req.actor, "prewarm.create", str(jid),
                     {"repo": repo, "type": rtype, "revision": rev, "include": inc, "exclude": exc}, now)
        row = jobs.get(tx, jid)
    if api.prewarm is not None:
        api.prewarm.wake()
    return 201, job_doc(row)


def list_jobs(api, req):
    limit = req.arg("limit", 100, int)
    with api.keys.db.transaction(write=False) as tx:
        rows = jobs.listing(tx, limit=limit)
    return 200, [job_doc(r) for r in rows]


def get_job(api, req):
    jid = _job_id(req)
    with api.keys.db.transaction(write=False) as tx:
        row = jobs.get(tx, jid)
    if row is None:
        raise not_found("no pre-warm job with id %d" % jid)
    return 200, job_doc(row)


def cancel_job(api, req):
    jid = _job_id(req)
    now = time.time()
    with api.keys.db.transaction() as tx:
        row = jobs.get(tx, jid)
        if row is None:
            raise not_found("no pre-warm job with id %d" % jid)
        if not jobs.finish(tx, jid, "cancelled", now):
            raise conflict("pre-warm job %d is already %s" % (jid, row["state"]))
        audit.append(tx, req.actor, "prewarm.cancel", str(jid), {"repo": row["repo"], "type": row["repo_type"]}, now)
        row = jobs.get(tx, jid)
    return 200, job_doc(row)


_JOB = re.compile(r"/api/v1/jobs/([^/]+)")
JOB_ROUTES = (
    ("GET", re.compile(r"/api/v1/jobs"), list_jobs, "admin"),
    ("POST", re.compile(r"/api/v1/jobs"), create_job, "admin"),
    ("GET", _JOB, get_job, "admin"),
    ("DELETE", _JOB, cancel_job, "admin"),
)
