"""One connection to the admin store, SQLite or Postgres, behind the same small API.

    db = Database.open("sqlite:///var/lib/pulsys/pulsys.sqlite3")   # or postgres://user@host/db
    with db.transaction() as tx:          # BEGIN ... COMMIT, ROLLBACK on any exception
        tx.execute("UPDATE counters SET value = value + 1 WHERE name = ?", ("keys",))
        rows = tx.all("SELECT id, scope FROM api_keys")       # -> [{"id": ..., "scope": ...}]

SQL is written once with `?` placeholders and no `%` (translated to psycopg2's `%s`).
The table modules next to this one (keys, audit, jobs) take a `tx` so that a change
and its audit event commit together.

Threads: one connection, one transaction at a time (a lock). The admin plane's load is
a few statements per second; its callers are the admin HTTP threads, the key refresher
and startup. The reactor never gets here (setup.cfg forbids the import).

Failures: every driver error leaves as DatabaseError with a one-line message. A
Postgres connection that broke (server restart, network) is replaced at the start of
the next transaction; the failed one is not retried, so nothing is applied twice.
"""

import contextlib
import os
import sqlite3
import threading
import urllib.parse

from pulsys.errors import PulsysError

class DatabaseError(PulsysError):
    """The store failed or is unreachable. The message is one line for a person."""


def dialect_of(url):
    scheme = url.split(":", 1)[0].lower()
    if scheme == "sqlite":
        return "sqlite"
    if scheme in ("postgres", "postgresql"):
        return "postgres"
    raise DatabaseError("database URL %r: expected sqlite:///PATH or postgres://USER@HOST[:PORT]/DB" % describe(url))


def sqlite_path(url):
    rest = url.split(":", 1)[1]
    return rest[2:] if rest.startswith("//") else rest


def describe(url):
    """The URL with any password replaced by ***, for logs and error messages."""
    try:
        u = urllib.parse.urlsplit(url)
        if u.password:
            netloc = "%s:***@%s" % (u.username or "", u.netloc.rpartition("@")[2])
            return urllib.parse.urlunsplit(u._replace(netloc=netloc))
    except ValueError:
        return "(unparseable URL)"
    return url


def _one_line(e):
    text = " ".join(str(e).split())
    return text or type(e).__name__


class Tx:
    """A transaction in progress: execute / one / all with `?` placeholders."""

    def __init__(self, cursor, dialect):
        self.cursor = cursor
        self.dialect = dialect

    def execute(self, sql, params=()):
        if self.dialect == "postgres" and params:
            sql = sql.replace("?", "%s")
        self.cursor.execute(sql, params)
        return self.cursor

    def all(self, sql, params=()):
        cur = self.execute(sql, params)
        names = [d[0] for d in cur.description]
        return [dict(zip(names, row)) for row in cur.fetchall()]

    def one(self, sql, params=()):
        rows = self.all(sql, params)
        return rows[0] if rows else None

    def script(self, sql):
        """Statements separated by ';' at line ends, without parameters (migrations)."""
        for stmt in sql.split(";\n"):
            lines = [ln for ln in stmt.splitlines() if not ln.strip().startswith("--")]
            text = "\n".join(lines).strip().rstrip(";")
            if text:
                self.cursor.execute(text)


class Database:
    def __init__(self, url, connect_timeout=10.0):
        self.url = url
        self.dialect = dialect_of(url)
        self.connect_timeout = connect_timeout
        self._conn = None
        self._lock = threading.RLock()
        if self.dialect == "postgres":
            import psycopg2            # only Postgres users pay for the import
            self._driver, self._errors = psycopg2, (psycopg2.Error,)
        else:
            self._driver, self._errors = sqlite3, (sqlite3.Error,)

    @classmethod
    def open(cls, url, connect_timeout=10.0):
        db = cls(url, connect_timeout)
        with db._lock:
            db._connection()
        return db

    def __repr__(self):
        return "Database(%s)" % describe(self.url)

    def _connection(self):
        conn = self._conn
        if conn is not None and self.dialect == "postgres" and conn.closed:
            self._conn = conn = None
        if conn is None:
            try:
                conn = self._connect()
            except self._errors as e:
                raise DatabaseError("cannot open the database %s: %s" % (describe(self.url), _one_line(e))) from None
            except OSError as e:
                raise DatabaseError("cannot open the database %s: %s" % (describe(self.url), e.strerror or e)) from None
            self._conn = conn
        return conn

    def _connect(self):
        if self.dialect == "postgres":
            return self._driver.connect(self.url, connect_timeout=max(1, int(self.connect_timeout)))
        path = sqlite_path(self.url)
        if os.path.dirname(path):
            os.makedirs(os.path.dirname(path), exist_ok=True)
        # owner-only: it holds the audit log (and key digests, useless without the keys);
        # SQLite gives its -wal and -shm files the database file's mode
        os.close(os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600))
        conn = sqlite3.connect(path, timeout=self.connect_timeout, isolation_level=None,
                               check_same_thread=False)
        conn.execute("PRAGMA journal_mode=WAL")        # readers never wait for the writer
        conn.execute("PRAGMA busy_timeout=%d" % int(self.connect_timeout * 1000))
        return conn

    @contextlib.contextmanager
    def transaction(self, write=True):
        """BEGIN ... COMMIT around the block; ROLLBACK and DatabaseError on failure.
        SQLite write transactions take the write lock at BEGIN (IMMEDIATE), so two
        writers wait for each other instead of failing at their first write."""
        with self._lock:
            conn = self._connection()
            try:
                if self.dialect == "sqlite":
                    cur = conn.cursor()
                    cur.execute("BEGIN IMMEDIATE" if write else "BEGIN")
                else:
                    cur = conn.cursor()
                yield Tx(cur, self.dialect)
                conn.commit() if self.dialect == "postgres" else cur.execute("COMMIT")
            except BaseException as e:
                self._rollback(conn)
                if isinstance(e, self._errors):
                    raise DatabaseError("database %s: %s" % (describe(self.url), _one_line(e))) from None
                raise

    def _rollback(self, conn):
        try:
            if self.dialect == "postgres":
                conn.rollback()
            elif conn.in_transaction:
                conn.execute("ROLLBACK")
        except self._errors:
            pass

    def close(self):
        with self._lock:
            if self._conn is not None:
                try:
                    self._conn.close()
                except self._errors:
                    pass
                self._conn = None
