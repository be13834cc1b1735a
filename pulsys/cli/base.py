"""What every pulsys command line shares: its argparse parser and its error line.

A usage error is one line on stderr naming the command and its --help, exit code 2 (no
usage dump); any other error a person can cause is one line `<command>: error: <why>`
and an exit code, never a traceback.
"""

import argparse
import sys


class Parser(argparse.ArgumentParser):
    """argparse with one-line usage errors. `label`: the command errors name (default:
    prog; `pulsys keys` gives its subcommands' parsers its own)."""

    def __init__(self, *args, label=None, **kw):
        super().__init__(*args, **kw)
        self.label = label or self.prog

    def error(self, message):
        sys.stderr.write("%s: error: %s (see %s --help)\n" % (self.label, message, self.label))
        raise SystemExit(2)


def fail(command, message, code=2):
    """Write `<command>: error: <message>` on stderr; -> code (the exit code)."""
    sys.stderr.write("%s: error: %s\n" % (command, message))
    return code
