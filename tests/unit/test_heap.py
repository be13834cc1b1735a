"""pulsys.platform.heap: glibc's thresholds fixed at start, seen in a real process's heap
(mallinfo2(3), glibc 2.33+): a 4 MiB block comes from the arena instead of a mapping of
its own, and its memory stays with the heap after it is freed; an operator's own
setting in the environment is left alone."""

import json
import subprocess
import sys

import pytest

from pulsys.platform import heap

# In a fresh interpreter (its main thread allocates from the main arena): optionally
# steady_heap(), then a 4 MiB bytearray (CPython takes blocks above 512 bytes from
# malloc) made and freed; mallinfo2's hblkhd is the bytes in mmapped blocks, arena the
# bytes of the brk heap.
PROBE = r"""
import ctypes, json, os, sys
from pulsys.platform import heap

class MallInfo2(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in
                ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks",
                 "uordblks", "fordblks", "keepcost")]

libc = ctypes.CDLL(None)
libc.mallinfo2.restype = MallInfo2
state = heap.steady_heap(json.loads(sys.argv[1])) if sys.argv[1] != "none" else None
before = libc.mallinfo2()
block = bytearray(4 << 20)
during = libc.mallinfo2()
del block
after = libc.mallinfo2()
print(json.dumps({"state": state, "mapped": during.hblkhd - before.hblkhd,
                  "arena_grew": during.arena - before.arena, "arena_kept": after.arena - before.arena}))
"""


def probe(environ):
    out = subprocess.run([sys.executable, "-c", PROBE, "none" if environ is None else json.dumps(environ)],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


@pytest.fixture(scope="module")
def glibc():
    if heap._glibc() is None:
        pytest.fail("this machine's C library is not glibc; these tests describe glibc (Debian)")


def test_by_default_a_large_block_is_a_mapping_of_its_own(glibc):
    r = probe(None)
    assert r["mapped"] >= 4 << 20 and r["arena_grew"] < 4 << 20


def test_steady_heap_keeps_a_large_block_in_the_heap_after_it_is_freed(glibc):
    r = probe({})
    assert r["state"] == "trim 64 MiB, mmap 32 MiB"
    assert r["mapped"] == 0 and r["arena_grew"] >= 4 << 20
    assert r["arena_kept"] >= 4 << 20          # not trimmed: the next such block needs no brk


@pytest.mark.parametrize("environ", [{"MALLOC_TRIM_THRESHOLD_": "131072"},
                                     {"MALLOC_MMAP_THRESHOLD_": "65536"},
                                     {"GLIBC_TUNABLES": "glibc.malloc.trim_threshold=131072"}])
def test_an_operators_setting_is_left_alone(glibc, environ):
    r = probe(environ)
    assert r["state"] == "left to the environment"
    assert r["mapped"] >= 4 << 20               # glibc's own default still rules


def test_the_state_is_kept_for_the_start_log(glibc):
    assert heap.steady_heap({"MALLOC_TOP_PAD_": "1"}) == heap.state == "left to the environment"
