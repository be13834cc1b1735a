"""The argparse parser every pulsys command line uses: a usage error is one line on
stderr naming the command and its --help, and exit code 2 (no usage dump)."""

import argparse
import sys


class OneLineParser(argparse.ArgumentParser):
    label = None     # the command named in errors; default: the parser's prog

    def error(self, message):
        name = self.label or self.prog
        sys.stderr.write("%s: error: %s (see %s --help)\n" % (name, message, name))
        raise SystemExit(2)
