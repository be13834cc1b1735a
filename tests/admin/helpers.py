"""Small helpers for admin-plane tests: a client download through pulsys, waiting for a
pre-warm job."""

import time
import urllib.request

from tests.auth.conftest import call


def get_file(server, repo, path, key, rtype="model"):
    prefix = {"model": "", "dataset": "datasets/"}[rtype]
    req = urllib.request.Request("%s/%s%s/resolve/main/%s" % (server.url, prefix, repo, path),
                                 headers={"Authorization": "Bearer " + key} if key else {})
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(req, timeout=30) as r:
        return r.read()


def wait_job(base, key, job_id, until=None, timeout=30.0):
    """Poll GET /api/v1/jobs/ID until `until(job)` (default: it ended); -> the job."""
    until = until or (lambda j: j["phase"] in ("done", "failed", "cancelled"))
    deadline = time.monotonic() + timeout
    while True:
        st, _, job = call("%s/api/v1/jobs/%d" % (base, job_id), key=key)
        assert st == 200, job
        if until(job):
            return job
        assert time.monotonic() < deadline, "job %d still %s" % (job_id, job)
        time.sleep(0.05)
