"""`pulsys verify` on a cache directory: what is bad is found, quarantined and reported;
what is good is left alone (pulsys/cache/verify.py, pulsys/cli_verify.py)."""

import json
import os
import subprocess
import sys

from pulsys.cache.store import Store
from pulsys.cache.verify import content_hasher, verify
from pulsys.model.entry import FILE, Entry
from pulsys.testing.fake_hub import git_blob_sha1, sha256_hex

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def put_blob(st, blob_id, data):
    part = st.new_part_path()
    with open(part, "wb") as f:
        f.write(data)
    return st.commit_blob(part, blob_id)


def put_entry(st, name, blob_id, size):
    e = Entry(FILE, "1|model|org/r|%s|%s|" % ("c" * 40, name), size, blob_id.split("/")[1],
              "c" * 40, blob_id.startswith("sha256"), blob_id)
    st.save_entry(e, 0.0, True)


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
    """Good blobs of both kinds, one corrupt blob, one misnamed file, a garbage metadata
    file, an entry whose size disagrees with its blob."""
    st = Store(str(tmp_path))
    lfs, reg, bad = os.urandom(3000), b'{"a": 1}\n', os.urandom(2000)
    ids = {"lfs": "sha256/" + sha256_hex(lfs), "reg": "sha1/" + git_blob_sha1(reg),
           "bad": "sha256/" + sha256_hex(bad), "wrong-size": "sha1/" + git_blob_sha1(b"xyz")}
    put_blob(st, ids["lfs"], lfs)
    put_blob(st, ids["reg"], reg)
    p = put_blob(st, ids["bad"], bad)
    with open(p, "r+b") as f:                      # one flipped byte, size unchanged
        f.seek(1000)
        f.write(bytes([bad[1000] ^ 0xFF]))
    put_blob(st, ids["wrong-size"], b"xyz")
    put_entry(st, "lfs.bin", ids["lfs"], len(lfs))
    put_entry(st, "reg.json", ids["reg"], len(reg))
    put_entry(st, "bad-1.bin", ids["bad"], len(bad))
    put_entry(st, "bad-2.bin", ids["bad"], len(bad))  # same blob, another repo path
    put_entry(st, "liar.txt", ids["wrong-size"], 4)
    os.makedirs(os.path.join(st.blobs, "sha256", "zz"), exist_ok=True)
    open(os.path.join(st.blobs, "sha256", "zz", "not-a-hash"), "wb").close()
    os.makedirs(os.path.join(st.meta, "ab"), exist_ok=True)
    with open(os.path.join(st.meta, "ab", "torn.json"), "w") as f:
        f.write('{"type": "entry", "fetched_')
    return st, ids


def test_verify_quarantines_what_is_bad_and_keeps_what_is_good(tmp_path):
    st, ids = make_cache(tmp_path)
    rep = verify(st)
    assert rep["blobs_checked"] == 5 and rep["metadata_files"] == 6
    assert {b["blob"]: b["reason"] for b in rep["bad_blobs"]} == {
        ids["bad"]: "content does not match its name",
        "sha256/not-a-hash": "name is not a sha256 content hash"}
    reasons = sorted(m["reason"] for m in rep["bad_metadata"])
    assert reasons[0].startswith("JSONDecodeError") and reasons[1] == (
        "ValueError: size 4 but its blob has 3 bytes")
    assert rep["entries_to_refetch"] == 2 and rep["problems"] == 4
    assert not os.path.exists(st.blob_path(ids["bad"]))
    assert os.path.exists(st.blob_path(ids["lfs"])) and os.path.exists(st.blob_path(ids["reg"]))
    q = os.path.join(st.root, "quarantine")
    assert os.path.exists(os.path.join(q, "blobs", "sha256", ids["bad"].split("/")[1]))
    assert os.path.exists(os.path.join(q, "meta", "ab", "torn.json"))
    again = verify(st)                              # idempotent: all clean now
    assert again["problems"] == 0 and again["blobs_checked"] == 3 and again["metadata_files"] == 4


def test_cli_text_json_and_exit_codes(tmp_path):
    st, ids = make_cache(tmp_path)
    p = run_cli("--cache-dir", str(tmp_path))
    assert p.returncode == 1, p.stderr
    assert "bad blob %s: content does not match its name" % ids["bad"] in p.stdout
    assert "result: 4 problem(s) found and quarantined" in p.stdout
    p = run_cli("--cache-dir", str(tmp_path), "--json")
    assert p.returncode == 0 and json.loads(p.stdout)["problems"] == 0


def test_cli_refuses_while_a_server_holds_the_cache_and_bad_input_is_one_line(tmp_path):
    st, _ = make_cache(tmp_path)
    server = Store(str(tmp_path))
    server.lock()                                   # what a running server holds
    p = run_cli("--cache-dir", str(tmp_path))
    assert p.returncode == 2 and p.stderr.count("\n") == 1 and "stop it first" in p.stderr
    assert os.path.exists(os.path.join(st.meta, "ab", "torn.json"))   # nothing touched
    server.unlock()
    assert run_cli("--cache-dir", str(tmp_path)).returncode == 1      # now it runs
    for args in (["--cache-dir", str(tmp_path / "nothing-here")], ["--frobnicate"]):
        p = run_cli(*args)
        assert p.returncode == 2 and p.stderr.count("\n") == 1 and "Traceback" not in p.stderr
        assert p.stderr.startswith("pulsys verify: error:")
