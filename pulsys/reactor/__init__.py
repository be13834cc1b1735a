"""Reactor backends. select_backend() is the only place that chooses one."""


def select_backend(facts, requested=None):
    """-> backend name for these platform facts. Pure; unit-tested with fake facts."""
    if requested is not None:
        return requested
    return "selector"


def backend_class(name):
    if name == "selector":
        from pulsys.reactor.selector import SelectorReactor
        return SelectorReactor
    raise ValueError("unknown reactor backend %r" % name)
