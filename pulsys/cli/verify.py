"""`pulsys verify [--cache-dir DIR] [--json]`: re-hash every blob of a cache directory,
quarantine what is bad and reconcile the index with the disk (pulsys.cache.verify),
print a summary. A cache of an older pulsys is imported into the index first.

Exit codes: 0 nothing bad, 1 something was quarantined or repaired, 2 the check could
not run (bad arguments, no cache there, a server is using it, the index cannot be
opened). Errors are one line, no traceback.
"""

import json
import os
import sys

import lmdb

from pulsys.cache.indexdb import IndexUnusable
from pulsys.cache.store import Store
from pulsys.cache.verify import render, verify
from pulsys.cli.base import Parser, fail
from pulsys.config import default_cache_dir


PROG = "pulsys verify"


def _fail(msg):
    return fail(PROG, msg)


def main(argv, environ):
    p = Parser(prog=PROG, description="Re-hash every cached blob (sha256, or git blob "
                "sha1), move bad blobs to v1/quarantine/ so they are refetched, bring the index in "
                "line with the blobs on disk (importing the metadata of an older pulsys first), "
                "print a summary. Run it while no pulsys server uses the cache directory. Exit "
                "code 1 when anything was bad.")
    p.add_argument("--cache-dir", metavar="DIR", default=None,
                   help="the cache directory [env PULSYS_CACHE_DIR, default $XDG_CACHE_HOME/pulsys "
                   "or ~/.cache/pulsys]")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    args = p.parse_args(argv)
    raw = args.cache_dir or environ.get("PULSYS_CACHE_DIR")
    cache_dir = os.path.abspath(os.path.expanduser(raw)) if raw else default_cache_dir(environ)
    if not os.path.isdir(os.path.join(cache_dir, "v1", "blobs")):
        return _fail("no pulsys cache in %s (expected %s)" % (cache_dir, os.path.join(cache_dir, "v1", "blobs")))
    try:
        store = Store(cache_dir)
        store.lock(exclusive=True)
    except BlockingIOError:
        return _fail("a pulsys server is using %s; stop it first" % cache_dir)
    except OSError as e:
        return _fail("cannot open %s: %s" % (cache_dir, e.strerror or e))
    try:
        rep = verify(store)
    except OSError as e:
        return _fail("verify stopped: %s: %s" % (e.filename or cache_dir, e.strerror or e))
    except IndexUnusable as e:
        return _fail(str(e))
    except lmdb.Error as e:
        return _fail("verify stopped: the index of %s: %s" % (cache_dir, str(e).replace("\n", " ")))
    sys.stdout.write((json.dumps(rep, indent=1, sort_keys=True) if args.json else render(rep)) + "\n")
    return 1 if rep["problems"] else 0
