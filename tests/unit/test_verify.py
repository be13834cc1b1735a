"""`pulsys verify` on a cache directory: what is bad is found, quarantined and reported;
the index is brought in line with the disk; what is good is left alone
(pulsys/cache/verify.py, pulsys/cli/verify.py)."""

import json
import marshal
import os
import subprocess
import sys

from pulsys.cache.index import Index
from pulsys.cache.index_import import open_index
from pulsys.cache.indexdb import IndexDB, blob_key, lkey
from pulsys.cache.store import Store
from pulsys.cache.verify import content_hasher, verify
from pulsys.model.entry import FILE, Entry
from pulsys.testing.fake_hub import git_blob_sha1, sha256_hex

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
COMMIT = "c" * 40
YEAR = 365 * 86400.0


class Log:
    def __init__(self):
        self.lines = []

    def info(self, event, **kw):
        self.lines.append(("info", event, kw))

    def warning(self, event, **kw):
        self.lines.append(("warning", event, kw))


def open_idx(st):
    return open_index(st, 0.0, Log())[0]


def key(name):
    return "1|model|org/r|%s|%s|" % (COMMIT, name)


def put_blob(st, blob_id, data):
    part = st.new_part_path(blob_id)
    with open(part, "wb") as f:
        f.write(data)
    return st.commit_blob(part, blob_id)


def one_file_cache(tmp_path, size):
    """A cache with one verified blob of `size` random bytes and its entry "w.bin";
    -> (store, open index, blob id)."""
    st = Store(str(tmp_path))
    data = os.urandom(size)
    blob_id = "sha256/" + sha256_hex(data)
    put_blob(st, blob_id, data)
    index = open_idx(st)
    index.publish(file_entry(st, "w.bin", blob_id, size))
    return st, index, blob_id


def file_entry(st, name, blob_id, size, on_disk=True):
    return Entry(FILE, key(name), size, blob_id.split("/")[1], COMMIT, blob_id.startswith("sha256"),
                 blob_id, st.blob_path(blob_id) if on_disk else None)


def run_cli(*args):
    env = dict(os.environ, PYTHONPATH=ROOT)
    return subprocess.run([sys.executable, "-m", "pulsys", "verify", *args], capture_output=True,
                          text=True, timeout=60, cwd=ROOT, env=env)


def test_names_are_the_hubs_content_hashes():
    data = os.urandom(1000)
    h = content_hasher("sha256", len(data))
    h.update(data)
    assert h.hexdigest() == sha256_hex(data)
    h = content_hasher("sha1", len(data))
    h.update(data)
    assert h.hexdigest() == git_blob_sha1(data)
    assert content_hasher("other", 1) is None


def make_cache(tmp_path):
    """Good blobs of both kinds; a corrupt blob with two entries; a misnamed file; an
    entry whose size disagrees with its blob; an entry and a blob record whose file is
    gone; a good blob with no record (and an entry); a record of the wrong size; a
    record that does not decode; an entry that is metadata only already."""
    st = Store(str(tmp_path))
    index = open_idx(st)              # before the blobs: a new index would import them
    lfs, reg, bad, orphan = os.urandom(3000), b'{"a": 1}\n', os.urandom(2000), os.urandom(500)
    ids = {"lfs": "sha256/" + sha256_hex(lfs), "reg": "sha1/" + git_blob_sha1(reg),
           "bad": "sha256/" + sha256_hex(bad), "wrong-size": "sha1/" + git_blob_sha1(b"xyz"),
           "gone": "sha256/" + sha256_hex(b"gone"), "orphan": "sha256/" + sha256_hex(orphan)}
    put_blob(st, ids["lfs"], lfs)
    put_blob(st, ids["reg"], reg)
    p = put_blob(st, ids["bad"], bad)
    with open(p, "r+b") as f:                      # one flipped byte, size unchanged
        f.seek(1000)
        f.write(bytes([bad[1000] ^ 0xFF]))
    put_blob(st, ids["wrong-size"], b"xyz")
    put_blob(st, ids["orphan"], orphan)
    os.makedirs(os.path.join(st.blobs, "sha256", "zz"), exist_ok=True)
    open(os.path.join(st.blobs, "sha256", "zz", "not-a-hash"), "wb").close()
    index.publish_many([
        file_entry(st, "lfs.bin", ids["lfs"], len(lfs)),
        file_entry(st, "reg.json", ids["reg"], len(reg)),
        file_entry(st, "bad-1.bin", ids["bad"], len(bad)),
        file_entry(st, "bad-2.bin", ids["bad"], len(bad)),     # same blob, another path
        file_entry(st, "liar.txt", ids["wrong-size"], 4),
        file_entry(st, "gone.bin", ids["gone"], 4),
        file_entry(st, "orphan.bin", ids["orphan"], len(orphan)),
        file_entry(st, "head-only.bin", ids["gone"], 4, on_disk=False),
    ])
    index.put_blobs([(ids["lfs"], len(lfs), 1.0), (ids["reg"], 999, 2.0), (ids["bad"], len(bad), 3.0),
                     (ids["wrong-size"], 3, 4.0), (ids["gone"], 4, 5.0)])
    garbage = key("garbage.bin")
    with index.env.begin(write=True) as tx:        # a record no pulsys wrote, and its byblob row
        tx.put(lkey(garbage), b"\x00not a record", db=index.db.entries)
        tx.put(blob_key(ids["lfs"], garbage), b"", db=index.db.byblob)
    index.db.close()
    return st, ids


def test_verify_quarantines_bad_blobs_and_reconciles_the_index(tmp_path):
    st, ids = make_cache(tmp_path)
    orphan_mtime = os.stat(st.blob_path(ids["orphan"])).st_mtime
    rep = verify(st)
    assert rep["index"]["source"] == "index" and rep["index"]["moved_aside"] is None
    assert rep["blobs_checked"] == 6 and rep["index_entries"] == 9
    assert {b["blob"]: b["reason"] for b in rep["bad_blobs"]} == {
        ids["bad"]: "content does not match its name",
        "sha256/not-a-hash": "name is not a sha256 content hash"}
    assert [m["key"] for m in rep["bad_metadata"]] == [key("garbage.bin")]
    assert rep["bad_metadata"][0]["reason"].startswith("ValueError")
    assert rep["refetch_reasons"] == {"blob quarantined": 2, "blob missing": 1, "size differs from its blob": 1}
    assert rep["entries_to_refetch"] == 4
    assert (rep["blob_records_added"], rep["blob_records_dropped"], rep["blob_records_fixed"]) == (1, 2, 1)
    # 2 bad blobs, 1 bad record, 2 entries (missing, size); quota records brought up to date
    # with the files (1 gone, 1 added, 1 fixed) are bookkeeping, not problems
    assert rep["problems"] == 5
    assert not os.path.exists(st.blob_path(ids["bad"]))
    assert os.path.exists(st.blob_path(ids["lfs"])) and os.path.exists(st.blob_path(ids["reg"]))
    q = os.path.join(st.root, "quarantine")
    assert os.path.exists(os.path.join(q, "blobs", "sha256", ids["bad"].split("/")[1]))
    assert os.path.exists(os.path.join(q, "blobs", "sha256", "not-a-hash"))

    index = open_idx(st)
    entries = {e.key: e for e in index.entries()}
    on_disk = {k.split("|")[4] for k, e in entries.items() if e.blob_path is not None}
    assert on_disk == {"lfs.bin", "reg.json", "orphan.bin"}
    assert set(entries) == {key(n) for n in ("lfs.bin", "reg.json", "bad-1.bin", "bad-2.bin", "liar.txt",
                                             "gone.bin", "orphan.bin", "head-only.bin")}
    bad1 = entries[key("bad-1.bin")]                # metadata only: HEAD still has what it needs
    assert bad1.blob_id == ids["bad"] and bad1.size == 2000 and bad1.expires == 0
    assert sorted(index.keys_of_blob(ids["bad"])) == sorted(lkey(key(n)) for n in ("bad-1.bin", "bad-2.bin"))
    assert index.keys_of_blob(ids["lfs"]) == [lkey(key("lfs.bin"))]   # the garbage row is gone
    blobs = {b: (s, t) for b, s, t in index.blob_records()}
    assert set(blobs) == {ids["lfs"], ids["reg"], ids["wrong-size"], ids["orphan"]}
    assert blobs[ids["reg"]] == (len(b'{"a": 1}\n'), 2.0)                 # size fixed, served kept
    assert blobs[ids["orphan"]] == (500, orphan_mtime)                    # adopted, served = mtime
    assert blobs[ids["lfs"]] == (3000, 1.0)
    index.db.close()

    again = verify(st)                              # idempotent: all clean now
    assert again["problems"] == 0 and again["blobs_checked"] == 4 and again["index_entries"] == 8
    assert again["entries_to_refetch"] == 0 and again["bad_metadata"] == []
    assert (again["blob_records_added"], again["blob_records_dropped"], again["blob_records_fixed"]) == (0, 0, 0)


def test_a_missing_blob_file_alone_is_a_problem_and_its_entries_refetch(tmp_path):
    st, index, blob_id = one_file_cache(tmp_path, 100)
    index.put_blobs([(blob_id, 100, 1.0)])
    index.db.close()
    os.unlink(st.blob_path(blob_id))                # removed by hand
    rep = verify(st)
    assert rep["bad_blobs"] == [] and rep["refetch_reasons"]["blob missing"] == 1
    assert rep["blob_records_dropped"] == 1 and rep["problems"] == 1
    index = open_idx(st)
    assert index.get(key("w.bin")).blob_path is None and list(index.blob_records()) == []
    index.db.close()


def test_republishing_keeps_the_time_an_entry_was_fetched(tmp_path):
    """A record stores (deadline - TTL); an entry fetched before the machine booted must
    not come back from verify as fetched at boot (fresh again for a whole TTL)."""
    st = Store(str(tmp_path))
    idx = Index(IndexDB(st.root, writer=True), st.blob_path, YEAR)
    e = file_entry(st, "old.bin", "sha256/" + "ab" * 32, 4)     # blob missing: republished
    e.expires = 1.0                                             # fetched a year before boot
    idx.publish(e)
    with idx.env.begin(db=idx.db.entries) as tx:
        before = marshal.loads(tx.get(lkey(e.key)))[14]
    idx.db.close()
    assert verify(st)["entries_to_refetch"] == 1
    idx = Index(IndexDB(st.root, writer=True), st.blob_path, 86400.0)
    with idx.env.begin(db=idx.db.entries) as tx:
        rec = marshal.loads(tx.get(lkey(e.key)))
    assert rec[8] is False and abs(rec[14] - before) < 1e-3, (rec[14], before)
    idx.db.close()


def write_meta(st, name, doc):
    d = os.path.join(st.meta, name[:2])
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name + ".json"), "w") as f:
        f.write(doc if isinstance(doc, str) else json.dumps(doc))


def test_an_old_meta_cache_is_imported_then_verified(tmp_path):
    """A cache of pulsys before 0.13: one JSON file per entry under v1/meta/, no index."""
    st = Store(str(tmp_path))
    good, bad = os.urandom(1500), os.urandom(1200)
    ids = {"good": "sha256/" + sha256_hex(good), "bad": "sha256/" + sha256_hex(bad)}
    put_blob(st, ids["good"], good)
    p = put_blob(st, ids["bad"], bad)
    with open(p, "r+b") as f:
        f.write(bytes([bad[0] ^ 1]))
    for n, (name, blob_id, size) in enumerate([("good.bin", ids["good"], 1500), ("bad.bin", ids["bad"], 1200)]):
        write_meta(st, "%02x%s" % (n, "0" * 62), {
            "type": "entry", "fetched_at": 1.7e9, "immutable": True,
            "entry": file_entry(st, name, blob_id, size).to_json()})
    write_meta(st, "ff" + "0" * 62, '{"type": "entry", "fetched_')             # torn
    assert not os.path.exists(os.path.join(st.root, "index"))
    p = run_cli("--cache-dir", str(tmp_path), "--json")
    assert p.returncode == 1, p.stdout + p.stderr
    rep = json.loads(p.stdout)
    assert rep["index"]["source"] == "import-meta" and rep["index"]["skipped"] == 1
    assert rep["index_entries"] == 2 and [b["blob"] for b in rep["bad_blobs"]] == [ids["bad"]]
    assert rep["refetch_reasons"]["blob quarantined"] == 1 and rep["problems"] == 1
    assert not os.path.exists(st.meta) and not [n for n in os.listdir(st.root) if n.startswith("meta")]
    index = open_idx(st)
    assert index.get(key("good.bin")).blob_path == st.blob_path(ids["good"])
    assert index.get(key("bad.bin")).blob_path is None
    assert [b for b, _, _ in index.blob_records()] == [ids["good"]]
    index.db.close()
    p = run_cli("--cache-dir", str(tmp_path))
    assert p.returncode == 0 and "index: opened" in p.stdout and "result: ok" in p.stdout, p.stdout


def test_a_damaged_index_is_moved_aside_and_rebuilt(tmp_path):
    st, index, blob_id = one_file_cache(tmp_path, 700)
    index.db.close()
    with open(os.path.join(st.root, "index", "data.mdb"), "wb") as f:
        f.write(os.urandom(65536))
    rep = verify(st)
    aside = rep["index"]["moved_aside"]
    assert aside and aside.startswith(os.path.join("v1", "index.unusable-"))
    assert os.path.isdir(os.path.join(str(tmp_path), aside))
    assert rep["problems"] == 1 and rep["bad_blobs"] == [] and rep["index_entries"] == 0
    index = open_idx(st)
    assert [(b, s) for b, s, _ in index.blob_records()] == [(blob_id, 700)]   # found again
    index.db.close()
    assert verify(st)["problems"] == 0


def test_cli_text_json_and_exit_codes(tmp_path):
    st, ids = make_cache(tmp_path)
    p = run_cli("--cache-dir", str(tmp_path))
    assert p.returncode == 1, p.stderr
    assert "bad blob %s: content does not match its name" % ids["bad"] in p.stdout
    assert "index entries checked: 9" in p.stdout
    assert "bad index entry %s: ValueError" % key("garbage.bin") in p.stdout
    assert "entries now metadata only: 4 (blob quarantined: 2, blob missing: 1, size differs" in p.stdout
    assert ("blob records (quota accounts): 1 added for blob files that had none, 2 dropped for blob "
            "files gone or quarantined, 1 of the wrong size corrected") in p.stdout
    assert "result: 5 problem(s) found; bad blobs quarantined, the index repaired" in p.stdout
    p = run_cli("--cache-dir", str(tmp_path), "--json")
    assert p.returncode == 0 and json.loads(p.stdout)["problems"] == 0


def test_cli_refuses_while_a_server_holds_the_cache_and_bad_input_is_one_line(tmp_path):
    st, ids = make_cache(tmp_path)
    server = Store(str(tmp_path))
    server.lock()                                   # what a running server holds
    p = run_cli("--cache-dir", str(tmp_path))
    assert p.returncode == 2 and p.stderr.count("\n") == 1 and "stop it first" in p.stderr
    assert os.path.exists(st.blob_path(ids["bad"]))                   # nothing touched
    assert not os.path.exists(os.path.join(st.root, "quarantine"))
    server.unlock()
    assert run_cli("--cache-dir", str(tmp_path)).returncode == 1      # now it runs
    broken = tmp_path / "broken"
    Store(str(broken))
    (broken / "v1" / "index").write_bytes(b"not a directory")          # the index cannot be opened
    for args in (["--cache-dir", str(tmp_path / "nothing-here")], ["--frobnicate"],
                 ["--cache-dir", str(broken)]):
        p = run_cli(*args)
        assert p.returncode == 2 and p.stderr.count("\n") == 1 and "Traceback" not in p.stderr, p.stderr
        assert p.stderr.startswith("pulsys verify: error:")
