"""The README's Quick start is exactly two commands, and CI runs the test one."""

import pathlib
import re
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
# serve.sh and test.sh both pip-install into .venv: one test process runs them, one at a
# time (scripts/test.sh runs pytest-xdist with --dist loadgroup)
pytestmark = pytest.mark.xdist_group("venv")


def quickstart_commands():
    text = (ROOT / "README.md").read_text()
    section = text.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    block = re.search(r"```sh\n(.*?)```", section, re.S).group(1)
    return [line.split("#")[0].strip() for line in block.splitlines() if line.strip()]


def test_readme_has_exactly_two_commands_serve_and_test():
    cmds = quickstart_commands()
    assert len(cmds) == 2, cmds
    assert cmds[0].startswith("bash scripts/serve.sh") and cmds[1] == "bash scripts/test.sh"


def test_ci_runs_the_readme_test_command():
    ci = (ROOT / ".ci" / "run").read_text()
    assert quickstart_commands()[1] in ci


def test_serve_command_installs_and_starts_pulsys():
    # same script, asked for its version instead of serving forever
    p = subprocess.run(["bash", "scripts/serve.sh", "--version"], cwd=ROOT, capture_output=True,
                       text=True, timeout=600)
    assert p.returncode == 0, p.stderr
    assert p.stdout.startswith("pulsys "), p.stdout


def test_test_script_fails_when_no_test_is_collected():
    p = subprocess.run(["bash", "scripts/test.sh", "-q", "-k", "no_test_has_this_name_xyz",
                        "tests/architecture/test_quickstart.py"], cwd=ROOT, capture_output=True,
                       text=True, timeout=600)
    assert p.returncode != 0 and "collected no tests" in p.stderr, (p.returncode, p.stdout, p.stderr)
