"""scripts/hot_lines.py's trace reader (bench_peers/hot_lines.c) on a lackey log written
here, and its attribution of a window's lines to mappings and objects."""

import os
import subprocess
import sys

import pytest

SCRIPTS = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "scripts")
sys.path.insert(0, SCRIPTS)
import bench_compare  # noqa: E402
import hot_lines  # noqa: E402

ENTER = "SYSCALL[7,1](426) sys_io_uring_enter ( 3, 2, 0, 1, 0x0, 0 ) --> Success(0x2)\n"
ENTER_END = "SYSCALL[7,1](426) ... [async] --> Success(0x0)\n"      # a blocking call's end: not a turn
OTHER = "SYSCALL[7,1](228) sys_clock_gettime( 1, 0x1ffeffcde0 )[sync] --> Success(0x0)\n"


@pytest.fixture(scope="module")
def reader(tmp_path_factory):
    return bench_compare.build_c(str(tmp_path_factory.mktemp("hl")), "hot_lines", who="test")[0]


def run(reader, ctl, log, per=1, windows=2):
    for n in (0, 1):
        open(os.path.join(ctl, "go.%d" % n), "w").close()
    return subprocess.run([reader, str(per), str(windows), ctl], input=log, capture_output=True,
                          text=True, timeout=60)


def dumped(ctl, k):
    with open(os.path.join(ctl, "lines.%d" % k)) as f:
        return sorted(f.read().split("\n")[:-1])


def test_windows_count_distinct_lines_from_the_arm_on_and_dump_each(reader, tmp_path):
    ctl = str(tmp_path)
    open(os.path.join(ctl, "arm"), "w").close()
    # before the arm is seen (first checked at the 2^20th line) nothing counts, turns included
    log = ENTER + "I  00009000,4\n" + "==7== filler\n" * ((1 << 20) + 5)
    log += "I  00001000,3\n"          # after the arm, before the first turn: not counted
    log += ENTER                      # opens window 0
    log += "I  00001000,3\nI  00001008,5\nI  00001040,2\n"            # 2 instruction lines
    log += " L 00002000,8\n S 00002010,8\n M 00003000,4\n"           # 2 data lines
    log += ENTER_END + OTHER
    log += "I  00002000,4\n"          # an instruction line at a data line's address: its own kind
    log += ENTER                      # closes window 0, opens window 1
    log += " L 00004000,8\n L 00004040,8\n L 00004080,8\nI  00001000,3\n"
    log += " S 00003038,8\n"         # the line window 0 touched at 3000: recurring
    log += ENTER                      # closes window 1, the last
    log += " L 00005000,8\n" * 3      # drained, not counted
    p = run(reader, ctl, log)
    assert p.returncode == 0, p.stderr
    assert p.stdout.splitlines() == ["W 0 I 3 D 2 RI 0 RD 0 accesses 7", "W 1 I 1 D 4 RI 1 RD 1 accesses 5"]
    assert dumped(ctl, 0) == ["0 1000 0", "0 1040 0", "0 2000 0", "1 2000 0", "1 3000 0"]
    # the instruction line at 1000 and the data line at 3000 recur; the instruction line
    # at 2000 of window 0 does not make window 1's data line there recur (nor is there one)
    assert dumped(ctl, 1) == ["0 1000 1", "1 3000 1", "1 4000 0", "1 4040 0", "1 4080 0"]
    assert os.path.exists(os.path.join(ctl, "pause.0")) and os.path.exists(os.path.join(ctl, "pause.1"))


def test_without_the_arm_nothing_is_counted(reader, tmp_path):
    p = run(reader, str(tmp_path), (ENTER + " L 00002000,8\n") * 10)
    assert p.returncode == 0 and p.stdout == ""
    assert not os.path.exists(os.path.join(str(tmp_path), "pause.0"))


MAPS = """\
00400000-00401000 r-xp 00000000 08:01 1 /nonexistent/libfoo.so
00500000-00600000 rw-p 00000000 00:00 0
7f0000000000-7f0000001000 rw-s 00000000 00:0e 2 anon_inode:[io_uring]
"""


def counts(rows):
    return {k: (n, r) for k, n, r in rows}


def test_attribution_by_mapping_and_by_the_live_object_covering_a_line():
    lines = "\n".join(["0 400000 1", "0 400040 0", "1 500000 1", "1 500040 0", "1 500080 1", "1 5000c0 0",
                       "1 7f0000000000 1", "1 9000000 0"]) + "\n"
    objects = "500000 100 Conn -\n500090 8 bytes dict\n"
    got = hot_lines.attribute(lines, MAPS, objects)
    assert counts(got["by_mapping"]) == {"I r-xp libfoo.so": (2, 1), "D rw-p [anon]": (4, 2),
                                         "D rw-s anon_inode:[io_uring]": (1, 1), "D  [unmapped]": (1, 0)}
    assert got["instruction_lines_by_function"] == [("libfoo.so ?", 2, 1)]
    # the Conn's 100 bytes cover the lines at 500000 and 500040; the bytes object (8 bytes at
    # 500090) the line at 500080; nothing covers 5000c0, the ring's line or the unmapped one
    assert got["anonymous_data_lines_by_object"] == [("other", 3, 1), ("Conn", 2, 1), ("bytes (in a dict)", 1, 1)]


def test_attribution_of_a_line_past_every_object_is_other():
    got = hot_lines.attribute("1 500200\n1 500080\n", MAPS, "500000 64 Conn -\n500080 16 bytes dict\n")
    assert counts(got["anonymous_data_lines_by_object"]) == {"other": (1, 0), "bytes (in a dict)": (1, 0)}


def test_attribution_reaches_lines_deep_inside_a_large_object():
    # a 64 KiB buffer with small objects after its start: its last line is still its own
    objects = "500000 65536 bytearray-buffer Conn\n500100 32 int -\n500200 32 int -\n"
    got = hot_lines.attribute("1 50ffc0\n1 500100\n1 510000\n", MAPS, objects)
    assert counts(got["anonymous_data_lines_by_object"]) == {"bytearray-buffer (in a Conn)": (1, 0), "int": (1, 0),
                                                             "other": (1, 0)}


def test_the_object_walk_looks_for_anonymous_data_lines_only():
    lines = "0 500000 0\n1 400040 1\n1 500040 1\n1 7f0000000000 0\n1 9000000 0\n1 500000 0\n"
    assert hot_lines.anon_data_lines(lines, MAPS) == [0x500000, 0x500040, 0x9000000, 0x7f0000000000]


def test_the_quietest_window_after_the_first_is_attributed():
    w = [{"i": 1, "d": 1}, {"i": 50, "d": 60}, {"i": 40, "d": 30}, {"i": 90, "d": 10}]
    assert hot_lines.quietest(w) == 2
