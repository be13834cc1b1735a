"""/readyz: is this pulsys ready for traffic? Three checks, each True or False:

- index:   the cache index was loaded from disk (startup does it before listening);
- serving: every reactor thread (--listeners 1) or worker process (N > 1) runs and
           reported ready;
- store:   the admin store answers a one-row query (keys, jobs and the audit log live
           there; a server that cannot reach it cannot change keys or run jobs).

/healthz stays "the admin listener answers" (liveness): a probe that restarts pulsys
when Postgres is down would not bring Postgres back.
"""

from pulsys.db.database import DatabaseError


def store_answers(db):
    try:
        with db.transaction(write=False) as tx:
            tx.one("SELECT COUNT(*) AS n FROM counters")    # reads the file or the server
        return True
    except DatabaseError:
        return False


def readiness(index_loaded, serving, db):
    checks = {"index": bool(index_loaded), "serving": bool(serving), "store": store_answers(db)}
    return all(checks.values()), checks
