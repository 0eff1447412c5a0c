"""HDF5 files and v7.3 MAT-files whose datasets hold no real numbers are refused by key with a DataError, as
.npz and v5 .mat files are: complex values were read silently as their real part, text and compound types ended
in a raw ValueError/TypeError, and a MATLAB char variable (text stored as uint16 codes) was read as numbers."""

from __future__ import annotations

import h5py
import numpy as np
import pytest

from opformer.cli import main
from opformer.data import load_arrays
from opformer.pde import DataError


@pytest.fixture()
def odd_h5(tmp_path):
    path = tmp_path / "odd.h5"
    with h5py.File(path, "w") as h5:
        h5["complex"] = np.ones((3, 4), np.complex64) * (1 + 2j)
        h5["bytes"] = np.array([b"ab", b"cd", b"ef"])
        h5["text"] = np.array(["a", "bb", "c"], dtype=h5py.string_dtype())
        h5["compound"] = np.zeros(3, dtype=[("a", "f4"), ("b", "i4")])
        h5["x"] = np.ones((3, 4))
        h5["mask"] = np.ones((3, 4), bool)
    return path


@pytest.mark.parametrize("key, found", [("complex", "dtype complex64"), ("bytes", "dtype |S2"),
                                        ("text", "dtype object"), ("compound", "dtype [('a', '<f4'), ('b', '<i4')]")])
def test_non_numeric_hdf5_dataset_is_refused_by_key(odd_h5, key, found):
    with pytest.raises(DataError) as info:
        load_arrays(odd_h5, (key,))
    assert str(info.value) == f"{odd_h5}: key {key!r} expected a real numeric array, found {found}"


def test_numeric_and_boolean_hdf5_datasets_are_still_read(odd_h5):
    arrays = load_arrays(odd_h5, ("x", "mask"))
    assert arrays["x"].shape == (3, 4) and arrays["mask"].dtype == np.float64 and arrays["mask"].sum() == 12


def _mat73(path, variables: dict) -> None:
    with h5py.File(path, "w", userblock_size=512) as h5:
        for name, (values, cls) in variables.items():
            h5.create_dataset(name, data=values).attrs["MATLAB_class"] = np.bytes_(cls)
    with open(path, "r+b") as fh:
        fh.write(b"MATLAB 7.3 MAT-file, Platform: GLNXA64".ljust(116))


def test_matlab_char_variable_is_not_read_as_numbers(tmp_path, capsys):
    path = tmp_path / "v73.mat"
    _mat73(path, {"name": (np.array([[104], [105], [106]], np.uint16), "char"),
                  "coef": (np.ones((5, 3)), "double"), "sol": (np.ones((5, 3)), "double")})
    with pytest.raises(DataError, match="key 'name' expected a real numeric array, found a MATLAB char variable"):
        load_arrays(path, ("name", "sol"))
    assert load_arrays(path, ("coef", "sol"))["coef"].shape == (3, 5)
    assert main(["data", "info", str(path)]) == 0
    lines = {line.split()[0]: line for line in capsys.readouterr().out.splitlines()[1:]}
    assert lines["name"].endswith("char  (not real numbers: cannot be read)")
    assert lines["coef"].endswith("double")  # the MATLAB class
