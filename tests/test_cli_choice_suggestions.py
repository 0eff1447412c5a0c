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
