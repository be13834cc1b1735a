"""`pulsys` (serve) warns of PULSYS_* variables that are no setting: a misspelt one would
otherwise change nothing and say nothing."""

from pulsys.cli.serve import main, unknown_settings


def test_a_misspelt_setting_is_named_on_stderr(capsys):
    code = main(["--listeners", "0"], {"PULSYS_LISTNERS": "2", "PULSYS_LISTENERS": "3",
                                       "PULSYS_BENCH_HOME": "/x", "HOME": "/"})
    err = capsys.readouterr().err
    assert code == 2 and "--listeners" in err                   # the bad flag still fails as before
    assert "PULSYS_LISTNERS is not a setting" in err
    assert "PULSYS_LISTENERS is not" not in err and "PULSYS_BENCH_HOME" not in err


def test_every_setting_name_is_known():
    from pulsys.config import SETTINGS
    assert unknown_settings({s.env: "1" for s in SETTINGS}) == []
