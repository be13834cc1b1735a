"""The command table of pulsys/cli: every command runs its module's main, usage errors
are one line naming the command, and the server's own flags stay the default."""

import importlib

import pytest

from pulsys import cli


@pytest.mark.parametrize("command", sorted(cli.COMMANDS))
def test_every_command_has_a_main_and_a_help_naming_it(command, capsys):
    mod = importlib.import_module("pulsys.cli." + cli.COMMANDS[command])
    assert callable(mod.main)
    with pytest.raises(SystemExit) as e:
        cli.main([command, "--help"], {})
    assert e.value.code == 0
    assert "usage: pulsys %s" % command in capsys.readouterr().out


@pytest.mark.parametrize("command", sorted(cli.COMMANDS))
def test_a_usage_error_is_one_line_naming_the_command(command, capsys):
    with pytest.raises(SystemExit) as e:
        cli.main([command, "--no-such-flag"], {})
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("pulsys %s: error: " % command), err
    assert "(see pulsys %s --help)" % command in err


def test_anything_else_is_the_server_and_its_flags(capsys):
    with pytest.raises(SystemExit) as e:
        cli.main(["--no-such-flag"], {})
    assert e.value.code == 2
    assert capsys.readouterr().err == "pulsys: error: unrecognized arguments: --no-such-flag (see pulsys --help)\n"
    assert cli.main(["--listen", "nowhere"], {}) == 2       # a bad value: one line, exit 2
    assert capsys.readouterr().err.startswith("pulsys: error: ")
