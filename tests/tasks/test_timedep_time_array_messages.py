"""The refusals of a trajectory file's times say what is wrong in the user's terms: a --time-key that names a field
(not a time axis) is not said to have rows that differ, and a --max-time below the second snapshot names the
snapshot times as numbers and the smallest --max-time that trains."""

from __future__ import annotations

import numpy as np
import pytest

from opformer.config import ConfigError, DataConfig
from opformer.pde.errors import DataError
from opformer.tasks import get_task
from opformer.tasks.trajectories import TrajectoryOptions

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


def _file(tmp_path, **arrays):
    rng = np.random.default_rng(0)
    path = tmp_path / "mine.npz"
    np.savez(path, field=rng.normal(size=(7, 5, 16)), **arrays)
    return path


def _load(path, **options):
    return get_task("burgers-traj").load(DataConfig(keys=("field",), n_test=2, n_val=2),
                                         TrajectoryOptions(**options), {"train": path, "test": None})


def test_a_time_key_naming_a_field_says_it_is_no_time_axis(tmp_path):
    path = _file(tmp_path, other=np.zeros((7, 5, 16)))
    with pytest.raises(DataError) as info:
        _load(path, time_key="other")
    message = str(info.value)
    assert message == (f"{path}: the times 'other' have shape (7, 5, 16): give one time axis (one value per "
                       "snapshot) or a (trajectories, times) array whose rows are all the same")
    assert "rows differ" not in message


def test_rows_that_differ_are_still_named_so(tmp_path):
    path = _file(tmp_path, tt=np.arange(5.0)[None] + np.arange(7.0)[:, None])
    with pytest.raises(DataError, match=r"the times 'tt' have shape \(7, 5\): give one time axis shared by every "
                                        r"trajectory \(its rows differ\)"):
        _load(path, time_key="tt")


def test_a_max_time_below_the_second_snapshot_names_the_times_as_numbers(tmp_path):
    path = _file(tmp_path, tt=np.array([0.0, 0.1, 0.15, 0.3, 0.5]))
    with pytest.raises(ConfigError) as info:
        _load(path, time_key="tt", max_time=0.05)
    assert str(info.value) == ("--max-time 0.05 leaves fewer than two snapshots (the snapshot times: 0, 0.1, 0.15, "
                               "...); give a --max-time of at least 0.1")
    _load(path, time_key="tt", max_time=0.1)  # that one trains on (t_0, t_1)


def test_a_file_of_one_snapshot_is_refused_for_training_and_for_scoring_in_their_terms(tmp_path):
    path = tmp_path / "first.npz"
    np.savez(path, field=np.zeros((3, 1, 16)))
    task, data = get_task("burgers-traj"), DataConfig(keys=("field",), n_test=1, n_val=1)
    with pytest.raises(DataError, match=r"holds 1 snapshot per trajectory \(shape \(3, 1, 16\)\); learning u\(t\) -> "
                                        r"u\(t \+ tau\) needs at least 2$"):
        task.load(data, TrajectoryOptions(), {"train": path, "test": None})
    # a trained model's evaluation (its normalizers given) scores pairs; it learns nothing
    with pytest.raises(DataError, match=r"holds 1 snapshot per trajectory \(shape \(3, 1, 16\)\); scoring a model on "
                                        r"\(t_0, t_k\) needs at least 2 \(opformer rollout --times predicts from "
                                        r"one\)"):
        task.load(data, TrajectoryOptions(), {"train": path, "test": None}, splits=("test",), normalizers={},
                  test_all=True)


@pytest.mark.parametrize("attribute, message", [
    (np.array([0.0, 0.1, np.nan, 0.3, 0.4]), "the times 'time' must be finite, found nan (snapshot 2)"),
    (np.array([0.0, 0.1, 0.2, 0.3, np.inf]), "the times 'time' must be finite, found inf (snapshot 4)"),
    ("0,1,2,3,4", "the times 'time' must be numbers, one per snapshot, found text '0,1,2,3,4'"),
])
def test_an_hdf5_time_attribute_of_no_finite_numbers_is_refused_naming_it(tmp_path, attribute, message):
    import h5py

    path = tmp_path / "mine.h5"
    with h5py.File(path, "w") as h5:
        h5["sim/u"] = np.random.default_rng(0).normal(size=(7, 5, 16))
        h5["sim"].attrs["time"] = attribute
    task = get_task("burgers-traj")
    with pytest.raises(DataError) as info:  # a NaN lead time trained to a NaN loss; text raised a ValueError
        task.load(DataConfig(keys=("sim/u",), n_test=2, n_val=2), TrajectoryOptions(time_key="time"),
                  {"train": path, "test": None})
    assert message in str(info.value)


@pytest.mark.parametrize("options, which", [({"pairs": "one-at-a-time"}, "--pairs one-at-a-time"),
                                            ({"history": 2}, "--history 2")])
def test_include_zero_where_it_adds_no_pair_is_refused_for_training(tmp_path, options, which):
    path = _file(tmp_path, tt=np.linspace(0.0, 1.0, 5))
    with pytest.raises(ConfigError, match=f"--include-zero adds the pairs \\(t_i, t_i\\) to --pairs all2all; {which} "
                                          "trains no such pairs, so it would do nothing: leave it out"):
        _load(path, time_key="tt", include_zero=True, **options)
    trained = _load(path, time_key="tt", include_zero=True)  # all2all: the identity pairs are trained
    # a trained model's options are read back as they were: its evaluation is not refused
    b = get_task("burgers-traj").load(DataConfig(keys=("field",), n_test=2, n_val=2),
                                      TrajectoryOptions(time_key="tt", include_zero=True, **options),
                                      {"train": path, "test": None}, splits=("test",),
                                      normalizers=trained.normalizers, test_all=True)
    assert len(b.datasets["test"]) > 0
