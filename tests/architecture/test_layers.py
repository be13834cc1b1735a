"""Architecture is tested: the import-linter contracts in setup.cfg, and the public
surface of the package."""

import ast
import os
import pathlib
import shutil
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]


def test_import_linter_contracts_hold():
    exe = shutil.which("lint-imports") or os.path.join(os.path.dirname(sys.executable), "lint-imports")
    p = subprocess.run([exe, "--config", str(ROOT / "setup.cfg")], cwd=ROOT, capture_output=True,
                       text=True, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "Contracts: 7 kept, 0 broken" in p.stdout, p.stdout


def _imports(path):
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                yield a.name
        elif isinstance(node, ast.ImportFrom) and node.module:
            yield node.module


@pytest.mark.parametrize("pkg,forbidden", [
    ("reactor", {"requests", "psycopg2", "sqlite3", "urllib3", "pulsys.db"}),
    ("auth", {"psycopg2", "sqlite3", "socket", "selectors", "pulsys.db"}),
    ("http1", {"socket", "selectors", "os", "time", "structlog", "pulsys.log"}),
    ("model", {"socket", "selectors", "os", "time", "structlog", "pulsys.log"}),
])
def test_never_imports(pkg, forbidden):
    for path in (ROOT / "pulsys" / pkg).glob("*.py"):
        bad = {m for m in _imports(path) if m.split(".")[0] in forbidden or m in forbidden}
        assert not bad, "%s imports %s" % (path.name, bad)


def test_pure_decision_modules_import_no_io():
    for name in ("route.py", "warm.py"):
        bad = {m for m in _imports(ROOT / "pulsys" / name)
               if m.split(".")[0] in {"socket", "selectors", "os", "time", "structlog"}}
        assert not bad, (name, bad)


def test_testing_package_imports_nothing_from_pulsys():
    for path in (ROOT / "pulsys" / "testing").glob("*.py"):
        bad = {m for m in _imports(path) if m == "pulsys" or (m.startswith("pulsys.") and not m.startswith("pulsys.testing"))}
        assert not bad, (path.name, bad)


def test_importing_pulsys_has_no_side_effects():
    code = ("import sys, threading, logging; import pulsys, pulsys.app; "
            "assert threading.active_count() == 1; print(pulsys.__version__)")
    p = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip().count(".") == 2


def test_public_surface():
    code = "import pulsys; print(sorted(n for n in vars(pulsys) if not n.startswith('_')))"
    p = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert p.stdout.strip() == "[]", p.stdout + p.stderr
