"""What the API-key check adds to a warm hit, in reactor CPU time, independent of load.

A wrk run on a shared 2-CPU machine swings by tens of percent between rounds, more than
the check could cost; this measures the check's own Python cost instead. In one process
it drives the io_uring reactor's fused hit (`UringReactor._hit`, its SQEs recorded, not
submitted) and the portable general step (`ReactorBase.on_request` on a socketpair) for
a remembered 4 KiB request, without a Gate and with a Gate that already accepted the
request's key, interleaving the variants over many short rounds. It reports the fastest
and the median round of each (the fastest is the least disturbed by other processes),
the difference of the fastest, and that difference as a share of the
server CPU one warm 4 KiB hit costs end to end (--cpu-per-hit-us, default 14.9 us: about
the io_uring backend's median server CPU per hit in results/linux-x86_64-2cpu/auth_warm*.json,
14.0-17.2 us, the cheapest per-hit figure measured here, so the share is not understated).

    python scripts/bench_auth_check.py [--hits 20000] [--rounds 21]
"""

import argparse
import os
import socket
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
sys.path.insert(0, ROOT)
from provenance import provenance, write_result  # noqa: E402

from pulsys.auth.gate import Gate  # noqa: E402
from pulsys.auth.keys import digest, key_id, new_key  # noqa: E402
from pulsys.cache.index import Index  # noqa: E402
from pulsys.http1.parse import parse_request_head  # noqa: E402
from pulsys.model.entry import FILE, Entry  # noqa: E402
from pulsys.model.key import target_key  # noqa: E402
from pulsys.platform import PlatformFacts, load_sender  # noqa: E402
from pulsys.reactor.conn import Conn  # noqa: E402
from pulsys.reactor.fdcache import FdCache  # noqa: E402
from pulsys.reactor.mailbox import Mailbox  # noqa: E402
from pulsys.route import route  # noqa: E402

COMMIT = "0123456789abcdef0123456789abcdef01234567"
SHA = "ab" * 32


class RecordingRing:
    enters = 0

    def prep_send(self, fd, data, tag, flags=0, sqe_flags=0):
        pass

    def prep_recv(self, fd, buf, tag):
        pass


def request(key):
    auth = b"Authorization: Bearer %s\r\n" % key.encode() if key else b""
    return (b"GET /org/m/resolve/main/f.bin HTTP/1.1\r\nHost: 127.0.0.1:8080\r\n"
            b"User-Agent: unknown/None; hf_hub/2.4.0; python/3.11.7\r\nAccept: */*\r\n" + auth + b"\r\n")


def index_for(req, body, blob):
    ix = Index()
    t = route(parse_request_head(req, 0, len(req)))
    e = Entry(FILE, target_key(t, COMMIT), len(body), SHA, COMMIT, True, "sha256/" + SHA, blob)
    e.body_mem = body
    ix.publish(e)
    ix.set_rev("model", "org/m", "main", COMMIT, expires=1e18, fetched_at=0)
    return ix


def uring_hits(req, ix, gate, n):
    from pulsys.reactor.uring import UringReactor
    lst, (a, b) = socket.socket(), socket.socketpair()
    r = UringReactor(lst, ix, None, Mailbox(), load_sender(PlatformFacts.probe(), None)[1], FdCache(),
                     gate=gate)
    r.ring = RecordingRing()
    conn = Conn(a, time.monotonic())
    r.conns[conn.fd] = conn
    r.heads[req] = (parse_request_head(req, 0, len(req)), route(parse_request_head(req, 0, len(req))))
    size, rbuf, hit = len(req), conn.rbuf, r._hit
    try:
        t0 = time.perf_counter()
        for _ in range(n):
            rbuf[0:size] = req
            conn.rstart, conn.rend, conn.recv_pending = 0, size, False
            if not hit(conn):
                raise SystemExit("bench_auth_check: the fused hit did not serve the request")
        return (time.perf_counter() - t0) / n
    finally:
        for s in (lst, a, b):
            s.close()


def general_hits(req, ix, gate, n):
    from pulsys.reactor.selector import SelectorReactor
    from pulsys.reactor.conn import READ
    lst, (a, b) = socket.socket(), socket.socketpair()
    r = SelectorReactor(lst, ix, None, Mailbox(), load_sender(PlatformFacts.probe(), None)[1], FdCache(),
                        gate=gate)
    conn = Conn(a, time.monotonic())
    head = parse_request_head(req, 0, len(req))
    t = route(head)
    on_request, finish = r.on_request, r._finish
    try:
        t0 = time.perf_counter()
        for _ in range(n):
            on_request(conn, head, b"", t)
            if conn.status != 200:
                raise SystemExit("bench_auth_check: the general step answered %d" % conn.status)
            finish(conn)
            conn.state = READ
        return (time.perf_counter() - t0) / n
    finally:
        for s in (lst, a, b):
            s.close()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--hits", type=int, default=20000)
    ap.add_argument("--rounds", type=int, default=21)
    ap.add_argument("--cpu-per-hit-us", type=float, default=14.9)
    ap.add_argument("--name", default="auth_check")
    a = ap.parse_args()
    key = new_key()[0]
    body = os.urandom(4096)
    with tempfile.NamedTemporaryFile() as blob:
        blob.write(body)
        blob.flush()
        plain, keyed = request(None), request(key)
        variants = {}
        for path, fn in (("uring_fused_hit", uring_hits), ("general_step", general_hits)):
            variants[(path, "off")] = lambda fn=fn: fn(plain, index_for(plain, body, blob.name), None, a.hits)

            def with_key(fn=fn):
                gate = Gate({key_id(key): (digest(key), "read")})
                gate.scope("Bearer " + key)         # accepted once, as the first request would
                return fn(keyed, index_for(keyed, body, blob.name), gate, a.hits)
            variants[(path, "required")] = with_key
        runs = {k: [] for k in variants}
        for _ in range(a.rounds):
            for k, run in variants.items():
                runs[k].append(run() * 1e6)
    results = []
    for path in ("uring_fused_hit", "general_step"):
        off, on = min(runs[(path, "off")]), min(runs[(path, "required")])
        added = on - off
        results.append({"path": path, "auth_off_us": round(off, 3), "auth_required_us": round(on, 3),
                        "auth_off_median_us": round(statistics.median(runs[(path, "off")]), 3),
                        "auth_required_median_us": round(statistics.median(runs[(path, "required")]), 3),
                        "added_us": round(added, 3),
                        "added_share_of_cpu_per_hit": round(added / a.cpu_per_hit_us, 4),
                        "rounds_off_us": [round(x, 3) for x in runs[(path, "off")]],
                        "rounds_required_us": [round(x, 3) for x in runs[(path, "required")]]})
        print("%-16s fastest round: auth off %.3f us, required %.3f us, added %+.3f us = %+.2f%% of "
              "%.1f us/hit; medians %.3f / %.3f us" % (
                  path, off, on, added, 100 * added / a.cpu_per_hit_us, a.cpu_per_hit_us,
                  statistics.median(runs[(path, "off")]), statistics.median(runs[(path, "required")])))
    doc = provenance(benchmark=a.name, hits_per_round=a.hits, rounds=a.rounds,
                     cpu_per_hit_us=a.cpu_per_hit_us, results=results,
                     loadavg_before=list(os.getloadavg()))
    print("wrote", write_result("%s.json" % a.name, doc))


if __name__ == "__main__":
    main()
