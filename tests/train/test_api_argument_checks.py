"""The numbers given to the Python entry points (evaluate, predict, rollout_file) are checked before anything is
loaded: a string, a float or a bool is refused in one line naming the argument, as the command line's flags are;
numpy integers are taken."""

import re

import numpy as np
import pytest

from opformer.cli import main
from opformer.config import SettingError
from opformer.train.rollout import rollout_file
from opformer.train.run import evaluate, predict

from .conftest import one_line_error
from .test_eval_predict_paths import burgers_runs  # noqa: F401 (a fixture)


@pytest.fixture(scope="module")
def burgers_run(burgers_runs):
    """A run directory of the untrained tiny 1D Burgers model (n = 64)."""
    return burgers_runs[0]


@pytest.fixture(scope="module")
def pairs(tmp_path_factory):
    """6 input, target pairs on 64 points, keys x, y."""
    path = tmp_path_factory.mktemp("pairs") / "pairs.npz"
    rng = np.random.default_rng(0)
    np.savez(path, x=rng.standard_normal((6, 64)), y=rng.standard_normal((6, 64)))
    return path


BAD = [("17", "'17'"), (17.0, "17.0"), (True, "True"), (0, "0"), (-4, "-4"), (np.int64(-2), "-2"),
       ([32], "[32]")]


#: (an integer resolution below 1 is refused once the stored grid is read, with its sizes:
#: test_resolution_possible_sizes.py)
NO_INTEGER = [(value, shown) for value, shown in BAD if not isinstance(value, (int, np.integer)) or value is True]


@pytest.mark.parametrize("name, value, shown", [("batch_size", *case) for case in BAD]
                         + [("resolution", *case) for case in NO_INTEGER])
def test_evaluate_and_predict_refuse_a_number_that_is_no_positive_integer(burgers_run, pairs, tmp_path, name,
                                                                          value, shown):
    for call in (lambda: evaluate(burgers_run, data=str(pairs), keys=["x", "y"], out=tmp_path / "ev", **{name: value}),
                 lambda: predict(burgers_run, data=str(pairs), keys=["x", "y"], out=tmp_path / "p.npz",
                                 **{name: value})):
        with pytest.raises(SettingError, match="^" + re.escape(f"{name} must be a positive integer, got {shown}") + "$"):
            call()
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("value, shown", [("2", "'2'"), (1.0, "1.0"), (False, "False"), (-1, "-1")])
def test_evaluate_refuses_a_plot_count_that_is_no_integer(burgers_run, pairs, tmp_path, value, shown):
    with pytest.raises(SettingError, match=rf"^plot_samples must be an integer >= 0, got {shown}$"):
        evaluate(burgers_run, data=str(pairs), keys=["x", "y"], out=tmp_path / "ev", plot_samples=value)
    assert list(tmp_path.iterdir()) == []


def test_numpy_integers_are_taken(burgers_run, pairs, tmp_path):
    m = evaluate(burgers_run, data=str(pairs), keys=["x", "y"], out=tmp_path / "ev", resolution=np.int64(32),
                 batch_size=np.int32(4), plot_samples=np.int64(0))
    assert m["resolution"] == [32] and m["n_test"] == 6
    s = predict(burgers_run, data=str(pairs), keys=["x", "y"], out=tmp_path / "p.npz", resolution=np.int64(32),
                batch_size=np.int64(4))
    assert s["n"] == 6


def test_the_command_line_names_the_flag(burgers_run, pairs, tmp_path, capsys):
    for cmd in (["eval", str(burgers_run), "--out", str(tmp_path / "ev")],
                ["predict", str(burgers_run), "--out", str(tmp_path / "p.npz")]):
        assert main([*cmd, "--data", str(pairs), "--keys", "x,y", "--resolution", "0"]) == 2
        line = one_line_error(capsys.readouterr().err)
        assert line == "opformer: error: --resolution must be a positive integer, got 0; possible: 64, 32, 16, 8, 4"
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("name, value, shown", [("samples", "1", "'1'"), ("samples", 1.0, "1.0"),
                                                ("samples", True, "True"), ("show", "0", "'0'"),
                                                ("show", False, "False")])
def test_rollout_file_refuses_counts_that_are_no_integers(tmp_path, name, value, shown):
    what = "a positive integer" if name == "samples" else "an integer >= 0"
    with pytest.raises(SettingError, match=rf"^{name} must be {what}, got {shown}$"):
        rollout_file(tmp_path / "model", data=tmp_path / "data.h5", out=tmp_path / "r", **{name: value})
    assert list(tmp_path.iterdir()) == []
