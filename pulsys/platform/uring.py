"""Facade over the PyPI `liburing` binding: the only module that imports it."""

import liburing  # noqa: F401  (ImportError here means: no io_uring backend)


def probe():
    return False, "the io_uring reactor is not built yet"
