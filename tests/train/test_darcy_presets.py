"""Every 2D preset (Darcy forward and inverse, all kinds, both norm schemes, FNO) trains on a tiny generated set:
its outputs have the documented shapes and a few optimizer steps lower the loss."""

import pytest
import torch

from opformer.train.config import apply_overrides, list_presets, load_preset, resolve
from opformer.train.data_setup import build_data
from opformer.train.module import OperatorModule

PRESETS_2D = [p for p in list_presets() if p.startswith("darcy") and not p.endswith("-cpu")]


@pytest.fixture(scope="module")
def darcy_files(tmp_path_factory):
    """Tiny piececonst files on a 29-node grid: 12 training and 4 test samples (independent streams)."""
    from opformer.pde import ensure_dataset

    d = tmp_path_factory.mktemp("darcy")
    train = ensure_dataset("darcy", d / "train.h5", workers=1, progress=False, n_samples=12, resolution=29)
    test = ensure_dataset("darcy", d / "test.h5", workers=1, progress=False, n_samples=4, resolution=29,
                          split="test")
    return train, test


_bundles = {}


def _setup(name, files):
    cfg = resolve(load_preset(name))
    over = {"data.path": str(files[0]), "data.test_path": str(files[1]), "data.resolution": 29,
            "train_pool": 12, "n_val": 4, "n_train": 8, "test_range": [0, None]}
    if "coarse_size" in cfg["model"]:
        over["coarse_size"] = 8
    if cfg["problem"] == "darcy-inverse":
        over["out_size"] = 8  # 29 pooled by the coarse factor 4 (ceil) -> 8
        if cfg["model"]["name"] == "fno2d":
            over["modes"] = 4  # 12 modes need a grid of 24 or more; the tiny target grid is 8
    for key in ("dropout", "downscaler_dropout", "upscaler_dropout"):
        if key in cfg["model"]:
            over[key] = 0.0
    cfg = resolve(apply_overrides(cfg, over))
    if cfg["problem"] not in _bundles:
        _bundles[cfg["problem"]] = build_data(cfg)
    return cfg, _bundles[cfg["problem"]]


def test_all_2d_presets_are_listed():
    kinds = ("gt", "ft", "st", "lt")
    for exp in ("darcy", "darcy-inverse"):
        for k in kinds:
            assert f"{exp}-{k}" in PRESETS_2D and f"{exp}-{k}-regular" in PRESETS_2D
        assert f"{exp}-fno" in PRESETS_2D


@pytest.mark.parametrize("name", PRESETS_2D)
def test_2d_preset_shapes_and_loss_decreases(name, darcy_files):
    torch.manual_seed(0)
    cfg, bundle = _setup(name, darcy_files)
    module = OperatorModule(cfg, target_shape=bundle.target_shape)
    if bundle.target_normalizer is not None:
        module.set_target_normalizer(*bundle.target_normalizer)
    batch = torch.utils.data.default_collate([bundle.train[i] for i in range(4)])
    fine = 29
    assert batch["input"].shape == (4, fine, fine, 1)
    expected = (4, 8, 8, 1) if cfg["problem"] == "darcy-inverse" else (4, fine, fine, 1)
    module.eval()
    with torch.no_grad():
        pred = module(batch)
        _, l2, reg = module._losses(batch)
    assert pred.shape == expected == batch["target"].shape
    if cfg["model"].get("boundary") == "dirichlet":  # zero Dirichlet ring in physical units
        assert torch.all(pred[:, 0] == 0) and torch.all(pred[:, :, -1] == 0)
    before = (l2 + reg).mean().item()
    opt = torch.optim.Adam(module.parameters(), lr=1e-4)
    module.train()
    for _ in range(6):
        _, l2, reg = module._losses(batch)
        loss = (l2 + reg).mean()
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(module.parameters(), 0.999)
        opt.step()
    module.eval()
    with torch.no_grad():
        _, l2, reg = module._losses(batch)
    after = (l2 + reg).mean().item()
    assert after < before, f"{name}: loss {before:.4f} -> {after:.4f}"
