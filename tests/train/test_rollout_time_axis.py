"""A run trained on a file of vorticity stored time last with the initial states apart (``--time-axis -1
--initial-key a``, the layout of the FNO paper's Navier-Stokes MAT-files) keeps that layout: ``opformer rollout``,
``opformer eval`` and ``opformer.load`` read the same file and another one of that layout without the flags, and
take them to read a file of the standard layout; the same data in the standard layout trains on the same split
with the same normalizer."""

from __future__ import annotations

import json

import h5py
import numpy as np
import pytest
import scipy.io

import opformer
from opformer.cli import main
from opformer.config import DataConfig
from opformer.tasks import get_task
from opformer.tasks.trajectories import TrajectoryOptions

TIMES = np.array([0.1, 0.2, 0.3, 0.4, 0.5])


def _vorticity(n_traj: int = 6, n: int = 8, times=TIMES, nu: float = 1e-3) -> np.ndarray:
    """Decaying Taylor-Green vorticity (trajectories, times, n, n), one amplitude per trajectory."""
    x = np.arange(n) / n
    amp = 1.0 + 0.2 * np.arange(n_traj)
    field = np.sin(2 * np.pi * x)[:, None] * np.sin(2 * np.pi * x)[None, :]
    decay = np.exp(-8 * np.pi ** 2 * nu * np.asarray(times))
    return amp[:, None, None, None] * decay[None, :, None, None] * field[None, None]


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """The same trajectories as a MATLAB v5 file (a, u time last, t (1, T)), an HDF5 file of that layout and an
    .npz of the standard layout (w (samples, T+1, n, n), t from 0)."""
    root = tmp_path_factory.mktemp("layouts")
    a = _vorticity(times=[0.0])[:, 0]
    u = np.moveaxis(_vorticity(), 1, -1)
    scipy.io.savemat(root / "ns_V1e-3.mat", {"a": a, "u": u, "t": TIMES[None, :]})
    with h5py.File(root / "other.h5", "w") as h5:
        h5["a"], h5["u"], h5["t"] = a, u, TIMES
    np.savez(root / "standard.npz", w=_vorticity(times=np.concatenate([[0.0], TIMES])),
             t=np.concatenate([[0.0], TIMES]))
    return root


TINY = ["--epochs", "1", "--width", "4", "--modes", "2", "--n-test", "2", "--n-val", "1", "--batch-size", "8",
        "--no-progress"]


@pytest.fixture(scope="module")
def run(files):
    out = files / "run"
    assert main(["train", "ns-fno", "--data", str(files / "ns_V1e-3.mat"), "--keys", "u", "--initial-key", "a",
                 "--time-axis", "-1", "--out", str(out), *TINY]) == 0
    return out


def test_the_layout_is_stored_with_the_run_and_rollout_reuses_it(files, run, capsys):
    predictor = opformer.load(run)
    assert (predictor.options.time_axis, predictor.options.initial_key) == (-1, "a")
    assert predictor.artifact["info"]["times"] == [0.0, *TIMES.tolist()]
    capsys.readouterr()
    assert main(["rollout", str(run), "--data", str(files / "ns_V1e-3.mat"), "--out", str(files / "r-own")]) == 0
    own = json.loads((files / "r-own" / "rollout.json").read_text())
    assert own["times"] == TIMES.tolist() and own["n"] == 2  # the run's test trajectories
    assert main(["rollout", str(run), "--data", str(files / "other.h5"), "--out", str(files / "r-h5")]) == 0
    other = json.loads((files / "r-h5" / "rollout.json").read_text())
    assert other["times"] == TIMES.tolist() and other["n"] == 6
    # a file of the standard layout: the flags override the run's layout, and it scores alike
    assert main(["rollout", str(run), "--data", str(files / "standard.npz"), "--keys", "w", "--time-axis", "1",
                 "--initial-key", "none", "--out", str(files / "r-std")]) == 0
    std = json.loads((files / "r-std" / "rollout.json").read_text())
    assert std["times"] == other["times"] and std["rel_l2"] == other["rel_l2"]
    pred = np.load(files / "r-h5" / "predictions.npz")["prediction"]
    assert pred.shape == (6, 5, 8, 8)
    np.testing.assert_array_equal(pred, np.load(files / "r-std" / "predictions.npz")["prediction"])


def test_eval_reads_files_of_the_run_layout_and_takes_the_flags_for_others(files, run, capsys):
    assert main(["eval", str(run), "--data", str(files / "other.h5"), "--out", str(files / "e-h5")]) == 0
    assert main(["eval", str(run), "--data", str(files / "standard.npz"), "--keys", "w", "--time-axis", "1",
                 "--initial-key", "none", "--out", str(files / "e-std")]) == 0
    h5, std = (json.loads((files / name / "metrics.json").read_text()) for name in ("e-h5", "e-std"))
    assert h5["test_rel_l2"] == std["test_rel_l2"] and h5["n_test"] == std["n_test"] == 30
    capsys.readouterr()
    # without the flags the standard file is read in the run's layout: refused in one line
    assert main(["eval", str(run), "--data", str(files / "standard.npz"), "--keys", "w",
                 "--out", str(files / "e-bad")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no array 'a' (--initial-key)" in err[0]
    assert main(["eval", str(run), "--data", str(files / "other.h5"), "--time-axis", "x",
                 "--out", str(files / "e-bad")]) == 2
    assert "--time-axis: expected an integer or 'last', got 'x'" in capsys.readouterr().err


def test_the_standard_layout_gives_the_same_split_and_normalizer(files, run):
    task = get_task("ns")
    moved = task.load(DataConfig(keys=["u"], n_test=2, n_val=1), TrajectoryOptions(time_axis=-1, initial_key="a"),
                      {"train": files / "ns_V1e-3.mat", "test": None})
    plain = task.load(DataConfig(keys=["w"], n_test=2, n_val=1), TrajectoryOptions(),
                      {"train": files / "standard.npz", "test": None})
    assert moved.info["times"] == plain.info["times"]
    for split in ("train", "val", "test"):
        a, b = moved.datasets[split], plain.datasets[split]
        np.testing.assert_array_equal(a.origin[0], b.origin[0])
        assert torch_equal(a.traj, b.traj) and torch_equal(a.pairs, b.pairs) and torch_equal(a.times, b.times)
    for name in ("input", "target"):
        assert moved.normalizers[name].describe() == plain.normalizers[name].describe()
        assert torch_equal(moved.normalizers[name].mean, plain.normalizers[name].mean)
        assert torch_equal(moved.normalizers[name].std, plain.normalizers[name].std)
    # and a training on it stores that normalizer and those test trajectories
    out = files / "run-std"
    assert main(["train", "ns-fno", "--data", str(files / "standard.npz"), "--keys", "w", "--out", str(out),
                 *TINY]) == 0
    trained, again = opformer.load(run), opformer.load(out)
    for name in ("input_normalizer", "target_normalizer"):
        assert torch_equal(getattr(trained.operator, name).mean, getattr(again.operator, name).mean)
        assert torch_equal(getattr(trained.operator, name).std, getattr(again.operator, name).std)
    metrics = [json.loads((path / "metrics.json").read_text()) for path in (run, out)]
    assert metrics[0]["trajectories"] == metrics[1]["trajectories"]


def torch_equal(a, b) -> bool:
    import torch

    return bool(torch.equal(torch.as_tensor(a), torch.as_tensor(b)))
