"""`pulsys keys create|list|revoke|hub-token`: manage API keys.

Two ways to reach the keys, chosen by --server:

* without --server (default): directly in the store, the one the server uses with the
  same --cache-dir / --db (and PULSYS_CACHE_DIR / PULSYS_DB). Works whether or not a
  server is running: a running pulsys applies the change within a second (it polls the
  store, docs/decisions/0009). Needs access to the store's file or database, so it is
  also the way back in when every admin key is lost. Audited as cli:<user>.
* --server URL --token KEY: through a running pulsys's admin listener (docs/admin.md),
  with an admin key. Audited as key:<id>.

`create` prints the new key alone on stdout (KEY=$(pulsys keys create)); everything
else goes to stderr. A Hub token a key carries (--upstream-auth client with --auth
required, ADR 0017) is read from stdin, never from the command line, where `ps` and
shell histories would show it. Exit codes: 0 done, 2 bad input or refused (one line, no
traceback), 1 the store or server could not be reached.
"""

import argparse
import functools
import getpass
import json
import os
import sys
import time

from pulsys.auth.keys import SCOPES
from pulsys.cli.base import Parser, fail
from pulsys.cli.remote import AdminClient, Failed, quote
from pulsys.config import db_url, default_cache_dir, token_secret_file
from pulsys.errors import ConfigError

PROG = "pulsys keys"


def make_parser():
    p = Parser(prog=PROG, description="Create, list and revoke pulsys API keys, directly in the "
                "store (default) or through a running server's admin listener (--server).")
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--server", metavar="URL", help="admin listener of a running pulsys, e.g. "
                        "http://127.0.0.1:8081 [env PULSYS_ADMIN_URL]")
    common.add_argument("--token", metavar="KEY", help="an admin key for --server [env PULSYS_ADMIN_TOKEN]")
    common.add_argument("--cache-dir", metavar="DIR", help="the server's cache dir, where the default "
                        "SQLite store is [env PULSYS_CACHE_DIR]")
    common.add_argument("--db", metavar="URL", help="the server's --db [env PULSYS_DB]")
    common.add_argument("--token-secret-file", metavar="FILE", help="the server's --token-secret-file, "
                        "which seals Hub tokens (default: token-secret in the cache dir) "
                        "[env PULSYS_TOKEN_SECRET_FILE]")
    common.add_argument("--json", action="store_true", help="print JSON")
    # subcommands (create, list, revoke) report errors as `pulsys keys`
    sub = p.add_subparsers(dest="command", metavar="{create,list,revoke,hub-token}",
                           parser_class=functools.partial(Parser, label=PROG))
    sub.required = True
    c = sub.add_parser("create", parents=[common], help="create a key; prints it once")
    c.add_argument("--scope", choices=SCOPES, default="read",
                   help="read: downloads only (default); admin: also the admin API")
    c.add_argument("--name", default="", help="what the key is for, e.g. ci or team-a")
    c.add_argument("--repo", action="append", metavar="PATTERN", dest="repos",
                   help="limit the key to repos matching [models/|datasets/|spaces/]OWNER/NAME, "
                        "with * and ? (repeatable; e.g. --repo 'acme/*' --repo 'datasets/team-a/*'); "
                        "other repos answer 404 RepoNotFound. Default: every repo")
    c.add_argument("--hub-token-stdin", action="store_true",
                   help="the key carries its owner's Hugging Face token, read from stdin: with "
                        "--upstream-auth client --auth required, pulsys asks the Hub with it")
    ls = sub.add_parser("list", parents=[common], help="list keys (never their secrets)")
    ls.add_argument("--active", action="store_true", help="only keys not revoked")
    r = sub.add_parser("revoke", parents=[common], help="revoke a key by id")
    r.add_argument("id", help="the key's id (12 hex digits, as `pulsys keys list` shows it)")
    h = sub.add_parser("hub-token", parents=[common], help="give a key its owner's Hugging Face token "
                       "(read from stdin), or --remove it")
    h.add_argument("id", help="the key's id, or `self` for the key given in --token (a key without "
                   "scope admin may set only its own)")
    h.add_argument("--remove", action="store_true", help="take the key's Hub token away")
    return p


# -- the two back ends --------------------------------------------------------------------


class _Direct:
    def __init__(self, args, environ):
        from pulsys.admin.keys import KeyService
        from pulsys.admin.token_secret import open_sealer
        from pulsys.db.database import Database
        from pulsys.db.migrate import migrate
        raw = args.cache_dir or environ.get("PULSYS_CACHE_DIR")
        cache_dir = os.path.abspath(os.path.expanduser(raw)) if raw else default_cache_dir(environ)
        secret = token_secret_file(args.token_secret_file or environ.get("PULSYS_TOKEN_SECRET_FILE") or "",
                                   cache_dir)
        try:
            url = db_url(args.db or environ.get("PULSYS_DB") or "", cache_dir)
            # made here when absent only to seal a token now; the other commands need none
            sealing = getattr(args, "hub_token_stdin", False) or (args.command == "hub-token" and not args.remove)
            sealer = open_sealer(secret, sealing)
        except ConfigError as e:
            raise Failed(2, str(e)) from None
        self.db = Database.open(url)
        migrate(self.db)
        self.service = KeyService(self.db, sealer=sealer)
        try:
            self.actor = "cli:%s" % getpass.getuser()
        except (KeyError, OSError):
            self.actor = "cli"

    def create(self, scope, name, repos, hub_token):
        key, row = self.service.create(scope, name, self.actor, repos, hub_token)
        return dict(row, key=key)

    def hub_token(self, key_id, token):
        if key_id == "self":
            raise Failed(2, "`self` names the key given in --token, with --server; name the key by its id")
        return self.service.set_hub_token(key_id, token, self.actor)

    def listing(self, active):
        return self.service.listing(include_revoked=not active)

    def revoke(self, key_id):
        return self.service.revoke(key_id, self.actor)


class _Remote(AdminClient):
    """The same calls through a running server's admin listener (pulsys.cli.remote)."""


    def create(self, scope, name, repos, hub_token):
        doc = {"scope": scope, "name": name}
        if repos:
            doc["repos"] = repos
        if hub_token is not None:
            doc["hub_token"] = hub_token
        return self.call("POST", "/api/v1/keys", doc)

    def hub_token(self, key_id, token):
        path = "/api/v1/keys/%s/hub-token" % quote(key_id)
        return self.call("DELETE", path) if token is None else self.call("PUT", path, {"hub_token": token})

    def listing(self, active):
        return self.call("GET", "/api/v1/keys?revoked=%d" % (0 if active else 1))["keys"]

    def revoke(self, key_id):
        return self.call("DELETE", "/api/v1/keys/" + quote(key_id))


# -- output ---------------------------------------------------------------------------------


def _when(t):
    return time.strftime("%Y-%m-%d %H:%M", time.gmtime(t)) if t else "-"


def _table(rows):
    line = "%-12s  %-5s  %-7s  %-16s  %-16s  %-16s  %-9s  %s"
    out = [line % ("ID", "SCOPE", "STATE", "CREATED (UTC)", "CREATED BY", "NAME", "HUB TOKEN", "REPOS")]
    for r in rows:
        out.append(line % (
            r["id"], r["scope"], "active" if r["revoked_at"] is None else "revoked",
            _when(r["created_at"]), r["created_by"], r["name"], "yes" if r.get("has_hub_token") else "-",
            " ".join(r.get("repos") or ["*"])))
    return "\n".join(out) + "\n"


def _stdin_token():
    """The Hub token on stdin (one line; what `printf %s "$HF_TOKEN" |` gives)."""
    if sys.stdin is None or sys.stdin.isatty():
        raise Failed(2, "give the Hugging Face token on stdin, e.g. printf %s \"$HF_TOKEN\" | pulsys keys ...")
    token = sys.stdin.readline().strip()
    if not token:
        raise Failed(2, "stdin held no token")
    return token


def _run(args, environ):
    backend = (_Remote if args.server or environ.get("PULSYS_ADMIN_URL") else _Direct)(args, environ)
    if args.command == "create":
        row = backend.create(args.scope, args.name, args.repos, _stdin_token() if args.hub_token_stdin else None)
        if args.json:
            sys.stdout.write(json.dumps(row, sort_keys=True) + "\n")
        else:
            sys.stderr.write("%s: created key %s (scope %s%s%s); this is the only time it is shown:\n"
                             % (PROG, row["id"], row["scope"], ", name %s" % row["name"] if row["name"] else "",
                                ", repos %s" % " ".join(row["repos"]) if row.get("repos") else ""))
            sys.stdout.write(row["key"] + "\n")
    elif args.command == "hub-token":
        row = backend.hub_token(args.id, None if args.remove else _stdin_token())
        if args.json:
            sys.stdout.write(json.dumps(row, sort_keys=True) + "\n")
        else:
            sys.stdout.write("key %s carries %s Hub token\n" % (row["id"], "a" if row["has_hub_token"] else "no"))
    elif args.command == "list":
        rows = backend.listing(args.active)
        sys.stdout.write(json.dumps(rows, sort_keys=True) + "\n" if args.json else _table(rows))
    else:
        row = backend.revoke(args.id)
        if args.json:
            sys.stdout.write(json.dumps(row, sort_keys=True) + "\n")
        else:
            sys.stdout.write("revoked key %s (scope %s)\n" % (row["id"], row["scope"]))
    return 0


def main(argv, environ):
    args = make_parser().parse_args(argv)
    from pulsys.admin.errors import AdminError
    from pulsys.db.database import DatabaseError
    try:
        return _run(args, environ)
    except Failed as e:
        code, msg = e.code, str(e)
    except AdminError as e:
        code, msg = 2, e.message
    except DatabaseError as e:
        code, msg = 1, str(e)
    return fail(PROG, msg, code)
