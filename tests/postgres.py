"""A real PostgreSQL server for the tests, from Debian's `postgresql` package.

PostgresServer.start() finds the newest /usr/lib/postgresql/<version>/bin (installing
the package with apt-get when it is missing and the tests run as root), runs initdb
into a new temporary directory and starts `postgres` on a free loopback port. The
server refuses to run as root, so when the tests are root it runs as the `postgres`
user the package creates (or `nobody`), which owns the directory. stop() ends it by
the PID started here (SIGINT: fast shutdown; SIGKILL after 10 s) and removes the
directory. A machine where the server cannot be had makes the tests that need it fail,
saying why: they are never skipped.
"""

import glob
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time

from tests.debian import apt_install, can_install

START_TIMEOUT = 30.0


class PostgresUnavailable(RuntimeError):
    pass


def _version(path):
    v = path.split("/postgresql/")[1].split("/")[0]
    return tuple(int(x) for x in v.split(".") if x.isdigit())


def find_bindir():
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=_version)
    return os.path.dirname(found[-1]) if found else None


def ensure_installed():
    """The server's bin directory, installing Debian's postgresql package when root."""
    bindir = find_bindir()
    if bindir:
        return bindir
    if can_install():
        log = apt_install(["postgresql"], 900)
        bindir = find_bindir()
        if bindir:
            return bindir
        raise PostgresUnavailable("installing Debian's postgresql package failed:\n" + log)
    raise PostgresUnavailable("no PostgreSQL server in /usr/lib/postgresql/*/bin; install Debian's "
                              "postgresql package (apt-get install postgresql), or run the tests as root")


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _run_as():
    """(uid, gid) to run the server as, or None to run as ourselves (not root)."""
    if os.geteuid() != 0:
        return None
    for name in ("postgres", "nobody"):
        try:
            pw = pwd.getpwnam(name)
            return pw.pw_uid, pw.pw_gid
        except KeyError:
            continue
    raise PostgresUnavailable("running as root and there is neither a postgres nor a nobody user")


class PostgresServer:
    user = "pulsys"

    def __init__(self, bindir, root, ident):
        self.bindir, self.root, self.ident = bindir, root, ident
        self.proc = None
        self.port = None
        self._dbs = 0

    def _popen_kw(self):
        kw = {"cwd": self.root, "env": {"PATH": "/usr/bin:/bin", "LANG": "C", "LC_ALL": "C", "HOME": self.root}}
        if self.ident is not None:
            kw.update(user=self.ident[0], group=self.ident[1], extra_groups=[])
        return kw

    @classmethod
    def start(cls):
        bindir = ensure_installed()
        ident = _run_as()
        root = tempfile.mkdtemp(prefix="pulsys-pg-")
        srv = cls(bindir, root, ident)
        try:
            if ident is not None:
                os.chown(root, *ident)
            p = subprocess.run([os.path.join(bindir, "initdb"), "-D", os.path.join(root, "data"), "-U", cls.user,
                                "--auth=trust", "-E", "UTF8", "--locale=C", "--no-sync"],
                               capture_output=True, text=True, timeout=120, **srv._popen_kw())
            if p.returncode != 0:
                raise PostgresUnavailable("initdb failed (%d): %s" % (p.returncode, p.stderr[-2000:]))
            for _ in range(3):          # a port taken between _free_port and bind: try another
                if srv._launch():
                    return srv
            raise PostgresUnavailable("postgres did not start:\n" + srv.log_text()[-3000:])
        except BaseException:
            srv.stop()
            raise

    def _launch(self, port=None):
        import psycopg2
        self.port = port or _free_port()
        log = open(os.path.join(self.root, "postgres.log"), "ab")
        try:
            self.proc = subprocess.Popen(
                [os.path.join(self.bindir, "postgres"), "-D", os.path.join(self.root, "data"),
                 "-h", "127.0.0.1", "-p", str(self.port), "-k", self.root,
                 "-c", "fsync=off", "-c", "full_page_writes=off", "-c", "synchronous_commit=off"],
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, **self._popen_kw())
        finally:
            log.close()
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                return False
            try:
                psycopg2.connect(host="127.0.0.1", port=self.port, user=self.user, dbname="postgres",
                                 connect_timeout=2).close()
                return True
            except psycopg2.OperationalError:
                time.sleep(0.05)
        self._kill()
        return False

    def log_text(self):
        try:
            with open(os.path.join(self.root, "postgres.log"), "rb") as f:
                return f.read().decode("utf-8", "replace")
        except OSError:
            return ""

    def url(self, dbname):
        return "postgresql://%s@127.0.0.1:%d/%s" % (self.user, self.port, dbname)

    def create_database(self, prefix="t"):
        """A new empty database; -> its URL."""
        import psycopg2
        self._dbs += 1
        name = "%s_%d" % (prefix, self._dbs)
        conn = psycopg2.connect(self.url("postgres"), connect_timeout=5)
        try:
            conn.autocommit = True
            conn.cursor().execute("CREATE DATABASE %s" % name)
        finally:
            conn.close()
        return self.url(name)

    def _kill(self):
        p, self.proc = self.proc, None
        if p is None or p.poll() is not None:
            return
        p.send_signal(signal.SIGINT)          # fast shutdown: disconnects clients, exits
        try:
            p.wait(10)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait(10)

    def restart(self):
        """Stop and start the same cluster on the same port (clients see their
        connections break)."""
        port = self.port
        self._kill()
        if not self._launch(port):
            raise PostgresUnavailable("postgres did not come back:\n" + self.log_text()[-3000:])

    def stop(self):
        self._kill()
        shutil.rmtree(self.root, ignore_errors=True)
