"""kill -9 while pulsys writes its index (LMDB, ADR 0013): during the one big
transaction that imports an older cache, and while clients keep it committing new
entries. After every kill the index opens, holds only whole transactions, names no blob
that is not complete and verified, and the next start serves the right bytes."""

import concurrent.futures
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request

import lmdb

from pulsys.cache.indexdb import IndexDB
from pulsys.cache.record import peek_entry
from pulsys.model import target as T
from pulsys.model.entry import FILE, Entry
from pulsys.model.key import target_key
from tests.conftest import ROOT, ProcServer

N_OLD = 10000           # entries of the old-format cache: its import takes 0.3-0.8 s
COMMIT = "a" * 40


def settings(hub, cache):
    return {"upstream": hub.url, "cache_dir": cache, "listeners": "1", "auth": "off",
            "allow_upstream_host": [hub.cdn_netloc], "access_log": False}


def old_cache(cache, n):
    """A cache as pulsys before the LMDB index left it: one JSON file per entry under
    meta/, all pointing at one verified blob."""
    body = b"old bytes\n"
    sha = hashlib.sha256(body).hexdigest()
    bdir = os.path.join(cache, "v1", "blobs", "sha256", sha[:2])
    os.makedirs(bdir)
    with open(os.path.join(bdir, sha), "wb") as f:
        f.write(body)
    for i in range(n):
        t = T.Target(T.RESOLVE, "model", "org/old", COMMIT, "f%05d.bin" % i)
        e = Entry(FILE, target_key(t), len(body), sha, COMMIT, True, "sha256/" + sha)
        d = hashlib.sha256(e.key.encode()).hexdigest()[:40]
        os.makedirs(os.path.join(cache, "v1", "meta", d[:2]), exist_ok=True)
        with open(os.path.join(cache, "v1", "meta", d[:2], d + ".json"), "w") as f:
            json.dump({"type": "entry", "fetched_at": time.time(), "immutable": True,
                       "entry": e.to_json()}, f)
    return body


def check_index(cache):
    """Open the index as a reader (no server runs): -> (schema, entries). Every entry
    that says its blob is on disk names a file whose bytes hash to its name. A kill
    between creating the LMDB files and committing the first transaction leaves no
    named database in them: nothing was committed, (None, 0)."""
    path = os.path.join(cache, "v1", "index")
    if os.path.getsize(os.path.join(path, "data.mdb")) == 0:
        return None, 0
    with lmdb.open(path, readonly=True, max_dbs=16, lock=False) as env:
        with env.begin() as tx:
            if tx.cursor().first() is False:        # the main database lists the named ones
                return None, 0
    db = IndexDB(os.path.join(cache, "v1"), writer=False)
    try:
        schema = db.schema()
        with db.env.begin(db=db.entries) as tx:
            records = [peek_entry(v) for v in tx.cursor().iternext(keys=False)]
    finally:
        db.close()
    for kind, _, blob_id, on_disk, size in records:
        if kind == FILE and on_disk:
            algo, _, hexd = blob_id.partition("/")
            with open(os.path.join(cache, "v1", "blobs", algo, hexd[:2], hexd), "rb") as f:
                data = f.read()
            h = hashlib.sha256(data) if algo == "sha256" else hashlib.sha1(b"blob %d\0" % size + data)
            assert len(data) == size and h.hexdigest() == hexd, blob_id
    return schema, len(records)


def test_kill_during_the_import_of_an_old_cache_then_the_import_completes(hub, tmp_path):
    cache = str(tmp_path / "c")
    body = old_cache(cache, N_OLD)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PULSYS_")}
    env.update({"PULSYS_" + k.upper(): (",".join(v) if isinstance(v, list) else str(v))
                for k, v in settings(hub, cache).items()})
    env.update(PULSYS_LISTEN="127.0.0.1:0", PULSYS_ADMIN_LISTEN="off", PULSYS_ACCESS_LOG="0",
               PYTHONPATH=ROOT)
    # kills ever later, in steps short enough that some land inside the import however
    # fast this machine imports (0.3 s on one VM, 0.8 s on another). The delay counts
    # from the process's start, whose time varies: on a loaded CI machine one start was
    # killed before it opened the index and the next had finished its import. Then the
    # old cache is made again and the delays before that finish are swept finer.
    interrupted, start, step = 0, 0.2, 0.05
    for sweep in range(3):
        delay = start
        while delay < 30:
            log = open(tmp_path / ("kill-%d-%.2f.log" % (sweep, delay)), "wb")
            p = subprocess.Popen([sys.executable, "-m", "pulsys"], cwd=ROOT, env=env, stdout=log,
                                 stderr=log, stdin=subprocess.DEVNULL)
            time.sleep(delay)
            p.send_signal(signal.SIGKILL)
            p.wait()
            log.close()
            delay += step
            if not os.path.exists(os.path.join(cache, "v1", "index", "data.mdb")):
                continue
            schema, n = check_index(cache)
            assert n in (0, N_OLD)                     # the import is one transaction: all or nothing
            if schema is not None:
                break
            interrupted += 1
            assert os.path.isdir(os.path.join(cache, "v1", "meta"))   # still there to import again
        if interrupted:
            break
        shutil.rmtree(cache)
        old_cache(cache, N_OLD)
        start, step = max(0.2, delay - step - 1.0), 0.02     # up to the kill that found it done
    assert interrupted >= 1, "no kill landed during the import; make N_OLD larger"
    srv = ProcServer(settings(hub, cache), str(tmp_path / "after.log"), start_timeout=60)
    try:
        assert srv.load_stats["entries"] == N_OLD
        for i in (0, N_OLD // 2, N_OLD - 1):
            r = srv_get(srv, "/org/old/resolve/%s/f%05d.bin" % (COMMIT, i))
            assert r == (200, body)
    finally:
        srv.stop()
        srv.shutdown()
    assert check_index(cache) == (b"1", N_OLD)


def srv_get(srv, path):
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(srv.url + path, timeout=30) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def test_kill_while_clients_keep_the_index_committing(hub, tmp_path):
    files = {"f%03d.bin" % i: os.urandom(1000 + 37 * i) for i in range(120)}
    hub.add_repo("org/w", files=files)
    cache = str(tmp_path / "c")
    for round_no, delay in enumerate((0.4, 0.9)):
        srv = ProcServer(settings(hub, cache), str(tmp_path / ("run-%d.log" % round_no)))
        names = sorted(files)[round_no * 50:]

        def pull(name):
            try:
                srv_get(srv, "/org/w/resolve/main/" + name)
                srv_get(srv, "/org/w/resolve/main/missing-%s" % name)    # negative entries too
            except OSError:
                pass                                                   # the server was killed
        with concurrent.futures.ThreadPoolExecutor(8) as ex:
            futures = [ex.submit(pull, n) for n in names]
            time.sleep(delay)
            os.kill(srv.pid, signal.SIGKILL)
            concurrent.futures.wait(futures, timeout=60)
        srv.shutdown()
        schema, n = check_index(cache)
        assert schema == b"1" and n > 0
    srv = ProcServer(settings(hub, cache), str(tmp_path / "last.log"))
    try:
        assert srv.load_stats["from"] == "index"
        for name, data in files.items():
            assert srv_get(srv, "/org/w/resolve/main/" + name) == (200, data), name
    finally:
        srv.stop()
        srv.shutdown()


WRITER = """
import sys, time
sys.path.insert(0, %r)
from tests.indexes import new_index
from pulsys.model.entry import CANNED, Entry
ix = new_index(sys.argv[1])
batch = [Entry(CANNED, "2|model|org/r%%d|main|||" %% i, status=200, body=b"x" * 200) for i in range(%d)]
ix.publish(Entry(CANNED, "first", status=200))
print("begin", flush=True)
t0 = time.monotonic()
ix.publish_many(batch)
print("end %%.3f" %% (time.monotonic() - t0), flush=True)
time.sleep(30)
"""


def test_kill_inside_a_write_transaction_leaves_the_index_as_before_it(tmp_path):
    """One process commits a 100k-entry transaction and is killed at points spread over
    it (measured in a first, unkilled round): the index then holds everything committed
    before, and the transaction whole or not at all."""
    n = 100000
    code = WRITER % (ROOT, n)

    def run(root, kill_after=None):
        p = subprocess.Popen([sys.executable, "-c", code, root], stdout=subprocess.PIPE, text=True)
        assert p.stdout.readline().strip() == "begin"
        if kill_after is None:
            took = float(p.stdout.readline().split()[1])
            p.kill()
            p.wait()
            return took
        time.sleep(kill_after)
        p.kill()
        p.wait()
    took = run(str(tmp_path / "measure"))
    counts = []
    for i in range(5):
        root = str(tmp_path / ("k%d" % i))
        run(root, took * (i + 0.5) / 5)
        db = IndexDB(root, writer=False)
        try:
            counts.append(db.count()[0])
        finally:
            db.close()
    assert set(counts) <= {1, n + 1}, counts          # before it, or all of it
    assert 1 in counts, (took, counts)               # at least one kill landed inside it
