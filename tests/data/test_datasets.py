"""PyTorch datasets: batch keys and shapes, strides, derivatives, splits, normalizers, inverse-problem noise."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from opformer.data import (
    BurgersDataset,
    DarcyDataset,
    DarcyInverseDataset,
    DataError,
    UnitGaussianNormalizer,
    load_arrays,
    make_splits,
)
from opformer.pde.darcy import cell_coords, pool_nanmean

BURGERS_KW = dict(train_pool=16, n_val=4, test_range=(-6, None))
DARCY_KW = dict(n_val=2, test_range=(-4, None))


def test_make_splits_follows_the_paper_protocol_with_a_validation_split():
    s = make_splits(1024, 1024)  # Darcy: train file 1024, test file 1024
    assert (s["train"][0], s["train"][-1], len(s["val"]), s["val"][0], s["val"][-1]) == (0, 921, 102, 922, 1023)
    assert (s["test"][0], s["test"][-1], len(s["test"])) == (924, 1023, 100)
    b = make_splits(2048, train_pool=1024, same_file=True)  # Burgers R10: one file
    assert (len(b["train"]), len(b["val"]), b["test"][0], b["test"][-1]) == (922, 102, 1948, 2047)
    c = make_splits(100, 50, n_val=10, n_train=20, test_range=(0, 5))
    assert (list(c["train"]), list(c["val"]), list(c["test"])) == (list(range(20)), list(range(90, 100)), [0, 1, 2, 3, 4])
    with pytest.raises(DataError, match="overlap"):
        make_splits(2048, train_pool=2000, same_file=True)
    with pytest.raises(DataError, match="train_pool"):
        make_splits(10, train_pool=11)


def test_burgers_batches_have_the_documented_keys_shapes_and_dtype(burgers_file):
    ds = BurgersDataset.splits(burgers_file, resolution=32, **BURGERS_KW)
    assert (len(ds["train"]), len(ds["val"]), len(ds["test"])) == (12, 4, 6)
    batch = next(iter(torch.utils.data.DataLoader(ds["train"], batch_size=5)))
    assert set(batch) == {"input", "target", "coords", "target_grad"}
    for key in batch:
        assert batch[key].shape == (5, 32, 1) and batch[key].dtype == torch.float32, key
    x = batch["coords"][0, :, 0]
    assert x[0] == 0 and torch.allclose(x[-1], torch.tensor(1 - 1 / 32))  # j/n: endpoint excluded


def test_burgers_strided_views_and_split_membership(burgers_file):
    raw = load_arrays(burgers_file, ("a", "u"))  # 24 samples, 128 points
    test = BurgersDataset(burgers_file, "test", resolution=64, **BURGERS_KW)
    val = BurgersDataset(burgers_file, "val", resolution=64, **BURGERS_KW)
    np.testing.assert_allclose(test[0]["input"][:, 0].numpy(), raw["a"][18, ::2].astype(np.float32))
    np.testing.assert_allclose(test[5]["target"][:, 0].numpy(), raw["u"][23, ::2].astype(np.float32))
    np.testing.assert_allclose(val[0]["target"][:, 0].numpy(), raw["u"][12, ::2].astype(np.float32))


def test_burgers_target_grad_is_the_periodic_central_difference_of_the_fine_grid(tmp_path):
    n = 512
    x = np.arange(n) / n
    u = np.stack([np.sin(2 * np.pi * k * x) for k in (1, 2, 3, 4)])
    np.savez(tmp_path / "sines.npz", a=u, u=u)
    ds = BurgersDataset(tmp_path / "sines.npz", "train", resolution=128, train_pool=3, n_val=1, test_range=(3, 4))
    for k in (1, 2):
        exact = 2 * np.pi * k * np.cos(2 * np.pi * k * x[::4])
        # (u(x+h) - u(x-h)) / 2h = u' sinc-like factor sin(kh)/(kh): O(h^2) with h = 1/512, not 1/128
        expected = exact * np.sin(2 * np.pi * k / n) / (2 * np.pi * k / n)
        np.testing.assert_allclose(ds[k - 1]["target_grad"][:, 0].numpy(), expected, atol=2e-5)
        assert np.max(np.abs(ds[k - 1]["target_grad"][:, 0].numpy() - exact)) / (2 * np.pi * k) < 2e-4


def test_burgers_normalizer_is_fitted_on_the_train_split_only(burgers_file):
    ds = BurgersDataset.splits(burgers_file, resolution=32, normalize=True, **BURGERS_KW)
    raw = load_arrays(burgers_file, ("a",))["a"][:, ::4]
    norm = ds["train"].input_normalizer
    np.testing.assert_allclose(norm.mean[:, 0].numpy(), raw[:12].mean(0), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(norm.std[:, 0].numpy(), raw[:12].std(0, ddof=1), rtol=1e-5)
    assert ds["test"].input_normalizer is norm and ds["val"].input_normalizer is norm
    enc = ds["test"][0]["input"][:, 0].numpy()
    np.testing.assert_allclose(enc, (raw[18] - norm.mean[:, 0].numpy()) / (norm.std[:, 0].numpy() + 1e-5), rtol=1e-4,
                               atol=1e-4)
    # a test split built on its own fits the same statistics from the train split
    alone = BurgersDataset(burgers_file, "test", resolution=32, normalize=True, **BURGERS_KW)
    torch.testing.assert_close(alone.input_normalizer.mean, norm.mean)


def test_unit_gaussian_normalizer_round_trip_and_state_dict():
    x = torch.randn(50, 7, 3, 1, dtype=torch.float64) * 3 + 2
    n = UnitGaussianNormalizer.fit(x)
    y = n.encode(x.float())
    torch.testing.assert_close(y.mean(0), torch.zeros(7, 3, 1), atol=1e-5, rtol=0)
    torch.testing.assert_close(n.decode(y), x.float(), atol=1e-5, rtol=1e-5)
    m = UnitGaussianNormalizer.from_state_dict(n.state_dict())
    torch.testing.assert_close(m.encode(x.float()), y)
    assert float(m.eps) == pytest.approx(1e-5)


def test_darcy_batches_strides_and_normalizers(darcy_files):
    train_file, test_file = darcy_files  # 10 samples each, 29 x 29 on cell centres
    ds = DarcyDataset.splits(train_file, test_file, resolution=15, **DARCY_KW)
    assert (len(ds["train"]), len(ds["val"]), len(ds["test"])) == (8, 2, 4)
    batch = next(iter(torch.utils.data.DataLoader(ds["test"], batch_size=4)))
    shapes = {k: tuple(v.shape) for k, v in batch.items()}
    assert shapes == {"input": (4, 15, 15, 1), "target": (4, 15, 15, 1), "coords": (4, 15, 15, 2),
                      "target_grad": (4, 15, 15, 2), "coeff": (4, 15, 15, 1)}
    raw_test = load_arrays(test_file, ("coeff", "sol"))
    np.testing.assert_allclose(batch["target"][0, ..., 0].numpy(), raw_test["sol"][6, ::2, ::2].astype(np.float32))
    np.testing.assert_allclose(batch["coeff"][0, ..., 0].numpy(), raw_test["coeff"][6, ::2, ::2])
    x = cell_coords(29)[::2]
    np.testing.assert_allclose(batch["coords"][0, :, 3, 0].numpy(), x.astype(np.float32))  # [..., 0] = x = axis 0
    np.testing.assert_allclose(batch["coords"][0, 3, :, 1].numpy(), x.astype(np.float32))
    raw_train = load_arrays(train_file, ("coeff", "sol"))
    norm = ds["train"].input_normalizer
    np.testing.assert_allclose(norm.mean[..., 0].numpy(), raw_train["coeff"][:8, ::2, ::2].mean(0), rtol=1e-6)
    assert set(ds["test"].normalizers) == {"input", "target"}
    decoded = norm.decode(batch["input"])
    torch.testing.assert_close(decoded, batch["coeff"], atol=1e-4, rtol=1e-5)


def test_darcy_target_grad_matches_the_exact_gradient_to_second_order(tmp_path):
    n = 65
    x = np.linspace(0, 1, n)
    X, Y = np.meshgrid(x, x, indexing="ij")
    u = np.stack([np.sin(np.pi * X) * np.sin(2 * np.pi * Y)] * 4)
    np.savez(tmp_path / "nodes.npz", coeff=np.ones_like(u), sol=u)
    ds = DarcyDataset(tmp_path / "nodes.npz", "train", resolution=33, n_val=1, test_range=(3, 4))  # node grid
    g = ds[0]["target_grad"].numpy()
    Xs, Ys = X[::2, ::2], Y[::2, ::2]
    np.testing.assert_allclose(g[..., 0], np.pi * np.cos(np.pi * Xs) * np.sin(2 * np.pi * Ys), atol=0.02)
    np.testing.assert_allclose(g[..., 1], 2 * np.pi * np.sin(np.pi * Xs) * np.cos(2 * np.pi * Ys), atol=0.05)
    np.testing.assert_allclose(ds[0]["coords"][-1, -1].numpy(), [1.0, 1.0])  # node grid includes the boundary


def test_inverse_dataset_pools_the_coefficient_and_adds_deterministic_noise(darcy_files):
    train_file, test_file = darcy_files
    kw = dict(resolution=15, coarse_factor=4, test_path=test_file, **DARCY_KW)
    clean = DarcyInverseDataset(train_file, "train", noise=0.0, **kw)
    noisy = DarcyInverseDataset(train_file, "train", noise=0.1, noise_seed=5, **kw)
    again = DarcyInverseDataset(train_file, "train", noise=0.1, noise_seed=5, **kw)
    other = DarcyInverseDataset(train_file, "train", noise=0.1, noise_seed=6, **kw)
    item = noisy[0]
    assert {k: tuple(v.shape) for k, v in item.items()} == {"input": (15, 15, 1), "target": (4, 4, 1),
                                                           "coords": (15, 15, 2), "coarse_coords": (4, 4, 2)}
    raw = load_arrays(train_file, ("coeff", "sol"))
    np.testing.assert_allclose(item["target"][..., 0].numpy(), pool_nanmean(pool_nanmean(raw["coeff"][0], 2), 4),
                               rtol=1e-6)
    # eps = 0: the input is exactly the standardized u; the noise is eps * N(0, 1) in standardized units
    u_tr = raw["sol"][:8, ::2, ::2]
    enc = (raw["sol"][0, ::2, ::2] - u_tr.mean(0)) / (u_tr.std(0, ddof=1) + 1e-5)
    np.testing.assert_allclose(clean[0]["input"][..., 0].numpy(), enc, rtol=1e-4, atol=1e-4)
    diff = torch.stack([noisy[i]["input"] - clean[i]["input"] for i in range(len(noisy))])
    assert abs(float(diff.std()) / 0.1 - 1) < 0.1 and abs(float(diff.mean())) < 0.02
    torch.testing.assert_close(noisy[3]["input"], again[3]["input"])  # fixed by the seed
    assert not torch.allclose(noisy[3]["input"], other[3]["input"])
    # the test file's noise is independent of the training file's
    test = DarcyInverseDataset(train_file, "test", noise=0.1, noise_seed=5, normalizers=clean.normalizers, **kw)
    test_clean = DarcyInverseDataset(train_file, "test", noise=0.0, normalizers=clean.normalizers, **kw)
    assert not torch.allclose(test[0]["input"] - test_clean[0]["input"], diff[0], atol=1e-3)


def test_inverse_pooling_sizes_of_the_paper():
    """421 -> 141 -> 36 (strides 3, then 4) and 421 -> 211 -> 71 (2, then 3)."""
    a = np.zeros((1, 421, 421))
    assert pool_nanmean(pool_nanmean(a, 3), 4).shape == (1, 36, 36)
    assert pool_nanmean(pool_nanmean(a, 2), 3).shape == (1, 71, 71)


def test_resolution_that_is_not_a_stride_is_reported(burgers_file, darcy_files):
    with pytest.raises(DataError, match=r"burgers\.h5: resolution 48 is not a stride of the stored resolution 128; "
                                        r"possible resolutions: \[128, 64, 32, 16, 8, 4\]"):
        BurgersDataset(burgers_file, resolution=48, **BURGERS_KW)
    with pytest.raises(DataError, match=r"darcy_train\.h5: resolution 14 is not a stride of the stored resolution 29; "
                                        r"possible resolutions: \[29, 15, 8, 5, 3\]"):
        DarcyDataset(darcy_files[0], resolution=14, **DARCY_KW)


def test_inconsistent_shapes_missing_keys_and_nan_are_reported(tmp_path):
    np.savez(tmp_path / "shapes.npz", a=np.zeros((4, 64)), u=np.zeros((4, 32)))
    with pytest.raises(DataError, match=r"shapes\.npz: key 'u' expected shape \(4, 64\) like key 'a', found \(4, 32\)"):
        BurgersDataset(tmp_path / "shapes.npz", train_pool=3, n_val=1, test_range=(3, 4), resolution=32)
    np.savez(tmp_path / "rect.npz", coeff=np.zeros((4, 9, 7)), sol=np.zeros((4, 9, 7)))
    with pytest.raises(DataError, match=r"rect\.npz: key 'coeff' expected shape \(n_samples, n, n\), found \(4, 9, 7\)"):
        DarcyDataset(tmp_path / "rect.npz", resolution=5, n_val=1, test_range=(3, 4))
    with pytest.raises(DataError, match=r"rect\.npz: key 'a' not found; available keys: \['coeff', 'sol'\]"):
        BurgersDataset(tmp_path / "rect.npz")
    sol = np.ones((4, 9, 9))
    sol[1, 4, 4] = np.nan
    np.savez(tmp_path / "nan.npz", coeff=np.ones((4, 9, 9)), sol=sol)
    with pytest.raises(DataError, match=r"nan\.npz: key 'sol' contains NaN or inf in sample\(s\) \[1\]"):
        DarcyDataset(tmp_path / "nan.npz", resolution=5, n_val=1, test_range=(3, 4))
    with pytest.raises(DataError, match=r"missing\.h5: file not found"):
        DarcyDataset(tmp_path / "missing.h5")
    with pytest.raises(DataError, match="split"):
        DarcyDataset(tmp_path / "nan.npz", "validation")


def test_original_mat_darcy_file_defaults_to_cell_centre_coordinates(tmp_path):
    import scipy.io

    rng = np.random.default_rng(0)
    scipy.io.savemat(tmp_path / "piececonst_r9.mat", {"coeff": rng.random((4, 9, 9)), "sol": rng.random((4, 9, 9))})
    ds = DarcyDataset(tmp_path / "piececonst_r9.mat", resolution=5, n_val=1, test_range=(3, 4))
    np.testing.assert_allclose(ds[0]["coords"][:, 0, 0].numpy(), cell_coords(9)[::2].astype(np.float32))
