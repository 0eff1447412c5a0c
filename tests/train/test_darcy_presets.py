"""Every 2D preset (Darcy forward and inverse, all kinds, both norm schemes, FNO, the CPU-reduced variants) trains on
a tiny generated set through the public path (preset -> overrides -> prepare_run): its outputs have the documented
shapes and a few optimizer steps lower the task's loss."""

from __future__ import annotations

import pytest
import torch

from opformer.train.config import apply_overrides, list_presets, load_preset, resolve
from opformer.train.run import prepare_run

PRESETS_2D = [p for p in list_presets() if p.startswith("darcy")]
FINE = 29


@pytest.fixture(scope="module")
def darcy_files(tmp_path_factory):
    """Tiny piececonst files on a 29 x 29 grid: 12 training and 4 test samples (independent streams)."""
    from opformer.pde import generate_dataset, make_recipe

    d = tmp_path_factory.mktemp("darcy-presets")
    train = generate_dataset(make_recipe("darcy", n_samples=12, resolution=FINE), d / "train.h5", workers=1,
                             progress=False)
    test = generate_dataset(make_recipe("darcy", n_samples=4, resolution=FINE, split="test"), d / "test.h5",
                            workers=1, progress=False)
    return train, test


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    """One intra-op thread: these small steps are fastest so, and stay fast on a shared machine."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def test_all_2d_presets_are_listed():
    for task in ("darcy", "darcy-inverse"):
        for kind in ("gt", "ft", "st", "lt"):
            assert f"{task}-{kind}" in PRESETS_2D and f"{task}-{kind}-regular" in PRESETS_2D
        assert f"{task}-fno" in PRESETS_2D
        for kind in ("gt", "ft", "fno"):
            assert f"{task}-{kind}-cpu" in PRESETS_2D


def _prepare(name, files):
    cfg = load_preset(name)
    over = {"data.path": str(files[0]), "data.test_path": str(files[1]), "resolution": FINE, "train_pool": 12,
            "n_val": 4, "n_train": 8}
    model = resolve(cfg).model
    for key in ("dropout", "downscaler_dropout", "upscaler_dropout"):
        if key in model:
            over[key] = 0.0  # deterministic steps: the loss is compared before and after
    cfg, explicit = apply_overrides(cfg, over)
    run, bundle, operator, _, _ = prepare_run(cfg, frozenset(explicit), progress=False)
    return run, bundle, operator


def _loss(run, operator, batch):
    pred = operator(batch["input"], batch["coords"][:1])
    l2, reg = run.task.loss(pred, batch, run.train)
    return pred, (l2 + reg).mean()


@pytest.mark.parametrize("name", PRESETS_2D)
def test_2d_preset_shapes_and_loss_decreases(name, darcy_files):
    torch.manual_seed(0)
    run, bundle, operator = _prepare(name, darcy_files)
    assert {k: len(v) for k, v in bundle.datasets.items()} == {"train": 8, "val": 4, "test": 4}
    batch = torch.utils.data.default_collate([bundle.datasets["train"][i] for i in range(4)])
    assert batch["input"].shape == (4, FINE, FINE, 1)
    inverse = run.task.name == "darcy-inverse"
    coarse = -(-FINE // run.options.coarse_factor) if inverse else FINE  # ceil: the NaN-padded pooling
    assert bundle.target_grid == (coarse, coarse) and run.model.get("out_size") == (coarse if inverse else None)
    operator.eval()
    with torch.no_grad():
        pred, before = _loss(run, operator, batch)
    assert pred.shape == batch["target"].shape == (4, coarse, coarse, 1)
    if run.model.get("boundary") == "dirichlet":  # zero Dirichlet ring in physical units
        assert torch.all(pred[:, 0] == 0) and torch.all(pred[:, -1] == 0)
        assert torch.all(pred[:, :, 0] == 0) and torch.all(pred[:, :, -1] == 0)
    opt = torch.optim.Adam(operator.parameters(), lr=1e-4)
    operator.train()
    for _ in range(5):
        _, loss = _loss(run, operator, batch)
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(operator.parameters(), run.train.grad_clip)
        opt.step()
    operator.eval()
    with torch.no_grad():
        _, after = _loss(run, operator, batch)
    assert torch.isfinite(after) and after.item() < before.item(), f"{name}: loss {before:.4f} -> {after:.4f}"
