"""Every counter is declared twice in pulsys/metrics.py: its name in NAMES (what
/debug/vars and /metrics export) and its index constant (what the warm path uses, found
by grep). They must agree."""

import ast
import os

from pulsys import metrics as M


def _constants():
    """NAME = int assignments at the top level of metrics.py, in file order."""
    path = os.path.join(os.path.dirname(M.__file__), "metrics.py")
    with open(path) as f:
        tree = ast.parse(f.read())
    out = []
    for node in tree.body:
        if (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)
                and isinstance(node.value, ast.Constant) and type(node.value.value) is int
                and node.targets[0].id.lower() in M.INDEX):
            out.append((node.targets[0].id, node.value.value))
    return out


def test_every_name_has_its_constant_and_every_constant_its_name():
    consts = _constants()
    assert [n for n, _ in consts] == [n.upper() for n in M.NAMES]
    assert [i for _, i in consts] == list(range(len(M.NAMES)))
    for name, i in consts:
        assert getattr(M, name) == i == M.INDEX[name.lower()]


def test_counter_lists_are_wide_enough_for_the_histograms_after_the_names():
    assert M.HIST == len(M.NAMES)
    assert M.H_WARM == M.HIST and M.WIDTH > M.H_API
