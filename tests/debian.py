"""Debian packages the tests need (chromium, postgresql, nodejs, nginx), installed with
apt-get when missing and the tests run as root.

One apt-get at a time across the test processes: pytest-xdist runs tests that install
packages side by side, and a second `apt-get install` that meets dpkg's lock fails at
once ("Could not get lock /var/lib/dpkg/lock-frontend"; seen on a fresh machine, where
the console test failed while PostgreSQL was being installed). An flock serialises the
suite's own calls, and `DPkg::Lock::Timeout` (apt.conf(5)) makes apt wait for anyone
else's."""

import fcntl
import os
import shutil
import subprocess

LOCK = "/var/lock/pulsys-tests-apt.lock"


def can_install():
    return os.geteuid() == 0 and shutil.which("apt-get") is not None


def apt_install(packages, timeout=900):
    """apt-get update, then install `packages`. -> the commands' log (for the caller's
    error message); it raises nothing, the caller checks for what it needed."""
    if not can_install():
        return "not root, or no apt-get: nothing installed"
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    wait = ["-o", "DPkg::Lock::Timeout=%d" % timeout]
    log = []
    with open(LOCK, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        for cmd, limit in ((["apt-get"] + wait + ["update", "-qq"], 300),
                           (["apt-get"] + wait + ["install", "-y", "-qq"] + list(packages), timeout)):
            try:
                p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=limit)
            except (OSError, subprocess.TimeoutExpired) as e:
                log.append("$ %s -> %s" % (" ".join(cmd), e))
                continue
            log.append("$ %s -> %d\n%s%s" % (" ".join(cmd), p.returncode, p.stdout[-2000:], p.stderr[-2000:]))
    return "\n".join(log)
