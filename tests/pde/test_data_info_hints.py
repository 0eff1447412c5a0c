"""`opformer data info` on files a user brings: unreadable HDF5 files in the user's words, and the trajectory flags
for times stored the way MATLAB stores a vector."""

from __future__ import annotations

import numpy as np
import pytest

from opformer.cli import main
from opformer.pde import read_header
from opformer.pde.errors import DataError


@pytest.mark.parametrize("content, said", [(b"", "cannot be read as HDF5 (an empty file)"),
                                           (b"some text", "cannot be read as HDF5 (not an HDF5 file")])
def test_info_on_an_empty_or_foreign_h5_says_what_it_is(tmp_path, capsys, content, said):
    """A 0-byte .h5 printed h5py's "(Unable to synchronously open file (file signature not found))"."""
    path = tmp_path / "empty.h5"
    path.write_bytes(content)
    assert main(["data", "info", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"opformer: error: {path}: {said}") and err.count("\n") == 1, err
    assert "signature" not in err and "synchronously" not in err
    with pytest.raises(DataError) as info:
        read_header(path)
    assert said in str(info.value) and "signature" not in str(info.value)


@pytest.mark.parametrize("layout", ["row", "column"])
def test_info_takes_matlab_row_and_column_vectors_as_times(tmp_path, capsys, layout):
    """scipy.io.savemat stores a vector as a (1, K) row: it was not counted as the times, and the hint said
    --keys INPUT,TARGET instead of the trajectory flags."""
    import scipy.io

    times = np.linspace(0, 1, 5)
    scipy.io.savemat(tmp_path / "traj.mat", {"u": np.zeros((6, 5, 16)),
                                             "t": times[None] if layout == "row" else times[:, None]})
    assert main(["data", "info", str(tmp_path / "traj.mat")]) == 0
    first = capsys.readouterr().out.splitlines()[0]
    assert first.endswith("1D trajectories: train burgers-traj-* with --keys u --time-key t):"), first
    np.savez(tmp_path / "pairs.npz", x=np.zeros((4, 16)), y=np.zeros((1, 16)))  # a (1, n) array beside pairs
    assert main(["data", "info", str(tmp_path / "pairs.npz")]) == 0
    assert capsys.readouterr().out.splitlines()[0].endswith("train with --keys INPUT,TARGET):")


@pytest.mark.parametrize("initial", [True, False])
def test_info_names_the_time_axis_and_initial_flags_of_a_time_last_file(tmp_path, capsys, initial):
    """A file of the FNO Navier-Stokes layout (u (samples, n, n, T), the times t_1..t_T, the states at t = 0 in a)
    was hinted as --keys INPUT,TARGET; the hinted flags train on it (tests/tasks/test_trajectory_time_axis.py)."""
    import scipy.io

    arrays = {"u": np.zeros((6, 8, 8, 5)), "t": np.arange(1.0, 6.0)[None]}
    if initial:
        arrays["a"] = np.zeros((6, 8, 8))
    scipy.io.savemat(tmp_path / "ns.mat", arrays)
    assert main(["data", "info", str(tmp_path / "ns.mat")]) == 0
    first = capsys.readouterr().out.splitlines()[0]
    flags = "--keys u --time-axis -1 --time-key t" + (" --initial-key a" if initial else "")
    assert first.endswith(f"2D trajectories: train ns-* or shear-layer-* with {flags}):"), first
