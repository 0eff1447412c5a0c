"""The line a training starts with, saying what its files were read as, and the warning for 1D arrays that look
stored samples last (300 points of 13 samples, transposed, trained silently as 300 samples of 13 points)."""

from __future__ import annotations

import re
import warnings

import numpy as np
import pytest

from opformer.cli import main
from opformer.train.config import apply_overrides, load_preset
from opformer.train.run import prepare_run

from .conftest import TINY_MODEL


def _start(preset: str, over: dict, capsys, model=None):
    cfg = load_preset(preset)
    if model is not None:
        cfg["model"] = dict(model)
    cfg, explicit = apply_overrides(cfg, over)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        prepare_run(cfg, frozenset(explicit), announce=True)
    lines = capsys.readouterr().out.splitlines()
    return [ln for ln in lines if ln.startswith("data:")], [str(w.message) for w in caught]


def test_1d_arrays_with_fewer_points_than_samples_are_said_and_warned(tmp_path, capsys, one_thread):
    x = np.random.default_rng(0).standard_normal((300, 13)).astype(np.float32)
    np.savez(tmp_path / "last1d.npz", x=x, y=np.cumsum(x, 1))
    lines, warned = _start("burgers-quick", {"data.path": str(tmp_path / "last1d.npz"), "data.keys": "x,y"}, capsys,
                          TINY_MODEL)
    assert len(lines) == 1, lines
    m = re.fullmatch(rf"data: 300 samples of 13 points from {re.escape(str(tmp_path / 'last1d.npz'))} \(x -> y\); "
                     r"train (\d+), val (\d+), test (\d+)", lines[0])
    assert m and sum(map(int, m.groups())) == 300, lines[0]
    layout = [w for w in warned if "samples last" in w]
    assert layout == [f"data: {tmp_path / 'last1d.npz'}: 'x' (300, 13) reads as 300 samples of 13 points (samples "
                      "first); if it holds 13 samples of 300 points stored samples last, transpose it (a.T)"], warned
    # samples first, more points than samples: said, not warned
    np.savez(tmp_path / "first.npz", x=x.T[:12], y=x.T[:12])
    lines, warned = _start("burgers-quick", {"data.path": str(tmp_path / "first.npz"), "data.keys": "x,y",
                                            "n_val": 2, "n_test": 2}, capsys, TINY_MODEL)
    assert lines == [f"data: 12 samples of 300 points from {tmp_path / 'first.npz'} (x -> y); train 8, val 2, "
                     "test 2"], lines
    assert not [w for w in warned if "samples last" in w]


def test_2d_and_trajectory_data_are_said_with_their_grids(darcy_files, ns_file, capsys, one_thread):
    train, test = darcy_files
    lines, _ = _start("darcy-fno-cpu", {"data.path": str(train), "data.test_path": str(test), "resolution": 15,
                                        "n_val": 2}, capsys)
    assert len(lines) == 1 and re.fullmatch(
        rf"data: \d+ samples of 15 x 15 points from {re.escape(str(train))} \(test split from "
        rf"{re.escape(str(test))}\) \(coeff -> sol\); train \d+, val 2, test \d+", lines[0]), lines
    lines, _ = _start("ns-fno", {"data.path": str(ns_file), "n_val": 2, "n_test": 2}, capsys)
    assert len(lines) == 1 and re.fullmatch(
        rf"data: 20 trajectories of 5 snapshots on 16 x 16 points from {re.escape(str(ns_file))} \(w\); "
        r"train 16, val 2, test 2 trajectories \(\d+ training pairs\)", lines[0]), lines


def test_the_training_command_starts_with_the_data_line(tmp_path, capsys, one_thread):
    x = np.random.default_rng(1).standard_normal((40, 13)).astype(np.float32)
    np.savez(tmp_path / "last1d.npz", x=x, y=np.cumsum(x, 1))
    assert main(["train", "burgers-quick", "--data", str(tmp_path / "last1d.npz"), "--keys", "x,y", "--epochs", "1",
                 "--n-val", "4", "--n-test", "4", "--out", str(tmp_path / "run"), "--no-progress",
                 "--d-model", "16", "--num-layers", "1", "--n-heads", "2"]) == 0
    out, err = capsys.readouterr()
    said = [ln for ln in out.splitlines() if ln.startswith("data:")]
    assert said == [f"data: 40 samples of 13 points from {tmp_path / 'last1d.npz'} (x -> y); train 32, val 4, "
                    "test 4"], out
    warned = [ln for ln in err.splitlines() if "samples last" in ln]
    assert len(warned) == 1 and warned[0].startswith("opformer: warning: data: "), err


def test_a_bundle_that_records_no_files_is_said_without_them():
    """A task of the user's own may return a Bundle without ``files``: the line names the config's file, or none."""
    from types import SimpleNamespace

    from opformer.train.run import data_line

    ds = {"train": [0] * 5, "val": [0] * 2}
    bundle = SimpleNamespace(datasets=ds, files={}, input_grid=(64,), target_grid=(64,), info={})
    run = SimpleNamespace(data=SimpleNamespace(path=None, keys=None), task=SimpleNamespace(default_keys=("a", "u")))
    assert data_line(run, bundle) == "data: 7 samples of 64 points from the task's data (a -> u); train 5, val 2"
    run.data.path = "/somewhere/mine.npz"
    assert data_line(run, bundle).startswith("data: 7 samples of 64 points from ")
    assert "mine.npz (a -> u)" in data_line(run, bundle)


def test_the_inverse_task_says_its_mapping_input_first(darcy_files, capsys, one_thread):
    """The inverse Darcy task's keys are (coefficient, solution) as the files store them, its input the solution: the
    line said "(coeff -> sol)", the forward map."""
    train, test = darcy_files
    lines, _ = _start("darcy-inverse-fno-cpu", {"data.path": str(train), "data.test_path": str(test),
                                                "resolution": 15, "n_val": 2}, capsys)
    assert len(lines) == 1 and "(sol -> coeff)" in lines[0], lines
