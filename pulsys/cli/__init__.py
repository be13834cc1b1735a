"""Command line: `pulsys [serve flags]` and its subcommands, one table.

The only package that reads sys.argv and os.environ. Each command is a module here
with a `main(argv, environ) -> exit code`, imported only when it runs (`pulsys --help`
must not pay for the server's imports).
"""

import importlib
import os
import sys

# subcommand -> module (pulsys.cli.<module>); anything else runs the server (serve.py)
COMMANDS = {
    "verify": "verify",        # re-hash a cache directory, repair the index
    "keys": "keys",            # create, list, revoke API keys
    "doctor": "doctor",        # which ceiling binds a pull
    "prefetch": "prefetch",    # pre-warm a repo through a running server
    "stats": "stats",          # cache use and downloads of a running server
}


def main(argv=None, environ=None):
    environ = os.environ if environ is None else environ
    argv = sys.argv[1:] if argv is None else argv
    name = COMMANDS.get(argv[0]) if argv else None
    if name is None:
        return importlib.import_module("pulsys.cli.serve").main(argv, environ)
    return importlib.import_module("pulsys.cli." + name).main(argv[1:], environ)
