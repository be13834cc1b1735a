"""The access log a real pulsys process writes on its stderr, here a regular file shared
by every process of the server: one whole JSON line for each request, in both layouts.
One listener writes from the server's own process onto fd 2 (log.stderr_stream), more
from each worker (log.LineStream); both write the reactors' chunks of bytes with
writev(2), where the general step's records and the turns' texts meet in order."""

import json
import os

import pytest

from tests.conftest import ProcServer
from tests.floors.test_floors import SIZE, load
from tests.multiproc.test_listeners import one_request


@pytest.mark.parametrize("listeners", [1, 2])
def test_each_request_has_one_whole_access_line_on_stderr(hub, tmp_path, listeners):
    hub.add_repo("bench/f", files={"f.bin": os.urandom(SIZE)}, lfs={"f.bin"})
    srv = ProcServer({"upstream": hub.url, "cache_dir": str(tmp_path / "cache"), "listeners": str(listeners),
                      "auth": "off", "allow_upstream_host": [hub.cdn_netloc], "access_log": "on"},
                     str(tmp_path / "pulsys.log"))
    try:
        assert one_request(srv.address, "/bench/f/resolve/main/missing.bin")[0] == 404
        total = 16 * 40
        assert load(srv, total) == total                    # warm hits: the turns' texts
        assert one_request(srv.address, "/bench/f/resolve/main/f.bin")[0] == 200
    finally:
        srv.stop()
        assert srv.shutdown() == 0                         # the writers flush on the way out
    lines = [json.loads(l) for l in srv.log_text().splitlines() if '"component":"access"' in l]
    assert len(lines) == total + 2
    misses = [l for l in lines if l["status"] == 404]
    assert [l["path"] for l in misses] == ["/bench/f/resolve/main/missing.bin"]
    if listeners == 1:           # one writer: the lines in the order of the answers
        assert lines[0] == misses[0] and lines[-1]["status"] == 200
    hits = [l for l in lines if l["status"] != 404]
    assert {(l["method"], l["path"], l["status"], l["event"]) for l in hits} == {
        ("GET", "/bench/f/resolve/main/f.bin", 200, "request")}
    assert all(l["bytes"] > SIZE and l["timestamp"].endswith("Z") for l in hits)
    assert [l["cache"] for l in hits].count("hit") >= total - 16
