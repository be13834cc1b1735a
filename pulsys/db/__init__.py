"""The admin plane's store: one schema (migrations/), SQLite by default, Postgres with
--db postgres://... Table modules take a transaction from Database.transaction():

    database.py   Database.open(url), transaction() -> Tx, DatabaseError
    migrate.py    migrate(db): numbered migrations, run at startup
    keys.py       api_keys and the keys generation counter
    audit.py      audit_log
    jobs.py       prewarm_jobs
"""
