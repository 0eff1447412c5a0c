"""The Lightning module that trains any opformer operator learner: loss, metrics, optimizer and schedule."""

from __future__ import annotations

import math
import random
import time
from typing import Any, Optional

import lightning as L
import numpy as np
import torch
from torch import Tensor

from ..models import build_model
from .losses import effective_gamma, h1_seminorm_1d, h1_seminorm_2d, rel_l2

__all__ = ["OperatorModule", "DivergenceError"]


class DivergenceError(RuntimeError):
    """Training produced a non-finite loss; nothing was checkpointed for the diverged state."""


class OperatorModule(L.LightningModule):
    """Trains ``build_model(config["model"])`` on batches ``{"input", "target", "coords", ...}``.

    Loss: relative L2 per sample plus ``gamma_eff`` times the relative H1 seminorm (1D: periodic central
    differences against ``target_grad``; 2D: weighted by the coefficient ``coeff``), averaged over the batch.
    Metric: relative L2 without the regularizer, averaged over samples (summed and counted across processes).
    For 2D problems with normalized targets the prediction is decoded to physical units before the loss, and the
    Dirichlet ring is zeroed after decoding when the model config says ``boundary: dirichlet``.
    """

    def __init__(self, config: dict, target_shape: Optional[tuple] = None):
        super().__init__()
        self.save_hyperparameters({"config": config, "target_shape": target_shape})
        self.config = config
        self.problem = config["problem"]
        self.model = build_model(dict(config["model"]))
        self.dirichlet = config["model"].get("boundary") == "dirichlet"
        # per-point normalizer of the target (2D forward problem); identity when absent
        shape = tuple(target_shape) if target_shape is not None else (1,)
        self.register_buffer("y_mean", torch.zeros(shape))
        self.register_buffer("y_std", torch.ones(shape))
        self._last_finite = None  # (epoch, step, loss)
        self.elapsed_before = 0.0  # training seconds of earlier (interrupted) sessions of this run
        self._fit_started = None
        self._val_sums: dict[str, list] = {}

    # --- helpers ---------------------------------------------------------------------------------------------
    def set_target_normalizer(self, mean: Tensor, std: Tensor) -> None:
        self.y_mean = mean.detach().to(self.y_mean.dtype).clone()
        self.y_std = std.detach().to(self.y_std.dtype).clone()

    def forward(self, batch: dict) -> Tensor:
        """Prediction in physical units: decode the normalized model output, then apply the Dirichlet ring."""
        pred = self.model(batch["input"], batch["coords"])
        if self.y_mean.numel() > 1 and self.y_mean.shape == pred.shape[1:]:
            pred = pred * self.y_std + self.y_mean
        if self.dirichlet:
            ring = torch.ones_like(pred)
            ring[:, 0], ring[:, -1], ring[:, :, 0], ring[:, :, -1] = 0, 0, 0, 0
            pred = pred * ring
        return pred

    def _losses(self, batch: dict) -> tuple[Tensor, Tensor, Tensor]:
        pred = self(batch)
        l2 = rel_l2(pred, batch["target"])
        t = self.config["train"]
        reg = torch.zeros_like(l2)
        if t["gamma"] > 0 and "target_grad" in batch:
            n = pred.shape[1]
            gamma = effective_gamma(t["gamma"], n, t["gamma_convention"])
            c = batch["coords"]
            if pred.dim() == 3:  # periodic 1D grid: h = x_1 - x_0
                reg = gamma * h1_seminorm_1d(pred, batch["target_grad"], float(c[0, 1, 0] - c[0, 0, 0]))
            else:  # 2D node or cell grid, axis 1 is x
                h = float(c[0, 1, 0, 0] - c[0, 0, 0, 0])
                reg = gamma * h1_seminorm_2d(pred, batch["target_grad"], batch["coeff"], h)
        return pred, l2, reg

    # --- training ----------------------------------------------------------------------------------------------
    def training_step(self, batch: dict, batch_idx: int) -> Tensor:
        _, l2, reg = self._losses(batch)
        loss = (l2 + reg).mean()
        if not torch.isfinite(loss):
            last = self._last_finite
            where = f"epoch {self.current_epoch} (step {self.global_step})"
            prev = f"the last finite loss was {last[2]:.6g} at epoch {last[0]}, step {last[1]}" if last else (
                "no finite loss was seen")
            raise DivergenceError(
                f"training diverged at {where}: loss is {loss.item()}; {prev}. No checkpoint of the diverged state "
                "was written; lower train.lr or check the data."
            )
        self._last_finite = (self.current_epoch, self.global_step, float(loss.detach()))
        bs = l2.shape[0]
        self.log("train_loss", loss, prog_bar=True, on_step=True, on_epoch=True, batch_size=bs, sync_dist=True)
        self.log("train_rel_l2", l2.mean(), on_step=False, on_epoch=True, batch_size=bs, sync_dist=True)
        return loss

    # validation: dataloader 0 is the validation split; with selection=test a second loader is the test split
    def on_validation_epoch_start(self) -> None:
        self._val_sums = {}

    def validation_step(self, batch: dict, batch_idx: int, dataloader_idx: int = 0) -> None:
        _, l2, _ = self._losses(batch)
        name = "val_rel_l2" if dataloader_idx == 0 else "test_rel_l2_selection"
        acc = self._val_sums.setdefault(name, [0.0, 0])
        acc[0] += float(l2.double().sum())
        acc[1] += int(l2.numel())

    def on_validation_epoch_end(self) -> None:
        for name, (s, c) in self._val_sums.items():
            t = torch.tensor([s, float(c)], dtype=torch.float64, device=self.device)
            t = self.trainer.strategy.reduce(t, reduce_op="sum")
            self.log(name, (t[0] / t[1].clamp_min(1)).float(), prog_bar=True, sync_dist=False,
                     add_dataloader_idx=False)

    def on_test_epoch_start(self) -> None:
        self._test_sum = [0.0, 0]

    def test_step(self, batch: dict, batch_idx: int) -> None:
        _, l2, _ = self._losses(batch)
        self._test_sum[0] += float(l2.double().sum())
        self._test_sum[1] += int(l2.numel())

    def on_test_epoch_end(self) -> None:
        t = torch.tensor(self._test_sum, dtype=torch.float64, device=self.device)
        t = self.trainer.strategy.reduce(t, reduce_op="sum")
        self.log("test_rel_l2", (t[0] / t[1].clamp_min(1)).float(), sync_dist=False)

    def configure_optimizers(self) -> Any:
        t = self.config["train"]
        opt = torch.optim.Adam(self.model.parameters(), lr=t["lr"], weight_decay=t["weight_decay"])
        steps = self.trainer.estimated_stepping_batches
        sched = torch.optim.lr_scheduler.OneCycleLR(
            opt,
            max_lr=t["lr"],
            total_steps=max(int(steps), 1),
            pct_start=t["pct_start"],
            div_factor=t["div_factor"],
            final_div_factor=t["final_div_factor"],
        )
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}

    def on_fit_start(self) -> None:
        self._fit_started = time.perf_counter()

    def training_seconds(self) -> float:
        """Wall time spent training this run, summed over resumed sessions."""
        now = 0.0 if self._fit_started is None else time.perf_counter() - self._fit_started
        return self.elapsed_before + now

    # --- exact resume: the random streams (and the clock) travel with the checkpoint -----------------------------
    def on_save_checkpoint(self, checkpoint: dict) -> None:
        checkpoint["training_seconds"] = self.training_seconds()
        checkpoint["rng_states"] = {
            "torch": torch.get_rng_state(),
            "numpy": _np_state_to_plain(np.random.get_state()),
            "python": random.getstate(),
        }

    def on_load_checkpoint(self, checkpoint: dict) -> None:
        self.elapsed_before = float(checkpoint.get("training_seconds", 0.0))
        states = checkpoint.get("rng_states")
        if states:
            torch.set_rng_state(states["torch"])
            np.random.set_state(_np_state_from_plain(states["numpy"]))
            random.setstate(states["python"])


def _np_state_to_plain(state: tuple) -> tuple:
    """NumPy's RNG state with its key array as a list (checkpoints then load with torch's weights_only=True)."""
    return (state[0], [int(x) for x in state[1]], int(state[2]), int(state[3]), float(state[4]))


def _np_state_from_plain(state) -> tuple:
    return (state[0], np.asarray(state[1], dtype=np.uint32), state[2], state[3], state[4])


def count_parameters(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def nan_to_none(x: float) -> Optional[float]:
    return None if x is None or (isinstance(x, float) and math.isnan(x)) else x
