"""Real Hugging Face clients, each in its own venv built from PyPI.

The venvs are built once into a cache directory outside the repository and
reused afterwards:

* ``PULSYS_TEST_VENV_DIR`` if set, else ``~/.cache/pulsys-test-venvs``;
* one directory per client, ``<name>-<sha1(requirements)[:12]>``, so changing
  the requirement list builds a new venv next to the old one;
* built under a temporary name and renamed into place once ``pip install``
  succeeded, so a killed build never leaves a half-built venv that looks ready;
* guarded by an ``fcntl`` lock so parallel pytest processes don't race.

A failed build raises :class:`VenvBuildError` carrying pip's output: tests
that need a client fail loudly (they are never skipped silently).

Client scripts live in ``client_scripts/`` and run *inside* a venv; they print
one JSON document on stdout.
"""

from __future__ import annotations

import dataclasses
import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Mapping, Sequence

SCRIPTS_DIR = Path(__file__).resolve().parent / "client_scripts"

# name -> requirements passed to pip. "latest" brings hf_xet as a dependency
# of huggingface_hub: it must stay installed (pulsys has to stop clients
# from using Xet, so the client must be able to try).
CLIENTS: dict[str, tuple[str, ...]] = {
    "latest": ("huggingface_hub>=2.4,<3",),
    "legacy": ("huggingface_hub==0.36.2", "hf_transfer==0.1.9"),
    # what older training images still pin (issue 16): before hf_xet, before the
    # 0.3x download rewrite; still HEAD-then-GET with its own redirect handling
    "old": ("huggingface_hub==0.23.5",),
    # libraries that call huggingface_hub for users, with their own optional-file probes
    # (hf-protocol.md §9); no torch: the loads below read data and tokenizers only
    "datasets": ("datasets>=4,<6",),
    "transformers": ("transformers>=4.50,<6", "tokenizers"),
}

# Generous: a cold build downloads a few dozen MB of wheels.
PIP_TIMEOUT_S = 900
LOCK_TIMEOUT_S = 1200
DEFAULT_RUN_TIMEOUT_S = 300


class VenvBuildError(RuntimeError):
    """pip/venv failed; the message carries their output."""


class ClientError(RuntimeError):
    """A client script exited non-zero (or timed out)."""

    def __init__(self, message: str, stdout: str = "", stderr: str = "", returncode: int | None = None):
        super().__init__(message)
        self.stdout = stdout
        self.stderr = stderr
        self.returncode = returncode


@dataclasses.dataclass(frozen=True)
class ClientVenv:
    name: str
    path: Path
    requirements: tuple[str, ...]

    @property
    def python(self) -> str:
        return str(self.path / "bin" / "python")

    def bin(self, name: str) -> str:
        """Path of a console script installed in this venv, e.g. ``"hf"``."""
        p = self.path / "bin" / name
        if not p.exists():
            raise FileNotFoundError(f"{name!r} is not installed in venv {self.path}")
        return str(p)

    def versions(self) -> dict[str, str]:
        """Installed versions of the interesting distributions."""
        code = (
            "import json, importlib.metadata as m\n"
            "out = {}\n"
            "for d in ('huggingface_hub', 'hf_xet', 'hf_transfer', 'httpx2', 'httpx', 'requests'):\n"
            "    try: out[d] = m.version(d)\n"
            "    except m.PackageNotFoundError: pass\n"
            "print(json.dumps(out))\n"
        )
        cp = subprocess.run([self.python, "-c", code], capture_output=True, text=True, timeout=60, check=True)
        return json.loads(cp.stdout)


def venv_root() -> Path:
    d = os.environ.get("PULSYS_TEST_VENV_DIR")
    if not d:
        d = os.path.join(os.path.expanduser("~"), ".cache", "pulsys-test-venvs")
    return Path(d)


def _req_digest(requirements: Sequence[str]) -> str:
    return hashlib.sha1("\n".join(requirements).encode()).hexdigest()[:12]


def _venv_ready(path: Path) -> bool:
    return (path / ".pulsys-ready").is_file() and (path / "bin" / "python").exists()


def _pip_env() -> dict[str, str]:
    env = dict(os.environ)
    # Don't let an outer virtualenv / PYTHONPATH leak into the build.
    for k in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME", "PIP_REQUIRE_VIRTUALENV"):
        env.pop(k, None)
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    env["PIP_NO_INPUT"] = "1"
    return env


def _build(name: str, requirements: tuple[str, ...], final: Path) -> None:
    root = final.parent
    tmp = root / f".{final.name}.building-{os.getpid()}"
    if tmp.exists():
        shutil.rmtree(tmp, ignore_errors=True)
    log: list[str] = []

    def run(cmd: list[str], timeout: float) -> None:
        log.append("$ " + " ".join(cmd))
        try:
            cp = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=_pip_env())
        except subprocess.TimeoutExpired as e:
            log.append(_text(e.stdout) + _text(e.stderr))
            raise VenvBuildError(
                f"building client venv {name!r} timed out after {timeout}s:\n" + "\n".join(log)
            ) from None
        log.append(cp.stdout + cp.stderr)
        if cp.returncode != 0:
            raise VenvBuildError(
                f"building client venv {name!r} failed (exit {cp.returncode}):\n" + "\n".join(log)
            )

    t0 = time.monotonic()
    try:
        # Console scripts get the interpreter's absolute path in their shebang,
        # which is ``tmp`` here; _relocate rewrites it to ``final`` before the
        # rename.
        run([sys.executable, "-m", "venv", str(tmp)], 120)
        py = str(tmp / "bin" / "python")
        run([py, "-m", "pip", "install", *requirements], PIP_TIMEOUT_S)
        freeze = subprocess.run([py, "-m", "pip", "freeze"], capture_output=True, text=True, timeout=120,
                                env=_pip_env())
        (tmp / "pip-freeze.txt").write_text(freeze.stdout)
        _relocate(tmp, final)
        (tmp / "requirements.txt").write_text("\n".join(requirements) + "\n")
        (tmp / ".pulsys-build-seconds").write_text(f"{time.monotonic() - t0:.1f}\n")
        (tmp / ".pulsys-ready").write_text("ok\n")
        try:
            os.rename(tmp, final)
        except OSError:
            if not _venv_ready(final):
                raise
            shutil.rmtree(tmp, ignore_errors=True)   # another test process built it meanwhile
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def _relocate(tmp: Path, final: Path) -> None:
    """Rewrite absolute ``tmp`` paths in bin/ (shebangs, activate) to ``final``."""
    old, new = str(tmp).encode(), str(final).encode()
    bindir = tmp / "bin"
    for p in bindir.iterdir():
        if p.is_symlink() or not p.is_file():
            continue
        data = p.read_bytes()
        if old not in data[:4096] and not p.name.startswith("activate"):
            continue
        if b"\0" in data[:1024]:  # binary, leave alone
            continue
        p.write_bytes(data.replace(old, new))
    cfg = tmp / "pyvenv.cfg"
    if cfg.exists():
        cfg.write_bytes(cfg.read_bytes().replace(old, new))


def _text(b: bytes | str | None) -> str:
    if b is None:
        return ""
    return b.decode(errors="replace") if isinstance(b, bytes) else b


def client_venv(name: str) -> ClientVenv:
    """Return the venv for client ``name``, building it first if needed."""
    requirements = CLIENTS[name]
    root = venv_root()
    final = root / f"{name}-{_req_digest(requirements)}"
    if _venv_ready(final):
        return ClientVenv(name, final, requirements)
    root.mkdir(parents=True, exist_ok=True)
    lock_path = root / f".{final.name}.lock"
    with open(lock_path, "w") as lock:
        deadline = time.monotonic() + LOCK_TIMEOUT_S
        while True:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise VenvBuildError(f"timed out waiting for lock {lock_path}") from None
                time.sleep(0.5)
        try:
            if not _venv_ready(final):
                if final.exists():  # left over from an older, incompatible layout
                    shutil.rmtree(final, ignore_errors=True)
                _build(name, requirements, final)
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
    return ClientVenv(name, final, requirements)


def build_seconds(venv: ClientVenv) -> float | None:
    p = venv.path / ".pulsys-build-seconds"
    try:
        return float(p.read_text().strip())
    except (OSError, ValueError):
        return None


# ---------------------------------------------------------------- environment

_LOOPBACK_NO_PROXY = "127.0.0.1,127.0.0.2,localhost,::1"

# Variables from the outer environment that would change what a client does.
_LEAKY_PREFIXES = ("HF_", "HUGGINGFACE_", "TRANSFORMERS_", "XET_")
_LEAKY_NAMES = {
    "http_proxy", "https_proxy", "all_proxy", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY",
    "no_proxy", "NO_PROXY", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE", "SSL_CERT_FILE",
    "PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "DO_NOT_TRACK",
}


def client_env(endpoint: str, hf_home: str | os.PathLike, token: str | None = None, **extra: str) -> dict[str, str]:
    """Environment for a client process talking to ``endpoint``.

    Inherits PATH etc., drops every ``HF_*``/proxy variable of the outer
    environment, then sets the ones the tests rely on. ``extra`` overrides
    (e.g. ``HF_HUB_ENABLE_HF_TRANSFER="1"``); a value of ``None`` removes.
    """
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in _LEAKY_NAMES and not k.startswith(_LEAKY_PREFIXES)
    }
    hf_home = str(hf_home)
    env.update(
        HF_ENDPOINT=endpoint.rstrip("/"),
        HF_HOME=hf_home,
        HF_HUB_DISABLE_TELEMETRY="1",
        HF_HUB_DISABLE_UPDATE_CHECK="1",
        HF_HUB_DISABLE_PROGRESS_BARS="1",
        HF_HUB_DISABLE_IMPLICIT_TOKEN="1",
        HF_HUB_ETAG_TIMEOUT="60",
        HF_HUB_DOWNLOAD_TIMEOUT="60",
        NO_PROXY=_LOOPBACK_NO_PROXY,
        no_proxy=_LOOPBACK_NO_PROXY,
        PYTHONUNBUFFERED="1",
        PYTHONDONTWRITEBYTECODE="1",
    )
    if token is not None:
        env["HF_TOKEN"] = token
    for k, v in extra.items():
        if v is None:
            env.pop(k, None)
        else:
            env[k] = str(v)
    return env


# ---------------------------------------------------------------- running


# A per-test time budget (set by an autouse fixture in conftest): every client
# process gets at most the time left, so a test is bounded however many
# clients it runs.
_deadline: float | None = None


def set_deadline(seconds: float | None) -> None:
    global _deadline
    _deadline = None if seconds is None else time.monotonic() + seconds


def _bounded(timeout: float) -> float:
    if _deadline is None:
        return timeout
    left = _deadline - time.monotonic()
    if left <= 1:
        raise ClientError("the test's time budget is used up; not starting another client")
    return min(timeout, left)


def _run(cmd: list[str], env: Mapping[str, str], timeout: float, cwd: str | None, check: bool) -> subprocess.CompletedProcess:
    timeout = _bounded(timeout)
    try:
        cp = subprocess.run(
            cmd, env=dict(env), capture_output=True, text=True, timeout=timeout, cwd=cwd, stdin=subprocess.DEVNULL
        )
    except subprocess.TimeoutExpired as e:
        raise ClientError(
            f"client timed out after {timeout}s: {' '.join(cmd)}\n"
            f"--- stdout ---\n{_text(e.stdout)}\n--- stderr ---\n{_text(e.stderr)}",
            _text(e.stdout), _text(e.stderr), None,
        ) from None
    if check and cp.returncode != 0:
        raise ClientError(
            f"client exited {cp.returncode}: {' '.join(cmd)}\n"
            f"--- stdout ---\n{cp.stdout}\n--- stderr ---\n{cp.stderr[-20000:]}",
            cp.stdout, cp.stderr, cp.returncode,
        )
    return cp


def run_client(
    venv: ClientVenv,
    script_name: str,
    args: Sequence[str] = (),
    env: Mapping[str, str] | None = None,
    timeout: float = DEFAULT_RUN_TIMEOUT_S,
    check: bool = True,
    cwd: str | None = None,
) -> subprocess.CompletedProcess:
    """Run ``client_scripts/<script_name>.py`` with the venv's python."""
    script = SCRIPTS_DIR / f"{script_name}.py"
    if not script.is_file():
        raise FileNotFoundError(script)
    if env is None:
        raise ValueError("run_client needs an env (see client_env)")
    cmd = [venv.python, str(script), *map(str, args)]
    return _run(cmd, env, timeout, cwd, check)


def run_cli(
    venv: ClientVenv,
    name: str,
    args: Sequence[str],
    env: Mapping[str, str],
    timeout: float = DEFAULT_RUN_TIMEOUT_S,
    check: bool = True,
    cwd: str | None = None,
) -> subprocess.CompletedProcess:
    """Run a console script of the venv (e.g. ``hf download ...``)."""
    return _run([venv.bin(name), *map(str, args)], env, timeout, cwd, check)


def json_out(cp: subprocess.CompletedProcess) -> dict:
    """The JSON document a client script printed (its last stdout line)."""
    lines = [ln for ln in cp.stdout.splitlines() if ln.strip()]
    if not lines:
        raise ClientError(f"client printed nothing on stdout\n--- stderr ---\n{cp.stderr}", cp.stdout, cp.stderr, cp.returncode)
    try:
        return json.loads(lines[-1])
    except json.JSONDecodeError:
        raise ClientError(
            f"client stdout is not JSON:\n{cp.stdout}\n--- stderr ---\n{cp.stderr}", cp.stdout, cp.stderr, cp.returncode
        ) from None


def sha256_file(path: str | os.PathLike) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def sha256_tree(root: str | os.PathLike) -> dict[str, str]:
    """{relpath: sha256} of every regular file under ``root`` (symlinks followed),
    skipping the client's own ``.cache`` bookkeeping directory."""
    root = Path(root)
    out: dict[str, str] = {}
    for dirpath, dirnames, filenames in os.walk(root, followlinks=True):
        rel_dir = Path(dirpath).relative_to(root)
        if rel_dir.parts[:1] == (".cache",):
            continue
        dirnames[:] = [d for d in dirnames if not (rel_dir == Path(".") and d == ".cache")]
        for fn in filenames:
            p = Path(dirpath) / fn
            out[str(p.relative_to(root))] = sha256_file(p)
    return out


if __name__ == "__main__":  # pragma: no cover - convenience: pre-build venvs
    for n in sys.argv[1:] or list(CLIENTS):
        t = time.monotonic()
        v = client_venv(n)
        print(n, v.path, v.versions(), f"{time.monotonic() - t:.1f}s (build {build_seconds(v)}s)")
