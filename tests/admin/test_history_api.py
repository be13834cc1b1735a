"""GET /api/v1/history after real traffic through a running pulsys (one process, and two
worker processes whose counters reach the parent's sampler through the counter table),
on SQLite and on PostgreSQL: the buckets' bytes served grow by exactly the bytes the
client received, upstream bytes by what the fake Hub sent, and hits, misses and fills
by the requests made. Bad input and the wrong key get clear errors."""

import socket

import pytest

from tests.auth.conftest import admin_url, call
from tests.conftest import wait_until

BODY = bytes(range(256)) * 1024          # 256 KiB, LFS
SAMPLE = "0.1"                           # --history-interval: seconds between samples


def raw_get(server, path, key):
    """GET with Connection: close on a plain socket -> (status, body, every byte received)."""
    s = socket.create_connection(server.address, timeout=30)
    try:
        s.sendall(("GET %s HTTP/1.1\r\nHost: %s:%d\r\nAuthorization: Bearer %s\r\nConnection: close\r\n\r\n"
                   % (path, server.address[0], server.address[1], key)).encode())
        got = bytearray()
        while True:
            chunk = s.recv(1 << 20)
            if not chunk:
                break
            got += chunk
    finally:
        s.close()
    head, _, body = bytes(got).partition(b"\r\n\r\n")
    return int(head.split(b" ")[1]), body, len(got)


def totals(doc, ring):
    out = {}
    for b in doc[ring]["buckets"]:
        for k, v in b.items():
            if k not in ("start", "hit_ratio"):
                out[k] = out.get(k, 0) + v
    return out


def history(base, key, query=""):
    st, _, doc = call(base + "/api/v1/history" + query, key=key)
    assert st == 200, doc
    return doc


@pytest.mark.parametrize("listeners,backend", [(1, "sqlite"), (2, "sqlite"), (1, "postgres")],
                         ids=["one-process-sqlite", "two-workers-sqlite", "one-process-postgres"])
def test_history_counts_what_clients_received_and_upstream_sent(hub, auth_server, request, listeners, backend):
    hub.add_repo("org/m", files={"model.safetensors": BODY, "config.json": b'{"a": 1}\n'})
    db_url = request.getfixturevalue("postgres").create_database() if backend == "postgres" else None
    server, admin, read = auth_server(db_url=db_url, history_interval=SAMPLE)
    base = admin_url(server)

    doc = history(base, admin)
    assert doc["sample_seconds"] == float(SAMPLE)
    assert doc["hour"]["resolution_seconds"] == 60 and len(doc["hour"]["buckets"]) == 60
    assert doc["day"]["resolution_seconds"] == 900 and len(doc["day"]["buckets"]) == 96
    starts = [b["start"] for b in doc["hour"]["buckets"]]
    assert starts == list(range(starts[0], starts[0] + 60 * 60, 60)) and starts[-1] <= doc["now"] < starts[-1] + 60
    assert set(doc["hour"]["buckets"][0]) == {"start", "bytes_served", "upstream_body_bytes", "hits", "misses",
                                              "hit_ratio", "fills_started"}
    before = totals(doc, "hour")

    received = 0
    for _ in range(3):                   # a miss (the fill), then two hits
        status, body, n = raw_get(server, "/org/m/resolve/main/model.safetensors", read)
        assert status == 200 and body == BODY
        received += n
    want = before["bytes_served"] + received

    def settled():
        d = history(base, admin)
        return d if totals(d, "hour")["bytes_served"] >= want and totals(d, "hour")["hits"] >= 2 else None
    assert wait_until(settled, timeout=10), history(base, admin)
    doc = settled()
    hour, day = totals(doc, "hour"), totals(doc, "day")
    assert hour["bytes_served"] == want
    assert hour["upstream_body_bytes"] - before["upstream_body_bytes"] == hub.total_body_bytes() == len(BODY)
    assert hour["misses"] - before["misses"] >= 1 and hour["hits"] - before["hits"] == 2
    assert hour["fills_started"] - before["fills_started"] == 1
    assert day == hour                    # the same samples, in wider buckets
    for b in doc["hour"]["buckets"]:
        seen = b["hits"] + b["misses"]
        assert b["hit_ratio"] == (round(b["hits"] / seen, 4) if seen else None)
    st, _, stats = call(base + "/api/v1/stats", key=admin)
    assert st == 200 and stats["bytes_served"] == hour["bytes_served"]     # a fresh store: only this run

    only = history(base, admin, "?window=day")
    assert set(only) == {"now", "sample_seconds", "day"}


def test_history_refuses_bad_input_and_keys_without_scope_admin(auth_server):
    server, admin, read = auth_server(history_interval=SAMPLE)
    base = admin_url(server)
    st, h, doc = call(base + "/api/v1/history?window=week", key=admin)
    assert st == 400 and "window" in doc["error"] and "hour, day" in doc["error"]
    assert h["X-Error-Message"] == doc["error"]
    assert call(base + "/api/v1/history", key=read)[0] == 403
    assert call(base + "/api/v1/history")[0] == 401
    assert call(base + "/api/v1/history", "POST", admin, body=b"{}")[0] == 405
