"""The problem-independent data pieces: splits (counts, fractions, the paper's protocols), normalizers (round trip,
per channel, evaluated on other grids), strides and the dataset of named tensors."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from opformer.data import DataError, FieldDataset, UnitGaussianNormalizer, make_splits, sample_array, stride_for


def _span(a):
    return (int(a[0]), int(a[-1]), len(a))


# --- splits -------------------------------------------------------------------------------------------------------------
def test_burgers_r10_protocol_train_val_from_the_pool_test_from_the_end_of_the_file():
    s = make_splits(2048, n_test=100, train_pool=1124, n_val=100, n_train=1024)
    assert _span(s["train"]) == (0, 1023, 1024)
    assert _span(s["val"]) == (1024, 1123, 100)
    assert _span(s["test"]) == (1948, 2047, 100)
    np.testing.assert_array_equal(s["train"], np.arange(1024))  # contiguous, in file order


def test_darcy_protocol_with_a_separate_test_file_uses_all_of_it():
    s = make_splits(1124, 100, n_train=1024, n_val=100, n_test=None, train_pool=1124)
    assert _span(s["train"]) == (0, 1023, 1024)
    assert _span(s["val"]) == (1024, 1123, 100)
    assert _span(s["test"]) == (0, 99, 100)
    last = make_splits(1124, 100, n_test=30, n_val=100)  # n_test takes the last samples of the test file
    assert _span(last["test"]) == (70, 99, 30)
    assert _span(last["train"]) == (0, 1023, 1024)  # the whole training file is the pool


def test_by_default_a_separate_test_file_is_all_test_samples():
    """The documented default (``n_test`` not given): all of a separate test file, 10% of a single file."""
    assert _span(make_splits(1124, 100)["test"]) == (0, 99, 100)
    assert _span(make_splits(1000)["test"]) == (900, 999, 100)


def test_default_splits_are_fractions_test_10_percent_of_the_file_val_10_percent_of_the_pool():
    s = make_splits(100)
    assert _span(s["test"]) == (90, 99, 10)
    assert _span(s["val"]) == (81, 89, 9)  # round(0.1 * 90)
    assert _span(s["train"]) == (0, 80, 81)
    f = make_splits(200, n_test=0.25, n_val=0.2)
    assert _span(f["test"]) == (150, 199, 50)
    assert _span(f["val"]) == (120, 149, 30)
    assert _span(f["train"]) == (0, 119, 120)
    g = make_splits(10, 40, n_test=0.5, n_val=0.01)  # a positive fraction gives at least one sample
    assert _span(g["test"]) == (20, 39, 20) and _span(g["val"]) == (9, 9, 1)
    h = make_splits(10, n_test=2, n_val=0)
    assert len(h["val"]) == 0 and _span(h["train"]) == (0, 7, 8)


def test_splits_never_overlap_and_the_pool_bounds_train_and_validation():
    s = make_splits(500, n_test=50, train_pool=300, n_val=40, n_train=100)
    assert _span(s["train"]) == (0, 99, 100) and _span(s["val"]) == (260, 299, 40) and _span(s["test"]) == (450, 499, 50)
    assert not set(s["train"]) & set(s["val"]) and not (set(s["train"]) | set(s["val"])) & set(s["test"])


def test_split_errors_name_the_flag_and_the_counts():
    with pytest.raises(DataError, match=r"--n-train 1025 is more than the 1024 samples left for training in data\.h5 "
                                        r"\(2048 samples: 100 validation, 100 test\)"):
        make_splits(2048, n_test=100, train_pool=1124, n_val=100, n_train=1025, where="data.h5")
    with pytest.raises(DataError, match=r"--train-pool 2000 is more than the 1948 samples available in data\.h5 "
                                        r"\(100 are test samples\)"):
        make_splits(2048, n_test=100, train_pool=2000, where="data.h5")
    with pytest.raises(DataError, match=r"--n-test 10 must leave samples for training: the training file has 10"):
        make_splits(10, n_test=10)
    with pytest.raises(DataError, match=r"--n-test 50 must be between 1 and the 40 samples of the test file"):
        make_splits(10, 40, n_test=50)
    with pytest.raises(DataError, match=r"--n-val 9 leaves no training sample: the training file has 9 samples for "
                                        r"training and validation after 1 for testing"):
        make_splits(10, n_test=1, n_val=9)
    with pytest.raises(DataError, match=r"--n-train 0 is more than"):
        make_splits(10, n_train=0)


# --- normalizers --------------------------------------------------------------------------------------------------------
def test_normalizer_round_trip_zero_mean_unit_std_and_state_dict():
    x = torch.randn(50, 7, 3, 1, dtype=torch.float64) * 3 + 2
    n = UnitGaussianNormalizer.fit(x)
    assert n.per_point and n.mean.shape == (7, 3, 1)
    y = n.encode(x.float())
    torch.testing.assert_close(y.mean(0), torch.zeros(7, 3, 1), atol=1e-5, rtol=0)
    # the unbiased std of the encoded samples is std / (std + eps): 1 up to eps / std
    torch.testing.assert_close(y.double().std(0), torch.ones(7, 3, 1, dtype=torch.float64), atol=1e-5, rtol=0)
    torch.testing.assert_close(n.decode(y), x.float(), atol=1e-5, rtol=1e-5)
    m = UnitGaussianNormalizer.empty(n.describe())
    m.load_state_dict(n.state_dict())
    torch.testing.assert_close(m.encode(x.float()), y)
    assert m.eps == pytest.approx(1e-5) and m.nodes is True


def test_normalizer_is_the_documented_formula_with_eps():
    x = torch.tensor([[1.0, 10.0], [3.0, 10.0], [5.0, 10.0]], dtype=torch.float64)[..., None]  # (3, 2, 1)
    n = UnitGaussianNormalizer.fit(x, eps=0.5)
    torch.testing.assert_close(n.mean[:, 0], torch.tensor([3.0, 10.0]))
    torch.testing.assert_close(n.std[:, 0], torch.tensor([2.0, 0.0]))  # unbiased: sqrt(8 / 2)
    enc = n.encode(torch.tensor([[[7.0], [11.0]]]))
    torch.testing.assert_close(enc[0, :, 0], torch.tensor([(7 - 3) / 2.5, (11 - 10) / 0.5]))


def test_per_channel_normalizer_pools_grid_and_samples_per_channel():
    rng = np.random.default_rng(1)
    x = np.stack([rng.normal(5.0, 2.0, (40, 6, 6)), rng.normal(-1.0, 0.5, (40, 6, 6))], axis=-1)  # (40, 6, 6, 2)
    n = UnitGaussianNormalizer.fit(x, per_point=False)
    assert not n.per_point and n.mean.shape == (2,)
    flat = x.reshape(-1, 2)
    np.testing.assert_allclose(n.mean.numpy(), flat.mean(0), rtol=1e-6)
    np.testing.assert_allclose(n.std.numpy(), flat.std(0, ddof=1), rtol=1e-6)
    # one normalizer for every grid: no resampling, the same two numbers per channel
    z = torch.randn(3, 11, 11, 2)
    expected = (z - torch.tensor(flat.mean(0), dtype=torch.float32)) / (
        torch.tensor(flat.std(0, ddof=1), dtype=torch.float32) + 1e-5)
    torch.testing.assert_close(n.encode(z), expected)
    torch.testing.assert_close(n.decode(n.encode(z)), z, atol=1e-5, rtol=1e-5)


def test_fit_needs_two_samples_and_matching_shapes():
    with pytest.raises(DataError, match="at least 2 training samples"):
        UnitGaussianNormalizer.fit(np.zeros((1, 5, 1)))
    with pytest.raises(DataError, match=r"mean shape \(3, 1\) != std shape \(4, 1\)"):
        UnitGaussianNormalizer(torch.zeros(3, 1), torch.ones(4, 1))


def _bilinear(X, Y):
    mean = 1.0 + 2.0 * X - 3.0 * Y + 4.0 * X * Y
    std = 2.0 + X + 0.5 * Y + X * Y
    return mean, std


def _node_grid(n):
    x = np.linspace(0.0, 1.0, n)
    return np.meshgrid(x, x, indexing="ij")


def test_node_grid_normalizer_on_a_finer_grid_is_its_interpolated_field():
    """Fitted on 17 x 17 nodes, evaluated on 33 x 33 nodes of the same square: bilinear interpolation reproduces
    bilinear fields exactly, so mean and std on the fine grid are the fields themselves at the fine nodes."""
    X, Y = _node_grid(17)
    mean, std = _bilinear(X, Y)
    eps = 1e-3
    n = UnitGaussianNormalizer(torch.tensor(mean)[..., None], torch.tensor(std)[..., None], eps=eps, nodes=True)
    z = torch.randn(2, 33, 33, 1, dtype=torch.float64)
    Xf, Yf = _node_grid(33)
    mf, sf = (torch.tensor(f)[None, ..., None] for f in _bilinear(Xf, Yf))
    torch.testing.assert_close(n.encode(z), (z - mf) / (sf + eps), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(n.decode(z), z * (sf + eps) + mf, atol=1e-5, rtol=1e-5)
    # every other fine node is a training node: there the fitted values come back unchanged
    torch.testing.assert_close(n.encode(z)[:, ::2, ::2], n.encode(z[:, ::2, ::2]), atol=1e-5, rtol=1e-5)


def test_normalizer_on_its_own_grid_is_exact_and_not_resampled():
    rng = np.random.default_rng(2)
    x = rng.normal(size=(20, 17, 17, 1)) * rng.uniform(0.5, 2.0, (17, 17, 1)) + rng.normal(size=(17, 17, 1))
    n = UnitGaussianNormalizer.fit(x)
    z = torch.tensor(x[:3], dtype=torch.float32)
    expected = (z - n.mean) / (n.std + n.eps)
    assert torch.equal(n.encode(z), expected)
    torch.testing.assert_close(n.decode(n.encode(z)), z, atol=1e-5, rtol=1e-5)


def test_normalizer_in_1d_on_a_finer_node_grid_is_linear_interpolation():
    x = np.linspace(0.0, 1.0, 9)
    mean, std = 3.0 - 2.0 * x, 1.0 + x
    n = UnitGaussianNormalizer(torch.tensor(mean)[:, None], torch.tensor(std)[:, None], eps=0.0, nodes=True)
    xf = np.linspace(0.0, 1.0, 17)
    z = torch.ones(1, 17, 1, dtype=torch.float64)
    torch.testing.assert_close(n.encode(z)[0, :, 0], torch.tensor((1.0 - (3.0 - 2.0 * xf)) / (1.0 + xf)))


# --- strides and arrays -----------------------------------------------------------------------------------------------
def test_stride_for_node_and_periodic_grids():
    assert stride_for(421, 141, nodes=True, where="f") == 3  # 420 = 3 * 140
    assert stride_for(421, 211, nodes=True, where="f") == 2
    assert stride_for(421, 85, nodes=True, where="f") == 5
    assert stride_for(421, None, nodes=True, where="f") == 1
    assert stride_for(8192, 512, nodes=False, where="f") == 16
    with pytest.raises(DataError, match=r"--resolution 100 is not a stride of the 421 points stored in f; "
                                        r"possible: 421, 211, 141, 106, 85, 71, 61"):
        stride_for(421, 100, nodes=True, where="f")
    with pytest.raises(DataError, match=r"--resolution 48 is not a stride of the 128 points stored in g; "
                                        r"possible: 128, 64, 32, 16, 8, 4$"):
        stride_for(128, 48, nodes=False, where="g")


def test_sample_array_drops_a_trailing_channel_of_one_and_names_the_key():
    a = np.zeros((3, 5, 5, 1))
    assert sample_array(a, 2, "coeff", "f").shape == (3, 5, 5)
    assert sample_array(np.zeros((3, 5)), 1, "a", "f").shape == (3, 5)
    with pytest.raises(DataError, match=r"f: key 'coeff' expected shape \(samples, n, n\) or \(samples, n, n, 1\), "
                                        r"found \(3, 5, 5, 2\)"):
        sample_array(np.zeros((3, 5, 5, 2)), 2, "coeff", "f")


def test_field_dataset_items_and_shared_entries():
    ds = FieldDataset({"input": np.arange(12.0).reshape(3, 4, 1), "target": np.ones((3, 4, 1))},
                      {"coords": np.linspace(0, 1, 4)[:, None]})
    assert len(ds) == 3
    item = ds[1]
    assert set(item) == {"input", "target", "coords"} and all(v.dtype == torch.float32 for v in item.values())
    torch.testing.assert_close(item["input"][:, 0], torch.tensor([4.0, 5.0, 6.0, 7.0]))
    assert ds.tensors("input").shape == (3, 4, 1)
    with pytest.raises(DataError, match="items of different lengths"):
        FieldDataset({"input": np.zeros((3, 4)), "target": np.zeros((2, 4))})


def test_a_whole_batch_is_the_stack_of_its_items_bitwise():
    """The training loaders fetch ``FieldDataset.batch(indices)`` (one gather per array) instead of stacking items:
    the same tensors, bit for bit, shared entries repeated per sample."""
    g = torch.Generator().manual_seed(0)
    ds = FieldDataset({"input": torch.randn(7, 5, 3, generator=g), "target": torch.randn(7, 5, 1, generator=g)},
                      {"coords": torch.linspace(0, 1, 5)[:, None]})
    idx = [4, 0, 6, 0]
    whole = ds.batch(idx)
    stacked = torch.utils.data.default_collate([ds[i] for i in idx])
    assert set(whole) == set(stacked) == {"input", "target", "coords"}
    for k in whole:
        assert whole[k].shape == stacked[k].shape and torch.equal(whole[k], stacked[k]), k
        assert whole[k].is_contiguous()


def test_the_training_loader_gives_the_batches_of_the_sampler_in_its_epoch_order():
    """The data module's loader: whole batches in the order of the epoch's shuffle (the epoch set the way Lightning
    sets it), the last one short."""
    from types import SimpleNamespace

    from lightning.fabric.utilities.data import _set_sampler_epoch

    from opformer.train.callbacks import EpochShuffleSampler
    from opformer.train.run import _DataModule

    ds = FieldDataset({"input": np.arange(10.0)[:, None], "target": np.zeros((10, 1))})
    t = SimpleNamespace(seed=5, num_workers=0, batch_size=4, eval_batch_size=3, selection="val", accelerator="cpu")
    loader = _DataModule({"train": ds}, t).train_dataloader()
    for epoch in (0, 3):
        _set_sampler_epoch(loader, epoch)
        ref = EpochShuffleSampler(10, 5)
        ref.set_epoch(epoch)
        order = list(ref)
        got = [b["input"][:, 0].long().tolist() for b in loader]
        assert got == [order[0:4], order[4:8], order[8:10]], (epoch, got)
    assert list(EpochShuffleSampler(10, 5)) != order  # epoch 3 is another order than epoch 0
    assert not loader.pin_memory  # pinned batches only where a CUDA device trains


def test_the_loaders_pin_their_batches_exactly_when_a_cuda_device_trains(monkeypatch):
    """Pinned host memory lets the batch's copy to a CUDA device run without the host waiting for it; on the CPU (or
    with a GPU accelerator asked for but no CUDA) it would only cost."""
    from types import SimpleNamespace

    from opformer.train import run as run_mod

    ds = FieldDataset({"input": np.arange(10.0)[:, None], "target": np.zeros((10, 1))})

    def loaders(accelerator):
        t = SimpleNamespace(seed=5, num_workers=0, batch_size=4, eval_batch_size=3, selection="val",
                            accelerator=accelerator)
        dm = run_mod._DataModule({"train": ds, "val": ds}, t)
        return [dm.train_dataloader(), *dm.val_dataloader()]

    for cuda in (False, True):
        monkeypatch.setattr(torch.cuda, "is_available", lambda cuda=cuda: cuda)
        assert [dl.pin_memory for dl in loaders("cpu")] == [False, False]
        assert [dl.pin_memory for dl in loaders("gpu")] == [cuda, cuda]
        assert [dl.pin_memory for dl in loaders("auto")] == [cuda, cuda]


def test_device_batches_are_the_host_batches_and_items():
    """The device copy of a dataset gathers the same batches as the host one (here the device is the CPU)."""
    rng = np.random.default_rng(0)
    ds = FieldDataset({"input": rng.normal(size=(9, 5, 5, 1)), "target": rng.normal(size=(9, 5, 5, 2))},
                      {"coords": rng.normal(size=(5, 5, 2))})
    dev = ds.on_device("cpu")
    assert dev is not ds and len(dev) == len(ds) == 9
    assert all(dev.tensors(k).device == torch.device("cpu") for k in ("input", "target"))
    assert ds.nbytes() == 4 * (9 * 25 + 9 * 50 + 50)
    for indices in ([0, 1, 2, 3], [8, 3, 3, 0], [7]):
        a, b = ds.batch(indices), dev.batch(indices)
        assert a.keys() == b.keys()
        for k in a:
            assert torch.equal(a[k], b[k]), k
        assert b["coords"].shape == (len(indices), 5, 5, 2) and b["coords"].is_contiguous()
    for k, v in ds[4].items():
        assert torch.equal(dev[4][k], v)


def test_the_training_split_stays_on_the_device_when_the_setting_and_memory_allow():
    from opformer.train.run import keeps_data_on_device

    gib = 2**30
    assert keeps_data_on_device("auto", "cuda", gib, 4 * gib)
    assert not keeps_data_on_device("auto", "cuda", gib + 1, 4 * gib)  # more than a quarter of the free memory
    assert keeps_data_on_device(True, "cuda", 10 * gib, gib)  # asked for: kept whatever the estimate
    assert not keeps_data_on_device(False, "cuda", 1, 4 * gib)
    for setting in ("auto", True):  # on the CPU the data are there already
        assert not keeps_data_on_device(setting, "cpu", 1, 4 * gib)
        assert not keeps_data_on_device(setting, "mps", 1, 4 * gib)


def test_a_training_loader_on_the_device_gives_the_host_loaders_batches(monkeypatch):
    """With the training split on the device, the training loader draws the same index batches (same seed, same
    epoch order) and gathers them from the device copy, made once; the validation loader stays on the host.  The
    "device" is the CPU dressed as a CUDA device: the wiring is what is checked here, the GPU run is in
    tests/train/test_cuda_graphs.py."""
    from types import SimpleNamespace

    from opformer.train import run as run_mod

    rng = np.random.default_rng(1)
    ds = FieldDataset({"input": rng.normal(size=(10, 3)), "target": rng.normal(size=(10, 1))},
                      {"coords": np.arange(3.0)})
    copies, real_copy = [], ds.on_device

    def on_device(device):
        assert device.type == "cuda"
        copies.append(real_copy("cpu"))
        return copies[-1]

    monkeypatch.setattr(ds, "on_device", on_device)
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device: (2**30, 2**31))

    def module(setting):
        t = SimpleNamespace(seed=5, num_workers=0, batch_size=4, eval_batch_size=3, selection="val",
                            accelerator="cpu", data_on_device=setting)
        dm = run_mod._DataModule({"train": ds, "val": ds}, t)
        dm.trainer = SimpleNamespace(world_size=1, global_rank=0,
                                     strategy=SimpleNamespace(root_device=SimpleNamespace(type="cuda")))
        return dm

    host = [b for b in module(False).train_dataloader()]
    assert not copies
    for setting in ("auto", True):
        dm = module(setting)
        for _ in range(2):  # a second request reuses the one copy
            loader = dm.train_dataloader()
            assert loader.dataset.ds is copies[-1]
            got = list(loader)
            assert len(got) == len(host) == 3
            for a, b in zip(host, got):
                assert all(torch.equal(a[k], b[k]) for k in a)
        assert dm.val_dataloader()[0].dataset.ds is ds
        assert dm.device_copy_info() == {"device": str(dm.trainer.strategy.root_device), "megabytes": 0.0}
    assert len(copies) == 2
    assert module(False).device_copy_info() is None


def test_a_training_split_that_does_not_fit_on_the_device_is_one_line_or_a_note(monkeypatch, capsys):
    """Asked for (true): a one-line error naming the flag; auto (the estimate was wrong): a note, and the batches
    come from the host."""
    from types import SimpleNamespace

    from opformer.config import ConfigError
    from opformer.train import run as run_mod

    ds = FieldDataset({"input": np.zeros((6, 3)), "target": np.zeros((6, 1))})

    def no_room(device):
        raise torch.OutOfMemoryError("CUDA out of memory")

    monkeypatch.setattr(ds, "on_device", no_room)
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device: (2**30, 2**31))
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: None)

    def module(setting):
        t = SimpleNamespace(seed=5, num_workers=0, batch_size=2, eval_batch_size=2, selection="val",
                            accelerator="cpu", data_on_device=setting)
        dm = run_mod._DataModule({"train": ds, "val": ds}, t)
        dm.trainer = SimpleNamespace(world_size=1, global_rank=0, is_global_zero=True,
                                     strategy=SimpleNamespace(root_device=_FakeCuda()))
        return dm

    with pytest.raises(ConfigError, match=r"^--data-on-device true: the training split \(0 MB\) does not fit on cuda:0"):
        module(True).train_dataloader()
    dm = module("auto")
    loader = dm.train_dataloader()
    assert loader.dataset.ds is ds and dm.device_copy_info() is None
    assert "did not fit on cuda:0; its batches are copied from the host" in capsys.readouterr().out


class _FakeCuda:
    type = "cuda"

    def __str__(self):
        return "cuda:0"
