"""`pulsys doctor`: which ceiling of this node binds a model pull, for people and machines.

    pulsys doctor --cache-dir /var/cache/pulsys --model-size 140GB
    pulsys doctor --probe-file openai-community/gpt2/model.safetensors --json

Errors a person can cause are one line on stderr and exit code 2.
"""

import argparse
import json
import sys

from pulsys import config, doctor, log
from pulsys.cli.base import Parser, fail
from pulsys.config import default_cache_dir
from pulsys.errors import ConfigError
from pulsys.platform import PlatformFacts, load_sender

_LABELS = [("write_MBps", "disk write (fdatasync'd)"), ("read_cold_MBps", "disk read, cold"),
           ("read_warm_MBps", "disk read, warm"), ("serve_MBps", "serve (sendfile, loopback)"),
           ("upstream_MBps", "upstream"), ("fill_MBps", "fill engine (local origin)"),
           ("network_MBps", "network link")]
_BINDING = {"disk_write": "disk write", "disk_read": "cold disk read", "serve": "serving",
            "upstream": "the upstream", "fill": "the fill engine (receive, hash, write)"}


PROG = "pulsys doctor"


def parse_size(text):
    """'140GB', '10GiB', '512M', '1000' -> bytes, as --cache-max-bytes reads them."""
    try:
        n = config.parse_size(text)
    except ConfigError:
        raise argparse.ArgumentTypeError("not a size: %r (examples: 140GB, 10GiB, 512M)" % text) from None
    if n <= 0:
        raise argparse.ArgumentTypeError("size must be > 0: %r" % text)
    return n


def _seconds(text):
    try:
        v = float(text)
    except ValueError:
        v = -1
    if not 0 < v <= 600:
        raise argparse.ArgumentTypeError("seconds must be in (0, 600]: %r" % text)
    return v


def make_parser(environ):
    p = Parser(prog=PROG, description=doctor.__doc__.split("\n\n")[0])
    p.add_argument("--cache-dir", default=environ.get("PULSYS_CACHE_DIR") or default_cache_dir(environ),
                   help="the cache directory to measure [env PULSYS_CACHE_DIR]")
    p.add_argument("--model-size", type=parse_size, default=parse_size("140GB"),
                   help="model size for the expected landing time (default 140GB)")
    p.add_argument("--size", type=parse_size, default=256 << 20,
                   help="bytes written for the disk test (default 256MiB)")
    p.add_argument("--seconds", type=_seconds, default=10.0, help="time cap per measurement (default 10)")
    p.add_argument("--upstream", default=environ.get("PULSYS_UPSTREAM", "https://huggingface.co"),
                   help="Hub to measure with --probe-file [env PULSYS_UPSTREAM]")
    p.add_argument("--probe-file", metavar="REPO/PATH",
                   help="measure the upstream on this file at main, e.g. openai-community/gpt2/model.safetensors")
    p.add_argument("--probe-url", metavar="URL", help="measure the upstream on this exact URL instead")
    p.add_argument("--json", action="store_true", help="one JSON object on stdout")
    return p


def _probe_url(a):
    if a.probe_url:
        return a.probe_url
    if not a.probe_file:
        return None
    parts = a.probe_file.strip("/").split("/")
    if len(parts) < 3:
        raise SystemExit(_fail("--probe-file must be ORG/NAME/PATH, got %r" % a.probe_file))
    return "%s/%s/resolve/main/%s" % (a.upstream.rstrip("/"), "/".join(parts[:2]), "/".join(parts[2:]))


def _fail(msg):
    return fail(PROG, msg)


def _duration(s):
    if s is None:
        return "unknown"
    s = int(round(s))
    h, rem = divmod(s, 3600)
    m, sec = divmod(rem, 60)
    return ("%dh %02dmin" % (h, m)) if h else ("%dmin %02ds" % (m, sec)) if m else "%ds" % sec


def render(r):
    lines = ["pulsys doctor: %s" % r["cache_dir"]]
    for key, label in _LABELS:
        v = r.get(key)
        mark = "  <- binds" if dict(doctor.STAGES).get(key) == r.get("binding") and v else ""
        lines.append("  %-28s %s%s" % (label, ("%10.1f MB/s" % v) if v else "  not measured", mark))
    if r.get("binding"):
        rate = r[{n: k for k, n in doctor.STAGES}[r["binding"]]]
        lines.append("%.1f GB lands in about %s: %s binds at %.1f MB/s" % (
            r["model_bytes"] / 1e9, _duration(r["expected_seconds"]), _BINDING[r["binding"]], rate))
    warn = doctor.write_ceiling_warning(r.get("write_MBps"), r.get("network_MBps"))
    for note in r.get("notes", []) + ([warn] if warn else []):
        lines.append("note: " + note)
    return "\n".join(lines) + "\n"


def main(argv, environ):
    a = make_parser(environ).parse_args(argv)
    log.configure()          # the fill engine's warnings to stderr: stdout is the report (--json)
    url = _probe_url(a)
    upstream = None
    if url:
        import requests
        token = environ.get("PULSYS_HF_TOKEN") or environ.get("HF_TOKEN")
        upstream = (requests.Session(), url, {"Authorization": "Bearer " + token} if token else {})
    _, sender = load_sender(PlatformFacts.probe(), None)
    try:
        from pulsys.upstream import fill_ceiling
        fill = (lambda d: fill_ceiling.measure(d, a.size, config.Config.fill_read_ahead, a.seconds))
        r = doctor.run(a.cache_dir, sender.send_body, a.model_size, a.size, a.seconds, upstream, fill)
    except PermissionError as e:
        return _fail("cannot write in %s: %s" % (a.cache_dir, e.strerror))
    except OSError as e:     # requests' errors are OSErrors too
        if type(e).__module__.startswith("requests"):
            return _fail("upstream probe failed: %s" % e)
        return _fail(str(e))
    sys.stdout.write(json.dumps(r) + "\n" if a.json else render(r))
    return 0
