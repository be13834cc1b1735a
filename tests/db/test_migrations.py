"""Numbered migrations on a real SQLite file and a real PostgreSQL database (db_url
runs each test on both)."""

import threading

import pytest

from pulsys.db.database import Database, DatabaseError
from pulsys.db.migrate import available, applied, migrate

TABLES = {"api_keys", "audit_log", "prewarm_jobs", "counters", "schema_migrations"}


def tables(db):
    with db.transaction(write=False) as tx:
        if tx.dialect == "sqlite":
            rows = tx.all("SELECT name FROM sqlite_master WHERE type = 'table'")
        else:
            rows = tx.all("SELECT tablename AS name FROM pg_tables WHERE schemaname = 'public'")
    return {r["name"] for r in rows}


def test_a_fresh_store_gets_every_migration_once(db_url):
    db = Database.open(db_url)
    numbers = [n for n, _, _ in available()]
    assert numbers[0] == 1
    assert migrate(db) == numbers
    assert TABLES <= tables(db)
    assert applied(db) == numbers
    assert migrate(db) == []                 # a restart applies nothing
    db.close()
    db = Database.open(db_url)              # and neither does a new connection
    assert migrate(db) == [] and applied(db) == numbers
    db.close()


def test_two_processes_starting_at_once_apply_each_migration_once(db_url):
    dbs = [Database.open(db_url) for _ in range(4)]
    results, errors = [], []
    go = threading.Barrier(len(dbs))

    def run(db):
        go.wait()
        try:
            results.append(migrate(db))
        except Exception as e:       # noqa: BLE001 - reported below
            errors.append(e)
    threads = [threading.Thread(target=run, args=(db,)) for db in dbs]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors
    assert sorted(len(r) for r in results) == [0, 0, 0, len(available())]
    with dbs[0].transaction(write=False) as tx:
        assert tx.one("SELECT COUNT(*) AS n FROM counters WHERE name = 'keys'")["n"] == 1
    for db in dbs:
        db.close()


def _write(d, name, sql):
    (d / name).write_text(sql)


def test_a_later_migration_applies_on_top_and_a_failing_one_changes_nothing(db_url, tmp_path):
    d = tmp_path / "m"
    d.mkdir()
    _write(d, "0001_first.sql", "CREATE TABLE a (id {serial_pk}, v TEXT NOT NULL);\n"
                                "INSERT INTO a (v) VALUES ('x');\n")
    db = Database.open(db_url)
    assert migrate(db, str(d)) == [1]
    _write(d, "0002_broken.sql", "CREATE TABLE b (id INTEGER);\nINSERT INTO no_such_table VALUES (1);\n")
    with pytest.raises(DatabaseError):
        migrate(db, str(d))
    assert applied(db) == [1] and "b" not in tables(db)      # all or nothing
    _write(d, "0002_broken.sql", "CREATE TABLE b (id INTEGER);\nALTER TABLE a ADD COLUMN w TEXT;\n")
    assert migrate(db, str(d)) == [2]
    with db.transaction(write=False) as tx:
        assert tx.all("SELECT v, w FROM a") == [{"v": "x", "w": None}]
    db.close()


def test_a_schema_newer_than_this_pulsys_is_refused(db_url, tmp_path):
    d = tmp_path / "m"
    d.mkdir()
    _write(d, "0001_first.sql", "CREATE TABLE a (id INTEGER);\n")
    _write(d, "0002_second.sql", "CREATE TABLE b (id INTEGER);\n")
    db = Database.open(db_url)
    migrate(db, str(d))
    (d / "0002_second.sql").unlink()
    with pytest.raises(DatabaseError, match="newer than this pulsys"):
        migrate(db, str(d))
    db.close()


def test_migration_files_must_be_numbered_without_gaps(tmp_path):
    _write(tmp_path, "0001_a.sql", "SELECT 1;\n")
    _write(tmp_path, "0003_c.sql", "SELECT 1;\n")
    with pytest.raises(DatabaseError, match="numbered"):
        available(str(tmp_path))
