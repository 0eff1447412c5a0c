"""A user's own data files that cannot be trained on are refused in one line in the user's terms: a pickled member of
an .npz (no code runs, nothing but its header is read), an empty .h5 or .mat, a bare .npy, and values that float32
(the models' precision) turns into inf."""

import os

import h5py
import numpy as np
import pytest
import scipy.io

from opformer.data import DataError, load_arrays
from opformer.data.readers import describe_arrays


class _Payload:
    """Unpickling it would create the file ``ran``: the test that no code runs."""

    def __init__(self, ran):
        self.ran = str(ran)

    def __reduce__(self):
        return (os.mkdir, (self.ran,))


def test_an_npz_member_holding_pickled_objects_is_refused_naming_the_key(tmp_path):
    ran = tmp_path / "ran"
    np.savez(tmp_path / "evil.npz", coef=np.array([_Payload(ran)], dtype=object), sol=np.zeros((1, 3, 3)))
    with pytest.raises(DataError) as info:
        load_arrays(tmp_path / "evil.npz", ("coef", "sol"))
    text = str(info.value)
    assert "\n" not in text and "evil.npz: refused: key 'coef' holds pickled Python objects" in text
    assert "allow_pickle" not in text and "np.savez" in text
    assert not ran.exists()
    # the other member alone is read as usual
    assert load_arrays(tmp_path / "evil.npz", ("sol",))["sol"].shape == (1, 3, 3)


@pytest.mark.parametrize("name, what", [("e.h5", "HDF5"), ("e.mat", "a MATLAB file")])
def test_an_empty_h5_or_mat_file_is_named_as_empty(tmp_path, name, what):
    (tmp_path / name).write_bytes(b"")
    with pytest.raises(DataError, match=f"{name}: cannot be read as {what} \\(an empty file\\)$"):
        load_arrays(tmp_path / name, ("coef", "sol"))
    with pytest.raises(DataError, match="an empty file"):
        describe_arrays(tmp_path / name)


def test_a_file_that_is_not_hdf5_says_so_without_h5pys_words(tmp_path):
    (tmp_path / "text.h5").write_text("not hdf5 at all\n")
    with pytest.raises(DataError) as info:
        load_arrays(tmp_path / "text.h5", ("coef", "sol"))
    assert "not an HDF5 file" in str(info.value) and "signature" not in str(info.value)


def test_a_bare_npy_is_refused_with_the_way_to_an_npz(tmp_path):
    np.save(tmp_path / "a.npy", np.zeros((4, 5)))
    with pytest.raises(DataError) as info:
        load_arrays(tmp_path / "a.npy", ("coef", "sol"))
    assert "unsupported file type '.npy'" in str(info.value) and "np.savez(" in str(info.value)


@pytest.mark.parametrize("suffix", [".npz", ".h5", ".mat"])
def test_values_beyond_float32_are_refused_naming_key_and_samples(tmp_path, suffix):
    a = np.ones((5, 4, 4))
    a[3, 1, 2] = 1e39  # finite in float64, inf in float32: a training loss of NaN, a prediction of NaN
    path = tmp_path / f"big{suffix}"
    if suffix == ".npz":
        np.savez(path, coef=a, sol=np.ones((5, 4, 4)))
    elif suffix == ".h5":
        with h5py.File(path, "w") as h5:
            h5["coef"], h5["sol"] = a, np.ones((5, 4, 4))
    else:
        scipy.io.savemat(path, {"coef": a, "sol": np.ones((5, 4, 4))})
    with pytest.raises(DataError) as info:
        load_arrays(path, ("coef", "sol"))
    text = str(info.value)
    assert "\n" not in text and f"big{suffix}: key 'coef' holds values beyond float32's range" in text
    assert "in 1 of its 5 samples: 3" in text
    a[3, 1, 2] = 1e30  # large, but a float32
    np.savez(tmp_path / "ok.npz", coef=a, sol=np.ones((5, 4, 4)))
    assert load_arrays(tmp_path / "ok.npz", ("coef",))["coef"].max() == 1e30
