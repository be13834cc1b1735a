"""`python scripts/opcount_boot.py ARGS` runs `python -m pulsys ARGS` with every bytecode
of every thread counted per code object (scripts/ops_per_request.py starts it):
CPython calls a trace function that sets frame.f_trace_opcodes once per executed
bytecode ("opcode" events, sys.settrace docs). SIGUSR1 zeroes the counts; SIGUSR2
writes {"ops": {key: n}, "calls": {key: n}}, keys "thread file.py:firstline:name", to
the file $PULSYS_OPCOUNT_OUT. For measurement only: the server runs ~10x slower."""

import collections
import json
import os
import runpy
import signal
import sys
import threading

ops, calls = collections.Counter(), collections.Counter()


def _tracer(frame, event, arg):
    frame.f_trace_opcodes = True
    frame.f_trace_lines = False
    code = frame.f_code
    key = "%s %s:%d:%s" % (threading.current_thread().name, os.path.basename(code.co_filename),
                           code.co_firstlineno, code.co_name)
    calls[key] += 1

    def local(frame, event, arg):
        if event == "opcode":
            ops[key] += 1
        return local
    return local


def _zero(signum, frame):
    ops.clear()
    calls.clear()


def _dump(signum, frame):
    out = os.environ["PULSYS_OPCOUNT_OUT"]
    with open(out + ".part", "w") as f:
        json.dump({"ops": dict(ops), "calls": dict(calls)}, f)
    os.replace(out + ".part", out)      # whole or absent: the reader polls for it


if __name__ == "__main__":
    signal.signal(signal.SIGUSR1, _zero)
    signal.signal(signal.SIGUSR2, _dump)
    sys.path[0] = os.getcwd()           # as `python -m` has it
    threading.settrace(_tracer)
    sys.argv[0] = "pulsys"
    runpy.run_module("pulsys", run_name="__main__", alter_sys=True)
