"""`opformer data info` on files opformer did not write: an empty archive, arrays the readers refuse, arrays
without samples; and the readers' refusal of an array with no samples."""

from __future__ import annotations

import h5py
import numpy as np
import pytest

from opformer.cli import main
from opformer.data import load_arrays
from opformer.pde import DataError


def test_info_on_an_npz_without_arrays_says_so_in_one_line(tmp_path, capsys):
    path = tmp_path / "empty.npz"
    np.savez(path)
    assert main(["data", "info", str(path)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.strip() == f"opformer: error: {path}: not an opformer data file, and it holds no arrays"


def test_info_marks_the_arrays_that_cannot_be_read(tmp_path, capsys):
    path = tmp_path / "odd.npz"
    np.savez(path, c=np.ones((3, 4), np.complex64), s=np.array(["ab", "c"]), o=np.array([{"a": 1}], dtype=object),
             r=np.zeros(3, dtype=[("a", "f4"), ("b", "i4")]), z=np.zeros((0, 5)), sc=np.float64(3.0),
             x=np.ones((3, 8), np.float16), y=np.ones((3, 8), np.uint8))
    assert main(["data", "info", str(path)]) == 0
    lines = {line.split()[0]: line for line in capsys.readouterr().out.splitlines()[1:]}
    for key in ("c", "s", "r"):
        assert lines[key].endswith("(not real numbers: cannot be read)"), lines[key]
    assert lines["o"].endswith("(objects, not numbers: refused when read)")
    assert lines["z"].endswith("(no samples)")
    assert lines["sc"].endswith("(a single value: no sample axis)")
    assert lines["x"].endswith("float16") and lines["y"].endswith("uint8")  # read as float64


def test_info_gives_no_training_hint_when_no_array_can_be_read(tmp_path, capsys):
    path = tmp_path / "strings.npz"
    np.savez(path, names=np.array(["a", "b"]), fields=np.zeros(2, dtype=[("a", "f4")]))
    assert main(["data", "info", str(path)]) == 0
    head = capsys.readouterr().out.splitlines()[0]
    assert "none of them can be read as training data" in head and "--keys" not in head


@pytest.mark.parametrize("suffix", [".npz", ".h5"])
def test_an_array_with_no_samples_is_refused_when_read(tmp_path, suffix):
    path = tmp_path / f"none{suffix}"
    if suffix == ".npz":
        np.savez(path, a=np.zeros((0, 16)), u=np.zeros((0, 16)))
    else:
        with h5py.File(path, "w") as h5:
            h5["a"] = np.zeros((0, 16))
            h5["u"] = np.zeros((0, 16))
    with pytest.raises(DataError, match=r"key 'a' holds no samples \(shape \(0, 16\)\)"):
        load_arrays(path, ("a", "u"))


@pytest.mark.parametrize("content", [b"", b"not hdf5 at all"])
def test_info_on_an_unreadable_partial_file_says_what_it_is(tmp_path, capsys, content):
    path = tmp_path / "b.h5.partial"
    path.write_bytes(content)
    assert main(["data", "info", str(path)]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1
    assert "cannot be read as HDF5" in err and "delete it and run again" in err
    assert "unsupported file type" not in err
