"""Three pulsys nodes (separate processes, cache dirs and loopback addresses) behind nginx
running docs/fleet/nginx-pulsys.conf, sharing one bucket (moto's S3 server) and one
PostgreSQL database (keys): a 30-client cold pull fetches each blob from the Hub once for
the whole fleet; a node killed mid-download leaves the others serving."""

import concurrent.futures
import os
import signal
import time
import types

import pytest

from pulsys.testing.fake_hub import FakeHub
from tests.auth.conftest import call, store_keys
from tests.fleet.conftest import sha256
from tests.fleet.nodes import LB_HOST, Nginx, free_port, start_nodes, vars_of
from tests.fleet.pull import pull, session

REPO = "org/fleet-model"
CLIENTS = 30


@pytest.fixture
def fleet(s3, aws_env, postgres, tmp_path, stop_after):
    hub = FakeHub(tree_page_size=2).start()       # paginated tree: Link headers must name nginx
    db = postgres.create_database()
    admin, read = store_keys(db, "admin", "read")
    lb_port = free_port(LB_HOST)
    lb_url = "http://%s:%d" % (LB_HOST, lb_port)
    try:
        nodes = stop_after(start_nodes(tmp_path, hub, s3.new_bucket(), s3.url, auth="required", db=db,
                                       public_base_url=lb_url))
        lb = stop_after(Nginx(list(nodes.values()), tmp_path / "nginx", lb_port))
        yield types.SimpleNamespace(hub=hub, nodes=nodes, lb=lb, admin=admin, read=read)
    finally:
        hub.stop()


def until(pred, limit):
    deadline = time.monotonic() + limit
    while not pred():
        assert time.monotonic() < deadline, "not within %.1f s" % limit
        time.sleep(0.02)


@pytest.mark.slow
def test_thirty_clients_cold_pull_one_upstream_fetch_per_blob(fleet):
    hub, nodes = fleet.hub, fleet.nodes
    files = {"config.json": b'{"model_type": "fleet"}', "generation_config.json": b'{"max_length": 64}',
             "tokenizer.json": os.urandom(5000)}
    files.update({"model-%05d.safetensors" % i: os.urandom((3 << 20) + i) for i in range(1, 6)})
    hub.add_repo(REPO, files=files, lfs={p for p in files if p.endswith(".safetensors")})
    hub.faults.throttle(24 << 20)         # each Hub body at 24 MB/s: the 30 pulls overlap the cold fills
    # a key made through node a's admin API is good on every node: keys live in the one Postgres
    st, _, doc = call(nodes["a"].admin_url + "/api/v1/keys", "POST", fleet.admin, {"scope": "read", "name": "fleet"})
    assert st == 201
    key = doc["key"]
    for n in nodes.values():   # an unknown path: 404 once the key is accepted, 401 before
        until(lambda: call(n.url + "/no-such-path", key=key)[0] == 404, 2.0)

    t0 = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(CLIENTS) as ex:
        pulls = list(ex.map(lambda i: pull(fleet.lb.url, REPO, key, shuffle=i), range(CLIENTS)))
    elapsed = time.monotonic() - t0
    want = {p: sha256(b) for p, b in files.items()}
    served_by = {}
    for got, links in pulls:
        assert {p: d for p, (d, _) in got.items()} == want
        assert links and all(u.startswith(fleet.lb.url + "/") for u in links)   # --public-base-url
        for p, (_, node) in got.items():
            served_by.setdefault(p, set()).add(node)
    # the consistent hash sends every request for a file to one node
    assert all(len(v) == 1 for v in served_by.values()), served_by
    # one fill from the Hub per blob, for the whole fleet and all 30 clients ...
    stats = {name: vars_of(n) for name, n in nodes.items()}
    from_hub = {name: v["fills_started"] - v["shared_fills"] for name, v in stats.items()}
    assert sum(from_hub.values()) == len(files), from_hub
    # ... and each file's bytes left the Hub exactly once: LFS bodies from its CDN, regular
    # files in the same response as their metadata (concurrent misses on a node ask once)
    assert {p: hub.body_bytes(sha256(b)) for p, b in files.items()} == {p: len(b) for p, b in files.items()}
    assert sum(1 for v in from_hub.values() if v) >= 2, from_hub   # the files were spread over the nodes
    assert [v["fills_failed"] for v in stats.values()] == [0, 0, 0]
    print("\n30-client cold pull of %.1f MB through 3 nodes: %.2f s; Hub fills per node %s"
          % (sum(map(len, files.values())) / 1e6, elapsed, from_hub))


@pytest.mark.slow
def test_a_node_killed_mid_download_leaves_the_others_serving(fleet):
    hub, nodes = fleet.hub, fleet.nodes
    big = os.urandom(24 << 20)
    small = {"f%02d.json" % i: os.urandom(200 + i) for i in range(12)}
    hub.add_repo(REPO, files=dict(small, **{"w.safetensors": big}), lfs={"w.safetensors"})
    hub.faults.throttle(8 << 20, match=".safetensors")    # 3 s of Hub body: time to kill mid-way
    s = session(fleet.read)
    url = fleet.lb.url + "/%s/resolve/main/w.safetensors" % REPO
    r = s.get(url, stream=True, timeout=30)
    assert r.status_code == 200
    victim_addr = r.headers["X-Pulsys-Node"]
    victim = next(n for n in nodes.values() if "%s:%d" % n.address == victim_addr)
    got = b""
    for chunk in r.raw.stream(1 << 16):
        got += chunk
        if len(got) >= 4 << 20:
            break
    os.kill(victim.pid, signal.SIGKILL)                  # a node dies mid-body
    with pytest.raises(Exception):
        for chunk in r.raw.stream(1 << 20):              # its client sees the body end short
            got += chunk
        if len(got) < len(big):
            raise IOError("short body")
    assert 0 < len(got) < len(big) and got == big[:len(got)]

    # the client resumes, as huggingface_hub does: the hash ring sends it to another node
    r2 = s.get(url, headers={"Range": "bytes=%d-" % len(got)}, timeout=60)
    assert r2.status_code == 206 and r2.headers["X-Pulsys-Node"] != victim_addr
    assert got + r2.content == big
    # and every other file is served, whichever node it hashed to
    for p, b in small.items():
        r3 = s.get(fleet.lb.url + "/%s/resolve/main/%s" % (REPO, p), timeout=30)
        assert r3.status_code == 200 and r3.content == b and r3.headers["X-Pulsys-Node"] != victim_addr
    survivors = [n for n in nodes.values() if n is not victim]
    assert sum(vars_of(n)["fills_completed"] for n in survivors) >= 1
