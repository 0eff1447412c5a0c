"""A Burgers FILE.partial records how its samples are computed (the attribute ``method``), and one begun by an
earlier generator is not resumed where that generator computed other samples.

Output grids coarser than the 512-point solve grid now hold the point values of the solve grid's interpolant; the
earlier generator stored its modes below the output grid's Nyquist frequency. Resuming such a FILE.partial would
mix the two in one file, so it is refused in one line (as a FILE.partial of another recipe is), and kept. On output
grids at least as fine as the solve grid the samples did not change and a FILE.partial without the attribute is
resumed. Shards from the two generators are not read as one data set either, and a complete coarse file of the
earlier generator is not returned for the recipe when it is asked for again."""

from __future__ import annotations

import h5py
import numpy as np
import pytest

from opformer.cli import main
from opformer.data import open_source
from opformer.pde import DataError, compute_samples, make_recipe
from opformer.pde.generate import _layout
from opformer.pde.storage import ShardWriter, partial_path, read_header


def _argv(out, *extra):
    return ["data", "burgers", "--samples", "4", "--workers", "1", "--no-progress", "--out", str(out), *extra]


def _begun(out, recipe, method=None) -> None:
    """A FILE.partial with samples 0 and 1 of 4 written, as an interrupted generation leaves it; ``method``: the
    attribute it records (None: none, as the earlier generator wrote)."""
    shapes, coords, _ = _layout(recipe)
    with ShardWriter(out, recipe, start=0, stop=4, shapes=shapes, coords=coords) as writer:
        writer.write([0, 1], compute_samples(recipe, [0, 1]))
    with h5py.File(partial_path(out), "r+") as h5:
        if "method" in h5.attrs:
            del h5.attrs["method"]
        if method is not None:
            h5.attrs["method"] = method


def test_a_coarse_grid_partial_of_the_earlier_generator_is_refused_and_kept(tmp_path, capsys):
    out = tmp_path / "b64.h5"
    _begun(out, make_recipe("burgers", n_samples=4, resolution=64))
    before = partial_path(out).read_bytes()
    assert main(_argv(out, "--resolution", "64")) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert err.startswith(f"opformer: error: {partial_path(out)}: was begun by an earlier opformer"), err
    assert "mix" in err and f"delete {partial_path(out)} to regenerate" in err, err
    assert not out.exists() and partial_path(out).read_bytes() == before  # kept as it was


def test_a_partial_of_another_generator_version_is_refused(tmp_path, capsys):
    out = tmp_path / "b64.h5"
    _begun(out, make_recipe("burgers", n_samples=4, resolution=64), method="burgers/1")
    assert main(_argv(out, "--resolution", "64")) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "burgers/1" in err and "burgers/2" in err, err
    assert not out.exists() and partial_path(out).exists()


@pytest.mark.parametrize("extra", [["--resolution", "64", "--solve-resolution", "0"],
                                   ["--resolution", "64", "--solve-resolution", "32", "--modes", "15"]])
def test_a_partial_without_the_attribute_is_resumed_where_the_samples_did_not_change(tmp_path, capsys, extra):
    sr = int(extra[3]) or None
    recipe = make_recipe("burgers", n_samples=4, resolution=64, solve_resolution=sr,
                         **({"modes": 15} if sr == 32 else {}))
    out, fresh = tmp_path / "resumed.h5", tmp_path / "fresh.h5"
    _begun(out, recipe)
    assert main(_argv(out, *extra)) == 0 and main(_argv(fresh, *extra)) == 0
    capsys.readouterr()
    with h5py.File(out, "r") as a, h5py.File(fresh, "r") as b:
        np.testing.assert_array_equal(a["u"][...], b["u"][...])


def test_the_generated_files_record_the_method(tmp_path):
    out = tmp_path / "b.h5"
    assert main(_argv(out, "--resolution", "64")) == 0
    assert read_header(out)["method"] == "burgers/2"
    with h5py.File(out, "r+") as h5:
        del h5.attrs["method"]
    assert read_header(out)["method"] is None


def _shard(tmp_path, name, start, stop, resolution, extra=()):
    out = tmp_path / name
    assert main(_argv(out, "--resolution", str(resolution), "--start", str(start), "--stop", str(stop), *extra)) == 0
    return out


def test_coarse_shards_of_the_two_generators_are_not_read_as_one_data_set(tmp_path, capsys):
    first, second = _shard(tmp_path, "s0.h5", 0, 2, 64), _shard(tmp_path, "s1.h5", 2, 4, 64)
    capsys.readouterr()
    assert open_source([first, second], ("a", "u")).n_samples == 4
    with h5py.File(second, "r+") as h5:
        del h5.attrs["method"]
    with pytest.raises(DataError) as info:
        open_source([first, second], ("a", "u"))
    text = str(info.value)
    assert "\n" not in text and str(second) in text and str(first) in text and "an earlier opformer" in text
    with h5py.File(first, "r+") as h5:  # both from the earlier generator: one data set again
        del h5.attrs["method"]
    assert open_source([first, second], ("a", "u")).n_samples == 4


def test_fine_grid_shards_with_and_without_the_attribute_are_one_data_set(tmp_path, capsys):
    extra = ("--solve-resolution", "0")
    first, second = _shard(tmp_path, "s0.h5", 0, 2, 64, extra), _shard(tmp_path, "s1.h5", 2, 4, 64, extra)
    capsys.readouterr()
    with h5py.File(second, "r+") as h5:
        del h5.attrs["method"]
    assert open_source([first, second], ("a", "u")).n_samples == 4


def _made(out, *extra) -> None:
    """A complete file of 4 samples, its attribute ``method`` removed, as the earlier generator wrote it."""
    assert main(_argv(out, *extra)) == 0
    with h5py.File(out, "r+") as h5:
        del h5.attrs["method"]


def test_a_complete_coarse_grid_file_of_the_earlier_generator_is_not_taken_for_the_recipe(tmp_path, capsys):
    """Asked again for the same recipe, a complete file of the earlier generator was returned as if it held this
    version's samples (`opformer data`, and the cache of a preset's default data through ensure_dataset)."""
    from opformer.pde import ensure_dataset

    out = tmp_path / "b64.h5"
    _made(out, "--resolution", "64")
    capsys.readouterr()
    before = out.read_bytes()
    assert main(_argv(out, "--resolution", "64")) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert err.startswith(f"opformer: error: {out}: was made by an earlier opformer"), err
    assert f"delete {out} to regenerate" in err, err
    assert out.read_bytes() == before and not partial_path(out).exists()  # kept as it was, nothing begun
    with pytest.raises(DataError, match="was made by an earlier opformer"):
        ensure_dataset("burgers", out, n_samples=4, resolution=64, workers=1, progress=False)
    with h5py.File(out, "r+") as h5:
        h5.attrs["method"] = "burgers/1"
    with pytest.raises(DataError, match=r"another version of the burgers generator \(burgers/1; this one is burgers/2\)"):
        ensure_dataset("burgers", out, n_samples=4, resolution=64, workers=1, progress=False)


def test_a_complete_file_without_the_attribute_is_taken_where_the_samples_did_not_change(tmp_path, capsys):
    from opformer.pde import ensure_dataset

    out = tmp_path / "b64.h5"
    extra = ("--resolution", "64", "--solve-resolution", "0")
    _made(out, *extra)
    assert main(_argv(out, *extra)) == 0
    assert "Traceback" not in capsys.readouterr().err
    assert ensure_dataset("burgers", out, n_samples=4, resolution=64, solve_resolution=None, workers=1,
                          progress=False) == out
