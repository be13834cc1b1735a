"""`pulsys prefetch ORG/NAME`: queue a pre-warm job on a running pulsys and follow it.

Talks to the admin listener (--server/--token as `pulsys keys`; docs/admin.md). Shows a
tqdm progress bar on stderr, refreshed from GET /api/v1/jobs/ID every POLL seconds; when
stderr is not a terminal the bar is printed as plain lines at most every 2 s (no
carriage-return animation in CI logs). Exit codes: 0 the job is done; 1 it failed or was
cancelled, or the server cannot be reached; 2 bad input or a refusal. Ctrl-C stops
following; the job goes on on the server.
"""

import sys
import time

from pulsys.cli.base import Parser, fail
from pulsys.cli.remote import AdminClient, Failed, add_arguments

PROG = "pulsys prefetch"
POLL = 0.5


def make_parser():
    p = Parser(prog=PROG, description="Fetch a repo's files into a running pulsys's cache "
                "(a pre-warm job), showing progress until it is done.")
    p.add_argument("repo", metavar="ORG/NAME")
    p.add_argument("--dataset", action="store_true", help="the repo is a dataset")
    p.add_argument("--revision", default="main", help="branch, tag or commit (default main)")
    p.add_argument("--include", action="append", default=[], metavar="GLOB",
                   help="only files matching GLOB (repeatable; default: every file)")
    p.add_argument("--exclude", action="append", default=[], metavar="GLOB",
                   help="leave out files matching GLOB (repeatable)")
    p.add_argument("--no-wait", action="store_true", help="queue the job, print its id and exit")
    add_arguments(p)
    return p


def _bar(stream):
    from tqdm import tqdm
    tty = stream.isatty()
    return tqdm(total=0, unit="B", unit_scale=True, unit_divisor=1024, file=stream,
                dynamic_ncols=tty, ncols=None if tty else 100, mininterval=0.2 if tty else 2.0,
                ascii=not tty, leave=True)


def follow(client, job, stream=sys.stderr, poll=POLL):
    """Show the job's progress until it ends; -> the final job document."""
    bar = _bar(stream)
    try:
        while True:
            phase = job["phase"]
            if job["bytes_total"] and bar.total != job["bytes_total"]:
                bar.total = job["bytes_total"]
            bar.n = job["bytes_done"]
            bar.set_description_str("%s %d/%d files" % (phase, job["files_done"], job["files_total"]),
                                    refresh=False)
            current = job.get("current_file") or ""
            bar.set_postfix_str(current[-40:], refresh=False)
            bar.refresh()
            if phase in ("done", "failed", "cancelled"):
                return job
            time.sleep(poll)
            job = client.call("GET", "/api/v1/jobs/%d" % job["id"])
    finally:
        bar.close()


def _run(args, environ):
    client = AdminClient(args, environ)
    job = client.call("POST", "/api/v1/jobs", {
        "repo": args.repo, "type": "dataset" if args.dataset else "model", "revision": args.revision,
        "include": args.include, "exclude": args.exclude})
    what = "%s%s@%s" % ("dataset " if args.dataset else "", args.repo, args.revision)
    if args.no_wait:
        sys.stdout.write("%d\n" % job["id"])
        return 0
    sys.stderr.write("%s: job %d: %s\n" % (PROG, job["id"], what))
    try:
        job = follow(client, job)
    except KeyboardInterrupt:
        sys.stderr.write("%s: stopped following; job %d goes on on the server\n" % (PROG, job["id"]))
        return 130
    if job["phase"] == "done":
        sys.stderr.write("%s: %s: %d files, %d bytes in the cache (job %d)\n"
                         % (PROG, what, job["files_total"], job["bytes_total"], job["id"]))
        return 0
    reason = job.get("error") or "cancelled"
    raise Failed(1, "job %d %s: %s" % (job["id"], job["phase"], reason))


def main(argv, environ):
    args = make_parser().parse_args(argv)
    try:
        return _run(args, environ)
    except Failed as e:
        return fail(PROG, e, e.code)
