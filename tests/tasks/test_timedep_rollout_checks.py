"""``opformer rollout`` on a user's own 1D trajectory files: the initial state at a leading t = 0 is checked once and
scored 0, the plots name the file from its path, and a file or an argument the model cannot roll out is refused in
one line before any note is printed or any file written."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

import opformer
from opformer.cli import main

TIMES = np.array([0.0, 0.25, 0.5, 0.75, 1.0])


def _trajectories(n: int = 9, k: int = 5, points: int = 16, seed: int = 0) -> np.ndarray:
    """Float64 trajectories (n, k, points) whose values float32 does not hold exactly."""
    rng = np.random.default_rng(seed)
    x = np.arange(points) / points
    a = rng.normal(size=(n, 1, 1)) + 0.1
    return a * np.sin(2 * np.pi * (x[None, None] - 0.1 * np.arange(k)[None, :, None])) + 1 / 3


def _model(tmp_path, history: int = 1, times: np.ndarray = TIMES):
    """An untrained burgers-traj FNO of the given history, saved from a run on ``train.npz`` (times 'tt', by default
    0.25 apart): enough for the shapes, the times and the checks."""
    from opformer.tasks.artifact import Predictor
    from opformer.train.config import apply_overrides, load_preset
    from opformer.train.run import prepare_run

    torch.set_num_threads(1)
    train = tmp_path / "train.npz"
    np.savez(train, field=_trajectories(), tt=times)
    cfg, explicit = apply_overrides(load_preset("burgers-traj-fno"), {
        "data.path": str(train), "keys": "field", "time_key": "tt", "n_test": 2, "n_val": 2, "width": 4, "modes": 4,
        "history": history})
    run, _, operator, artifact, _ = prepare_run(cfg, frozenset(explicit))
    path = tmp_path / f"model-h{history}"
    Predictor(operator, artifact, run.task, run.options).save_pretrained(path)
    return path


def test_a_leading_zero_time_checks_u0_once_and_its_error_is_zero(tmp_path, array_checks):
    from opformer.train.rollout import rollout_file

    model = _model(tmp_path)
    data = tmp_path / "other.npz"
    u = _trajectories(5, seed=1)
    np.savez(data, field=u, tt=TIMES)
    checked = array_checks
    m = rollout_file(model, data=data, times=[0.0, 0.5, 1.5], out=tmp_path / "r")
    assert checked.count("u0") == 1
    assert m["times"] == [0.0, 0.5, 1.5]
    assert m["rel_l2"][0] == 0.0 and m["rel_l2"][2] is None  # u(t_0) itself; no truth at 1.5
    pred = np.load(tmp_path / "r" / "predictions.npz")["prediction"]
    np.testing.assert_array_equal(pred[:, 0], u[:, 0].astype(np.float32))
    # the same predictions as without the leading 0
    later = rollout_file(model, data=data, times=[0.5, 1.5], out=tmp_path / "r2")
    np.testing.assert_array_equal(np.load(tmp_path / "r2" / "predictions.npz")["prediction"], pred[:, 1:])
    assert later["rel_l2"] == m["rel_l2"][1:]
    # times that are not ascending are still refused, the leading 0 included
    for bad in ([0.0, 0.0, 0.5], [0.0, -1.0]):
        with pytest.raises(opformer.config.ConfigError, match="times must be finite ascending values"):
            rollout_file(model, data=data, times=bad, out=tmp_path / "r3")
    assert not (tmp_path / "r3").exists()


def test_the_plot_titles_take_the_file_name_from_its_path(tmp_path, monkeypatch):
    from matplotlib.figure import Figure

    from opformer.train.rollout import rollout_file

    model = _model(tmp_path)
    data = tmp_path / "runs of may.npz"  # " of " in the name: no label string to split
    np.savez(data, field=_trajectories(9, seed=2), tt=TIMES)
    titles = {}
    real = Figure.savefig

    def record(fig, fname, *args, **kwargs):
        name = getattr(fname, "name", str(fname)).rsplit("/", 1)[-1]
        titles[name] = ([ax.get_title() for ax in fig.axes], fig._suptitle.get_text() if fig._suptitle else "")
        return real(fig, fname, *args, **kwargs)

    monkeypatch.setattr(Figure, "savefig", record)
    rollout_file(model, data=data, out=tmp_path / "r", show=1)
    assert titles["error_vs_time.png"][0][0] == "direct rollout, mean over the trajectories (runs of may.npz)"
    assert titles["snapshots.png"][1] == "trajectory 1 of runs of may.npz, direct rollout"


def test_a_file_of_one_snapshot_is_refused_in_one_line_unless_times_are_given(tmp_path, capsys):
    model = _model(tmp_path)
    data = tmp_path / "first.npz"
    np.savez(data, field=_trajectories(4, k=1, seed=3), tt=TIMES[:1])
    out = tmp_path / "r"
    assert main(["rollout", str(model), "--data", str(data), "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert "first.npz: key 'field' holds 1 snapshot per trajectory, shape (4, 1, 16): no later time to roll out " \
           "to; give --times" in err
    assert not out.exists()
    assert main(["rollout", str(model), "--data", str(data), "--out", str(out), "--times", "0.5,1"]) == 0
    assert json.loads((out / "rollout.json").read_text())["rel_l2"] == [None, None]  # predictions only


@pytest.mark.parametrize("args, message", [
    (["--mode", "direct"], "a model with --history 2 rolls out one snapshot at a time: use --mode autoregressive"),
    (["--step", "0.5"], "--step of a model with history 2 is its training snapshot spacing 0.25"),
    (["--step", "0"], "--step must be a finite number > 0, got 0.0"),
    (["--times", "1,0.5"], "--times must be finite ascending values > 0"),
])
def test_a_history_model_refuses_its_arguments_before_any_note(tmp_path, capsys, args, message):
    model = _model(tmp_path, history=2)
    data = tmp_path / "no_times.npz"  # no times: the rollout notes that it takes the training times
    np.savez(data, field=_trajectories(3, seed=4))
    out = tmp_path / "r"
    assert main(["rollout", str(model), "--data", str(data), "--out", str(out), *args]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and message in err, err
    assert not out.exists()


def test_a_history_model_refuses_a_file_at_another_spacing_naming_its_times(tmp_path, capsys):
    model = _model(tmp_path, history=2)
    out = tmp_path / "r"
    wide = tmp_path / "wide.npz"  # spaced 0.5: the model's input window would be spaced twice its training's
    np.savez(wide, field=_trajectories(3, seed=5), tt=2 * TIMES)
    assert main(["rollout", str(model), "--data", str(wide), "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert ("wide.npz: its first 2 snapshots are 0.5 apart (times 'tt'); this model with --history 2 was trained on "
            "snapshots 0.25 apart") in err
    uneven = tmp_path / "uneven.npz"  # the first two at the training spacing, later ones off it, no --times
    np.savez(uneven, field=_trajectories(3, seed=6), tt=np.array([0.0, 0.25, 0.6, 0.75, 1.0]))
    assert main(["rollout", str(model), "--data", str(uneven), "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert "uneven.npz: its snapshot time 0.6 (times 'tt') is not a multiple of the step 0.25" in err
    assert "--times must" not in err  # no --times was given
    assert not out.exists()
    # at the training spacing it rolls out
    assert main(["rollout", str(model), "--data", str(uneven), "--out", str(out), "--times", "0.5,0.75"]) == 0


def test_a_refused_rollout_of_a_model_trained_at_uneven_times_prints_only_the_refusal(tmp_path, capsys):
    model = _model(tmp_path, times=np.array([0.0, 0.1, 0.15, 0.5, 1.0]))
    data = tmp_path / "train.npz"
    out = tmp_path / "r"
    assert main(["rollout", str(model), "--data", str(data), "--out", str(out), "--mode", "autoregressive",
                 "--times", "1e300"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "model calls of autoregressive steps" in err, err
    assert not out.exists()
    # a rollout that runs still says which steps it took
    assert main(["rollout", str(model), "--data", str(data), "--out", str(out), "--mode", "autoregressive"]) == 0
    assert "the training snapshots are unevenly spaced: the autoregressive steps are 0.05" in capsys.readouterr().err


def test_keys_naming_two_arrays_is_refused_as_training_refuses_it(tmp_path, capsys):
    model = _model(tmp_path)
    out = tmp_path / "r"
    assert main(["rollout", str(model), "--data", str(tmp_path / "train.npz"), "--keys", "field,tt", "--out",
                 str(out)]) == 2
    assert capsys.readouterr().err == ("opformer: error: --keys needs the one trajectory array of the file, got "
                                       "field,tt\n")
    assert not out.exists()


def test_the_training_file_of_a_run_with_test_data_is_said_to_hold_no_test_trajectory(tmp_path, capsys):
    torch.set_num_threads(1)
    train, test = tmp_path / "train.npz", tmp_path / "test.npz"
    np.savez(train, field=_trajectories(6, seed=7), tt=TIMES)
    np.savez(test, field=_trajectories(3, seed=8), tt=TIMES)
    assert main(["train", "burgers-traj-fno", "--data", str(train), "--test-data", str(test), "--keys", "field",
                 "--time-key", "tt", "--epochs", "1", "--width", "4", "--modes", "4", "--n-val", "2",
                 "--out", str(tmp_path / "run"), "--no-progress", "--threads", "1"]) == 0
    capsys.readouterr()
    model = str(tmp_path / "run" / "checkpoints" / "best.ckpt")
    assert main(["rollout", model, "--data", str(train), "--out", str(tmp_path / "r")]) == 0
    captured = capsys.readouterr()
    assert (f"{train} is the file this model was trained on and holds none of its test trajectories (they are in "
            f"{test}, --test-data): the errors are on its training and validation trajectories") in captured.err
    assert "6 trajectories (the run's training and validation trajectories)" in captured.out
    assert json.loads((tmp_path / "r" / "rollout.json").read_text())["trajectories"] == \
        "the run's training and validation trajectories"
    # its test file: every trajectory, no note
    assert main(["rollout", model, "--data", str(test), "--out", str(tmp_path / "r2")]) == 0
    captured = capsys.readouterr()
    assert "trained on" not in captured.err and "3 trajectories (all trajectories of the file)" in captured.out


def test_rollout_file_refuses_a_bad_mode_or_text_times_before_reading_the_file(tmp_path):
    from opformer.config import SettingError
    from opformer.train.rollout import rollout_file

    model = _model(tmp_path)
    missing = tmp_path / "missing.npz"  # never opened: the arguments are refused first
    with pytest.raises(SettingError, match=r"^mode must be direct, autoregressive or mixed, got 'jump'$"):
        rollout_file(model, data=missing, mode="jump", out=tmp_path / "r")
    with pytest.raises(SettingError, match=r"^times must be numbers \(finite, ascending, > 0\), got \['a', 'b'\]$"):
        rollout_file(model, data=missing, times=["a", "b"], out=tmp_path / "r")
    assert not (tmp_path / "r").exists()
