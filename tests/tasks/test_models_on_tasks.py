"""Every 2D architecture runs on every 2D task (forward, inverse, time-dependent) through the presets and
`--model NAME`, and its trained operator round-trips through save_pretrained / opformer.load."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import opformer
from opformer.tasks.artifact import Predictor
from opformer.tasks.darcy import SCALABLE_2D
from opformer.train.config import apply_overrides, load_preset
from opformer.train.run import prepare_run

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


@pytest.mark.parametrize("model", sorted(SCALABLE_2D))
@pytest.mark.parametrize("task", ["darcy", "darcy-inverse", "ns"])
def test_model_runs_on_task_and_round_trips(task, model, darcy_files, ns_file, tmp_path):
    torch.set_num_threads(1)
    if task == "ns":
        over = {"data.path": str(ns_file), "n_test": 2, "n_val": 2}
    else:
        over = {"data.path": str(darcy_files[0]), "data.test_path": str(darcy_files[1]), "resolution": 15,
                "n_val": 2}
        if task == "darcy-inverse":
            over["coarse_factor"] = 3
    cfg, explicit = apply_overrides(load_preset(task), {"model": model, **over})
    run, bundle, operator, artifact, _ = prepare_run(cfg, frozenset(explicit))
    batch = torch.utils.data.default_collate([bundle.datasets["train"][i] for i in range(2)])
    opt = torch.optim.Adam(operator.parameters(), lr=1e-3)
    for _ in range(2):
        pred = operator(batch["input"], batch["coords"][:1], batch.get("lead_time"))
        assert pred.shape == batch["target"].shape
        l2, reg = run.task.loss(pred, batch, run.train)
        opt.zero_grad()
        (l2 + reg).mean().backward()
        opt.step()
    assert torch.isfinite(l2).all()
    operator.eval()
    Predictor(operator, artifact, run.task, run.options).save_pretrained(tmp_path / "m")
    again = opformer.load(tmp_path / "m")
    x = batch["input"][..., 0].numpy()
    if task == "ns":
        a = Predictor(operator, artifact, run.task, run.options).rollout(x, [0.5])
        np.testing.assert_allclose(again.rollout(x, [0.5]), a, rtol=1e-6, atol=1e-6)
    else:
        a = Predictor(operator, artifact, run.task, run.options).predict(x)
        np.testing.assert_allclose(again.predict(x), a, rtol=1e-6, atol=1e-6)
