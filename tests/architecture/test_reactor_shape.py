"""The reactor's shape (ADR 0015): the HTTP step makes no I/O, and a backend never
calls into its base class by name (the base calls the backend's hooks instead)."""

import ast
import os

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
REACTOR = os.path.join(ROOT, "pulsys", "reactor")


def _tree(name):
    with open(os.path.join(REACTOR, name)) as f:
        return ast.parse(f.read())


def test_the_http_step_imports_nothing_that_does_io():
    names = set()
    for node in ast.walk(_tree("step.py")):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            names.add(node.module)
    assert names, "step.py imports nothing?"
    io = {"socket", "select", "selectors", "os", "pulsys.platform", "pulsys.platform.uring",
          "pulsys.reactor.fdcache", "pulsys.reactor.mailbox"}
    assert names & io == set()


def test_backends_do_not_call_their_base_by_name():
    for name in ("selector.py", "uring.py"):
        calls = [n for n in ast.walk(_tree(name))
                 if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name)
                 and n.value.id == "ReactorBase"]
        assert calls == [], "%s reaches into ReactorBase: %s" % (name, [c.attr for c in calls])
        assert "def run(" not in open(os.path.join(REACTOR, name)).read()   # the loop is base's
