"""The admin store's tables and KeyService, on a real SQLite file and a real
PostgreSQL database (each test runs on both)."""

import itertools

import pytest

from pulsys.admin.errors import AdminError
from pulsys.admin.keys import KeyService
from pulsys.auth.keys import digest, key_id
from pulsys.db import audit, jobs
from pulsys.db import keys as rows
from pulsys.db.database import Database, DatabaseError
from pulsys.db.migrate import migrate


def clock():
    t = itertools.count(1_700_000_000)
    return lambda: float(next(t))


def test_keys_rows_generation_and_active_table(db):
    with db.transaction() as tx:
        g0 = rows.generation(tx)
        rows.insert(tx, "aaaaaaaaaaaa", "d1", "read", "ci", "cli:x", 10.0)
        rows.insert(tx, "bbbbbbbbbbbb", "d2", "admin", "", "cli:x", 11.0)
    with db.transaction() as tx:
        assert rows.generation(tx) == g0 + 2
        assert rows.active_table(tx) == {"aaaaaaaaaaaa": ("d1", "read", None), "bbbbbbbbbbbb": ("d2", "admin", None)}
        assert rows.revoke(tx, "aaaaaaaaaaaa", "key:bbbbbbbbbbbb", 12.0) is True
        assert rows.revoke(tx, "aaaaaaaaaaaa", "key:bbbbbbbbbbbb", 13.0) is False     # already
        assert rows.revoke(tx, "cccccccccccc", "key:bbbbbbbbbbbb", 13.0) is False     # unknown
        assert rows.generation(tx) == g0 + 3       # only real changes bump it
        assert rows.active_table(tx) == {"bbbbbbbbbbbb": ("d2", "admin", None)}
        listed = rows.listing(tx)
        assert [r["id"] for r in listed] == ["aaaaaaaaaaaa", "bbbbbbbbbbbb"]
        assert listed[0]["revoked_at"] == 12.0 and listed[0]["revoked_by"] == "key:bbbbbbbbbbbb"
        assert "digest" not in listed[0]
        assert [r["id"] for r in rows.listing(tx, include_revoked=False)] == ["bbbbbbbbbbbb"]
        assert rows.count(tx) == 2


def test_a_failed_transaction_leaves_nothing_behind(db):
    with pytest.raises(DatabaseError):
        with db.transaction() as tx:
            rows.insert(tx, "aaaaaaaaaaaa", "d1", "read", "", "t", 1.0)
            rows.insert(tx, "aaaaaaaaaaaa", "d1", "read", "", "t", 1.0)    # duplicate id
    with db.transaction(write=False) as tx:
        assert rows.count(tx) == 0 and rows.generation(tx) == 0
    with pytest.raises(DatabaseError):
        with db.transaction() as tx:
            rows.insert(tx, "bbbbbbbbbbbb", "d", "superuser", "", "t", 1.0)   # CHECK constraint
    with pytest.raises(ZeroDivisionError):         # not a database error: passes through, rolled back
        with db.transaction() as tx:
            rows.insert(tx, "cccccccccccc", "d", "read", "", "t", 1.0)
            1 / 0
    with db.transaction(write=False) as tx:
        assert rows.count(tx) == 0


def test_key_service_create_list_revoke_with_audit(db):
    svc = KeyService(db, clock())
    key, row = svc.create("read", "team-a", "key:000000000000")
    assert key_id(key) == row["id"] and row["scope"] == "read" and row["name"] == "team-a"
    gen, table = svc.snapshot()
    assert table == {row["id"]: (digest(key), "read", None)}     # only the digest is stored
    with db.transaction(write=False) as tx:
        stored = tx.all("SELECT * FROM api_keys")
    assert key not in repr(stored) and key[-43:] not in repr(stored)     # nor its secret part
    revoked = svc.revoke(row["id"], "cli:alice")
    assert revoked["revoked_by"] == "cli:alice" and revoked["revoked_at"] is not None
    assert svc.snapshot() == (gen + 1, {})
    with pytest.raises(AdminError) as e:
        svc.revoke(row["id"], "cli:alice")
    assert e.value.status == 409 and "already revoked" in e.value.message
    with pytest.raises(AdminError) as e:
        svc.revoke("abcdef123456", "cli:alice")
    assert e.value.status == 404
    for bad in (("root", ""), ("read", 5), ("read", "x" * 201), ("read", "tab\there")):
        with pytest.raises(AdminError) as e:
            svc.create(*bad, "cli:alice")
        assert e.value.status == 400
    events = svc.audit()
    assert [(e["action"], e["actor"], e["target"]) for e in events] == [
        ("key.revoke", "cli:alice", row["id"]), ("key.create", "key:000000000000", row["id"])]
    assert events[1]["detail"] == {"scope": "read", "name": "team-a"}


def test_first_key_only_on_a_store_that_never_had_one(db):
    svc = KeyService(db, clock())
    first = svc.ensure_first_key()
    assert first is not None and svc.snapshot()[1][key_id(first)][1] == "admin"
    assert svc.ensure_first_key() is None
    svc.revoke(key_id(first), "cli:bob")
    assert svc.ensure_first_key() is None        # all revoked is not "none": no new admin key
    assert svc.audit()[-1]["actor"] == "pulsys"


def test_audit_pages_newest_first(db):
    with db.transaction() as tx:
        ids = [audit.append(tx, "cli:x", "key.create" if i % 2 else "purge", "t%d" % i, {"i": i}, float(i))
               for i in range(7)]
    with db.transaction(write=False) as tx:
        first = audit.page(tx, limit=3)
        assert [e["id"] for e in first] == ids[::-1][:3]
        second = audit.page(tx, limit=3, before=first[-1]["id"])
        assert [e["id"] for e in second] == ids[::-1][3:6]
        assert [e["detail"]["i"] for e in audit.page(tx, limit=100, action="purge")] == [6, 4, 2, 0]
        assert len(audit.page(tx, limit=10_000)) == 7


def test_prewarm_jobs_queue_claim_progress_finish_and_requeue(db):
    with db.transaction() as tx:
        a = jobs.create(tx, "model", "org/a", "main", ["*.json"], [], "key:1", 1.0)
        b = jobs.create(tx, "dataset", "org/b", "v1", [], ["*.bin"], "key:1", 2.0)
        with pytest.raises(ValueError):
            jobs.create(tx, "kernel", "org/c", "main", [], [], "key:1", 3.0)
    with db.transaction() as tx:
        got = jobs.claim_next(tx, "w1", 5.0)
        assert got["id"] == a and got["state"] == "running" and got["include_globs"] == ["*.json"]
        assert jobs.progress(tx, a, 6.0, phase="files", files_total=3, files_done=1, bytes_done=10,
                             bytes_total=30, bytes_per_s=5.0, current_file="config.json") is True
        with pytest.raises(ValueError):
            jobs.progress(tx, a, 6.0, state="done")
        assert jobs.progress(tx, b, 6.0, files_done=1) is False       # b is not running
    with db.transaction() as tx:
        assert jobs.requeue_running(tx, 7.0) == 1                    # a restart
        again = jobs.claim_next(tx, "w2", 8.0)
        assert again["id"] == a and again["files_done"] == 1 and again["started_at"] == 5.0
        assert jobs.finish(tx, a, "done", 9.0) is True
        assert jobs.finish(tx, a, "failed", 9.0) is False
        assert jobs.finish(tx, b, "cancelled", 9.0) is True
        assert jobs.claim_next(tx, "w2", 10.0) is None
        listed = jobs.listing(tx)
        assert [(j["id"], j["state"]) for j in listed] == [(b, "cancelled"), (a, "done")]
        assert [j["id"] for j in jobs.listing(tx, states=["done"])] == [a]
        assert jobs.get(tx, b)["exclude_globs"] == ["*.bin"]


def test_a_broken_postgres_connection_is_replaced_at_the_next_transaction(postgres):
    db = Database.open(postgres.create_database())
    migrate(db)
    KeyService(db).create("read", "", "t")
    postgres.restart()
    with pytest.raises(DatabaseError):        # this one finds the connection gone
        KeyService(db).listing()
    assert len(KeyService(db).listing()) == 1  # the next one reconnects
    db.close()


def test_an_unreachable_database_is_one_clear_error(tmp_path):
    with pytest.raises(DatabaseError, match="cannot open the database postgresql://u:\\*\\*\\*@127.0.0.1:1/x") as e:
        Database.open("postgresql://u:secret@127.0.0.1:1/x", connect_timeout=2)
    assert "secret" not in str(e.value) and "\n" not in str(e.value)
    (tmp_path / "f").write_text("")
    with pytest.raises(DatabaseError, match="cannot open"):
        Database.open("sqlite://" + str(tmp_path / "f" / "db.sqlite3"))


def test_the_sqlite_file_is_readable_by_its_owner_only(tmp_path):
    db = Database.open("sqlite://" + str(tmp_path / "s" / "pulsys.sqlite3"))
    migrate(db)
    db.close()
    assert (tmp_path / "s" / "pulsys.sqlite3").stat().st_mode & 0o777 == 0o600
