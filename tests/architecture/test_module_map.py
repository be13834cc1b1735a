"""docs/development.md lists every module of pulsys (its "Every module" table), so a
reader finds where anything lives; a new module without a row fails here."""

import os

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _modules():
    out = []
    for dirpath, dirs, files in os.walk(os.path.join(ROOT, "pulsys")):
        dirs[:] = [d for d in dirs if d != "__pycache__"]
        out += [os.path.relpath(os.path.join(dirpath, f), ROOT) for f in files if f.endswith(".py")]
    return sorted(out)


def test_every_module_has_a_row_in_development_md():
    with open(os.path.join(ROOT, "docs", "development.md")) as f:
        text = f.read()
    modules = _modules()
    assert len(modules) > 50
    missing = [m for m in modules if "| `%s` |" % m not in text]
    assert missing == [], "add a row to docs/development.md, 'Every module': %s" % missing
