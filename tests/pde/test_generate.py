"""Generation: determinism across workers and shards, resumption after interruption, refusal of mismatches."""

from __future__ import annotations

import importlib

import h5py
import numpy as np
import pytest

import opformer
from opformer.data import load_arrays
from opformer.pde import BURGERS_R10, DARCY_R421, DataError, ensure_dataset, generate_dataset, make_recipe

generate_module = importlib.import_module("opformer.pde.generate")
from opformer.pde.storage import partial_path, read_header

TINY = dict(n_samples=12, resolution=64, solve_resolution=None, steps=20, grf={"modes": 10})


def _read(path, keys=("a", "u")):
    return load_arrays(path, keys)


def test_default_recipes_are_the_documented_ones():
    assert BURGERS_R10["domain"] == "2pi" and BURGERS_R10["nu"] == 0.1 and BURGERS_R10["t_final"] == 1.0
    assert BURGERS_R10["grf"] == {"sigma": 25.0, "tau": 5.0, "gamma": 2.0, "mean": 0.0, "modes": 20}
    assert (BURGERS_R10["resolution"], BURGERS_R10["n_samples"]) == (8192, 2048)
    assert (DARCY_R421["resolution"], DARCY_R421["n_samples"], DARCY_R421["high"], DARCY_R421["low"]) == (421, 1024, 12.0, 3.0)
    assert DARCY_R421["grf"] == {"alpha": 2.0, "tau": 3.0}


def test_make_recipe_checks_keys_and_values():
    assert make_recipe("burgers", modes=None)["grf"]["modes"] is None  # flat shortcut for grf keys
    with pytest.raises(DataError, match="unknown recipe key 'viscosity'"):
        make_recipe("burgers", viscosity=0.1)
    with pytest.raises(DataError, match="grf.modes"):
        make_recipe("burgers", resolution=32, solve_resolution=None, grf={"modes": 20})
    with pytest.raises(DataError, match="split"):
        make_recipe("darcy", split="validation")
    with pytest.raises(DataError, match="unknown problem"):
        make_recipe("navier-stokes")


def test_file_stores_arrays_coordinates_recipe_seed_and_version(tmp_path):
    recipe = make_recipe("burgers", **TINY)
    path = generate_dataset(recipe, tmp_path / "b.h5", workers=1, progress=False)
    with h5py.File(path, "r") as h5:
        assert h5["a"].shape == h5["u"].shape == (12, 64)
        np.testing.assert_array_equal(h5["x"][...], np.arange(64) / 64)
        assert h5["done"][...].all()
        assert h5.attrs["seed"] == 0 and h5.attrs["opformer_version"] == opformer.__version__
    header = read_header(path)
    assert header["recipe"] == recipe and header["complete"]
    assert not partial_path(path).exists()


def test_samples_are_identical_whatever_the_workers_and_shards(tmp_path):
    recipe = make_recipe("burgers", **TINY)
    one = _read(generate_dataset(recipe, tmp_path / "one.h5", workers=1, progress=False))
    two = _read(generate_dataset(recipe, tmp_path / "two.h5", workers=2, chunk_size=2, progress=False))
    generate_dataset(recipe, tmp_path / "shard_0.h5", start=0, stop=5, workers=1, progress=False)
    generate_dataset(recipe, tmp_path / "shard_1.h5", start=5, stop=12, workers=1, progress=False)
    shards = _read(str(tmp_path / "shard_*.h5"))
    for key in ("a", "u"):
        np.testing.assert_array_equal(one[key], two[key])  # initial fields: bitwise; solutions: batch-independent
        np.testing.assert_array_equal(one[key], shards[key])


def test_interrupted_generation_resumes_and_equals_an_uninterrupted_one(tmp_path, monkeypatch):
    recipe = make_recipe("burgers", **TINY)
    reference = _read(generate_dataset(recipe, tmp_path / "ref.h5", workers=1, progress=False))

    real = generate_module.compute_samples
    calls: list[list[int]] = []

    def crash_on_third_chunk(rec, idx):
        calls.append([int(i) for i in idx])
        if len(calls) == 3:
            raise KeyboardInterrupt  # as a Ctrl-C in the middle of a run
        return real(rec, idx)

    monkeypatch.setattr(generate_module, "compute_samples", crash_on_third_chunk)
    out = tmp_path / "b.h5"
    with pytest.raises(KeyboardInterrupt):
        generate_dataset(recipe, out, workers=1, chunk_size=3, progress=False)
    assert not out.exists()  # never a half-written final file
    header = read_header(partial_path(out))
    assert header["n_done"] == 6 and not header["complete"]

    calls.clear()
    monkeypatch.setattr(generate_module, "compute_samples", lambda rec, idx: (calls.append(list(idx)), real(rec, idx))[1])
    generate_dataset(recipe, out, workers=1, chunk_size=3, progress=False)
    assert sorted(i for c in calls for i in c) == [6, 7, 8, 9, 10, 11]  # only the missing samples
    resumed = _read(out)
    for key in ("a", "u"):
        np.testing.assert_array_equal(resumed[key], reference[key])
    assert not partial_path(out).exists()


def test_resume_with_another_recipe_is_refused(tmp_path, monkeypatch):
    recipe = make_recipe("burgers", **TINY)
    monkeypatch.setattr(generate_module, "compute_samples", lambda rec, idx: (_ for _ in ()).throw(RuntimeError("stop")))
    with pytest.raises(RuntimeError):
        generate_dataset(recipe, tmp_path / "b.h5", workers=1, progress=False)
    monkeypatch.undo()
    other = make_recipe("burgers", **dict(TINY, nu=0.2))
    with pytest.raises(DataError, match=r"b\.h5\.partial.*nu: 0\.1 != 0\.2"):
        generate_dataset(other, tmp_path / "b.h5", workers=1, progress=False)
    with pytest.raises(DataError, match=r"sample range \[0, 12\), not the requested \[0, 6\)"):
        generate_dataset(recipe, tmp_path / "b.h5", stop=6, workers=1, progress=False)


def test_ensure_dataset_generates_once_then_reuses_and_refuses_other_recipes(tmp_path, monkeypatch):
    path = tmp_path / "d.h5"
    assert ensure_dataset("darcy", path, n_samples=3, resolution=13, workers=1, progress=False) == path
    stamp = path.stat().st_mtime_ns
    monkeypatch.setattr(generate_module, "compute_samples", lambda *a: pytest.fail("must not recompute"))
    assert ensure_dataset("darcy", path, n_samples=3, resolution=13, workers=1, progress=False) == path
    assert path.stat().st_mtime_ns == stamp
    with pytest.raises(DataError, match=r"d\.h5.*split: 'train' != 'test'"):
        ensure_dataset("darcy", path, n_samples=3, resolution=13, split="test")


def test_darcy_train_and_test_files_are_independent_draws(darcy_files):
    train = load_arrays(darcy_files[0], ("coeff", "sol"))
    test = load_arrays(darcy_files[1], ("coeff", "sol"))
    assert train["coeff"].shape == (10, 29, 29)
    assert not np.array_equal(train["coeff"][0], test["coeff"][0])
    assert set(np.unique(train["coeff"])) == {3.0, 12.0}


def test_unwritable_output_path_is_reported(tmp_path):
    recipe = make_recipe("burgers", **TINY)
    (tmp_path / "a_file").write_text("x")
    with pytest.raises(DataError, match="a_file"):
        generate_dataset(recipe, tmp_path / "a_file" / "b.h5", workers=1, progress=False)


def test_bad_shard_range_is_reported(tmp_path):
    with pytest.raises(DataError, match="start < stop"):
        generate_dataset(make_recipe("burgers", **TINY), tmp_path / "b.h5", start=5, stop=5, workers=1, progress=False)
    with pytest.raises(DataError, match="n_samples=12"):
        generate_dataset(make_recipe("burgers", **TINY), tmp_path / "b.h5", start=0, stop=13, workers=1, progress=False)


def test_unreadable_partial_file_is_reported_and_kept(tmp_path):
    """A FILE.partial that is not HDF5 (or is locked by a running generation) is never deleted silently."""
    out = tmp_path / "b.h5"
    partial_path(out).write_bytes(b"not an HDF5 file")
    with pytest.raises(DataError, match=r"b\.h5\.partial: cannot be read as HDF5 .*delete it and run again"):
        generate_dataset(make_recipe("burgers", **TINY), out, workers=1, progress=False)
    assert partial_path(out).read_bytes() == b"not an HDF5 file"
