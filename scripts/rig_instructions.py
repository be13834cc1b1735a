"""Instructions per fused warm hit of the io_uring reactor's Python, counted by valgrind
(callgrind), so two trees compare exactly on a noisy shared machine where timings of the
same code move by 2x between runs.

The reactor runs against tests/uring_stub.py's recording ring (no kernel): each turn
hands it K recv completions of one remembered 4 KiB answer (a keyed request, the Gate
on), then ends the turn as the loop does under load: marks it, and folds the turns so far
(counters, histogram, LRU time, per-repo downloads and the JSON access-log text, written
to /dev/null) once FOLD_AT hits wait (trees before that: folds every turn). The count is the difference between a run
of N turns and a run of none, divided by N * K; what the rig itself does per hit (copy
the request into the buffer) is included, the same for both trees.

    python scripts/rig_instructions.py --hits-per-turn 1,7,20 [--tree DIR ...]
    python scripts/rig_instructions.py --ring memory --hits-per-turn 7 --without access-log,auth,fold

--tree adds a source tree (e.g. a worktree of another commit: git worktree add --detach
DIR COMMIT) to count beside this one. Needs valgrind (Debian package).
"""

import argparse
import os
import re
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


# --without: a feature the issue keeps on, taken off, to count what it costs a hit
WITHOUT = {
    "access-log": "no access-log text (the reactor's AccessLog set to None)",
    "auth": "no --auth required: no Authorization header, no Gate",
    "fold": "no fold at all: no counters, histogram, LRU time, per-repo downloads or log",
}


def child(tree, k, turns, ring="record", without="none"):
    sys.path.insert(0, tree)
    import pathlib
    import tempfile
    import time

    import pulsys.cache.indexdb as indexdb
    indexdb.MAP_SIZE = 1 << 26      # valgrind cannot reserve the 256 GiB LMDB map
    from pulsys.auth.gate import Gate
    from pulsys.auth.keys import digest, key_id, new_key
    from pulsys.log import AccessLog, AccessLogWriter
    from tests.uring_stub import FusedHitRig

    key = new_key()[0]
    req = (b"GET /org/m/resolve/main/f.bin HTTP/1.1\r\nHost: t\r\nUser-Agent: huggingface_hub/1.0\r\n"
           b"Authorization: Bearer %s\r\n\r\n" % key.encode())
    gate = Gate({key_id(key): (digest(key), "read")})
    if without == "auth":   # as long a head: the same bytes to copy and hash
        req, gate = req.replace(b"Authorization: Bearer", b"X-Nothing-Here:Bearer"), None
    tmp = tempfile.mkdtemp(prefix="rig-instructions-")
    rig = FusedHitRig(pathlib.Path(tmp), req, "0123456789abcdef0123456789abcdef01234567", "ab" * 32,
                      gate=gate)
    r, conn = rig.reactor, rig.conn
    log = AccessLog()
    AccessLogWriter([log], "json", open(os.devnull, "w"))
    r.access_log, r.access = log, log.append
    if without == "access-log":
        r.access_log = None
    if hasattr(r, "access_turn"):   # trees before the writer set AccessLog.add_turn
        r.access_turn = log.add_turn
    unprepare = lambda: None       # noqa: E731
    if ring != "record":
        # a real ring, its SQEs prepared through RingMemory or the binding, then dropped
        # unsubmitted at the end of each turn (liburing's private tail set back)
        import ctypes

        from pulsys.platform.uring import Ring
        try:
            real = Ring(4096, "ring", memory=(ring == "memory"))
            assert (real.mem is not None) == (ring == "memory")
        except TypeError:           # a tree before RingMemory: the binding only
            assert ring == "binding"
            real = Ring(4096, "ring")
        r.ring = real
        rig.dispatch = r.make_dispatch()
        # liburing's struct io_uring behind the binding's Ring: sq.sqe_head at 64, sqe_tail at 68
        base = ctypes.c_void_p.from_address(id(real._ring) + 16).value
        sqe_head, sqe_tail = ctypes.c_uint32.from_address(base + 64), ctypes.c_uint32.from_address(base + 68)

        def unprepare():
            sqe_tail.value = sqe_head.value
    dispatch = getattr(rig, "dispatch", None) or r._dispatch
    n, tag, rbuf, mono = len(req), rig.tag, conn.rbuf, time.monotonic
    sent = rig.ring.sent

    hits, fold = r._turn_hits, r.fold_hits
    marks = getattr(r, "_turn_marks", None)   # trees before turns were folded together: None
    if marks is not None:
        from pulsys.reactor.uring import FOLD_AT
        mark = marks.append

    def turn():
        now = r.now = mono()
        for _ in range(k):
            rbuf[0:n] = req
            conn.inflight += 1
            dispatch(tag, n, 0)
        unprepare()
        if without == "fold":
            hits.clear()
        elif marks is None:
            fold()
        else:                   # as the loop's turn ends under load (it never sleeps here)
            m = len(hits)
            if m != (marks[-1][2] if marks else 0):
                mark((now, mono() - now, m))
                if m >= FOLD_AT:
                    fold()
        if log.buffered() >= log.BATCH:
            log.format_ready()
            log.chunks.clear()
    for _ in range(50):
        turn()
    fold()
    assert not r._turn_hits and (ring != "record" or len(sent) == 50 * k)
    for _ in range(turns):
        turn()
    rig.close()
    shutil.rmtree(tmp, ignore_errors=True)


def collected(tree, k, turns, ring, without="none"):
    p = subprocess.run(["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", sys.executable,
                        os.path.abspath(__file__), "--child", tree, str(k), str(turns), ring, without],
                       capture_output=True, text=True)
    m = re.search(r"Collected : (\d+)", p.stderr)
    if p.returncode != 0 or m is None:
        raise SystemExit("rig_instructions: error: the counted run failed:\n" + p.stderr[-2000:])
    return int(m.group(1))


def main():
    if len(sys.argv) in (6, 7) and sys.argv[1] == "--child":   # TREE K TURNS RING [WITHOUT]
        return child(*sys.argv[2:3], int(sys.argv[3]), int(sys.argv[4]), *sys.argv[5:])
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--hits-per-turn", default="1,7,20")
    ap.add_argument("--hits", type=int, default=30000, help="hits counted per run (default 30000)")
    ap.add_argument("--tree", action="append", default=[], help="another source tree to count")
    ap.add_argument("--ring", default="record", choices=["record", "memory", "binding"],
                    help="record: tests/uring_stub.py's recording ring (the reactor's Python "
                         "alone); memory or binding: a real ring whose SQEs are written through "
                         "RingMemory or the liburing binding, dropped unsubmitted each turn")
    ap.add_argument("--without", default="none", help="comma-separated, counted one at a time beside the "
                    "whole: " + "; ".join("%s = %s" % kv for kv in WITHOUT.items()))
    a = ap.parse_args()
    variants = ["none"] + [w for w in a.without.split(",") if w != "none"]
    for w in variants:
        if w != "none" and w not in WITHOUT:
            ap.error("unknown --without %r (choose from %s)" % (w, ", ".join(WITHOUT)))
    if not shutil.which("valgrind"):
        raise SystemExit("rig_instructions: error: valgrind not found (apt-get install valgrind)")
    for k in [int(x) for x in a.hits_per_turn.split(",")]:
        turns = max(1, a.hits // k)
        for tree in [ROOT] + [os.path.abspath(t) for t in a.tree]:
            for w in variants:
                per_hit = (collected(tree, k, turns, a.ring, w) - collected(tree, k, 0, a.ring, w)) / (turns * k)
                print("%-40s %-7s %3d hits a turn: %7.0f instructions a hit%s" % (
                    tree, a.ring, k, per_hit, "" if w == "none" else ", without " + w), flush=True)


if __name__ == "__main__":
    main()
