"""A resolution of 0 or below given to eval or predict is refused with the resolutions the stored grid has, as any
other resolution that is no stride of it ("possible: 256, 128, ..."); a value that is no integer is still refused
before anything is read, and nothing is written either way."""

import re

import numpy as np
import pytest

from opformer.cli import main
from opformer.config import SettingError
from opformer.train.run import evaluate, predict

from .conftest import one_line_error
from .test_api_argument_checks import pairs  # noqa: F401 (a fixture: 6 pairs on 64 points, keys x, y)
from .test_eval_predict_paths import burgers_runs  # noqa: F401 (a fixture)

#: the strides of the 256-point grid of the tiny Burgers file that the run trained on, and of a 64-point file
ON_256 = "possible: 256, 128, 64, 32, 16, 8, 4"
ON_64 = "possible: 64, 32, 16, 8, 4"


@pytest.mark.parametrize("value", ["0", "-3"])
def test_the_command_line_lists_the_possible_resolutions_for_zero_and_below(burgers_runs, pairs, tmp_path, capsys,
                                                                            value):
    """(before: "--resolution must be a positive integer, got 0" alone, while --resolution 100 listed them)"""
    run = burgers_runs[0]
    for cmd, listed in ((["eval", str(run), "--out", str(tmp_path / "ev")], ON_256),  # the run's own test split
                        (["eval", str(run), "--out", str(tmp_path / "ev"), "--data", str(pairs), "--keys", "x,y"],
                         ON_64),
                        (["predict", str(run), "--out", str(tmp_path / "p.npz"), "--data", str(pairs), "--keys",
                          "x,y"], ON_64)):
        assert main([*cmd, "--resolution", value]) == 2
        line = one_line_error(capsys.readouterr().err)
        assert line == f"opformer: error: --resolution must be a positive integer, got {value}; {listed}", line
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("value", [0, -4, np.int64(-2)])
def test_the_python_entry_points_name_the_argument_and_list_the_resolutions(burgers_runs, pairs, tmp_path, value):
    run = burgers_runs[0]
    want = "^" + re.escape(f"resolution must be a positive integer, got {int(value)}; {ON_64}") + "$"
    with pytest.raises(SettingError, match=want):
        evaluate(run, data=str(pairs), keys=["x", "y"], out=tmp_path / "ev", resolution=value)
    with pytest.raises(SettingError, match=want):
        predict(run, data=str(pairs), keys=["x", "y"], out=tmp_path / "p.npz", resolution=value)
    with pytest.raises(SettingError, match=re.escape(ON_256)):
        evaluate(run, out=tmp_path / "ev", resolution=value)
    assert list(tmp_path.iterdir()) == []


def test_a_value_that_is_no_integer_is_refused_before_the_model_is_read(burgers_runs, tmp_path, monkeypatch):
    import opformer.train.run as run_module

    monkeypatch.setattr(run_module, "load", lambda *a, **k: pytest.fail("the model was read"))
    for value, shown in (("0", "'0'"), (0.0, "0.0"), (False, "False")):
        with pytest.raises(SettingError, match="^" + re.escape(f"resolution must be a positive integer, got {shown}")
                           + "$"):
            evaluate(burgers_runs[0], out=tmp_path / "ev", resolution=value)
