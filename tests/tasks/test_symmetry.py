"""D4 augmentation of 2D pairs (opformer/tasks/symmetry.py): the moved gradient is the gradient of the moved field,
the eight codes are the group of the square, and the Darcy solver commutes with every element (so a moved pair is
an exact pair of the same problem)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from opformer.cli import main
from opformer.config import ConfigError
from opformer.pde.darcy import solve
from opformer.tasks.symmetry import D4_ELEMENTS, check_symmetric_grid, dihedral_batch, dihedral_field, \
    dihedral_gradient


def _smooth(n: int):
    x = np.linspace(0.0, 1.0, n)
    gx, gy = np.meshgrid(x, x, indexing="ij")
    u = np.sin(2 * gx + 0.3) * np.cos(3 * gy - 0.2) + gx ** 2 * gy
    ux = 2 * np.cos(2 * gx + 0.3) * np.cos(3 * gy - 0.2) + 2 * gx * gy
    uy = -3 * np.sin(2 * gx + 0.3) * np.sin(3 * gy - 0.2) + gx ** 2
    return x, torch.tensor(u)[..., None], torch.tensor(np.stack([ux, uy], -1))


def test_the_moved_gradient_is_the_gradient_of_the_moved_field():
    x, u, g = _smooth(65)
    h = x[1] - x[0]
    for code in D4_ELEMENTS:
        moved = dihedral_field(u, code)[..., 0].numpy()
        dx, dy = np.gradient(moved, h, edge_order=2)
        mg = dihedral_gradient(g, code).numpy()
        # only the finite-difference error of the identity remains (second order: ~1e-3 at h = 1/64)
        assert np.abs(dx - mg[..., 0]).max() < 2e-3 and np.abs(dy - mg[..., 1]).max() < 2e-3, code
    # a wrong rule (the transpose without swapping the components) is caught by the same check
    dx, dy = np.gradient(dihedral_field(u, 1)[..., 0].numpy(), h, edge_order=2)
    assert np.abs(dx - dihedral_field(g, 1)[..., 0].numpy()).max() > 0.5


def test_the_eight_codes_are_the_group_of_the_square():
    f = torch.arange(25.0).view(5, 5, 1) ** 1.5  # no symmetry of its own
    images = [dihedral_field(f, c) for c in D4_ELEMENTS]
    assert len({tuple(t.flatten().tolist()) for t in images}) == 8
    keys = {tuple(t.flatten().tolist()) for t in images}
    for a in D4_ELEMENTS:  # closed under composition, and every element is a rotation or reflection of the square
        for b in D4_ELEMENTS:
            assert tuple(dihedral_field(dihedral_field(f, a), b).flatten().tolist()) in keys
    rot90 = torch.rot90(f, 1, dims=(0, 1))
    assert any(torch.equal(rot90, t) for t in images)


def test_the_darcy_solver_commutes_with_every_element():
    """solve(a o g) = solve(a) o g on the node grid: a moved (coefficient, solution) pair is an exact pair."""
    rng = np.random.default_rng(3)
    n = 17
    a = np.where(rng.random((n, n)) > 0.5, 12.0, 3.0)
    a[4:9, 2:13] = 7.0  # a block without the square's symmetry
    u = solve(a)
    for code in D4_ELEMENTS:
        ta = dihedral_field(torch.tensor(a)[..., None], code)[..., 0].numpy()
        tu = dihedral_field(torch.tensor(u)[..., None], code)[..., 0].numpy()
        assert np.abs(solve(ta) - tu).max() < 1e-10 * np.abs(u).max(), code


def test_a_batch_gets_one_element_per_sample_and_keeps_the_coordinates():
    x, u, g = _smooth(9)
    batch = {"input": torch.stack([u, 2 * u, 3 * u]).float(), "target": torch.stack([u, 2 * u, 3 * u]).float(),
             "target_grad": torch.stack([g, 2 * g, 3 * g]).float(), "coords": torch.zeros(3, 9, 9, 2)}
    out = dihedral_batch(batch, torch.Generator().manual_seed(0), ("input", "target"), ("target_grad",))
    assert out["coords"] is batch["coords"]
    for i in range(3):  # input and target moved by the same element
        code = next(c for c in D4_ELEMENTS if torch.equal(dihedral_field(batch["input"][i], c), out["input"][i]))
        assert torch.equal(dihedral_field(batch["target"][i], code), out["target"][i])
        assert torch.equal(dihedral_gradient(batch["target_grad"][i], code), out["target_grad"][i])


def test_grids_without_the_symmetry_are_refused():
    x = np.linspace(0, 1, 9)
    check_symmetric_grid(np.stack(np.meshgrid(x, x, indexing="ij"), -1), "here")
    xs = x ** 2  # not symmetric about its centre
    with pytest.raises(ConfigError, match="symmetric about the centre"):
        check_symmetric_grid(np.stack(np.meshgrid(xs, xs, indexing="ij"), -1), "here")
    with pytest.raises(ConfigError, match="symmetric about the centre"):
        check_symmetric_grid(np.stack(np.meshgrid(x, 2 * x, indexing="ij"), -1), "here")


@pytest.fixture(scope="module")
def darcy_npz(tmp_path_factory):
    rng = np.random.default_rng(0)
    n, m = 13, 20
    a = np.where(rng.random((m, n, n)) > 0.5, 12.0, 3.0)
    path = tmp_path_factory.mktemp("d4") / "perm.npz"
    np.savez(path, perm=a, pressure=solve(a).astype(np.float32))
    return path


def _train(path, out, *extra):
    args = ["train", "darcy-fno", "--data", str(path), "--keys", "perm,pressure", "--width", "8", "--modes", "4",
            "--epochs", "2", "--batch-size", "4", "--out", str(out), "--no-progress", "--threads", "1", *extra]
    assert main(args) == 0
    return json.loads((out / "metrics.json").read_text())


def test_training_with_d4_runs_and_repeats_itself(darcy_npz, tmp_path):
    a = _train(darcy_npz, tmp_path / "a", "--augment", "d4")
    b = _train(darcy_npz, tmp_path / "b", "--augment", "d4")
    c = _train(darcy_npz, tmp_path / "c")
    assert a["test_rel_l2"] == b["test_rel_l2"]  # the same seed on the same machine
    assert a["test_rel_l2"] != c["test_rel_l2"]  # the augmentation changed what was trained on


def test_augment_on_a_task_without_the_symmetry_is_one_line_before_anything_is_written(tmp_path, capsys):
    np.savez(tmp_path / "b.npz", x=np.zeros((10, 32)), y=np.zeros((10, 32)))
    code = main(["train", "burgers-gt", "--data", str(tmp_path / "b.npz"), "--keys", "x,y", "--augment", "d4",
                 "--out", str(tmp_path / "r"), "--no-progress"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "--augment d4: task burgers does not have that symmetry" in err
    assert not (tmp_path / "r").exists()
