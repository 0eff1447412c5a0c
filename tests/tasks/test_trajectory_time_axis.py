"""Trajectory files of another layout than (samples, K+1, *grid): the snapshots on another axis (``--time-axis``, e.g.
the last one, as MATLAB files of Navier-Stokes vorticity often hold them) and the initial states in an array of
their own (``--initial-key``), read as the standard layout with the initial states at t = 0; the refusals of a
layout that does not fit, one line each, and the hint at a file that looks stored with its snapshots last."""

from __future__ import annotations

import h5py
import numpy as np
import pytest
import scipy.io

from opformer.cli import main
from opformer.config import ConfigError, DataConfig
from opformer.data import DataError
from opformer.tasks import get_task
from opformer.tasks.trajectories import TrajectoryOptions

N_TRAJ, N, NU = 6, 8, 1e-3
TIMES = np.array([0.05, 0.1, 0.2, 0.3, 0.45])  # t_1..t_T, all > 0 (t_0 = 0 is the initial state's)


def taylor_green(times) -> np.ndarray:
    """Decaying Taylor-Green vorticity A_k sin(2 pi x) sin(2 pi y) exp(-8 pi^2 nu t) of trajectory k at ``times``:
    (trajectories, times, n, n)."""
    x = np.arange(N) / N
    amp = 1.0 + 0.25 * np.arange(N_TRAJ)
    field = np.sin(2 * np.pi * x)[:, None] * np.sin(2 * np.pi * x)[None, :]
    decay = np.exp(-8 * np.pi ** 2 * NU * np.asarray(times, dtype=np.float64))
    return amp[:, None, None, None] * decay[None, :, None, None] * field[None, None]


def write_time_last(path, kind: str, *, t=TIMES, a=None, u=None, extra=None) -> None:
    """A file of the layout ``a`` (samples, n, n) at t = 0, ``u`` (samples, n, n, T) at ``t`` (1, T): a MATLAB v5
    file, a MATLAB v7.3 file (HDF5 with the axes reversed) or a plain HDF5 file."""
    a = taylor_green([0.0])[:, 0] if a is None else a
    u = np.moveaxis(taylor_green(t), 1, -1) if u is None else u
    arrays = {"a": a, "u": u, "t": np.asarray(t, dtype=np.float64)[None, :], **(extra or {})}
    if kind == "mat-v5":
        scipy.io.savemat(path, arrays)
    elif kind == "mat-v7.3":
        with h5py.File(path, "w") as h5:
            for name, value in arrays.items():
                h5.create_dataset(name, data=np.asarray(value).T).attrs["MATLAB_class"] = np.bytes_("double")
    else:
        with h5py.File(path, "w") as h5:
            for name, value in arrays.items():
                h5[name] = value


def _load(path, normalizers=None, **options):
    """The ns task's bundle of ``path``: its splits, or with ``normalizers`` (a trained model's) every trajectory as
    the test split, as a trained model's evaluation reads a file."""
    task = get_task("ns")
    whole = {} if normalizers is None else {"splits": ("test",), "normalizers": normalizers, "test_all": True}
    return task.load(DataConfig(keys=["u"], n_test=2, n_val=1), TrajectoryOptions(**options),
                     {"train": path, "test": None}, **whole)


@pytest.mark.parametrize("kind,suffix", [("mat-v5", ".mat"), ("mat-v7.3", ".mat"), ("hdf5", ".h5")])
@pytest.mark.parametrize("axis", [-1, "last", 3])
def test_time_last_with_the_initial_states_apart_reads_as_the_formula(tmp_path, kind, suffix, axis):
    path = tmp_path / f"ns_V1e-3{suffix}"
    write_time_last(path, kind)
    bundle = _load(path, time_axis=axis, initial_key="a")
    want = taylor_green(np.concatenate([[0.0], TIMES]))
    assert bundle.info["times"] == [0.0, *TIMES.tolist()]
    seen = []
    for split, ds in bundle.datasets.items():
        rows = ds.origin[0]
        seen += rows.tolist()
        np.testing.assert_array_equal(ds.traj.numpy()[..., 0], want[rows].astype(np.float32))
        assert ds.times.tolist() == [0.0, *TIMES.tolist()]
    assert sorted(seen) == list(range(N_TRAJ))
    # a trained model's evaluation of the whole file reads it alike
    test = _load(path, bundle.normalizers, time_axis=axis, initial_key="a").datasets["test"]
    np.testing.assert_array_equal(test.traj.numpy()[..., 0], want.astype(np.float32))


def test_the_snapshots_on_a_middle_axis_with_a_channel_are_moved_to_axis_one(tmp_path):
    """(samples, n, T, n, 1) with --time-axis 2: exactly the array with that axis moved, no initial states added."""
    u = np.random.default_rng(3).standard_normal((N_TRAJ, N, 4, N, 1))
    np.savez(tmp_path / "mid.npz", u=u, t=np.array([0.0, 0.5, 1.0, 1.5]))
    bundle = _load(tmp_path / "mid.npz", time_axis=2)
    want = np.moveaxis(u, 2, 1)
    assert bundle.info["times"] == [0.0, 0.5, 1.0, 1.5]
    for ds in bundle.datasets.values():
        np.testing.assert_array_equal(ds.traj.numpy(), want[ds.origin[0]].astype(np.float32))


def test_without_times_the_snapshots_follow_the_initial_state_at_dt(tmp_path):
    path = tmp_path / "bare.h5"
    with h5py.File(path, "w") as h5:
        h5["a"] = taylor_green([0.0])[:, 0]
        h5["u"] = np.moveaxis(taylor_green(TIMES), 1, -1)
    with pytest.warns(UserWarning, match="0.25 apart"):
        bundle = _load(path, time_axis=-1, initial_key="a", dt=0.25)
    assert bundle.info["times"] == [0.0, 0.25, 0.5, 0.75, 1.0, 1.25]


def test_the_layout_options_are_typed_and_checked():
    assert TrajectoryOptions(time_axis="last").time_axis == -1
    assert TrajectoryOptions().time_axis == 1 and TrajectoryOptions().initial_key is None
    with pytest.raises(ConfigError, match="--time-axis 0 is the axis of the trajectories"):
        TrajectoryOptions(time_axis=0)
    with pytest.raises(ConfigError, match="--initial-key: must not be empty"):
        TrajectoryOptions(initial_key=" ")


def test_initial_times_at_or_below_zero_are_refused_naming_both_keys(tmp_path):
    path = tmp_path / "from_zero.mat"
    write_time_last(path, "mat-v5", t=np.array([0.0, 0.1, 0.2, 0.3, 0.4]))
    with pytest.raises(DataError) as info:
        _load(path, time_axis=-1, initial_key="a")
    text = str(info.value)
    assert "'t' (--time-key)" in text and "--initial-key a" in text and "'u'" in text and "> 0" in text


def _train(tmp_path, data, *flags) -> int:
    return main(["train", "ns-fno", "--data", str(data), *flags, "--epochs", "1", "--width", "4", "--modes", "2",
                 "--out", str(tmp_path / "run"), "--no-progress"])


def _one_error_line(capsys) -> str:
    err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("opformer: error")]
    assert len(err) == 1
    return err[0]


@pytest.mark.parametrize("flags,expected", [
    (("--keys", "u", "--time-axis", "4"),
     "--time-axis 4 is out of range for key 'u' of shape (6, 8, 8, 5): the snapshots lie on axis 1 to 3 (or -1 to -3)"),
    (("--keys", "u", "--time-axis", "-4"), "--time-axis -4 is out of range for key 'u'"),
    (("--keys", "u", "--time-axis", "0"), "--time-axis 0 is the axis of the trajectories"),
    (("--keys", "rect", "--time-axis", "-1"),
     "key 'rect' expected trajectories (samples, times, n, n) or (samples, times, n, n, 1), found (6, 8, 6, 5), read "
     "as (6, 5, 8, 6) (--time-axis -1) (a 8x6 grid: task ns takes square grids)"),
    (("--keys", "u", "--time-axis", "-1", "--initial-key", "a5"),
     "--initial-key 'a5' holds 5 initial states (shape (5, 8, 8)), the trajectories 'u' 6 (shape (6, 8, 8, 5)): "
     "give one state at t = 0 per trajectory"),
    (("--keys", "u", "--time-axis", "-1", "--initial-key", "a16"),
     "--initial-key 'a16' has shape (6, 16, 16), expected (6, 8, 8): one state on the grid of the snapshots of 'u'"),
    (("--keys", "u", "--time-axis", "-1", "--initial-key", "u"),
     "--initial-key u names the trajectory array itself (--keys u)"),
    (("--keys", "u", "--time-axis", "-1", "--initial-key", "b"),
     "no array 'b' (--initial-key) holds the initial states; available keys:"),
])
def test_a_layout_that_does_not_fit_is_one_line_and_status_2(tmp_path, capsys, flags, expected):
    rng = np.random.default_rng(0)
    path = tmp_path / "odd.mat"
    write_time_last(path, "mat-v5", extra={"a5": rng.random((5, N, N)), "a16": rng.random((6, 16, 16)),
                                           "rect": rng.random((6, N, 6, 5))})
    assert _train(tmp_path, path, *flags) == 2
    assert expected in _one_error_line(capsys)
    assert not (tmp_path / "run" / "checkpoints").exists()


@pytest.mark.parametrize("kind,suffix", [("mat-v5", ".mat"), ("hdf5", ".h5")])
def test_a_file_stored_time_last_read_in_the_default_layout_is_pointed_to_the_flags(tmp_path, capsys, kind, suffix):
    path = tmp_path / f"ns_V1e-3_N6_T5{suffix}"
    write_time_last(path, kind)
    assert _train(tmp_path, path, "--keys", "u") == 2
    line = _one_error_line(capsys)
    assert "found (6, 8, 8, 5) (a 8x5 grid: task ns takes square grids)" in line
    assert "--time-axis -1 reads it so, and --initial-key a puts the states of 'a' (6, 8, 8) before them" in line
    # with --initial-key given, only the axis is suggested
    assert _train(tmp_path, path, "--keys", "u", "--initial-key", "a") == 2
    line = _one_error_line(capsys)
    assert line.endswith("--time-axis -1 reads it so")


def test_times_as_long_as_the_last_axis_suggest_the_time_axis_in_1d(tmp_path, capsys):
    """(samples, n, T) reads without complaint as n snapshots of T points, until the times (T values) disagree."""
    rng = np.random.default_rng(1)
    path = tmp_path / "b.npz"
    np.savez(path, u=rng.random((6, 16, 5)), a=rng.random((6, 16)), t=0.1 * np.arange(1, 6))
    assert main(["train", "burgers-traj-fno", "--data", str(path), "--keys", "u", "--epochs", "1", "--width", "4",
                 "--modes", "2", "--out", str(tmp_path / "run"), "--no-progress"]) == 2
    line = _one_error_line(capsys)
    assert "the times 't' must be 16 increasing values (one per snapshot), found an array of shape (5,)" in line
    assert "--time-axis -1 reads it so, and --initial-key a puts the states of 'a' (6, 16) before them" in line
