"""MATLAB files holding variables that are not real numbers: text (char), cell arrays, structs, complex arrays, and
logical arrays, in the v5 format (scipy.io.savemat) and in v7.3 (HDF5, as MATLAB lays it out).

`opformer data info` lists every variable with its name, shape and MATLAB class; a key naming one that holds no
real numbers is refused, before its values are read, in one line naming the file, the key, its class and the
numeric keys there are; a logical variable is read as 0/1, as boolean arrays of the other formats are."""

from __future__ import annotations

import h5py
import numpy as np
import pytest
import scipy.io

from opformer.cli import main
from opformer.data import load_arrays
from opformer.pde import DataError

A = np.arange(24.0).reshape(6, 4)
MASK = (np.arange(24).reshape(6, 4) % 3 == 0)


def _v5(path, compress: bool):
    obj = scipy.io.matlab.MatlabObject(np.array([(1.0,)], dtype=[("w", "O")]), classname="Thing")
    scipy.io.savemat(path, {"a": A, "u": 2 * A, "name": "hello", "cells": np.array([[1.0, "x"]], dtype=object),
                            "s": {"f": np.ones(3), "g": "t"}, "mask": MASK, "z": A + 1j * A, "obj": obj},
                     do_compression=compress)
    return path


def _v73(path):
    """The layout MATLAB's ``save -v7.3`` writes: column-major arrays (axes reversed), the class in the attribute
    MATLAB_class, text as uint16 codes, cells as references into #refs#, a struct as a group, complex values as a
    compound (real, imag), a logical as uint8, an empty array as its size with MATLAB_empty, a 512-byte header."""
    with h5py.File(path, "w", userblock_size=512) as h5:
        def var(where, name, data, cls, **attrs):
            ds = where.create_dataset(name, data=data)
            ds.attrs["MATLAB_class"] = np.bytes_(cls)
            for key, value in attrs.items():
                ds.attrs[key] = value
            return ds

        var(h5, "a", A.T, "double")
        var(h5, "u", 2 * A.T, "double")
        var(h5, "name", np.frombuffer("hello".encode("utf-16-le"), np.uint16).reshape(5, 1), "char",
            MATLAB_int_decode=np.int32(2))
        refs = h5.create_group("#refs#")
        one, ex = var(refs, "a", np.ones((1, 1)), "double"), var(refs, "b", np.array([[120]], np.uint16), "char")
        cells = h5.create_dataset("cells", shape=(2, 1), dtype=h5py.ref_dtype)
        cells[0, 0], cells[1, 0] = one.ref, ex.ref
        cells.attrs["MATLAB_class"] = np.bytes_("cell")
        s = h5.create_group("s")
        s.attrs["MATLAB_class"] = np.bytes_("struct")
        var(s, "f", np.ones((3, 1)), "double")
        var(s, "g", np.array([[116]], np.uint16), "char", MATLAB_int_decode=np.int32(2))
        var(h5, "mask", MASK.T.astype(np.uint8), "logical", MATLAB_int_decode=np.int32(1))
        z = np.zeros((4, 6), dtype=[("real", "<f8"), ("imag", "<f8")])
        z["real"], z["imag"] = A.T, A.T
        var(h5, "z", z, "double")
        var(h5, "empty", np.array([0, 0], np.uint64), "double", MATLAB_empty=np.uint8(1))
        var(h5, "when", np.array([[3707764736], [2], [1], [1], [1], [1]], np.uint32), "datetime",
            MATLAB_object_decode=np.int32(3))
    with open(path, "r+b") as fh:
        fh.write(b"MATLAB 7.3 MAT-file, Platform: GLNXA64, Created on: Mon Jan  1 00:00:00 2024 HDF5 schema 1.00 .")
    return path


@pytest.fixture(params=["v5", "v5-compressed", "v7.3"])
def mat(request, tmp_path):
    path = tmp_path / "vars.mat"
    return _v73(path) if request.param == "v7.3" else _v5(path, compress=request.param == "v5-compressed")


def _info(path, capsys) -> dict:
    assert main(["data", "info", str(path)]) == 0
    captured = capsys.readouterr()
    assert captured.err == ""
    return {line.split()[0]: line.strip().split("  ")[1:] for line in captured.out.splitlines()[1:]}


def test_info_lists_every_variable_with_its_shape_and_class(mat, capsys):
    lines = _info(mat, capsys)
    assert lines["a"] == ["(6, 4)", "double"] and lines["u"] == ["(6, 4)", "double"]
    assert lines["mask"] == ["(6, 4)", "logical"]
    assert lines["name"] == ["(1, 5)", "char", "(not real numbers: cannot be read)"]
    assert lines["cells"][1:] == ["cell", "(not real numbers: cannot be read)"]
    assert lines["s"] == ["(1, 1)", "struct", "(not real numbers: cannot be read)"]
    assert lines["z"] == ["(6, 4)", "complex double", "(not real numbers: cannot be read)"]
    assert lines["s/f"] == ["(1, 3)", "double"]  # a struct's numeric field, by its path (v5: the struct is read)
    assert lines["s/g"][1:] == ["char", "(not real numbers: cannot be read)"]
    if "obj" in lines:  # v5: a MATLAB object
        assert lines["obj"][1:] == ["object", "(objects, not numbers: refused when read)"]
    else:  # v7.3: an object of a class of its own (a datetime), its fields as uint32 codes
        assert lines["when"][1] == "datetime (a MATLAB object: cannot be read)"
        assert lines["empty"] == ["()", "double (empty: no values)"]


@pytest.mark.parametrize("key, cls", [("name", "char"), ("cells", "cell"), ("s", "struct"), ("z", "complex double")])
def test_a_key_that_holds_no_real_numbers_is_refused_in_one_line(mat, key, cls):
    with pytest.raises(DataError) as info:
        load_arrays(mat, (key, "u"))
    numeric = "['a', 'mask', 's/f', 'u']" if h5py.is_hdf5(mat) else "['a', 'u', 's/f', 'mask']"
    assert str(info.value) == (f"{mat}: key {key!r} expected a real numeric array, found a MATLAB {cls} variable; "
                               f"numeric keys: {numeric}")


def test_a_complex_v4_variable_is_listed_and_refused_unread(tmp_path, capsys, monkeypatch):
    """The v4 format (savemat format="4") marks a complex variable in its header: it was listed as double and read
    whole before it was refused."""
    path = tmp_path / "v4.mat"
    scipy.io.savemat(path, {"a": A, "z": A + 1j * A, "name": "hi", "u": 2 * A}, format="4")
    lines = _info(path, capsys)
    assert lines["z"] == ["(6, 4)", "complex double", "(not real numbers: cannot be read)"]
    assert lines["a"] == ["(6, 4)", "double"] and lines["u"] == ["(6, 4)", "double"]  # u: after z and the text
    loaded = []
    monkeypatch.setattr(scipy.io, "loadmat", lambda *args, **kwargs: loaded.append(kwargs) or {})
    with pytest.raises(DataError, match=r"key 'z' expected a real numeric array, found a MATLAB complex double "
                                        r"variable; numeric keys: \['a', 'u'\]$"):
        load_arrays(path, ("z", "a"))
    assert loaded == []


def test_objects_and_empty_variables_are_refused_by_key(tmp_path):
    v5, v73 = _v5(tmp_path / "v5.mat", False), _v73(tmp_path / "v73.mat")
    with pytest.raises(DataError, match=r"key 'obj' expected a real numeric array, found a MATLAB object variable; "
                                        r"numeric keys: \['a', 'u', 's/f', 'mask'\]$"):
        load_arrays(v5, ("obj",))
    with pytest.raises(DataError, match=r"key 'when' expected a real numeric array, found a MATLAB datetime variable"):
        load_arrays(v73, ("when",))
    with pytest.raises(DataError, match=r"key 'empty' is an empty MATLAB variable \(it holds no values\); numeric"):
        load_arrays(v73, ("empty",))


def test_logical_variables_are_read_as_zeros_and_ones(mat):
    arrays = load_arrays(mat, ("mask", "a"))
    assert arrays["mask"].dtype == np.float64
    np.testing.assert_array_equal(arrays["mask"], MASK.astype(np.float64))
    np.testing.assert_array_equal(arrays["a"], A)


def test_a_refused_v5_variable_is_never_loaded(tmp_path, monkeypatch):
    path = _v5(tmp_path / "v5.mat", True)
    loaded = []
    loadmat = scipy.io.loadmat
    monkeypatch.setattr(scipy.io, "loadmat", lambda p, variable_names=None, **k: loaded.append(variable_names)
                        or loadmat(p, variable_names=variable_names, **k))
    for key in ("cells", "s", "obj", "z", "name"):
        with pytest.raises(DataError, match=f"key '{key}' expected a real numeric array"):
            load_arrays(path, (key,))
    # no refused variable is read; the one struct is, for the message's list of numeric keys (its field s/f)
    assert loaded and all(names == ["s"] for names in loaded), loaded


def test_training_on_a_text_variable_is_refused_in_one_line(mat, tmp_path, capsys):
    code = main(["train", "burgers-gt", "--data", str(mat), "--keys", "name,u", "--out", str(tmp_path / "r")])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "Traceback" not in err, err
    assert f"{mat}: key 'name' expected a real numeric array, found a MATLAB char variable; numeric keys:" in err
    assert not (tmp_path / "r").exists()


def test_a_struct_field_is_a_key_in_every_format(mat):
    """A 1 x 1 struct's numeric field is named by its path, ``s/f``, in a v5 file as in a v7.3 one (v5: the fields
    were not listed, and "s/f" was not found)."""
    arrays = load_arrays(mat, ("s/f",))
    np.testing.assert_array_equal(arrays["s/f"], np.ones((1, 3)))
    with pytest.raises(DataError, match=r"key 's/g' expected a real numeric array, found a MATLAB char variable"):
        load_arrays(mat, ("s/g",))


def test_nested_v5_struct_fields_are_keys_and_other_structs_are_not_read(tmp_path, monkeypatch):
    path = tmp_path / "nested.mat"
    scipy.io.savemat(path, {"a": A, "out": {"inner": {"u": 2 * A}, "note": "x"}, "big": {"w": np.ones((1000, 10))}})
    arrays = load_arrays(path, ("a", "out/inner/u"))
    np.testing.assert_array_equal(arrays["out/inner/u"], 2 * A)
    with pytest.raises(DataError, match=r"key 'out/inner/v' not found; available keys: \['a', 'big', 'out', "
                                        r"'out/inner', 'out/inner/u', 'out/note'\]"):
        load_arrays(path, ("a", "out/inner/v"))
    read = []
    loadmat = scipy.io.loadmat
    monkeypatch.setattr(scipy.io, "loadmat", lambda p, variable_names=None, **k: read.append(variable_names)
                        or loadmat(p, variable_names=variable_names, **k))
    load_arrays(path, ("a", "out/inner/u"))
    assert all("big" not in names for names in read), read  # a struct no key names is not read
