"""Pre-warm jobs through the admin API, against a running pulsys (real sockets) whose
upstream is the fake Hub: its byte counters prove what was fetched, and a client GET
afterwards proves the files are warm. Store: real SQLite and real PostgreSQL."""

import os

import pytest

from tests.admin.helpers import get_file, wait_job
from tests.auth.conftest import admin_url, call
from tests.conftest import vars_when


@pytest.fixture
def srv(auth_server, db_url):
    server, admin, read = auth_server(db_url=db_url)
    return admin_url(server), admin, read, server


def test_a_job_fetches_the_chosen_files_once_through_the_fill_path(srv, hub):
    base, admin, read, server = srv
    big, other = os.urandom(3 << 20), os.urandom(1 << 20)
    hub.add_repo("org/warm", files={"config.json": b'{"a": 1}', "model.safetensors": big,
                                    "extra.bin": other, "docs/notes.txt": b"notes"})
    assert get_file(server, "org/warm", "config.json", read) == b'{"a": 1}'    # cached before the job
    hub.reset_counters()
    st, _, job = call(base + "/api/v1/jobs", "POST", admin,
                      {"repo": "org/warm", "include": ["*.json", "*.safetensors", "docs/"],
                       "exclude": ["*.txt"]})
    assert st == 201 and job["phase"] == "queued" and job["type"] == "model" and job["revision"] == "main"
    job = wait_job(base, admin, job["id"])
    assert job["phase"] == "done", job
    assert (job["files_done"], job["files_total"]) == (2, 2)
    assert job["bytes_total"] == job["bytes_done"] == len(big) + 8
    assert job["created_by"].startswith("key:") and job["finished_at"] >= job["created_at"]
    # each byte of the chosen LFS file came from upstream once; nothing else was fetched
    assert hub.total_body_bytes() == len(big)
    # the job went through the normal path: a client GET now is a warm hit, no upstream bytes
    hits = server.vars()["cache_hits"]
    assert get_file(server, "org/warm", "model.safetensors", read) == big
    v = vars_when(server, lambda v: v["cache_hits"] >= hits + 1)
    assert v["cache_hits"] == hits + 1 and hub.total_body_bytes() == len(big)
    # newest first; the audit log names the key that queued it
    call(base + "/api/v1/jobs", "POST", admin, {"repo": "org/warm", "include": ["config.json"]})
    st, _, listed = call(base + "/api/v1/jobs", key=admin)
    assert st == 200 and listed[0]["id"] > listed[1]["id"] == job["id"]
    st, _, log = call(base + "/api/v1/audit?action=prewarm.create", key=admin)
    assert log["events"][-1]["target"] == str(job["id"]) and log["events"][-1]["actor"] == job["created_by"]
    assert log["events"][-1]["detail"]["include"] == ["*.json", "*.safetensors", "docs/"]


def test_bad_input_cancel_and_a_failing_job(srv, hub):
    base, admin, read, server = srv
    cases = [
        ({"repo": "../etc"}, 400, "repo"),
        ({"repo": "org/x", "type": "kernel"}, 400, "type"),
        ({"repo": "org/x", "include": "*.bin", "bogus": 1}, 400, "unknown field bogus"),
        ({"repo": "org/x", "include": [3]}, 400, "glob"),
        ({"repo": "org/x", "revision": ""}, 400, "revision"),
    ]
    for body, status, text in cases:
        st, hdrs, doc = call(base + "/api/v1/jobs", "POST", admin, body)
        assert st == status and text in doc["error"] and hdrs["X-Error-Message"] == doc["error"], (body, doc)
    assert call(base + "/api/v1/jobs", "POST", read, {"repo": "org/x"})[0] == 403
    assert call(base + "/api/v1/jobs/999999", key=admin)[0] == 404
    assert call(base + "/api/v1/jobs/abc", key=admin)[0] == 400
    # a repo the Hub does not have: the job fails with the Hub's answer in one line
    st, _, job = call(base + "/api/v1/jobs", "POST", admin, {"repo": "org/missing"})
    job = wait_job(base, admin, job["id"])
    assert job["phase"] == "failed" and "Repository not found" in job["error"] and "\n" not in job["error"]
    # cancel a job while it fetches a slow file
    hub.add_repo("org/slow", files={"w.safetensors": os.urandom(2 << 20)})
    hub.faults.throttle(256 * 1024)
    try:
        st, _, job = call(base + "/api/v1/jobs", "POST", admin, {"repo": "org/slow"})
        wait_job(base, admin, job["id"], until=lambda j: j["bytes_done"] > 0)
        st, _, cancelled = call(base + "/api/v1/jobs/%d" % job["id"], "DELETE", admin)
        assert st == 200 and cancelled["phase"] == "cancelled"
        st, _, doc = call(base + "/api/v1/jobs/%d" % job["id"], "DELETE", admin)
        assert st == 409 and "already cancelled" in doc["error"]
    finally:
        hub.faults.clear()
    st, _, log = call(base + "/api/v1/audit?action=prewarm.cancel", key=admin)
    assert [e["target"] for e in log["events"]] == [str(job["id"])]
    assert call(base + "/api/v1/whoami", key=admin)[0] == 200      # still serving
