"""What each Task makes of a data file: batch keys and shapes, strides and split membership, the H1 targets, the
normalizers (fitted on the training split, valid on other grids), the inverse problem's pooling and noise, and the
errors that name the file, the key or the flag."""

from __future__ import annotations

import h5py
import numpy as np
import pytest
import torch

from opformer.config import DataConfig
from opformer.data import DataError, load_arrays
from opformer.pde.darcy import cell_coords, pool_nanmean
from opformer.tasks import Operator, get_task

BURGERS = dict(train_pool=16, n_val=4, n_test=6)  # 24 samples: train 0..11, val 12..15, test 18..23
DARCY = dict(n_val=2, n_test=4)  # 10 + 10 samples: train 0..7, val 8..9; test: the last 4 of the test file


class Identity(torch.nn.Module):
    """A model that returns its (encoded) input: the Operator around it shows what the model is given."""

    def forward(self, x, coords):
        return x


def _load(task_name, files, splits=("train", "val", "test"), normalizers=None, options=None, **data):
    task = get_task(task_name)
    if isinstance(files, (tuple, list)):
        files = {"train": files[0], "test": files[1]}
    elif not isinstance(files, dict):
        files = {"train": files, "test": None}
    opts = options if options is not None else task.options_class()
    return task.load(DataConfig(**data), opts, files, splits=splits, normalizers=normalizers)


def _batch(ds, n):
    return torch.utils.data.default_collate([ds[i] for i in range(n)])


# --- Burgers ------------------------------------------------------------------------------------------------------------
def test_burgers_batches_have_the_documented_keys_shapes_and_dtype(burgers_file):
    b = _load("burgers", burgers_file, resolution=32, **BURGERS)
    assert {k: len(v) for k, v in b.datasets.items()} == {"train": 12, "val": 4, "test": 6}
    assert (b.grid, b.input_grid, b.target_grid) == ("periodic", (32,), (32,))
    assert b.normalizers == {}  # the paper does not standardize the Burgers input
    batch = _batch(b.datasets["train"], 5)
    assert set(batch) == {"input", "target", "coords", "target_grad"}
    for key in batch:
        assert batch[key].shape == (5, 32, 1) and batch[key].dtype == torch.float32, key
    x = batch["coords"][0, :, 0]
    assert x[0] == 0 and torch.allclose(x[-1], torch.tensor(1 - 1 / 32))  # j/n: the endpoint is excluded


def test_burgers_strided_views_and_split_membership(burgers_file):
    raw = load_arrays(burgers_file, ("a", "u"))  # 24 samples, 128 points
    b = _load("burgers", burgers_file, resolution=64, **BURGERS)
    test, val, train = b.datasets["test"], b.datasets["val"], b.datasets["train"]
    np.testing.assert_allclose(test[0]["input"][:, 0].numpy(), raw["a"][18, ::2].astype(np.float32))
    np.testing.assert_allclose(test[5]["target"][:, 0].numpy(), raw["u"][23, ::2].astype(np.float32))
    np.testing.assert_allclose(val[0]["target"][:, 0].numpy(), raw["u"][12, ::2].astype(np.float32))
    np.testing.assert_allclose(train[11]["input"][:, 0].numpy(), raw["a"][11, ::2].astype(np.float32))


def test_burgers_target_grad_is_the_periodic_central_difference_of_the_fine_grid(tmp_path):
    n = 512
    x = np.arange(n) / n
    u = np.stack([np.sin(2 * np.pi * k * x) for k in (1, 2, 3, 4)])
    np.savez(tmp_path / "sines.npz", a=u, u=u)
    ds = _load("burgers", tmp_path / "sines.npz", splits=("train",), resolution=128, n_test=1,
               n_val=1).datasets["train"]
    assert len(ds) == 2
    for k in (1, 2):
        g = ds[k - 1]["target_grad"][:, 0].numpy()
        exact = 2 * np.pi * k * np.cos(2 * np.pi * k * x[::4])
        # (u(x+h) - u(x-h)) / 2h = u' sin(2 pi k h) / (2 pi k h), h = 1/512 (the stored grid), not 1/128
        expected = exact * np.sin(2 * np.pi * k / n) / (2 * np.pi * k / n)
        np.testing.assert_allclose(g, expected, atol=2e-5)
        assert np.max(np.abs(g - exact)) / (2 * np.pi * k) < 2e-4


def test_burgers_input_normalizer_is_fitted_on_the_train_split_only(burgers_file):
    task = get_task("burgers")
    opts = task.options_class(normalize_input=True)
    b = _load("burgers", burgers_file, options=opts, resolution=32, **BURGERS)
    raw = load_arrays(burgers_file, ("a",))["a"][:, ::4]
    norm = b.normalizers["input"]
    assert set(b.normalizers) == {"input"}
    np.testing.assert_allclose(norm.mean[:, 0].numpy(), raw[:12].mean(0), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(norm.std[:, 0].numpy(), raw[:12].std(0, ddof=1), rtol=1e-5)
    # the datasets hold physical values; the Operator encodes them with the fitted statistics
    op = task.build_operator({"name": "fno1d", "width": 4, "modes": 2, "num_layers": 1, "head_width": 4},
                             b.normalizers, opts)
    op.model = Identity()
    batch = _batch(b.datasets["test"], 2)
    np.testing.assert_allclose(batch["input"][0, :, 0].numpy(), raw[18].astype(np.float32))
    enc = op(batch["input"], batch["coords"][:1])[0, :, 0].numpy()
    np.testing.assert_allclose(enc, (raw[18] - norm.mean[:, 0].numpy()) / (norm.std[:, 0].numpy() + 1e-5), rtol=1e-4,
                               atol=1e-4)
    # a test split loaded on its own fits the same statistics from the train split
    alone = _load("burgers", burgers_file, splits=("test",), options=opts, resolution=32, **BURGERS)
    torch.testing.assert_close(alone.normalizers["input"].mean, norm.mean)
    torch.testing.assert_close(alone.normalizers["input"].std, norm.std)


def test_periodic_input_normalizer_at_twice_the_resolution_agrees_at_the_shared_points(burgers_file):
    """The points j/32 of the training grid are the even points of the 64-point grid: there the normalizer
    evaluated on the finer grid must give the fitted values (it is a function on the periodic domain)."""
    opts = get_task("burgers").options_class(normalize_input=True)
    coarse = _load("burgers", burgers_file, options=opts, resolution=32, **BURGERS)
    fine = _load("burgers", burgers_file, splits=("test",), options=opts, normalizers=coarse.normalizers,
                 resolution=64, **BURGERS)
    norm = coarse.normalizers["input"]
    x32, x64 = coarse.datasets["test"].tensors("input"), fine.datasets["test"].tensors("input")
    assert torch.equal(x64[:, ::2], x32)
    torch.testing.assert_close(norm.encode(x64)[:, ::2], norm.encode(x32), atol=1e-4, rtol=1e-4)


# --- Darcy --------------------------------------------------------------------------------------------------------------
def test_darcy_batches_strides_and_normalizers(darcy_files):
    train_file, test_file = darcy_files  # 10 samples each, 29 x 29 cell centres
    b = _load("darcy", darcy_files, resolution=15, **DARCY)
    assert {k: len(v) for k, v in b.datasets.items()} == {"train": 8, "val": 2, "test": 4}
    assert (b.grid, b.input_grid, b.target_grid) == ("cell", (15, 15), (15, 15))
    batch = _batch(b.datasets["test"], 4)
    assert {k: tuple(v.shape) for k, v in batch.items()} == {
        "input": (4, 15, 15, 1), "target": (4, 15, 15, 1), "coords": (4, 15, 15, 2), "target_grad": (4, 15, 15, 2)}
    raw_test = load_arrays(test_file, ("coeff", "sol"))
    np.testing.assert_allclose(batch["target"][0, ..., 0].numpy(), raw_test["sol"][6, ::2, ::2].astype(np.float32))
    np.testing.assert_allclose(batch["input"][0, ..., 0].numpy(), raw_test["coeff"][6, ::2, ::2].astype(np.float32))
    x = cell_coords(29)[::2].astype(np.float32)
    np.testing.assert_allclose(batch["coords"][0, :, 3, 0].numpy(), x)  # [..., 0] = x = axis 0
    np.testing.assert_allclose(batch["coords"][0, 3, :, 1].numpy(), x)
    raw_train = load_arrays(train_file, ("coeff", "sol"))
    assert set(b.normalizers) == {"input", "target"}
    for role, key in (("input", "coeff"), ("target", "sol")):
        fitted = raw_train[key][:8, ::2, ::2]
        np.testing.assert_allclose(b.normalizers[role].mean[..., 0].numpy(), fitted.mean(0), rtol=1e-5, atol=1e-7)
        np.testing.assert_allclose(b.normalizers[role].std[..., 0].numpy(), fitted.std(0, ddof=1), rtol=1e-5,
                                   atol=1e-7)
    # the Operator encodes the input and decodes the output: with an identity model the round trip is the input
    # mapped through the target statistics
    op = Operator(Identity(), b.normalizers["input"], b.normalizers["target"])
    enc = b.normalizers["input"].encode(batch["input"])
    torch.testing.assert_close(op(batch["input"], batch["coords"][:1]), b.normalizers["target"].decode(enc))
    torch.testing.assert_close(Operator(Identity(), b.normalizers["input"], b.normalizers["input"])(
        batch["input"], batch["coords"][:1]), batch["input"], atol=1e-4, rtol=1e-5)


def test_darcy_operator_with_a_dirichlet_model_is_zero_on_the_boundary(darcy_files):
    b = _load("darcy", darcy_files, resolution=15, **DARCY)
    op = Operator(Identity(), b.normalizers["input"], b.normalizers["target"], zero_boundary=True)
    batch = _batch(b.datasets["train"], 3)
    y = op(batch["input"], batch["coords"][:1])
    for ring in (y[:, 0], y[:, -1], y[:, :, 0], y[:, :, -1]):
        assert torch.all(ring == 0)
    assert torch.all(y[:, 1:-1, 1:-1] != 0)


def test_darcy_target_grad_is_second_order_and_taken_on_the_stored_grid(tmp_path):
    def field(n):
        x = np.linspace(0, 1, n)
        X, Y = np.meshgrid(x, x, indexing="ij")
        u = np.sin(np.pi * X) * np.sin(2 * np.pi * Y)
        grad = np.stack([np.pi * np.cos(np.pi * X) * np.sin(2 * np.pi * Y),
                         2 * np.pi * np.sin(np.pi * X) * np.cos(2 * np.pi * Y)], axis=-1)
        np.savez(tmp_path / f"nodes{n}.npz", coeff=np.ones((4, n, n)), sol=np.stack([u] * 4))
        return grad

    errors = {}
    for n in (33, 65):
        exact = field(n)
        b = _load("darcy", tmp_path / f"nodes{n}.npz", splits=("train",), n_val=1, n_test=1)
        assert b.grid == "node"
        errors[n] = np.abs(b.datasets["train"][0]["target_grad"].numpy() - exact).max()
        np.testing.assert_allclose(b.datasets["train"][0]["coords"][-1, -1].numpy(), [1.0, 1.0])  # both ends
    assert errors[33] < 0.1 and 3.5 < errors[33] / errors[65] < 4.5  # O(h^2), boundary included
    # strided to 33, the gradient is the one of the stored 65-point grid (h = 1/64), not of the 33-point view
    strided = _load("darcy", tmp_path / "nodes65.npz", splits=("train",), resolution=33, n_val=1, n_test=1)
    own = _load("darcy", tmp_path / "nodes65.npz", splits=("train",), n_val=1, n_test=1)
    torch.testing.assert_close(strided.datasets["train"][0]["target_grad"],
                               own.datasets["train"][0]["target_grad"][::2, ::2])


def test_darcy_normalizer_of_a_strided_grid_agrees_with_itself_on_the_stored_grid(darcy_files):
    """Fitted at 15 (every other of the 29 stored points), evaluated on the 29 stored points: at the points both
    grids share it must give the fitted statistics back."""
    coarse = _load("darcy", darcy_files, resolution=15, **DARCY)
    full = _load("darcy", darcy_files, splits=("test",), normalizers=coarse.normalizers, resolution=29, **DARCY)
    y15, y29 = coarse.datasets["test"].tensors("target"), full.datasets["test"].tensors("target")
    assert torch.equal(y29[:, ::2, ::2], y15)
    norm = coarse.normalizers["target"]
    torch.testing.assert_close(norm.encode(y29)[:, ::2, ::2], norm.encode(y15), atol=1e-4, rtol=1e-4)


def test_darcy_node_grid_normalizer_on_the_stored_grid_agrees_at_the_shared_points(tmp_path):
    rng = np.random.default_rng(3)
    np.savez(tmp_path / "nodes.npz", coeff=rng.uniform(3, 12, (12, 17, 17)), sol=rng.normal(size=(12, 17, 17)))
    coarse = _load("darcy", tmp_path / "nodes.npz", resolution=9, n_val=2, n_test=2)
    full = _load("darcy", tmp_path / "nodes.npz", splits=("test",), normalizers=coarse.normalizers, n_val=2, n_test=2)
    for role in ("input", "target"):
        norm = coarse.normalizers[role]
        x9, x17 = coarse.datasets["test"].tensors(role), full.datasets["test"].tensors(role)
        torch.testing.assert_close(norm.encode(x17)[:, ::2, ::2], norm.encode(x9), atol=1e-4, rtol=1e-4)


# --- the inverse problem ------------------------------------------------------------------------------------------------
def test_inverse_pooling_sizes_of_the_paper():
    """421 -> 141 -> 36 (strides 3, then 4) and 421 -> 211 -> 71 (2, then 3); 85 -> 29 (3) for the CPU presets."""
    a = np.zeros((1, 421, 421))
    assert pool_nanmean(pool_nanmean(a, 3), 4).shape == (1, 36, 36)
    assert pool_nanmean(pool_nanmean(a, 2), 3).shape == (1, 71, 71)
    assert pool_nanmean(pool_nanmean(a, 5), 3).shape == (1, 29, 29)


def test_inverse_target_is_the_pooled_coefficient(darcy_files):
    train_file, _ = darcy_files
    inv = get_task("darcy-inverse")
    b = _load("darcy-inverse", darcy_files, options=inv.options_class(noise=0.0, coarse_factor=4), resolution=15,
              **DARCY)
    assert (b.input_grid, b.target_grid) == ((15, 15), (4, 4))  # 29 -> 15 (stride 2) -> ceil(15 / 4)
    item = b.datasets["train"][0]
    assert {k: tuple(v.shape) for k, v in item.items()} == {"input": (15, 15, 1), "target": (4, 4, 1),
                                                           "coords": (15, 15, 2)}
    raw = load_arrays(train_file, ("coeff", "sol"))
    np.testing.assert_allclose(item["target"][..., 0].numpy(), pool_nanmean(pool_nanmean(raw["coeff"][0], 2), 4),
                               rtol=1e-6)
    np.testing.assert_allclose(item["input"][..., 0].numpy(), raw["sol"][0, ::2, ::2].astype(np.float32))
    assert set(b.normalizers) == {"input"}  # the coefficient is predicted in physical units
    u_tr = raw["sol"][:8, ::2, ::2]
    np.testing.assert_allclose(b.normalizers["input"].mean[..., 0].numpy(), u_tr.mean(0), rtol=1e-5, atol=1e-8)
    big = _load("darcy-inverse", darcy_files, splits=("train",), options=inv.options_class(coarse_factor=3),
                resolution=29, **DARCY)
    assert big.target_grid == (10, 10)


def test_inverse_noise_is_eps_xi_in_standardized_units_and_deterministic(darcy_files):
    """The input is u + noise * (std + eps) * xi in physical units, so that the Operator's encoded input is exactly
    encode(u) + noise * xi, with xi from default_rng([noise_seed, file, sample]) (file 1: the separate test file)."""
    inv = get_task("darcy-inverse")
    kw = dict(resolution=15, **DARCY)
    clean = _load("darcy-inverse", darcy_files, options=inv.options_class(noise=0.0), **kw)
    noisy = _load("darcy-inverse", darcy_files, options=inv.options_class(noise=0.1, noise_seed=5), **kw)
    norm = noisy.normalizers["input"]
    torch.testing.assert_close(norm.mean, clean.normalizers["input"].mean)  # fitted on the clean training inputs
    torch.testing.assert_close(norm.std, clean.normalizers["input"].std)
    op = Operator(Identity(), norm)
    first = {"train": 0, "val": 8, "test": 6}  # sample positions in their files
    for split, file_id in (("train", 0), ("val", 0), ("test", 1)):
        n = len(noisy.datasets[split])
        xi = np.stack([np.random.default_rng([5, file_id, first[split] + i]).standard_normal((15, 15))
                       for i in range(n)])[..., None]
        u_noisy = noisy.datasets[split].tensors("input")
        u_clean = clean.datasets[split].tensors("input")
        coords = noisy.datasets[split][0]["coords"][None]
        encoded = op(u_noisy, coords)
        torch.testing.assert_close(encoded, norm.encode(u_clean) + 0.1 * torch.tensor(xi, dtype=torch.float32),
                                   atol=2e-5, rtol=1e-5)
        torch.testing.assert_close(noisy.datasets[split].tensors("target"), clean.datasets[split].tensors("target"))
    again = _load("darcy-inverse", darcy_files, options=inv.options_class(noise=0.1, noise_seed=5), **kw)
    other = _load("darcy-inverse", darcy_files, options=inv.options_class(noise=0.1, noise_seed=6), **kw)
    assert torch.equal(again.datasets["train"].tensors("input"), noisy.datasets["train"].tensors("input"))
    assert not torch.allclose(other.datasets["train"].tensors("input"), noisy.datasets["train"].tensors("input"))


# --- errors and accepted layouts ------------------------------------------------------------------------------------------
def test_resolution_that_is_not_a_stride_is_reported(burgers_file, darcy_files):
    with pytest.raises(DataError, match=r"--resolution 48 is not a stride of the 128 points stored in .*burgers\.h5; "
                                        r"possible: 128, 64, 32, 16, 8, 4$"):
        _load("burgers", burgers_file, resolution=48, **BURGERS)
    with pytest.raises(DataError, match=r"--resolution 14 is not a stride of the 29 points stored in "
                                        r".*darcy_train\.h5; possible: 29, 15, 8, 5, 3$"):
        _load("darcy", darcy_files, resolution=14, **DARCY)


def test_inconsistent_shapes_missing_keys_and_nan_are_reported(tmp_path):
    np.savez(tmp_path / "shapes.npz", a=np.zeros((4, 64)), u=np.zeros((4, 32)))
    with pytest.raises(DataError, match=r"shapes\.npz: keys \('a', 'u'\) must hold grids of one shape \(64,\), "
                                        r"found \[\(64,\), \(32,\)\]"):
        _load("burgers", tmp_path / "shapes.npz", n_val=1, n_test=1)
    np.savez(tmp_path / "rect.npz", coeff=np.zeros((4, 9, 7)), sol=np.zeros((4, 9, 7)))
    with pytest.raises(DataError, match=r"rect\.npz: task darcy needs square grids, found \(9, 7\)"):
        _load("darcy", tmp_path / "rect.npz", n_val=1, n_test=1)
    with pytest.raises(DataError, match=r"rect\.npz: key 'a' not found; available keys: \['coeff', 'sol'\]"):
        _load("burgers", tmp_path / "rect.npz")
    with pytest.raises(DataError, match=r"rect\.npz: key 'coeff' expected shape \(samples, n\) or \(samples, n, 1\), "
                                        r"found \(4, 9, 7\)"):
        _load("burgers", tmp_path / "rect.npz", keys=["coeff", "sol"])
    sol = np.ones((4, 9, 9))
    sol[1, 4, 4] = np.nan
    np.savez(tmp_path / "nan.npz", coeff=np.ones((4, 9, 9)), sol=sol)
    with pytest.raises(DataError, match=r"nan\.npz: key 'sol' contains NaN or inf in 1 of its 4 samples: 1 "):
        _load("darcy", tmp_path / "nan.npz", resolution=5, n_val=1, n_test=1)
    with pytest.raises(DataError, match=r"missing\.h5: file not found"):
        _load("darcy", tmp_path / "missing.h5")
    with pytest.raises(DataError, match=r"--keys needs two different array names INPUT,TARGET, got sol,sol"):
        _load("darcy", tmp_path / "nan.npz", keys=["sol", "sol"])


def test_original_mat_darcy_file_defaults_to_cell_centre_coordinates(tmp_path):
    import scipy.io

    rng = np.random.default_rng(0)
    scipy.io.savemat(tmp_path / "piececonst_r9.mat", {"coeff": rng.random((4, 9, 9)), "sol": rng.random((4, 9, 9))})
    b = _load("darcy", tmp_path / "piececonst_r9.mat", resolution=5, n_val=1, n_test=1)
    assert b.grid == "cell" and b.input_grid == (5, 5)
    np.testing.assert_allclose(b.datasets["train"][0]["coords"][:, 0, 0].numpy(), cell_coords(9)[::2].astype(np.float32))
    np.savez(tmp_path / "r9.npz", coeff=rng.random((4, 9, 9)), sol=rng.random((4, 9, 9)))
    other = _load("darcy", tmp_path / "r9.npz", resolution=5, n_val=1, n_test=1)  # other files: nodes, both ends
    assert other.grid == "node"
    np.testing.assert_allclose(other.datasets["train"][0]["coords"][:, 0, 0].numpy(), np.linspace(0, 1, 5))


def test_keys_given_as_x_y_select_the_arrays(tmp_path):
    rng = np.random.default_rng(4)
    x, y = rng.normal(size=(6, 16)), rng.normal(size=(6, 16))
    np.savez(tmp_path / "mine.npz", x=x, y=y, a=np.zeros((6, 16)), u=np.zeros((6, 16)))
    b = _load("burgers", tmp_path / "mine.npz", keys=["x", "y"], n_val=1, n_test=1)
    np.testing.assert_allclose(b.datasets["train"].tensors("input")[..., 0].numpy(), x[:4].astype(np.float32))
    np.testing.assert_allclose(b.datasets["test"].tensors("target")[..., 0].numpy(), y[5:].astype(np.float32))
    # the periodic grid of a user's file is j/n when the file stores no coordinates
    np.testing.assert_allclose(b.datasets["train"][0]["coords"][:, 0].numpy(), np.arange(16) / 16)


def test_a_trailing_channel_axis_of_one_is_the_same_data(tmp_path):
    rng = np.random.default_rng(5)
    a, u = rng.normal(size=(6, 16)), rng.normal(size=(6, 16))
    np.savez(tmp_path / "flat.npz", a=a, u=u)
    np.savez(tmp_path / "chan.npz", a=a[..., None], u=u[..., None])
    flat = _load("burgers", tmp_path / "flat.npz", resolution=8, n_val=1, n_test=1)
    chan = _load("burgers", tmp_path / "chan.npz", resolution=8, n_val=1, n_test=1)
    for split in ("train", "val", "test"):
        for key in ("input", "target", "target_grad"):
            assert torch.equal(flat.datasets[split].tensors(key), chan.datasets[split].tensors(key)), (split, key)
    c, s = rng.uniform(3, 12, (5, 9, 9)), rng.normal(size=(5, 9, 9))
    np.savez(tmp_path / "flat2.npz", coeff=c, sol=s)
    np.savez(tmp_path / "chan2.npz", coeff=c[..., None], sol=s[..., None])
    flat2 = _load("darcy", tmp_path / "flat2.npz", n_val=1, n_test=1)
    chan2 = _load("darcy", tmp_path / "chan2.npz", n_val=1, n_test=1)
    assert chan2.input_grid == (9, 9)
    for key in ("input", "target", "target_grad"):
        assert torch.equal(flat2.datasets["train"].tensors(key), chan2.datasets["train"].tensors(key)), key


def test_integer_and_boolean_arrays_are_read_as_numbers(tmp_path):
    """Piecewise-constant coefficients stored as integers and indicator fields stored as booleans."""
    rng = np.random.default_rng(6)
    coeff = rng.choice([3, 12], size=(5, 9, 9)).astype(np.int32)
    sol = rng.normal(size=(5, 9, 9))
    np.savez(tmp_path / "ints.npz", coeff=coeff, sol=sol)
    b = _load("darcy", tmp_path / "ints.npz", n_val=1, n_test=1)
    np.testing.assert_array_equal(b.datasets["train"].tensors("input")[..., 0].numpy(), coeff[:3].astype(np.float32))
    mask = rng.random((6, 16)) > 0.5
    np.savez(tmp_path / "bools.npz", a=mask, u=rng.normal(size=(6, 16)))
    with h5py.File(tmp_path / "bools.h5", "w") as h5:
        h5["a"], h5["u"] = mask, rng.normal(size=(6, 16))
    for name in ("bools.npz", "bools.h5"):
        c = _load("burgers", tmp_path / name, n_val=1, n_test=1)
        np.testing.assert_array_equal(c.datasets["train"].tensors("input")[..., 0].numpy(),
                                      mask[:4].astype(np.float32), err_msg=name)
