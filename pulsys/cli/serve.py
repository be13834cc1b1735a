"""`pulsys [flags]`: argv + environment -> Config -> app.run(). Every error a person can
cause is one line on stderr and exit code 2; no traceback.
"""

import sys

from pulsys import __version__
from pulsys.cli.base import Parser, fail
from pulsys.config import SETTINGS, build_config
from pulsys.errors import ConfigError


def make_parser():
    p = Parser(prog="pulsys", description="A pull-through cache for the Hugging Face Hub. "
                "Every flag can also be set with the environment variable named after it "
                "(e.g. --cache-dir -> PULSYS_CACHE_DIR). `pulsys verify --help`: check a cache directory. `pulsys keys --help`: API keys. `pulsys doctor --help`: which ceiling binds a pull. `pulsys prefetch --help`: pre-warm a repo. `pulsys stats --help`: cache use and downloads.")
    p.add_argument("--version", action="version", version="pulsys " + __version__)
    for s in SETTINGS:
        helptext = "%s [env %s%s]" % (
            s.help, s.env, "" if s.default in (None, "", ()) else ", default %s" % (s.default,))
        if s.kind == "tristate":
            g = p.add_mutually_exclusive_group()
            g.add_argument(s.flag, dest=s.name, action="store_const", const="on", default=None, help=helptext)
            g.add_argument("--no-" + s.flag[2:], dest=s.name, action="store_const", const="off",
                           help="force the portable backend")
        elif s.kind == "flag":
            p.add_argument(s.flag, dest=s.name, action="store_const", const=True, default=None, help=helptext)
        elif s.kind == "multi":
            p.add_argument(s.flag, dest=s.name, action="append", default=None, metavar=s.metavar, help=helptext)
        else:
            p.add_argument(s.flag, dest=s.name, default=None,
                           metavar=s.metavar or ("{%s}" % ",".join(s.choices) if s.choices else s.name.upper()),
                           help=helptext)
    return p


# PULSYS_* variables of the project's own tools, not settings of the server: the fleet
# front's script (deploy/k8s/front), benchmarks and tests
_NOT_SETTINGS = ("PULSYS_NODES", "PULSYS_NODE_PORT", "PULSYS_FRONT_LISTEN", "PULSYS_REFERENCE_DIR",
                 "PULSYS_BENCH_", "PULSYS_TEST_")


def unknown_settings(environ):
    """PULSYS_* names in the environment that no setting reads: a misspelt one would
    otherwise do nothing and say nothing."""
    known = {s.env for s in SETTINGS}
    return sorted(k for k in environ if k.startswith("PULSYS_") and k not in known
                  and not k.startswith(_NOT_SETTINGS))


def main(argv, environ):
    args = make_parser().parse_args(argv)
    for name in unknown_settings(environ):
        sys.stderr.write("pulsys: warning: %s is not a setting (ignored; the names are in pulsys --help)\n" % name)
    try:
        config = build_config(vars(args), environ)
    except ConfigError as e:
        return fail("pulsys", e)
    # structlog imports rich, when it is installed, for pretty tracebacks only: 0.15 s of
    # every start on this VM (rich is no dependency of pulsys; test tools bring it)
    sys.modules.setdefault("rich", None)
    from pulsys.platform.heap import steady_heap
    steady_heap()                      # before any fork: the fork server and workers inherit it
    forks = None
    if config.listeners > 1:
        from pulsys.workers import start_fork_server
        forks = start_fork_server()    # before app: its threads and the planes workers never use
    from pulsys import app  # imported late: `pulsys --help` must not pay for it
    return app.run(config, forks)
