"""A trajectory file's snapshot times in the user's terms: a mistyped --time-key names what the file holds instead
(an array or an HDF5 attribute of one value per snapshot, else the file's arrays), and a file whose times sit in an
HDF5 attribute of another name than the default is noted with that attribute, as `opformer data info` suggests it."""

from __future__ import annotations

import warnings

import h5py
import numpy as np
import pytest

import opformer
from opformer.cli import main
from opformer.config import DataConfig
from opformer.data import DataError
from opformer.tasks import get_task
from opformer.tasks.trajectories import TrajectoryOptions


def _traj(n_traj=6, n_times=4, n=16):
    return np.random.default_rng(0).standard_normal((n_traj, n_times, n))


def _train(tmp_path, data, *extra):
    return main(["train", "burgers-traj-fno", "--data", str(data), "--keys", "vorticity", *extra, "--epochs", "1",
                 "--out", str(tmp_path / "run"), "--no-progress"])


@pytest.mark.parametrize("where", ["npz array", "h5 dataset attribute", "h5 file attribute"])
def test_a_mistyped_time_key_names_the_times_the_file_holds(tmp_path, capsys, where):
    times = np.array([0.0, 0.1, 0.2, 0.4])
    if where == "npz array":
        data = tmp_path / "mine.npz"
        np.savez(data, vorticity=_traj(), times=times)
        name = "times"
    else:
        data = tmp_path / "mine.h5"
        with h5py.File(data, "w") as h5:
            h5["vorticity"] = _traj()
            (h5["vorticity"] if where == "h5 dataset attribute" else h5).attrs["time"] = times
        name = "time"
    assert _train(tmp_path, data, "--time-key", "tims") == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "'tims' (--time-key)" in err[0]
    assert f"the file has {name!r} of 4 values (one per snapshot): --time-key {name} names them" in err[0]
    assert not (tmp_path / "run").exists()


def test_a_mistyped_time_key_in_a_file_without_times_lists_its_arrays(tmp_path):
    np.savez(tmp_path / "bare.npz", vorticity=_traj(), grid=np.linspace(0, 1, 16))
    with pytest.raises(DataError) as info:
        get_task("burgers-traj").load(DataConfig(keys=["vorticity"], n_test=1, n_val=1),
                                      TrajectoryOptions(time_key="tims"), {"train": tmp_path / "bare.npz", "test": None})
    assert "its arrays: 'vorticity', 'grid', none of 4 values (one per snapshot)" in str(info.value)


def test_times_in_an_hdf5_attribute_of_another_name_are_pointed_to(tmp_path):
    """Without --time-key the snapshots are taken --dt apart, and the note names the attribute that holds the
    times (it named arrays only, so a user who followed `data info` to an attribute was not told)."""
    with h5py.File(tmp_path / "attr.h5", "w") as h5:
        h5["vorticity"] = _traj()
        h5["vorticity"].attrs["time"] = np.array([0.0, 0.1, 0.2, 0.4])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", opformer.OpformerWarning)
        b = get_task("burgers-traj").load(DataConfig(keys=["vorticity"], n_test=1, n_val=1), TrajectoryOptions(),
                                          {"train": tmp_path / "attr.h5", "test": None})
    notes = [str(w.message) for w in caught if issubclass(w.category, opformer.OpformerWarning)]
    assert any("stores no snapshot times" in n and "the file has 'time' of 4 values: --time-key time names them" in n
               for n in notes), notes
    assert np.allclose(b.info["times"], [0, 1, 2, 3])  # --dt apart, as the note says
