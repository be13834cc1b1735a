"""The disk fills up in the middle of a cold fill.

How: the server runs in a subprocess under RLIMIT_FSIZE. A process may not grow any
file past that limit; the write that would fails with EFBIG (CPython ignores
SIGXFSZ), in the same pwrite, mid-body, where a full disk fails with ENOSPC. A small
tmpfs would be the closer copy of a full disk, but mounting one needs root or a user
namespace, which CI machines do not reliably grant; a resource limit needs neither.
The limit is well above everything else the server writes (metadata, its log).
"""

import os
import sys

import pytest

from pulsys.testing.fake_hub import sha256_hex
from tests.behaviour.fillcheck import blob_files, part_files, raw_get
from tests.conftest import ProcServer, wait_until

MIB = 1024 * 1024
LIMIT = 4 * MIB
SMALL = os.urandom(MIB + 3)
BIG = os.urandom(8 * MIB + 5)

_LIMITED = ("import resource, runpy; resource.setrlimit(resource.RLIMIT_FSIZE, (%d, %d)); "
            "runpy.run_module('pulsys', run_name='__main__', alter_sys=True)" % (LIMIT, LIMIT))


@pytest.mark.skipif(not sys.platform.startswith(("linux", "darwin")), reason="needs RLIMIT_FSIZE")
def test_a_full_disk_mid_fill_cuts_that_client_short_and_warm_serving_goes_on(hub, tmp_path):
    hub.add_repo("org/m", files={"small.safetensors": SMALL, "big.safetensors": BIG})
    cache = str(tmp_path / "cache")
    settings = {"upstream": hub.url, "cache_dir": cache, "allow_upstream_host": [hub.cdn_netloc],
                "access_log": "off", "listeners": "1", "auth": "off"}
    srv = ProcServer(settings, str(tmp_path / "pulsys.log"), argv=[sys.executable, "-c", _LIMITED])
    try:
        st, _, body, complete = raw_get(srv.address, "/org/m/resolve/main/small.safetensors")
        assert st == 200 and complete and body == SMALL
        st, hdrs, body, complete = raw_get(srv.address, "/org/m/resolve/main/big.safetensors")
        assert st == 200 and hdrs["content-length"] == str(len(BIG)) and not complete
        assert len(body) <= LIMIT                                # never past where the disk ran out
        assert wait_until(lambda: part_files(cache) == [], 5), part_files(cache)
        assert blob_files(cache) == {"sha256/" + sha256_hex(SMALL): True}
        v = srv.vars()
        assert v["fills_failed"] == 1 and v["fills_completed"] == 1
        assert "File too large" in srv.log_text()
        hub.reset_counters()
        for _ in range(3):
            st, _, body, complete = raw_get(srv.address, "/org/m/resolve/main/small.safetensors")
            assert st == 200 and complete and body == SMALL
        assert hub.count() == 0 and srv.proc.poll() is None
    finally:
        srv.stop()
        srv.shutdown()
