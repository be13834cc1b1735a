"""A pre-warm job that was fetching when pulsys stopped goes on at the next start, and
its progress is live while it runs (real SQLite store, fake Hub throttled)."""

import os
import time

from pulsys.db import jobs
from pulsys.db.database import Database
from tests.admin.helpers import get_file, wait_job
from tests.auth.conftest import admin_url, call


def test_progress_is_live_and_a_job_resumes_after_a_restart(auth_server, hub, tmp_path):
    body = os.urandom(3 << 20)
    hub.add_repo("org/big", files={"a.safetensors": body, "b.json": b"{}"})
    cache = str(tmp_path / "cache")
    server, admin, read = auth_server(cache_dir=cache)
    base = admin_url(server)
    hub.faults.throttle(1 << 20)          # ~3 s for the file
    st, _, job = call(base + "/api/v1/jobs", "POST", admin, {"repo": "org/big"})
    live = wait_job(base, admin, job["id"], until=lambda j: j["bytes_done"] > 0 and j["bytes_per_s"] > 0)
    assert live["phase"] == "fetching" and live["files_total"] == 2
    assert live["current_file"] == "a.safetensors" and live["bytes_total"] == len(body) + 2
    later = wait_job(base, admin, job["id"], until=lambda j: j["bytes_done"] > live["bytes_done"])
    assert later["bytes_done"] < later["bytes_total"]
    server.stop()
    server.shutdown()
    db = Database.open("sqlite://%s/pulsys.sqlite3" % cache)
    with db.transaction(write=False) as tx:
        assert jobs.get(tx, job["id"])["state"] == "running"      # left for the next start
    db.close()
    hub.faults.clear()
    server, admin, read = auth_server(cache_dir=cache)
    done = wait_job(admin_url(server), admin, job["id"])
    assert done["phase"] == "done" and done["files_done"] == 2 and done["bytes_done"] == len(body) + 2
    before = _quiet(hub)
    assert get_file(server, "org/big", "a.safetensors", read) == body
    assert hub.total_body_bytes() == before


def _quiet(hub, seconds=0.3, tries=20):
    """The fake Hub's body-byte count once it has stopped moving: the handler that was
    sending to the stopped server's connection counts its last pieces after writing them."""
    last = hub.total_body_bytes()
    for _ in range(tries):
        time.sleep(seconds)
        now = hub.total_body_bytes()
        if now == last:
            return now
        last = now
    raise AssertionError("the fake Hub kept sending body bytes")
