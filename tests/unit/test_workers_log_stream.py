"""The access-log stream onto a shared stderr (log.LineStream): lines from several
processes writing to it never interleave, whether it is a pipe (writes cut to PIPE_BUF
at line ends) or a regular file (one write a chunk), and whether a chunk comes as text
or as the reactors' list of bytes (write_parts: one writev(2) a chunk)."""

import os
import select
import socket
import subprocess
import sys
import tempfile

from pulsys.log import LineStream

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CHUNKS, LINES = 24, 900        # each writer: 24 chunks of 900 lines (~90 KB a chunk)

# A writer process: CHUNKS chunks of LINES numbered lines through LineStream(fd). A line
# carries its writer's letter and is padded to a length that varies, so a piece of another
# line inside it shows as a line that does not match the pattern.
WRITER = """
import sys
from pulsys.log import LineStream
import os
fd, go, who = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
s = LineStream(fd)
if "whole" in sys.argv[4:]:
    s.limit = None
os.read(go, 1)          # both writers start together
for c in range(%d):
    lines = ["%%s %%d %%d %%s\\n" %% (who, c, i, who * (40 + (i * 7) %% 90)) for i in range(%d)]
    if "parts" in sys.argv[4:]:
        s.write_parts([l.encode() for l in lines])
    else:
        s.write("".join(lines))
""" % (CHUNKS, LINES)


def spawn_writers(fd, *extra):
    """Writers A and B, started, then let go at once -> their Popens."""
    go_r, go_w = os.pipe()
    try:
        procs = [subprocess.Popen([sys.executable, "-c", WRITER, str(fd), str(go_r), who, *extra],
                                  cwd=ROOT, pass_fds=(fd, go_r)) for who in "AB"]
        os.write(go_w, b"go")
    finally:
        os.close(go_r)
        os.close(go_w)
    return procs


def check_lines(text, writers):
    """Every line is one writer's whole line, and each writer's lines all arrived in order."""
    seen = {w: 0 for w in writers}
    for line in text.split("\n")[:-1]:
        who, c, i, pad = line.split(" ")
        assert who in seen and pad == who * (40 + (int(i) * 7) % 90), line[:120]
        assert int(c) * LINES + int(i) == seen[who], line[:120]
        seen[who] += 1
    assert text.endswith("\n")
    assert seen == {w: CHUNKS * LINES for w in writers}


def read_pipe_from(writers_of):
    r, w = os.pipe()
    try:
        procs = writers_of(w)
    finally:
        os.close(w)
    out = []
    while True:
        # small reads keep the pipe full, so writers block mid-chunk and take turns
        b = os.read(r, 4096)
        if not b:
            break
        out.append(b)
    os.close(r)
    for p in procs:
        assert p.wait(60) == 0
    return b"".join(out).decode()


def test_where_writes_stay_whole_a_chunk_is_one_write_elsewhere_cut_at_pipe_buf():
    r, w = os.pipe()
    a, b = socket.socketpair()
    null = os.open(os.devnull, os.O_WRONLY)
    with tempfile.TemporaryFile() as f:
        try:
            assert LineStream(w).limit == select.PIPE_BUF
            assert LineStream(a.fileno()).limit == select.PIPE_BUF
            assert LineStream(f.fileno()).limit is None
            assert LineStream(null).limit is None
        finally:
            for fd in (r, w, null):
                os.close(fd)
            a.close()
            b.close()


def test_two_processes_into_one_pipe_never_interleave_a_line():
    check_lines(read_pipe_from(spawn_writers), "AB")


def test_each_write_is_whole_lines_of_at_most_pipe_buf_bytes():
    # a SOCK_SEQPACKET pair keeps each write(2) as one message: the writes themselves
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    try:
        lines = ["%d %s\n" % (i, "y" * (i * 37 % 300)) for i in range(400)]
        text = "".join(lines)
        LineStream(a.fileno()).write(text)
        a.close()
        msgs = []
        while True:
            m = b.recv(1 << 20)
            if not m:
                break
            msgs.append(m)
        assert b"".join(msgs).decode() == text
        assert len(msgs) > 1 and all(len(m) <= select.PIPE_BUF and m.endswith(b"\n") for m in msgs)
        # as many bytes a write as fit: each write and the next line would exceed PIPE_BUF
        sizes = [len(m) for m in msgs]
        starts = [sum(sizes[:i]) for i in range(len(sizes) + 1)]
        for k in range(len(msgs) - 1):
            nxt = text.encode()[starts[k + 1]:].split(b"\n", 1)[0]
            assert sizes[k] + len(nxt) + 1 > select.PIPE_BUF
    finally:
        a.close()
        b.close()


def test_two_processes_into_one_regular_file_never_interleave_a_line():
    with tempfile.TemporaryFile() as f:      # one open file, shared: as an inherited stderr
        procs = spawn_writers(f.fileno())
        for p in procs:
            assert p.wait(60) == 0
        f.seek(0)
        check_lines(f.read().decode(), "AB")


def test_chunks_of_parts_from_two_processes_never_interleave_a_line_in_a_file_or_a_pipe():
    with tempfile.TemporaryFile() as f:
        procs = spawn_writers(f.fileno(), "parts")
        for p in procs:
            assert p.wait(60) == 0
        f.seek(0)
        check_lines(f.read().decode(), "AB")
    check_lines(read_pipe_from(lambda w: spawn_writers(w, "parts")), "AB")


def test_a_chunk_of_more_parts_than_one_writev_takes_arrives_whole_and_in_order():
    parts = [b"%d %s\n" % (i, b"z" * (i % 50)) for i in range(2 * LineStream.IOV_MAX + 5)]
    with tempfile.TemporaryFile() as f:
        s = LineStream(f.fileno())
        assert s.limit is None
        s.write_parts(parts)
        s.write_parts([])
        f.seek(0)
        assert f.read() == b"".join(parts)


def test_a_line_longer_than_pipe_buf_arrives_whole_from_one_writer():
    r, w = os.pipe()
    line = "x" * (3 * select.PIPE_BUF + 17) + "\n"
    text = "a\n" + line + "b\n"
    pid = os.fork()
    if pid == 0:
        try:
            os.close(r)
            LineStream(w).write(text)
        finally:
            os._exit(0)
    os.close(w)
    got = b""
    while True:
        b = os.read(r, 65536)
        if not b:
            break
        got += b
    os.close(r)
    os.waitpid(pid, 0)
    assert got.decode() == text
