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

With PULSYS_BENCH_SLICE_US=N in the environment each copy first asks the scheduler for
a slice of N microseconds (sched_setattr(2): sched_runtime of a SCHED_OTHER task, the
EEVDF slice request of Linux >= 6.12; 100-100,000), so two busy copies on one CPU take
turns less often: a way to price what a switch between them costs.
"""

import argparse
import ctypes
import os
import platform
import runpy
import signal
import socket
import struct
import sys

_SCHED_SETATTR = {"x86_64": 314, "aarch64": 274}    # syscall numbers (asm/unistd.h)


def ask_slice(us):
    """Ask for a slice of `us` microseconds for this process (sched_setattr(2), struct
    sched_attr: size, policy SCHED_OTHER, flags, nice, priority, runtime, deadline,
    period). -> None; OSError where the kernel or this CPU's syscall table refuses."""
    nr = _SCHED_SETATTR.get(platform.machine())
    if nr is None:
        raise OSError("sched_setattr: no syscall number known for %s" % platform.machine())
    attr = ctypes.create_string_buffer(struct.pack("IIQiIQQQ", 48, 0, 0, 0, 0, us * 1000, 0, 0), 48)
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.syscall(nr, 0, attr, 0) != 0:
        e = ctypes.get_errno()
        raise OSError(e, "sched_setattr: %s" % os.strerror(e))


def run_one(script, args):
    """Become one copy of the reference: SO_REUSEPORT on every TCP socket it binds."""
    plain_bind = socket.socket.bind

    def bind(self, address):
        if self.type == socket.SOCK_STREAM:
            self.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        return plain_bind(self, address)

    socket.socket.bind = bind
    slice_us = os.environ.get("PULSYS_BENCH_SLICE_US")
    if slice_us:
        ask_slice(int(slice_us))
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
