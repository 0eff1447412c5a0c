"""Trajectory recipes (Burgers snapshots, Navier–Stokes, shear layer), the recipe registry and their commands."""

from __future__ import annotations

import h5py
import numpy as np
import pytest
import torch

from opformer.cli import main
from opformer.pde import DataError, generate_dataset, make_recipe, read_header
from opformer.pde import navier_stokes as ns
from opformer.pde.generate import NS_FNO, RECIPES, RecipeKind, compute_samples, default_recipe, register_recipe
from opformer.pde.grf import sample_rng

TINY_BURGERS = dict(n_samples=4, resolution=64, solve_resolution=None, steps=20, grf={"modes": 10})
TINY_NS = dict(n_samples=5, resolution=16, solve_resolution=16, t_final=1.0, snapshots=4)



def _arrays(path, *keys):
    with h5py.File(path, "r") as h5:
        return [h5[k][...] for k in keys]


def test_burgers_snapshots_store_the_trajectory_whose_ends_are_a_and_the_final_state(tmp_path):
    """u(t_0) = a and u(t_K) = the one-snapshot recipe's u(T): the same samples, the same solver steps."""
    final = generate_dataset(make_recipe("burgers", **TINY_BURGERS), tmp_path / "final.h5", workers=1, progress=False)
    traj = generate_dataset(make_recipe("burgers", snapshots=4, **TINY_BURGERS), tmp_path / "traj.h5", workers=1,
                            progress=False)
    a, u, t = _arrays(traj, "a", "u", "t")
    assert u.shape == (4, 5, 64) and a.shape == (4, 64)
    np.testing.assert_allclose(t, [0.0, 0.25, 0.5, 0.75, 1.0], rtol=0, atol=0)
    np.testing.assert_allclose(u[:, 0], a, atol=1e-12)
    np.testing.assert_allclose(u[:, -1], _arrays(final, "u")[0], atol=1e-12)
    assert read_header(traj)["recipe"]["snapshots"] == 4
    # without the option the recipe has no snapshots key at all: files written before the option still match
    assert "snapshots" not in make_recipe("burgers") and "snapshots" not in make_recipe("burgers", snapshots=None)


def test_ns_recipe_defaults_are_the_fno_benchmark():
    r = default_recipe("ns")
    assert (r["nu"], r["t_final"], r["snapshots"], r["resolution"], r["forcing"]) == (1e-3, 50.0, 50, 64, "fno")
    assert r["grf"] == {"scale": 7.0**1.5, "tau": 7.0, "gamma": 2.5}
    assert default_recipe("shear-layer")["forcing"] == "none"
    with pytest.raises(DataError, match="multiple of resolution=64"):
        make_recipe("ns", solve_resolution=96)
    with pytest.raises(DataError, match="snapshots"):
        make_recipe("ns", snapshots=0)
    assert make_recipe("ns", tau=5.0)["grf"]["tau"] == 5.0  # flat shortcut


def test_ns_file_holds_vorticity_trajectories_from_the_grf_initial_field(tmp_path):
    recipe = make_recipe("ns", **TINY_NS)
    path = generate_dataset(recipe, tmp_path / "ns.h5", workers=1, progress=False)
    w, t, x, y = _arrays(path, "w", "t", "x", "y")
    assert w.shape == (5, 5, 16, 16) and w.dtype == np.float32
    np.testing.assert_array_equal(t, [0.0, 0.25, 0.5, 0.75, 1.0])
    np.testing.assert_array_equal(x, np.arange(16) / 16)
    np.testing.assert_array_equal(y, x)
    w0 = ns.grf_vorticity(16, None, sample_rng(0, 3))  # sample 3: seed 0, index 3
    np.testing.assert_allclose(w[3, 0], w0, atol=1e-6)
    # the stored trajectory is the solver's, with the FNO forcing
    ref = ns.solve(torch.tensor(w0), nu=1e-3, t_final=1.0, times=t, forcing=ns.fno_forcing(16))
    np.testing.assert_allclose(w[3], ref.numpy(), atol=1e-6)
    assert read_header(path)["recipe"] == recipe


def test_ns_samples_do_not_depend_on_workers_shards_or_solve_grid_of_the_initial_field(tmp_path):
    recipe = make_recipe("ns", **TINY_NS, dtype="float64")
    one = _arrays(generate_dataset(recipe, tmp_path / "one.h5", workers=1, progress=False), "w")[0]
    two = _arrays(generate_dataset(recipe, tmp_path / "two.h5", workers=2, chunk_size=2, progress=False), "w")[0]
    part = _arrays(generate_dataset(recipe, tmp_path / "part.h5", start=2, stop=4, workers=1, progress=False), "w")[0]
    # equal to round-off: torch's batched FFTs round differently for different batch sizes
    np.testing.assert_allclose(two, one, rtol=0, atol=1e-13)
    np.testing.assert_allclose(part, one[2:4], rtol=0, atol=1e-13)
    # a finer solve grid starts from the same field (the output grid's modes) and stays close (16^2 is coarse:
    # its 2/3 rule keeps |k| <= 5 in the products)
    fine = compute_samples(make_recipe("ns", **dict(TINY_NS, solve_resolution=32)), [0])["w"]
    np.testing.assert_allclose(fine[0, 0], one[0, 0], atol=1e-14)
    assert np.max(np.abs(fine[0] - one[0])) < 1e-2 * np.max(np.abs(one[0]))


def test_shear_layer_recipe(tmp_path):
    recipe = make_recipe("shear-layer", n_samples=2, resolution=16, solve_resolution=32, t_final=0.1, snapshots=2,
                         dtype="float64")
    w, t = _arrays(generate_dataset(recipe, tmp_path / "s.h5", workers=1, progress=False), "w", "t")
    assert w.shape == (2, 3, 16, 16)
    np.testing.assert_allclose(w[1, 0], ns.shear_layer_vorticity(32, None, sample_rng(0, 1), rho=1 / 30)[::2, ::2],
                               atol=1e-12)
    assert not np.allclose(w[0, 0], w[1, 0])


def test_a_new_recipe_kind_is_one_registration(tmp_path):
    """Everything generate_dataset needs comes from the RecipeKind: nothing else names the problem."""
    kind = RecipeKind(
        name="constant-test", defaults={"problem": "constant-test", "n_samples": 3, "resolution": 4, "seed": 0,
                                        "value": 2.0, "dtype": "float64"},
        validate=lambda recipe, need: need(recipe["value"] > 0, "value must be > 0"),
        compute=lambda recipe, idx, device: {"c": np.full((len(idx), 4), recipe["value"]) * np.asarray(idx)[:, None]},
        layout=lambda recipe: ({"c": (4,)}, {"x": np.arange(4) / 4}, ()),
        chunk=lambda recipe, device: 2, keys=("c",), shortcuts=None,
    )
    register_recipe(kind)
    try:
        with pytest.raises(DataError, match="value must be > 0"):
            make_recipe("constant-test", value=-1.0)
        path = generate_dataset(make_recipe("constant-test", value=3.0), tmp_path / "c.h5", workers=1, progress=False)
        np.testing.assert_array_equal(_arrays(path, "c")[0], 3.0 * np.arange(3)[:, None] * np.ones(4))
    finally:
        RECIPES.pop("constant-test")


def test_navier_stokes_and_burgers_snapshot_commands(tmp_path, capsys):
    out = tmp_path / "ns.h5"
    argv = ["data", "navier-stokes", "--samples", "3", "--resolution", "16", "--solve-resolution", "16",
            "--t-final", "0.5", "--snapshots", "2", "--nu", "1e-4", "--out", str(out), "--workers", "1", "--no-progress"]
    assert main(argv) == 0
    recipe = read_header(out)["recipe"]
    assert (recipe["problem"], recipe["nu"], recipe["snapshots"], recipe["forcing"]) == ("ns", 1e-4, 2, "fno")
    assert _arrays(out, "w")[0].shape == (3, 3, 16, 16)
    assert main(argv) == 0  # complete: nothing to do

    shear = tmp_path / "shear.h5"
    assert main(["data", "navier-stokes", "--ic", "shear-layer", "--samples", "1", "--resolution", "16",
                 "--t-final", "0.05", "--snapshots", "1", "--out", str(shear), "--no-progress"]) == 0
    recipe = read_header(shear)["recipe"]
    assert (recipe["problem"], recipe["forcing"], recipe["solve_resolution"]) == ("shear-layer", "none", 128)

    traj = tmp_path / "b.h5"
    assert main(["data", "burgers", "--samples", "2", "--resolution", "64", "--steps", "20", "--solve-resolution", "0",
                 "--modes", "10", "--snapshots", "5", "--out", str(traj), "--workers", "1", "--no-progress"]) == 0
    assert _arrays(traj, "u")[0].shape == (2, 6, 64)

    capsys.readouterr()
    assert main(["data", "navier-stokes", "--resolution", "16", "--solve-resolution", "24", "--out", str(tmp_path / "x.h5")]) == 2
    assert "solve_resolution must be a multiple of resolution=16" in capsys.readouterr().err


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message on a machine without CUDA")
def test_unavailable_device_is_one_clear_error(tmp_path, capsys):
    assert main(["data", "navier-stokes", "--samples", "1", "--resolution", "16", "--solve-resolution", "16",
                 "--t-final", "0.1", "--snapshots", "1", "--device", "cuda", "--out", str(tmp_path / "g.h5"),
                 "--no-progress"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("opformer: error: cannot use the device 'cuda'") and "\n" not in err


def test_ns_default_recipe_is_unchanged_by_make_recipe():
    assert make_recipe("ns") == NS_FNO
