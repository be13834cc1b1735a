"""The tests of a module are found from its name (docs/development.md, "Finding the
tests of a module"): every file in tests/unit/ is named test_<module>[_<aspect>].py
for a module or package of pulsys."""

import os

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _names():
    names = set()
    for dirpath, dirs, files in os.walk(os.path.join(ROOT, "pulsys")):
        dirs[:] = [d for d in dirs if d != "__pycache__"]
        names.update(dirs)
        names.update(f[:-3] for f in files if f.endswith(".py") and f != "__init__.py")
    return names


def _tested(stem, names):
    parts = stem.split("_")
    return any("_".join(parts[:k]) in names for k in range(1, len(parts) + 1))


def test_every_unit_test_file_names_its_module():
    names = _names()
    assert {"reactor", "fill", "space", "warm"} <= names
    files = [f for f in os.listdir(os.path.join(ROOT, "tests", "unit"))
             if f.startswith("test_") and f.endswith(".py")]
    assert len(files) > 20
    stray = sorted(f for f in files if not _tested(f[5:-3], names))
    assert stray == [], "name these test_<module>[_<aspect>].py (docs/development.md): %s" % stray


def test_the_rule_rejects_a_name_that_is_no_module():
    assert not _tested("banana_split", _names()) and _tested("fill_run", _names())
