"""Run the shared reference server (uring_min_server.py) unchanged in N processes that
share one port, pulsys's `--listeners N` layout, to measure what that layout costs the
reference itself.

The reference binds one socket with SO_REUSEADDR only, so a second copy on the same port
would fail with EADDRINUSE. Each copy here runs in its own process with `socket.bind`
setting SO_REUSEPORT first (socket(7): every socket bound to the port must set it, and
the kernel then spreads new connections over them by a hash of the 4-tuple). Nothing
else of the reference is touched: its file is run by runpy as `__main__`.

    python ref_processes.py --processes 2 --script <dir>/uring_min_server.py -- PORT ROOT mem

SIGTERM to this process stops every copy; it exits when they all have.
"""

import argparse
import os
import runpy
import signal
import socket
import sys


def run_one(script, args):
    """Become one copy of the reference: SO_REUSEPORT on every TCP socket it binds."""
    plain_bind = socket.socket.bind

    def bind(self, address):
        if self.type == socket.SOCK_STREAM:
            self.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        return plain_bind(self, address)

    socket.socket.bind = bind
    sys.argv = [script] + args
    runpy.run_path(script, run_name="__main__")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--processes", type=int, default=1)
    ap.add_argument("--script", required=True, help="the reference server's file")
    ap.add_argument("args", nargs=argparse.REMAINDER, help="-- then the reference's own arguments")
    a = ap.parse_args()
    args = a.args[1:] if a.args[:1] == ["--"] else a.args
    if a.processes < 1:
        ap.error("--processes takes a whole number above 0")
    if not os.path.isfile(a.script):
        ap.error("no such file: %s" % a.script)
    kids = []
    signal.signal(signal.SIGTERM, lambda *_: [os.kill(k, signal.SIGTERM) for k in kids])
    for _ in range(a.processes):
        pid = os.fork()
        if pid == 0:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            try:
                run_one(a.script, args)
            finally:
                os._exit(1)
        kids.append(pid)
    failed = False
    for k in kids:
        _, st = os.waitpid(k, 0)      # (retried after the handler runs: PEP 475)
        failed |= os.waitstatus_to_exitcode(st) not in (0, -signal.SIGTERM)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
