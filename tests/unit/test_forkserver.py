"""pulsys.forkserver on its own: each case runs in a fresh interpreter, since a fork
server must be started before any thread and pytest's process may run some."""

import os
import subprocess
import sys
import textwrap

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")

PRELUDE = textwrap.dedent("""
    import os, signal, socket, sys, threading, time
    from pulsys.forkserver import ForkServer, ForkServerError

    def target(fds, arg):
        os.write(fds[0], b"%d:%d" % (arg, os.getppid()))
        os.close(fds[0])
        if arg == 99:
            time.sleep(60)
        return arg

    def spawn(fs, arg):     # a child running target(a pipe's write end, arg); the read end
        r, w = os.pipe()
        proc = fs.spawn([w], arg)
        os.close(w)
        return proc, r
""")


def run(body):
    code = PRELUDE + textwrap.dedent(body)
    p = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    return p.stdout


def test_a_child_runs_the_target_with_the_fds_and_its_exit_code_is_reported():
    out = run("""
        fs = ForkServer(target)
        proc, r = spawn(fs, 7)
        got = os.read(r, 100).decode()
        assert proc.wait(10) == 7, proc.returncode
        assert got == "7:%d" % fs.pid, got             # its parent is the fork server
        assert proc.pid not in (os.getpid(), fs.pid)
        fs.close()
        try:
            os.kill(fs.pid, 0)
        except ProcessLookupError:
            print("reaped")                           # close() waited for the fork server
    """)
    assert out.strip() == "reaped"


def test_signals_reach_a_live_child_and_report_it_as_killed():
    out = run("""
        fs = ForkServer(target)
        proc, r = spawn(fs, 99)
        os.read(r, 100)                                  # it runs
        assert proc.poll() is None
        proc.terminate()
        print(proc.wait(10))
        proc.kill()                                      # reaped already: nothing is sent
        fs.close()
    """)
    assert out.strip() == str(-15)


def test_spawns_after_many_exits_still_get_their_own_reply():
    out = run("""
        fs = ForkServer(target)
        codes = []
        for i in range(20):
            proc, r = spawn(fs, i)
            os.read(r, 100)
            os.close(r)
            codes.append(proc.wait(10))
        fs.close()
        print(codes)
    """)
    assert out.strip() == str(list(range(20)))


def test_refused_once_a_thread_runs():
    out = run("""
        threading.Thread(target=time.sleep, args=(1,), daemon=True).start()
        try:
            ForkServer(target)
        except ForkServerError as e:
            print("refused:", e.strerror)
    """)
    assert out.startswith("refused: a fork server must be started before any thread")


def test_when_the_server_dies_the_fork_server_exits():
    out = run("""
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:                                   # a "server" that starts a fork server and dies
            os.close(r)
            fs = ForkServer(target)
            os.write(w, b"%d" % fs.pid)
            os._exit(0)
        os.close(w)
        zygote = int(os.read(r, 100))
        os.waitpid(pid, 0)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                os.kill(zygote, 0)
            except ProcessLookupError:
                print("gone")
                break
            time.sleep(0.05)
    """)
    assert out.strip() == "gone"
