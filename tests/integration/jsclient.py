"""@huggingface/hub (huggingface.js) from the npm registry as a real client: installed
once with Node.js and npm (Debian's nodejs and npm packages, installed here with apt-get
when missing and the tests run as root) into the client cache (clients.venv_root(), never
the repository), under a temporary name and renamed into place, guarded by a lock."""

import fcntl
import json
import os
import shutil
import subprocess
from pathlib import Path

from .clients import SCRIPTS_DIR, venv_root
from tests.debian import apt_install

PACKAGE = "@huggingface/hub@2.17.5"


class JsClientError(RuntimeError):
    pass


def _ensure_node():
    if shutil.which("node") and shutil.which("npm"):
        return
    log = apt_install(["nodejs", "npm"], 900)
    if shutil.which("node") and shutil.which("npm"):
        return
    raise JsClientError("Node.js and npm are needed for the huggingface.js client: install Debian's "
                        "nodejs and npm packages, or run the tests as root\n" + log)


def hfjs_dir():
    """The directory whose node_modules holds PACKAGE (installed on first use)."""
    _ensure_node()
    root = venv_root()
    final = root / ("npm-" + PACKAGE.replace("@", "").replace("/", "-"))
    if (final / ".pulsys-ready").is_file():
        return final
    root.mkdir(parents=True, exist_ok=True)
    with open(root / (".%s.lock" % final.name), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (final / ".pulsys-ready").is_file():
            tmp = root / (".%s.building-%d" % (final.name, os.getpid()))
            shutil.rmtree(tmp, ignore_errors=True)
            tmp.mkdir()
            (tmp / "package.json").write_text('{"private": true}\n')
            cp = subprocess.run(["npm", "install", "--no-audit", "--no-fund", PACKAGE], cwd=tmp,
                                capture_output=True, text=True, timeout=600)
            if cp.returncode != 0:
                shutil.rmtree(tmp, ignore_errors=True)
                raise JsClientError("npm install %s failed:\n%s%s" % (PACKAGE, cp.stdout, cp.stderr))
            (tmp / ".pulsys-ready").write_text("ok\n")
            shutil.rmtree(final, ignore_errors=True)
            os.rename(tmp, final)
    return final


def run_hfjs(install, env, *args, timeout=120):
    """Run client_scripts/hfjs.mjs; -> its JSON document."""
    env = dict(env, HFJS_MODULE=str(Path(install) / "node_modules/@huggingface/hub/dist/index.mjs"))
    cp = subprocess.run(["node", str(SCRIPTS_DIR / "hfjs.mjs"), *args], env=env, capture_output=True,
                        text=True, timeout=timeout)
    try:
        return json.loads(cp.stdout.strip().splitlines()[-1])
    except (IndexError, ValueError):
        raise JsClientError("hfjs.mjs %s printed no JSON (exit %d):\n%s%s"
                            % (" ".join(args), cp.returncode, cp.stdout, cp.stderr)) from None
