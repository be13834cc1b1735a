"""The index file never carries what the heap held before. LMDB mallocs each page it
writes; with MDB_NOMEMINIT the page's unused part goes to data.mdb as malloc left it,
and this process's heap holds Hub tokens (--upstream-auth client) and API keys. A run of
the behaviour tests found a client's token in data.mdb that way (test_upstream_auth_client.py,
once in many runs). Here the heap is sprayed with a marker and freed on purpose, in an
interpreter of its own (the heap's state is then this script's), before IndexDB writes:
with the pages left uninitialised, 237 copies of the marker reached the file in each of
three runs."""

import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MARK = "hf_secret_token_0123456789abcdef"
SCRIPT = r"""
import sys
from pulsys.cache.indexdb import IndexDB
spray = [%(mark)r.encode() * 128 + bytes([i %% 256]) for i in range(2000)]   # ~4 KiB blocks
del spray                                                                    # freed: reused by malloc
db = IndexDB(sys.argv[1])
with db.env.begin(write=True) as tx:
    for i in range(50):
        tx.put(b"key-%%d" %% i, b"v" * 40, db=db.meta)
db.close()
"""


def test_freed_heap_bytes_never_reach_the_index_file(tmp_path):
    p = subprocess.run([sys.executable, "-c", SCRIPT % {"mark": MARK}, str(tmp_path)], cwd=ROOT,
                       env=dict(os.environ, PYTHONPATH=ROOT), capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr[-2000:]
    with open(tmp_path / "index" / "data.mdb", "rb") as f:
        data = f.read()
    assert b"key-49" in data                     # the writes are in the file
    assert data.count(MARK.encode()) == 0
