"""The LMDB index: lookups, records, scans, a reactor's memo, and opening or importing a
cache directory (cache/index.py, index_view.py, indexdb.py, record.py, index_import.py)."""

import hashlib
import json
import os
import pickle
import time

from pulsys.cache.index_import import open_index
from pulsys.cache.indexdb import SCHEMA
from pulsys.cache.store import Store
from pulsys.model import target as T
from pulsys.model.entry import CANNED, FILE, Entry
from pulsys.model.key import repo_prefix, target_key
from tests.indexes import new_index, view_of

COMMIT = "c" * 40
SHA256 = "b" * 64


def tgt(rev, path="f.bin", repo="org/n"):
    return T.Target(T.RESOLVE, "model", repo, rev, path)


def file_entry(on_disk=True, commit=COMMIT, path="f.bin", sha=SHA256, size=5, ix=None):
    blob_id = "sha256/" + sha
    return Entry(FILE, target_key(tgt(commit, path)), size, sha, commit, True, blob_id,
                 ix.blob_path(blob_id) if on_disk and ix is not None else ("/b" if on_disk else None))


def put_blob(ix, body):
    sha = hashlib.sha256(body).hexdigest()
    path = ix.blob_path("sha256/" + sha)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(body)
    return sha


def test_symbolic_revision_resolves_through_a_fresh_mapping_only(tmp_path):
    ix = new_index(str(tmp_path))
    ix.publish(file_entry(ix=ix))
    for reader in (ix, view_of(ix)):
        assert reader.lookup(tgt(COMMIT), now=10) is not None
        assert reader.lookup(tgt("main"), now=10) is None                 # no mapping yet
    ix.set_rev("model", "org/n", "main", COMMIT, expires=time.monotonic() + 20, fetched_at=0)
    for reader in (ix, view_of(ix)):
        now = time.monotonic()
        assert reader.lookup(tgt("main"), now).etag == SHA256
        assert reader.lookup(tgt("main"), now + 25) is None                # stale: revalidate
        assert reader.lookup_stale(tgt("main")).etag == SHA256            # but usable offline


def test_canned_entry_with_expiry_and_a_record_that_round_trips(tmp_path):
    ix = new_index(str(tmp_path))
    t0 = time.monotonic()
    e = Entry(CANNED, target_key(tgt("main")), status=307, headers=(("Location", "/x"),), body=b"b\xff",
              expires=t0 + 5)
    e.head_only = True
    ix.publish(e)
    got = ix.lookup(tgt("main"), t0 + 1)
    assert (got.status, got.headers, got.body, got.head_only) == (307, (("Location", "/x"),), b"b\xff", True)
    assert abs(got.expires - (t0 + 5)) < 0.01
    assert ix.lookup(tgt("main"), t0 + 6) is None
    assert ix.lookup_stale(tgt("main")).status == 307


def test_freshness_is_judged_by_the_ttl_in_force(tmp_path):
    """Records keep fetch times in effect: a restart with a shorter --revision-ttl makes
    an answer fetched 1 s ago under a 60 s TTL stale."""
    ix = new_index(str(tmp_path), ttl=60.0)
    now = time.monotonic()
    ix.set_rev("model", "org/n", "main", COMMIT, expires=now + 59, fetched_at=time.time() - 1)
    ix.publish(file_entry(ix=ix))
    assert ix.lookup(tgt("main"), now) is not None
    ix.ttl = 0.5
    assert ix.lookup(tgt("main"), now) is None
    assert ix.lookup(tgt(COMMIT), now) is not None                     # at a commit: forever


def test_scans_by_blob_and_by_repo_follow_every_change(tmp_path):
    ix = new_index(str(tmp_path))
    a = file_entry(ix=ix, path="a")
    b = file_entry(ix=ix, path="b")
    other = Entry(FILE, target_key(tgt(COMMIT, "a", repo="org/other")), 5, SHA256, COMMIT, True,
                  "sha256/" + SHA256, None)
    ix.publish_many([a, b, other])
    assert sorted(e.key for e in ix.entries_of_blob("sha256/" + SHA256)) == sorted([a.key, b.key, other.key])
    ix.publish(file_entry(ix=ix, path="b", sha="d" * 64))                # b now has other content
    assert len(ix.entries_of_blob("sha256/" + SHA256)) == 2 and len(ix.entries_of_blob("sha256/" + "d" * 64)) == 1
    assert [e.key for e in ix.entries(repo_prefix(T.RESOLVE, "model", "org/other"))] == [other.key]
    assert ix.remove(a.key) and not ix.remove(a.key)
    assert [e.key for e in ix.entries_of_blob("sha256/" + SHA256)] == [other.key]
    assert len(ix) == 2 and ix.get(other.key).blob_path is None


def test_negative_entries_are_listed_apart_and_the_list_follows_every_change(tmp_path):
    ix = new_index(str(tmp_path))
    k1, k2 = target_key(tgt(COMMIT, "gone-1")), target_key(tgt(COMMIT, "gone-2" + "x" * 600))
    for k in (k1, k2):
        ix.publish(Entry(CANNED, k, status=404, body=b"{}"))
    ix.publish(Entry(CANNED, target_key(tgt(COMMIT, "redirect")), status=302))
    assert sorted(ix.negative_keys()) == sorted([k1, k2])                  # the long key in full
    ix.publish(file_entry(ix=ix, path="gone-1"))                           # the file appeared
    assert list(ix.negative_keys()) == [k2]
    ix.remove(k2)
    assert list(ix.negative_keys()) == []


def test_keys_longer_than_lmdb_allows_are_stored_and_found_by_repo(tmp_path):
    ix = new_index(str(tmp_path))
    long_path = "d/" * 400 + "f.bin"                                      # a key of ~830 bytes
    e = file_entry(ix=ix, path=long_path)
    ix.publish(e)
    assert ix.get(e.key).key == e.key
    assert view_of(ix).lookup(tgt(COMMIT, long_path), 1.0).key == e.key
    assert [x.key for x in ix.entries(repo_prefix(T.RESOLVE, "model", "org/n"))] == [e.key]
    assert [x.key for x in ix.entries_of_blob(e.blob_id)] == [e.key]


def test_a_view_remembers_answers_until_the_index_changes(tmp_path):
    ix = new_index(str(tmp_path))
    ix.publish(file_entry(ix=ix, path="a"))
    ix.publish(file_entry(ix=ix, path="b"))
    v = view_of(ix)
    first = v.lookup(tgt(COMMIT, "a"), 1.0)
    reads = v.reads
    assert v.lookup(tgt(COMMIT, "a"), 1.0) is first and v.reads == reads     # memo: no LMDB read
    ix.publish(file_entry(ix=ix, path="b", size=7))                          # another key changes
    decodes = v.decodes
    assert v.lookup(tgt(COMMIT, "a"), 1.0) is first                          # same record: kept
    assert v.reads == reads + 1 and v.decodes == decodes
    ix.publish(file_entry(ix=ix, path="a", size=9))                          # this key changes
    assert v.lookup(tgt(COMMIT, "a"), 1.0).size == 9
    ix.remove(target_key(tgt(COMMIT, "a")))
    assert v.lookup(tgt(COMMIT, "a"), 1.0) is None                           # gone at once


def test_a_target_keeps_its_last_hit_only_while_the_index_and_the_clock_allow(tmp_path):
    ix = new_index(str(tmp_path))
    now = time.monotonic()
    ix.publish(file_entry(ix=ix))
    ix.set_rev("model", "org/n", "main", COMMIT, expires=now + 20, fetched_at=0)
    v = view_of(ix)
    t = tgt("main")                       # the reactor keeps one Target per exact head
    first = v.lookup(t, now)
    reads = v.reads
    assert v.lookup(t, now + 1) is first and v.reads == reads and t.seen[1] is first
    assert v.lookup(t, now + 21) is None                                   # the mapping went stale
    ix.publish(file_entry(ix=ix, size=8))
    assert v.lookup(t, now).size == 8                                      # gen moved: read again
    ix.remove(target_key(tgt(COMMIT)))
    assert v.lookup(t, now) is None and t.seen is None
    copy = pickle.loads(pickle.dumps(tgt("main")))
    t.seen = (1, first, now)
    assert pickle.loads(pickle.dumps(t)).seen is None and copy.key is None  # a Job carries no Entry


def test_a_view_remembers_misses_and_is_bounded(tmp_path):
    ix = new_index(str(tmp_path))
    v = view_of(ix, memo_max=4)
    assert v.lookup(tgt(COMMIT, "nothing"), 1.0) is None
    reads = v.reads
    assert v.lookup(tgt(COMMIT, "nothing"), 1.0) is None and v.reads == reads
    for i in range(10):
        v.lookup(tgt(COMMIT, "x%d" % i), 1.0)
        assert len(v.memo) <= 4


def test_a_view_reads_small_bodies_within_its_byte_budget(tmp_path):
    ix = new_index(str(tmp_path))
    sha = put_blob(ix, b"hello")
    ix.publish(file_entry(ix=ix, sha=sha))
    ix.publish(file_entry(ix=ix, path="big", sha=put_blob(ix, b"x" * 100), size=100))
    v = view_of(ix, small_max=8)
    assert v.lookup(tgt(COMMIT), 1.0).body_mem is None                      # looked up once: no read
    e = v.lookup(tgt(COMMIT), 1.0)                                          # again: its bytes are kept
    assert e.body_mem == b"hello" and e.heads.full_ka.endswith(b"\r\n\r\nhello")
    assert v.lookup(tgt(COMMIT), 1.0) is e and v.body_bytes == 5
    for _ in range(2):
        assert v.lookup(tgt(COMMIT, "big"), 1.0).body_mem is None           # above small_max
    os.truncate(ix.blob_path("sha256/" + sha), 2)                           # not the size it says
    v2 = view_of(ix, small_max=8)
    for _ in range(3):
        assert v2.lookup(tgt(COMMIT), 1.0).body_mem is None
    t = tgt(COMMIT)
    assert v2.lookup(t, 1.0) is not None and t.seen is not None             # failed once: settled


def test_a_view_drops_a_snapshot_that_is_behind(tmp_path):
    ix = new_index(str(tmp_path))
    v = view_of(ix)
    v.lookup(tgt(COMMIT), 1.0)
    assert v._tx is not None
    v.refresh()
    assert v._tx is not None                                                # gen unchanged: kept
    ix.publish(file_entry(ix=ix))
    v.refresh()
    assert v._tx is None                                                    # behind: released


# -- opening a cache directory -------------------------------------------------------------


class _Lines:
    def __init__(self):
        self.lines = []

    def warning(self, event, **kw):
        self.lines.append(event)

    info = warning


def store_with_blob(tmp_path, body=b"hello"):
    """A Store with one committed blob (named SHA256, whatever `body` hashes to)."""
    st = Store(str(tmp_path))
    part = st.new_part_path()
    with open(part, "wb") as f:
        f.write(body)
    st.commit_blob(part, "sha256/" + SHA256)
    return st


def _old_meta(st, key, doc):
    d = hashlib.sha256(key.encode()).hexdigest()[:40]
    os.makedirs(os.path.join(st.meta, d[:2]), exist_ok=True)
    with open(os.path.join(st.meta, d[:2], d + ".json"), "w") as f:
        json.dump(doc, f)


def test_an_old_cache_is_imported_once_and_its_files_removed(tmp_path):
    st = store_with_blob(tmp_path)
    now = time.time()
    on_disk = file_entry(on_disk=False)                       # the blob is there, 5 bytes
    gone = file_entry(on_disk=False, path="g.bin", sha="e" * 64)
    for e in (on_disk, gone):
        _old_meta(st, e.key, {"type": "entry", "fetched_at": now, "immutable": True, "entry": e.to_json()})
    _old_meta(st, "revkey", {"type": "rev", "key": "revkey", "rtype": "model", "repo": "org/n",
                             "rev": "main", "commit": COMMIT, "fetched_at": now - 10})
    os.makedirs(os.path.join(st.meta, "zz"), exist_ok=True)
    with open(os.path.join(st.meta, "zz", "torn.json"), "w") as f:
        f.write('{"type": "entry", "fetch')
    log = _Lines()
    ix, stats = open_index(st, 60.0, log)
    assert stats["from"] == "import-meta" and (stats["entries"], stats["revisions"], stats["skipped"]) == (2, 1, 1)
    assert "index built from the files of an older pulsys" in log.lines
    assert ix.get(on_disk.key).blob_path == st.blob_path("sha256/" + SHA256)
    assert ix.get(gone.key).blob_path is None                  # no blob: metadata only
    assert ix.lookup(tgt("main"), time.monotonic()).etag == SHA256
    assert [(b, s) for b, s, _ in ix.blob_records()] == [("sha256/" + SHA256, 5)]
    assert not os.path.exists(st.meta)
    ix.db.close()
    ix, stats = open_index(st, 60.0, _Lines())
    assert stats["from"] == "index" and stats["entries"] == 2
    ix.db.close()


def test_an_index_of_another_version_is_moved_aside_and_rebuilt_from_the_blobs(tmp_path):
    st = store_with_blob(tmp_path)
    ix, _ = open_index(st, 60.0, _Lines())
    with ix.db.env.begin(write=True, db=ix.db.meta) as tx:
        tx.put(b"schema", b"99")
    ix.db.close()
    log = _Lines()
    ix, stats = open_index(st, 60.0, log)
    assert log.lines[0] == "index not usable; moved aside and rebuilt from the blobs on disk"
    assert ix.db.schema() == SCHEMA and stats["blobs_found"] == 1
    assert [b for b, _, _ in ix.blob_records()] == ["sha256/" + SHA256]
    assert [n for n in os.listdir(st.root) if n.startswith("index.unusable-")]
    ix.db.close()


def test_store_commit_is_atomic(tmp_path):
    st = Store(str(tmp_path))
    part = st.new_part_path()
    with open(part, "wb") as f:
        f.write(b"hello")
    path = st.commit_blob(part, "sha256/" + SHA256)
    assert not os.path.exists(part) and open(path, "rb").read() == b"hello"
    open(st.new_part_path(), "wb").close()                    # a leftover partial
    assert st.clean_tmp() == 1 and not os.listdir(st.tmp)


def test_the_writer_makes_the_generation_file_before_lmdb_commits(tmp_path, monkeypatch):
    """A kill after LMDB's first commit must find the generation file there: the writer
    makes it before it opens LMDB (tests/behaviour/test_index_crash.py sweeps the kills)."""
    import lmdb

    from pulsys.cache import indexdb
    seen = []
    real = lmdb.open

    def watched(path, **kw):
        seen.append(os.path.exists(os.path.join(path, "gen")))
        return real(path, **kw)
    monkeypatch.setattr(indexdb.lmdb, "open", watched)
    db = indexdb.IndexDB(str(tmp_path / "v1"))
    db.bump()
    db.close()
    assert seen == [True]
    reader = indexdb.IndexDB(str(tmp_path / "v1"), writer=False)
    try:
        assert reader.gen() == 1
    finally:
        reader.close()


def test_a_reader_of_an_index_without_its_generation_file_gets_index_unusable(tmp_path):
    from pulsys.cache.indexdb import IndexDB, IndexUnusable
    root = str(tmp_path / "v1")
    IndexDB(root).close()
    gen = os.path.join(root, "index", "gen")
    with open(gen, "r+b") as f:
        f.truncate(3)
    for expect in ("is short", "has no generation file"):
        try:
            IndexDB(root, writer=False).close()
        except IndexUnusable as e:
            assert expect in str(e) and root in str(e)
        else:
            raise AssertionError("a reader opened an index whose gen file %s" % expect)
        if os.path.exists(gen):
            os.remove(gen)
    db = IndexDB(root)            # the writer makes it again
    try:
        assert db.gen() == 0
    finally:
        db.close()
