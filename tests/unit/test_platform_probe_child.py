"""The io_uring probe runs in a child process first, so that a binding that kills its
process (the liburing 2026.3.x wheels die of SIGILL on CPUs without AVX-512) costs the
io_uring backend and not the server: the reason is one clear line."""

import sys

import pytest

from pulsys.platform import _probe_in_child

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="io_uring is Linux only")


def test_a_child_killed_by_sigill_gives_a_one_line_reason():
    why = _probe_in_child("import os, signal; os.kill(os.getpid(), signal.SIGILL)")
    assert why == ("the liburing binding killed its probe process with SIGILL: the liburing "
                   "wheel uses CPU instructions this machine lacks")


def test_other_signals_are_named_too():
    assert _probe_in_child("import os, signal; os.kill(os.getpid(), signal.SIGSEGV)") == (
        "the liburing binding killed its probe process with SIGSEGV")


def test_a_child_that_survives_passes_the_word_to_the_real_probe():
    assert _probe_in_child("pass") == ""
    # an exception is not a crash: the in-process probe reports it with its reason
    assert _probe_in_child("raise RuntimeError('x')") == ""
