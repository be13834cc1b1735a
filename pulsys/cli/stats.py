"""`pulsys stats`: what a running pulsys holds and serves (GET /api/v1/stats), for a
person or, with --json, for a script. --server/--token as `pulsys keys`. Exit codes as
`pulsys keys`: 2 bad input or refused, 1 the server cannot be reached."""

import json
import sys

from pulsys.cli.base import Parser, fail
from pulsys.cli.remote import AdminClient, Failed, add_arguments, human_bytes

PROG = "pulsys stats"


def make_parser():
    p = Parser(prog=PROG, description="Cache use, hit ratio and downloads per repo of a running pulsys.")
    p.add_argument("--json", action="store_true", help="print the JSON document of GET /api/v1/stats")
    p.add_argument("--top", type=int, default=20, help="repos to list (default 20)")
    add_arguments(p)
    return p


def render(s, top):
    quota = s["quota_bytes"]
    use = human_bytes(s["bytes_used"]) + (" of %s (%.0f%%)" % (human_bytes(quota), 100.0 * s["bytes_used"] / quota)
                                          if quota else " (no quota)")
    lines = [
        "cache     %s, %d entries, %d blobs" % (use, s["entries"], s["blobs"]),
        "requests  %d hits, %d misses, hit ratio %.1f%%" % (s["hits"], s["misses"], 100 * s["hit_ratio"]),
        "bytes     %s served, %s from upstream, %s saved" % (
            human_bytes(s["bytes_served"]), human_bytes(s["upstream_body_bytes"]),
            human_bytes(s["upstream_bytes_saved"])),
    ]
    repos = s["repos"][:max(0, top)]
    if repos:
        lines.append("")
        lines.append("%-8s %-48s %10s %12s" % ("TYPE", "REPO", "DOWNLOADS", "SERVED"))
        for r in repos:
            lines.append("%-8s %-48s %10d %12s" % (r["type"], r["repo"], r["downloads"], human_bytes(r["bytes_served"])))
    return "\n".join(lines) + "\n"


def main(argv, environ):
    args = make_parser().parse_args(argv)
    try:
        doc = AdminClient(args, environ).call("GET", "/api/v1/stats")
    except Failed as e:
        return fail(PROG, e, e.code)
    sys.stdout.write(json.dumps(doc, sort_keys=True) + "\n" if args.json else render(doc, args.top))
    return 0
