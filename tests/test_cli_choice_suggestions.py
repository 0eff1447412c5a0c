"""A misspelt sub-command or choice gets the nearest one suggested (argparse of Python 3.11 lists the choices only)."""

import pytest

from opformer.cli import main


@pytest.mark.parametrize("argv,near", [(["trian"], "'train'"), (["data", "burgrs"], "'burgers'"),
                                       (["rollout", "m.ckpt", "--mode", "direc"], "'direct'")])
def test_the_nearest_choice_is_suggested(capsys, argv, near):
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert f"; did you mean {near}? (`" in err and err.count("\n") == 1


def test_nothing_near_adds_nothing(capsys):
    with pytest.raises(SystemExit):
        main(["xyz"])
    assert "did you mean" not in capsys.readouterr().err


def test_a_number_list_starting_negative_is_a_flags_value(capsys):
    """``--times -1,2`` was taken for an option ("expected one argument"); it now reaches the command's own checks,
    as ``--times=-1,2`` did."""
    from opformer.cli import _joined_number_lists

    assert _joined_number_lists(["rollout", "m", "--times", "-1,2", "--step", "-0.5"]) == \
        ["rollout", "m", "--times=-1,2", "--step", "-0.5"]
    assert _joined_number_lists(["--times", "-1e-3,2.5E+1"]) == ["--times=-1e-3,2.5E+1"]
    assert _joined_number_lists(["--out", "-x,y"]) == ["--out", "-x,y"]  # not numbers: left to argparse
    with pytest.raises(SystemExit):
        main(["rollout", "missing.ckpt", "--times", "-1,2"])
    err = capsys.readouterr().err
    assert "expected one argument" not in err and "--data" in err
