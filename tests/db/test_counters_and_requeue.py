"""Per-repo download counters and per-worker requeueing of pre-warm jobs, on a real
SQLite file and a real PostgreSQL database (each test runs on both)."""

from pulsys.db import counters, jobs


def test_repo_counters_add_up_and_leave_the_keys_generation_alone(db):
    with db.transaction() as tx:
        gen = tx.one("SELECT value FROM counters WHERE name = 'keys'")["value"]
        counters.add_repo_stats(tx, {("model", "org/a"): (2, 100), ("dataset", "org/d|x"): (1, 7)})
    with db.transaction() as tx:
        counters.add_repo_stats(tx, {("model", "org/a"): (3, 1 << 40)})
    with db.transaction(write=False) as tx:
        assert counters.repo_stats(tx) == {("model", "org/a"): (5, 100 + (1 << 40)),
                                           ("dataset", "org/d|x"): (1, 7)}
        assert tx.one("SELECT value FROM counters WHERE name = 'keys'")["value"] == gen


def test_requeue_only_the_jobs_this_worker_had_claimed(db):
    with db.transaction() as tx:
        a = jobs.create(tx, "model", "org/a", "main", [], [], "key:1", 1.0)
        b = jobs.create(tx, "model", "org/b", "main", [], [], "key:1", 2.0)
        assert jobs.claim_next(tx, "node-1", 3.0)["id"] == a
        assert jobs.claim_next(tx, "node-2", 3.0)["id"] == b
        assert jobs.requeue_running(tx, 4.0, "node-1") == 1
        assert jobs.get(tx, a)["state"] == "queued" and jobs.get(tx, b)["state"] == "running"
