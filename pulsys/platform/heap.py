"""glibc malloc's thresholds, fixed once at start so a busy reactor's heap stays grown.

By default glibc adjusts two thresholds as a process runs (mallopt(3), M_MMAP_THRESHOLD:
"dynamic mmap threshold"): a block larger than the mmap threshold gets a mapping of its
own, and when the heap's free top exceeds the trim threshold, free() hands it back to
the kernel (sbrk for the main arena, MADV_DONTNEED for the others). Under load a reactor
formats its access log into text that the writer thread frees every 0.25 s, ~9 MiB of
it at 150k requests a second. So the heap grows by brk() and shrinks again after each
write: in a `--listeners N` worker, whose reactor is the main thread and so
allocates from the main arena, `perf trace -s` counted ~200 brk calls a second, and each
regrowth faults its pages in again. Its server CPU a request was 1.016x that of the
same reactor in one process, and 0.987x with the thresholds below (docs/benchmarks.md,
issue 18, fourteenth day).

Fixed values also switch the dynamic adjustment off (mallopt(3)). TRIM keeps up to 64 MiB
of freed memory at an arena's top mapped, what a burst may leave behind; MMAP (32 MiB,
the largest M_MMAP_THRESHOLD the 64-bit glibc takes: HEAP_MAX_SIZE / 2) keeps body-sized
buffers in the arenas, as the dynamic threshold would after the first such free. An
operator's own choice in the environment (MALLOC_TRIM_THRESHOLD_, MALLOC_MMAP_THRESHOLD_,
MALLOC_TOP_PAD_, or glibc.malloc tunables in GLIBC_TUNABLES) is left as it is. Where the
C library is not glibc (musl, Darwin) nothing is set.
"""

import ctypes
import os

M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3      # <malloc.h>
TRIM = 64 << 20
MMAP = 32 << 20
_OPERATOR = ("MALLOC_TRIM_THRESHOLD_", "MALLOC_MMAP_THRESHOLD_", "MALLOC_TOP_PAD_")
state = None       # what steady_heap() did in this process (the start log shows it)


def _glibc():
    try:
        libc = ctypes.CDLL(None)
        libc.gnu_get_libc_version.restype = ctypes.c_char_p
        libc.gnu_get_libc_version()
        return libc
    except (OSError, AttributeError):
        return None


def steady_heap(environ=None):
    """Fix glibc's trim and mmap thresholds for this process and the children it forks
    afterwards. -> what was done, also kept in `state` for the start log: "trim 64 MiB,
    mmap 32 MiB", "left to the environment", "not glibc" or "mallopt refused"."""
    global state
    environ = os.environ if environ is None else environ
    if any(environ.get(k) for k in _OPERATOR) or "glibc.malloc." in environ.get("GLIBC_TUNABLES", ""):
        state = "left to the environment"
    elif (libc := _glibc()) is None:
        state = "not glibc"
    # mallopt returns 1 on success, 0 on error (mallopt(3))
    elif libc.mallopt(M_MMAP_THRESHOLD, MMAP) != 1 or libc.mallopt(M_TRIM_THRESHOLD, TRIM) != 1:
        state = "mallopt refused"
    else:
        state = "trim %d MiB, mmap %d MiB" % (TRIM >> 20, MMAP >> 20)
    return state
