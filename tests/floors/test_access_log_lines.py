"""Every request of a loaded server gets its access-log line, in JSON, whether the
reactor formatted it at the end of a loop turn (batches of AccessLog.BATCH) or the
writer thread did (what a quiet reactor leaves)."""

import io
import json
import os

import pytest

from tests.conftest import wait_until
from tests.floors.test_floors import BACKENDS, SIZE, load


@pytest.mark.parametrize("iouring", BACKENDS)
def test_each_request_of_a_loaded_server_has_one_json_line(hub, make_server, iouring):
    hub.add_repo("bench/f", files={"f.bin": os.urandom(SIZE)}, lfs={"f.bin"})
    srv = make_server(hub, listeners=1, iouring=iouring, access_log="on", log_format="json")
    out = srv.access_writer.stream = io.StringIO()
    total = 16 * 50          # 16 connections; more than 3 batches of AccessLog.BATCH
    assert load(srv, total) == total
    # the reactor folds a paused load's last hits (up to FOLD_AT) within ~FOLD_IDLE of
    # the pause, which a busy machine can delay past the client's exit: flush until then
    def logged():
        srv.access_writer.flush()
        return out.getvalue().count("\n") >= total
    wait_until(logged, timeout=10)
    lines = [json.loads(l) for l in out.getvalue().splitlines()]
    assert len(lines) == total
    assert {(l["method"], l["path"], l["status"], l["bytes"], l["event"]) for l in lines} == {
        ("GET", "/bench/f/resolve/main/f.bin", 200, lines[-1]["bytes"], "request")}
    assert lines[-1]["bytes"] > SIZE and [l["cache"] for l in lines].count("hit") >= total - 16
    stamps = [l["timestamp"] for l in lines]
    assert all(t.endswith("Z") and len(t) == 27 for t in stamps)
