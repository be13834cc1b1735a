"""Provenance for every results/ file: commit, dirty flag, machine, kernel, Python build,
date. Refuses to record when the commit cannot be determined (results without a commit
cannot be reproduced)."""

import datetime
import json
import os
import platform
import subprocess
import sys
import sysconfig

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _git(*args):
    return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=True).stdout.strip()


def machine_label():
    return "%s-%s-%dcpu" % (sys.platform, platform.machine(), os.cpu_count() or 0)


def provenance(**extra):
    try:
        commit = _git("rev-parse", "HEAD")
        dirty = bool(_git("status", "--porcelain", "--untracked-files=no"))
    except (subprocess.CalledProcessError, FileNotFoundError):
        raise SystemExit("bench: error: cannot determine the git commit; refusing to record results")
    if len(commit) != 40:
        raise SystemExit("bench: error: unknown commit %r; refusing to record results" % commit)
    cpu = ""
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next((l.split(":", 1)[1].strip() for l in f if l.startswith("model name")), "")
    except OSError:
        pass
    doc = {
        "commit": commit, "dirty": dirty,
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "machine": machine_label(), "cpu_model": cpu, "cpus": os.cpu_count(),
        "kernel": platform.release(), "system": platform.system(),
        "python": sys.version.split()[0], "python_build": "%s %s%s" % (
            platform.python_implementation(), " ".join(platform.python_build()),
            " free-threaded" if sysconfig.get_config_var("Py_GIL_DISABLED") else " GIL"),
    }
    doc.update(extra)
    return doc


def write_result(name, doc, out_dir=None):
    """Write results/<machine>/<name> (or out_dir/<name>); -> the path written."""
    d = out_dir or os.path.join(ROOT, "results", machine_label())
    os.makedirs(d, exist_ok=True)
    path = os.path.join(d, name)
    with open(path, "w") as f:
        json.dump(doc, f, indent=1, sort_keys=True)
        f.write("\n")
    return os.path.relpath(path, ROOT)
