import os

from pulsys.cache.index import Index
from pulsys.cache.store import Store
from pulsys.model import target as T
from pulsys.model.entry import CANNED, FILE, Entry
from pulsys.model.key import target_key

COMMIT = "c" * 40
SHA256 = "b" * 64


def tgt(rev, path="f.bin"):
    return T.Target(T.RESOLVE, "model", "org/n", rev, path)


def file_entry(blob_path=None, commit=COMMIT):
    return Entry(FILE, target_key(tgt(commit)), 5, SHA256, commit, True, "sha256/" + SHA256, blob_path)


def test_symbolic_revision_resolves_through_a_fresh_mapping_only():
    ix = Index()
    ix.publish(file_entry("/b"))
    assert ix.lookup(tgt(COMMIT), now=10) is not None
    assert ix.lookup(tgt("main"), now=10) is None                 # no mapping yet
    ix.set_rev("model", "org/n", "main", COMMIT, expires=20, fetched_at=0)
    assert ix.lookup(tgt("main"), now=10).etag == SHA256
    assert ix.lookup(tgt("main"), now=25) is None                 # stale: revalidate
    assert ix.lookup_stale(tgt("main")).etag == SHA256            # but usable offline


def test_canned_entry_with_expiry():
    ix = Index()
    ix.publish(Entry(CANNED, target_key(tgt("main")), status=307, expires=5))
    assert ix.lookup(tgt("main"), 1).status == 307
    assert ix.lookup(tgt("main"), 6) is None
    assert ix.lookup_stale(tgt("main")).status == 307


def test_store_commit_is_atomic_and_index_rebuilds(tmp_path):
    st = Store(str(tmp_path))
    part = st.new_part_path()
    with open(part, "wb") as f:
        f.write(b"hello")
    path = st.commit_blob(part, "sha256/" + SHA256)
    assert not os.path.exists(part) and open(path, "rb").read() == b"hello"
    e = file_entry(path)
    st.save_entry(e, fetched_at=1000.0, immutable=True)
    st.save_rev("revkey", "model", "org/n", "main", COMMIT, fetched_at=1000.0)
    # a leftover partial and a torn metadata file from a crash
    open(st.new_part_path(), "wb").close()
    os.makedirs(os.path.join(st.meta, "zz"), exist_ok=True)
    open(os.path.join(st.meta, "zz", "bad.json"), "w").write("{not json")
    ix = Index()
    n_e, n_r, skipped = st.load(ix, ttl=60, now_mono=100.0, now_wall=1030.0)
    assert (n_e, n_r, skipped) == (1, 1, 1)
    assert st.clean_tmp() == 1
    got = ix.lookup(tgt("main"), now=110.0)                       # mapping 30 s old, ttl 60
    assert got is not None and got.blob_path == path and got.heads is not None
    assert ix.lookup(tgt("main"), now=131.0) is None


def test_entry_whose_blob_is_missing_loads_as_metadata_only(tmp_path):
    st = Store(str(tmp_path))
    st.save_entry(file_entry("/nonexistent"), 0.0, True)
    ix = Index()
    st.load(ix, 60, 0.0, 0.0)
    assert ix.lookup(tgt(COMMIT), 1.0).blob_path is None


def test_small_bodies_are_attached_once_per_blob_within_budget(tmp_path):
    st = Store(str(tmp_path), small_max=8, small_budget=10)
    part = st.new_part_path()
    open(part, "wb").write(b"12345")
    path = st.commit_blob(part, "sha256/" + SHA256)
    e1 = st.attach_small_body(file_entry(path))
    e2 = st.attach_small_body(file_entry(path))
    assert e1.body_mem == b"12345" and e2.body_mem is e1.body_mem and st.small_left == 5
    big = Entry(FILE, "k2", 9, "c" * 64, COMMIT, True, "sha256/" + "c" * 64, path)
    assert st.attach_small_body(big).body_mem is None          # above small_max
