"""Reactor backends. select_backend() is the only place that chooses one, and
build_reactor() the only place that makes one (in-process server and worker alike)."""

from pulsys.auth.access import Grants
from pulsys.errors import BackendUnavailable
from pulsys.log import AccessLog
from pulsys.reactor.fdcache import FdCache
from pulsys.reactor.mailbox import Mailbox


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


def build_reactor(backend, listener, index, submit, sender, config, gate=None, mailbox=None, fdcache=None):
    """A reactor of `backend` on `listener` with its own mailbox, fd cache and, when the
    access log is on, its own AccessLog buffer (reactor.access; a writer drains it).
    index: its IndexView; submit: where its Jobs go (the pool's submit, or a worker's
    link to its parent); gate: the API-key Gate, or None for --auth off; with
    --upstream-auth client, its Grants (auth/access.py); mailbox and
    fdcache: made here unless the caller made them first (a worker's link posts to them)."""
    access = AccessLog() if config.access_log and config.log_level in ("debug", "info") else None
    grants = Grants() if config.upstream_auth == "client" else None
    return backend_class(backend)(listener, index, submit, mailbox or Mailbox(), sender, fdcache or FdCache(),
                                  access, gate=gate, grants=grants, **config.reactor_limits())
