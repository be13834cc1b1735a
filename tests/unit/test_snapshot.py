"""Start-up load: the index snapshot is used only while it describes meta/, blobs are
always checked against disk, and what is skipped is logged (cache/snapshot.py, store.py)."""

import os
import time

import structlog

from pulsys.cache import snapshot
from pulsys.cache.index import Index
from pulsys.cache.store import Store
from pulsys.model import target as T
from pulsys.model.entry import CANNED, FILE, Entry
from pulsys.model.key import target_key

COMMIT = "c" * 40


def tgt(rev, path):
    return T.Target(T.RESOLVE, "model", "org/n", rev, path)


def fill_store(st, n=5):
    """n FILE entries at a commit with blobs, a mutable CANNED entry fetched 30 s before
    wall time 1000, a revision mapping."""
    paths = []
    for i in range(n):
        data = b"x" * (i + 1)
        part = st.new_part_path()
        with open(part, "wb") as f:
            f.write(data)
        blob = "sha256/%064x" % i
        paths.append(st.commit_blob(part, blob))
        st.save_entry(Entry(FILE, target_key(tgt(COMMIT, "f%d" % i)), len(data), blob[7:], COMMIT,
                            True, blob), 970.0, True)
    st.save_entry(Entry(CANNED, target_key(tgt("main", "r")), status=307,
                        headers=(("Location", "/x"),)), 970.0, False)
    st.save_rev("100|model|org/n|main||", "model", "org/n", "main", COMMIT, 970.0)
    return paths


def load(root, now_mono=100.0, now_wall=1000.0):
    st, ix = Store(root), Index()
    stats = st.load(ix, 60.0, now_mono, now_wall)
    return st, ix, stats


def test_snapshot_round_trip_is_the_same_index(tmp_path):
    st = Store(str(tmp_path))
    fill_store(st)
    st, ix, stats = load(str(tmp_path))
    assert st.loaded_from == "meta" and stats == (6, 1, 0)
    snapshot.write(st, ix, {"sha256/%064x" % 1: 990.0}, 60.0, 100.0, 1000.0)
    st2, ix2, stats2 = load(str(tmp_path), now_mono=500.0, now_wall=1010.0)
    assert st2.loaded_from == "snapshot" and stats2 == (6, 1, 0)
    assert st2.snapshot_served == {"sha256/%064x" % 1: 990.0}
    for key, e in ix.entries.items():
        e2 = ix2.entries[key]
        assert (e2.kind, e2.size, e2.etag, e2.blob_id, e2.blob_path, e2.headers, e2.status) == \
            (e.kind, e.size, e.etag, e.blob_id, e.blob_path, e.headers, e.status)
        assert e2.kind != FILE or e2.heads.ok_ka == e.heads.ok_ka
    # the CANNED entry was fetched at wall 970 (ttl 60): 40 s old at wall 1010 -> 20 s left
    canned = ix2.entries[target_key(tgt("main", "r"))]
    assert abs(canned.expires - 520.0) < 1e-6
    r = ix2.revs["100|model|org/n|main||"]
    assert r.commit == COMMIT and abs(r.expires - 520.0) < 1e-6


def test_a_metadata_change_after_the_snapshot_makes_the_next_load_read_meta(tmp_path):
    st = Store(str(tmp_path))
    fill_store(st)
    st, ix, _ = load(str(tmp_path))
    snapshot.write(st, ix, {}, 60.0, 100.0, 1000.0)
    time.sleep(0.05)      # directory mtimes tick every few ms (see the snapshot module)
    st.save_entry(Entry(FILE, target_key(tgt(COMMIT, "new")), 1, "e" * 64, COMMIT, True,
                        "sha256/" + "e" * 64), 999.0, True)
    st2, ix2, stats = load(str(tmp_path))
    assert st2.loaded_from == "meta" and stats[0] == 7


def test_a_blob_removed_after_the_snapshot_is_not_served_from_it(tmp_path):
    st = Store(str(tmp_path))
    paths = fill_store(st)
    st, ix, _ = load(str(tmp_path))
    snapshot.write(st, ix, {}, 60.0, 100.0, 1000.0)
    os.unlink(paths[2])
    with open(paths[3], "ab") as f:
        f.write(b"longer")
    st2, ix2, _ = load(str(tmp_path))
    assert st2.loaded_from == "snapshot"
    assert ix2.entries[target_key(tgt(COMMIT, "f2"))].blob_path is None
    assert ix2.entries[target_key(tgt(COMMIT, "f3"))].blob_path is None
    assert ix2.entries[target_key(tgt(COMMIT, "f4"))].blob_path == paths[4]


def test_a_garbage_snapshot_is_ignored(tmp_path):
    st = Store(str(tmp_path))
    fill_store(st)
    with open(snapshot.path(st), "w") as f:
        f.write('{"format": "pulsys-index-snapshot/1", "entries": [[1, 2]]')
    st2, ix2, stats = load(str(tmp_path))
    assert st2.loaded_from == "meta" and stats == (6, 1, 0)
    with open(snapshot.path(st), "w") as f:      # parses, describes meta/, rows are wrong
        import json
        json.dump({"format": snapshot.FORMAT, "meta": snapshot.meta_signature(st.meta),
                   "entries": [[1, 2]], "revs": []}, f)
    st3, ix3, stats = load(str(tmp_path))
    assert st3.loaded_from == "meta" and stats == (6, 1, 0) and len(ix3) == 6


def test_skipped_files_are_logged_and_never_served(tmp_path):
    st = Store(str(tmp_path))
    paths = fill_store(st)
    os.makedirs(os.path.join(st.meta, "zz"), exist_ok=True)
    with open(os.path.join(st.meta, "zz", "torn.json"), "w") as f:
        f.write('{"type": "entry", "fetched_at": 1, "entry": {"kind"')
    with open(paths[0], "r+b") as f:
        f.truncate(0)
    with structlog.testing.capture_logs() as logs:
        st2, ix2, stats = load(str(tmp_path))
    assert stats == (6, 1, 1)
    events = [(e["event"], e.get("path") or e.get("blob")) for e in logs]
    assert ("skipped at load", os.path.join(st.meta, "zz", "torn.json")) in events
    assert ("blob has the wrong size; entry loads as metadata only", "sha256/%064x" % 0) in events
    assert ix2.entries[target_key(tgt(COMMIT, "f0"))].blob_path is None
