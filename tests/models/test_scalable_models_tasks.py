"""scot, vit, unet, deeponet and cno run on the 2D tasks through the public path `opformer train TASK --model NAME`
(preset -> overrides with --model -> prepare_run, which fits out_size to the inverse task's coarser target grid):
the output has the target's grid and a few optimizer steps lower the task's loss."""

from __future__ import annotations

import pytest
import torch

from opformer.train.config import apply_overrides, load_preset
from opformer.train.run import prepare_run

MODELS = {
    "scot": {"embed_dim": 16, "depths": "1,1", "num_heads": "2,2", "patch_size": 2},
    "vit": {"d_model": 32, "num_layers": 2, "n_heads": 2, "patch_size": 2},
    "unet": {"width": 8, "levels": 2},
    "deeponet": {"sensors": 8, "basis": 16, "branch_width": 32, "trunk_width": 32},
    "cno": {"width": 8, "levels": 1, "res_blocks": 1},
}


pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.mark.parametrize("task", ["darcy", "darcy-inverse"])
@pytest.mark.parametrize("name", sorted(MODELS))
def test_model_trains_on_task(name, task, darcy_files):
    cfg = load_preset(f"{task}-fno")
    over = {"model": name, **MODELS[name], "data.path": str(darcy_files[0]), "data.test_path": str(darcy_files[1]),
            "resolution": 29, "train_pool": 10, "n_val": 2, "n_train": 8}
    cfg, explicit = apply_overrides(cfg, over)
    run, bundle, operator, _, _ = prepare_run(cfg, frozenset(explicit), progress=False)
    assert run.model["name"] == name
    batch = next(iter(torch.utils.data.DataLoader(bundle.datasets["train"], batch_size=4)))

    def loss():
        pred = operator(batch["input"], batch["coords"][:1])
        l2, reg = run.task.loss(pred, batch, run.train)
        return pred, (l2 + reg).mean()

    pred, before = loss()
    assert pred.shape == batch["target"].shape
    opt = torch.optim.Adam(operator.parameters(), lr=1e-3)
    for _ in range(4):
        _, value = loss()
        opt.zero_grad()
        value.backward()
        opt.step()
    assert loss()[1].item() < before.item()
