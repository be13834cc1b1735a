"""One node against three behind nginx, on this machine: the same model pulled by the same
concurrent clients, cold (from the Hub), warm, and by a node that joins later (from the
shared bucket). Everything runs on loopback: the fake Hub (its CDN answers throttled to
--hub-mbps per response, like one upstream connection), moto's S3 server, pulsys nodes
as processes, nginx with docs/fleet/nginx-pulsys.conf. Writes results/<machine>/fleet.json
and prints a Markdown table.

    python scripts/bench_fleet.py [--files 8] [--file-mib 32] [--clients 8] [--hub-mbps 100]

Bounded: every pull has a 300 s timeout and the run starts and stops its own processes.
"""

import argparse
import concurrent.futures
import os
import pathlib
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "scripts"))

from provenance import provenance, write_result  # noqa: E402
from pulsys.testing.fake_hub import FakeHub  # noqa: E402
from tests.fleet.nodes import LB_HOST, Nginx, free_port, start_nodes, vars_of  # noqa: E402
from tests.fleet.pull import pull  # noqa: E402
from tests.fleet.s3server import AWS_ENV, S3Server  # noqa: E402

REPO = "bench/fleet-model"


def timed_pulls(base, clients, expect):
    t0 = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(clients) as ex:
        results = list(ex.map(lambda i: pull(base, REPO, shuffle=i)[0], range(clients)))
    seconds = time.monotonic() - t0
    for got in results:
        if {p: d for p, (d, _) in got.items()} != expect:
            raise SystemExit("bench: error: a pull through %s got wrong bytes" % base)
    return seconds


def layout(n, files, args, s3, work):
    import hashlib
    hub = FakeHub(record_requests=False).start()
    try:
        hub.add_repo(REPO, files=files, lfs={p for p in files if p.endswith(".safetensors")})
        hub.faults.throttle(args.hub_mbps * 1e6)
        expect = {p: hashlib.sha256(b).hexdigest() for p, b in files.items()}
        total = sum(map(len, files.values()))
        port = free_port(LB_HOST)
        names = tuple("n%d" % i for i in range(n))
        nodes = start_nodes(work / ("fleet%d" % n), hub, s3.new_bucket(), s3.url, names=names,
                            public_base_url="http://%s:%d" % (LB_HOST, port), fill_threads="32")
        lb = Nginx(list(nodes.values()), work / ("nginx%d" % n), port)
        late = None
        try:
            cold = timed_pulls(lb.url, args.clients, expect)
            hub_bytes = hub.total_body_bytes()
            warm = timed_pulls(lb.url, args.clients, expect)
            for node in nodes.values():       # until every node's uploads are done
                while vars_of(node)["shared_uploads_pending"]:
                    time.sleep(0.1)
            before = hub.total_body_bytes()
            late = start_nodes(work / ("late%d" % n), hub, _bucket(nodes), s3.url, names=("late",))["late"]
            joined = timed_pulls(late.url, 1, expect)
            late_hub = hub.total_body_bytes() - before
            fills = {name: vars_of(node)["fills_started"] for name, node in nodes.items()}
        finally:
            lb.stop()
            for node in list(nodes.values()) + ([late] if late else []):
                node.stop()
                node.shutdown()
    finally:
        hub.stop()
    mb = total / 1e6
    return {"nodes": n, "clients": args.clients, "model_MB": round(mb, 1),
            "cold_seconds": round(cold, 2), "cold_client_MBps": round(mb * args.clients / cold, 1),
            "cold_hub_MB": round(hub_bytes / 1e6, 1), "warm_seconds": round(warm, 2),
            "warm_client_MBps": round(mb * args.clients / warm, 1), "fills_per_node": fills,
            "late_node_seconds": round(joined, 2), "late_node_MBps": round(mb / joined, 1),
            "late_node_hub_MB": round(late_hub / 1e6, 1)}


def _bucket(nodes):
    """The bucket the fleet uses, from its first node's /debug/vars."""
    where = vars_of(next(iter(nodes.values())))["shared_store"]
    return where[len("s3://"):].split("/", 1)[0]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--files", type=int, default=8)
    ap.add_argument("--file-mib", type=int, default=32)
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--hub-mbps", type=float, default=100.0, help="MB/s per Hub response")
    args = ap.parse_args()
    if not (1 <= args.files <= 64 and 1 <= args.file_mib <= 1024 and 1 <= args.clients <= 64):
        raise SystemExit("bench: error: --files 1-64, --file-mib 1-1024, --clients 1-64")
    os.environ.update(AWS_ENV)
    files = {"config.json": b'{"model_type": "bench"}'}
    files.update({"model-%05d.safetensors" % i: os.urandom(args.file_mib << 20) for i in range(args.files)})
    prov = provenance()
    with tempfile.TemporaryDirectory(prefix="pulsys-fleet-") as tmp:
        work = pathlib.Path(tmp)
        s3 = S3Server.start(str(work / "moto.log"))
        try:
            rows = [layout(n, files, args, s3, work) for n in (1, 3)]
        finally:
            s3.stop()
    path = write_result("fleet.json", dict(prov, args=vars(args), rows=rows))
    print("| nodes | cold pull, %d clients | Hub bytes | warm pull, %d clients | a new node, from the bucket |"
          % (args.clients, args.clients))
    print("|---:|---:|---:|---:|---:|")
    for r in rows:
        print("| %d | %.1f s (%.0f MB/s to clients) | %.0f MB | %.1f s (%.0f MB/s) | %.1f s (%.0f MB/s, Hub %.0f MB) |"
              % (r["nodes"], r["cold_seconds"], r["cold_client_MBps"], r["cold_hub_MB"], r["warm_seconds"],
                 r["warm_client_MBps"], r["late_node_seconds"], r["late_node_MBps"], r["late_node_hub_MB"]))
    print("model %.1f MB; %s" % (rows[0]["model_MB"], path))


if __name__ == "__main__":
    main()
