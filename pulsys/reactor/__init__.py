"""Reactor backends. select_backend() is the only place that chooses one."""

from pulsys.errors import BackendUnavailable


def select_backend(facts, iouring="auto"):
    """-> backend name for these platform facts and the --iouring setting. Pure;
    unit-tested with fake facts on every OS. Raises BackendUnavailable when io_uring is
    demanded ("on") and the startup probe failed."""
    if iouring == "on":
        if not facts.uring_ok:
            raise BackendUnavailable("--iouring: io_uring is not usable here: %s" % facts.uring_error)
        return "uring"
    if iouring == "auto" and facts.uring_ok:
        return "uring"
    return "selector"


def backend_class(name):
    if name == "selector":
        from pulsys.reactor.selector import SelectorReactor
        return SelectorReactor
    if name == "uring":
        from pulsys.reactor.uring import UringReactor
        return UringReactor
    raise ValueError("unknown reactor backend %r" % name)
