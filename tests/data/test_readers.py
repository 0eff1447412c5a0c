"""Readers: .mat v5 / v7.3 (transposed), .h5, .npz, .pt, shard sets; the errors name file, key and shapes."""

from __future__ import annotations

import h5py
import numpy as np
import pytest
import scipy.io
import torch

from opformer.data import load_arrays, open_source
from opformer.data.readers import describe_arrays
from opformer.pde import DataError, generate_dataset, make_recipe

A = np.arange(3 * 4 * 5, dtype=np.float64).reshape(3, 4, 5)
U = -A


def test_mat_v5_is_read_with_scipy(tmp_path):
    path = tmp_path / "data.mat"
    scipy.io.savemat(path, {"coeff": A, "sol": U, "other": 1.0})
    out = load_arrays(path, keys=("coeff", "sol"))
    np.testing.assert_array_equal(out["coeff"], A)
    np.testing.assert_array_equal(out["sol"], U)
    assert open_source(path, ("coeff",)).kind == "mat"


def test_mat_v73_is_read_with_h5py_and_transposed_back(tmp_path):
    """MATLAB v7.3 is HDF5 with a 512-byte user block; column-major arrays appear with reversed axes."""
    path = tmp_path / "data73.mat"
    with h5py.File(path, "w", userblock_size=512) as h5:
        h5.create_dataset("coeff", data=A.T)  # what MATLAB writes for a (3, 4, 5) array
        h5.create_dataset("sol", data=U.T)
    out = load_arrays(path, keys=("coeff", "sol"))
    np.testing.assert_array_equal(out["coeff"], A)
    np.testing.assert_array_equal(out["sol"], U)
    src = open_source(path, ("coeff", "sol"))
    np.testing.assert_array_equal(src.read("sol", [2, 0]), U[[2, 0]])


def test_users_h5_npz_and_pt_files(tmp_path):
    with h5py.File(tmp_path / "mine.h5", "w") as h5:
        h5["a"], h5["u"] = A, U
    np.savez(tmp_path / "mine.npz", a=A, u=U)
    torch.save({"a": torch.from_numpy(A), "u": torch.from_numpy(U).float()}, tmp_path / "mine.pt")  # tensors only
    for name in ("mine.h5", "mine.npz", "mine.pt"):
        out = load_arrays(tmp_path / name, keys=("a", "u"))
        np.testing.assert_array_equal(out["a"], A, err_msg=name)
        np.testing.assert_array_equal(out["u"], U, err_msg=name)
        assert out["a"].dtype == np.float64


def test_missing_file_and_missing_key_are_named(tmp_path):
    with pytest.raises(DataError, match=r"nowhere\.h5: file not found"):
        load_arrays(tmp_path / "nowhere.h5", ("a",))
    np.savez(tmp_path / "x.npz", a=A)
    with pytest.raises(DataError, match=r"^\S*x\.npz: key 'u' not found; available keys: \['a'\]$"):
        load_arrays(tmp_path / "x.npz", ("a", "u"))  # the message alone, not wrapped in a read error
    scipy.io.savemat(tmp_path / "x.mat", {"a": A})
    with pytest.raises(DataError, match=r"x\.mat: key 'sol' not found"):
        load_arrays(tmp_path / "x.mat", ("sol",))
    with pytest.raises(DataError, match=r"no file matches"):
        load_arrays(str(tmp_path / "none_*.h5"), ("a",))
    (tmp_path / "x.csv").write_text("1,2")
    with pytest.raises(DataError, match="unsupported file type '.csv'"):
        load_arrays(tmp_path / "x.csv", ("a",))


def test_inconsistent_sample_counts_and_nan_are_reported(tmp_path):
    np.savez(tmp_path / "bad.npz", a=A, u=U[:2])
    with pytest.raises(DataError, match=r"bad\.npz: key 'u' has 2 samples \(shape \(2, 4, 5\)\), expected 3 like key 'a' \(shape \(3, 4, 5\)\)"):
        load_arrays(tmp_path / "bad.npz", ("a", "u"))
    nan = A.copy()
    nan[1, 2, 3] = np.nan
    np.savez(tmp_path / "nan.npz", a=nan, u=U)
    with pytest.raises(DataError, match=r"nan\.npz: key 'a' contains NaN or inf in 1 of its 3 samples: 1 "):
        load_arrays(tmp_path / "nan.npz", ("a", "u"))
    # a read of some samples (a split) names every bad sample of the file, not only those it read
    nan[0, 0, 0], nan[2, 1, 1] = np.inf, -np.inf
    np.savez(tmp_path / "nan.npz", a=nan, u=U)
    with pytest.raises(DataError, match=r"nan\.npz: key 'a' contains NaN or inf in 3 of its 3 samples: 0, 1, 2 "):
        open_source(tmp_path / "nan.npz", ("a",)).read("a", [1])


def test_shards_concatenate_by_index_and_gaps_overlaps_and_recipes_are_checked(tmp_path):
    recipe = make_recipe("burgers", n_samples=9, resolution=32, solve_resolution=None, steps=10, grf={"modes": 5})
    kw = dict(workers=1, progress=False)
    whole = load_arrays(generate_dataset(recipe, tmp_path / "whole.h5", **kw))
    generate_dataset(recipe, tmp_path / "s2.h5", start=6, stop=9, **kw)
    generate_dataset(recipe, tmp_path / "s0.h5", start=0, stop=3, **kw)
    generate_dataset(recipe, tmp_path / "s1.h5", start=3, stop=6, **kw)
    joined = load_arrays([tmp_path / "s2.h5", tmp_path / "s0.h5", tmp_path / "s1.h5"])  # any order
    np.testing.assert_array_equal(joined["u"], whole["u"])
    with pytest.raises(DataError, match=r"starts at sample 6 but .*s0\.h5 stops at 3"):
        load_arrays([tmp_path / "s0.h5", tmp_path / "s2.h5"])
    generate_dataset(recipe, tmp_path / "s1b.h5", start=2, stop=6, **kw)
    with pytest.raises(DataError, match=r"s1b\.h5: samples \[2, 6\) overlap"):
        load_arrays([tmp_path / "s0.h5", tmp_path / "s1b.h5"])
    generate_dataset(dict(recipe, seed=1), tmp_path / "o1.h5", start=3, stop=9, **kw)
    with pytest.raises(DataError, match=r"o1\.h5: recipe differs .*seed: 0 != 1"):
        load_arrays([tmp_path / "s0.h5", tmp_path / "o1.h5"])


def test_unfinished_generation_is_not_read(tmp_path):
    recipe = make_recipe("burgers", n_samples=4, resolution=32, solve_resolution=None, steps=10, grf={"modes": 5})
    from opformer.pde.storage import ShardWriter

    with ShardWriter(tmp_path / "p.h5", recipe, start=0, stop=4, shapes={"a": (32,), "u": (32,)}, coords={}) as w:
        w.write([0], {"a": np.zeros((1, 32)), "u": np.zeros((1, 32))})
    with pytest.raises(DataError, match=r"p\.h5: file not found \(an unfinished generation .*p\.h5\.partial exists"):
        load_arrays(tmp_path / "p.h5")
    with pytest.raises(DataError, match=r"incomplete data file \(1 of 4 samples"):
        load_arrays(tmp_path / "p.h5.partial")


def test_h5_keys_may_name_datasets_in_groups_and_describe_arrays_lists_every_format(tmp_path):
    with h5py.File(tmp_path / "g.h5", "w") as h5:
        h5["inputs/a"] = A
        h5["results/deep/u"] = U.astype(np.float32)
    out = load_arrays(tmp_path / "g.h5", keys=("inputs/a", "results/deep/u"))
    np.testing.assert_array_equal(out["results/deep/u"], U)
    with pytest.raises(DataError, match=r"key 'results/v' not found; available keys: \['inputs/a', 'results/deep/u'\]"):
        load_arrays(tmp_path / "g.h5", keys=("inputs/a", "results/v"))
    assert describe_arrays(tmp_path / "g.h5") == [("inputs/a", (3, 4, 5), "float64"),
                                                  ("results/deep/u", (3, 4, 5), "float32")]
    np.savez(tmp_path / "d.npz", coeff=A, sol=U.astype(np.float32))
    assert describe_arrays(tmp_path / "d.npz") == [("coeff", (3, 4, 5), "float64"), ("sol", (3, 4, 5), "float32")]
    scipy.io.savemat(tmp_path / "d.mat", {"coeff": A})
    assert describe_arrays(tmp_path / "d.mat") == [("coeff", (3, 4, 5), "double")]
    torch.save({"coeff": torch.as_tensor(A)}, tmp_path / "d.pt")
    assert describe_arrays(tmp_path / "d.pt") == [("coeff", (3, 4, 5), "float64")]
    (tmp_path / "d.csv").write_text("1,2\n")
    with pytest.raises(DataError, match="unsupported file type '.csv'"):
        describe_arrays(tmp_path / "d.csv")


def test_an_empty_hdf5_dataset_is_listed_and_refused_as_a_key(tmp_path):
    """h5py.Empty (a type, no values): data info lists it, training on it names it; the other keys still load."""
    with h5py.File(tmp_path / "e.h5", "w") as h5:
        h5["vs"] = h5py.Empty("f")
        h5["a"], h5["u"] = A, U
    assert describe_arrays(tmp_path / "e.h5")[-1] == ("vs", (), "float32 (empty: no values)")
    with pytest.raises(DataError, match="'vs' is an empty HDF5 dataset"):
        load_arrays(tmp_path / "e.h5", keys=("vs", "u"))
    np.testing.assert_array_equal(load_arrays(tmp_path / "e.h5", keys=("a", "u"))["u"], U)


def test_data_info_lists_the_entries_of_a_pt_dict_that_are_not_arrays(tmp_path, capsys):
    from opformer.cli import main

    torch.save({"a": torch.ones(3, 4), "meta": {"x": 1}, "n": 5}, tmp_path / "odd.pt")
    assert describe_arrays(tmp_path / "odd.pt") == [("a", (3, 4), "float32"), ("meta", (), "dict (not an array)"),
                                                    ("n", (), "int (not an array)")]
    assert main(["data", "info", str(tmp_path / "odd.pt")]) == 0
    out = capsys.readouterr().out
    assert "1 array(s)" in out and "meta  ()  dict (not an array)" in out


@pytest.mark.parametrize("suffix", [".npz", ".h5"])
def test_a_missing_key_is_recorded_on_the_error(tmp_path, suffix):
    """The error names the missing array, the file and what it holds as attributes too, for callers that word the
    refusal themselves (eval's "no target array")."""
    import h5py

    from opformer.pde.errors import MissingKeyError

    path = tmp_path / f"d{suffix}"
    u = np.zeros((3, 8), dtype=np.float32)
    if suffix == ".npz":
        np.savez(path, u=u, v=u)
    else:
        with h5py.File(path, "w") as h5:
            h5["u"], h5["v"] = u, u
    with pytest.raises(MissingKeyError) as err:
        open_source([path], ["u", "w"])
    assert (err.value.key, err.value.path, err.value.available) == ("w", str(path), ["u", "v"])
