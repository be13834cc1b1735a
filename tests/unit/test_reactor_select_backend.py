import sys

import pytest

from pulsys.errors import BackendUnavailable
from pulsys.platform import PlatformFacts, choose_sender, load_sender
from pulsys.reactor import select_backend


def facts(system, uring_ok=False, why="no"):
    linux = system.startswith("linux")
    return PlatformFacts(system, "6.1", True, linux, linux, True, system in ("darwin", "freebsd14"),
                         uring_ok, why)


def test_backend_uses_io_uring_when_the_probe_passed_unless_told_not_to():
    assert select_backend(facts("linux", True, "")) == "uring"
    assert select_backend(facts("linux", True, ""), "off") == "selector"
    assert select_backend(facts("linux", False)) == "selector"
    assert select_backend(facts("darwin")) == "selector"


def test_demanding_io_uring_where_it_is_unusable_fails_with_the_reason():
    with pytest.raises(BackendUnavailable, match="kernel lacks"):
        select_backend(facts("linux", False, "kernel lacks io_uring ops: SEND"), "on")
    with pytest.raises(BackendUnavailable):
        select_backend(facts("darwin", False, "io_uring is Linux only"), "on")


def test_sender_choice_is_a_pure_function_of_the_facts():
    assert choose_sender(facts("linux")) == "linux"
    assert choose_sender(facts("darwin")) == "darwin"           # sendfile + sf_hdtr
    assert choose_sender(facts("sunos5")) == "portable"
    assert choose_sender(facts("linux"), "portable") == "portable"


def test_platform_modules_refuse_to_import_where_they_do_not_work():
    if sys.platform != "darwin":
        with pytest.raises(ImportError):
            import pulsys.platform.sendfile_darwin  # noqa: F401
    if not sys.platform.startswith("linux"):
        with pytest.raises(ImportError):
            import pulsys.platform.sendfile_linux  # noqa: F401
    name, mod = load_sender(facts(sys.platform), "portable")
    assert name == "portable" and hasattr(mod, "send_body")


def test_darwin_header_first_accounting():
    # sendfile(2) on macOS counts header bytes first in the returned length; the split
    # is pure arithmetic, checked here on every OS (the module itself is darwin-only)
    import importlib.util
    import pathlib
    src = pathlib.Path(__file__).resolve().parents[2] / "pulsys" / "platform" / "sendfile_darwin.py"
    text = src.read_text()
    ns = {}
    exec(compile(text[text.index("def split_sent"):text.index("def send_head_and_body")], str(src), "exec"), ns)
    split = ns["split_sent"]
    assert split(0, 100) == (0, 0)
    assert split(60, 100) == (60, 0)        # partial head
    assert split(100, 100) == (100, 0)
    assert split(150, 100) == (100, 50)     # head done, 50 body bytes
    assert importlib.util.find_spec("pulsys.platform.sendfile_darwin") is not None
