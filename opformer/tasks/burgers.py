"""Viscous Burgers (paper §5.1, Table 2a): the initial condition u0 -> u(., T) on a periodic 1D grid.

Data: the R10 recipe (:mod:`opformer.pde.burgers`, ``docs/data.md``), or any file with arrays (samples, n) or
(samples, n, 1) under ``--keys`` (default ``a,u``).  The paper's protocol on the default data: train on the first
1024 samples, validate on the next 100, test on the last 100 of 2048, at n = 512 (strided from 8192).
Loss: relative L2 plus the H1-seminorm term with periodic central differences (eq. (1)-(2), ``docs/training.md``).
"""

from __future__ import annotations

import dataclasses
import numpy as np

from ..config import TrainConfig, opt
from ..data.datasets import (FieldDataset, SplitArrays, UnitGaussianNormalizer, constant_input_warning, sample_array,
                             stride_for)
from .base import Bundle, Task, model_table, open_pair, register_task, split_indices
from .losses import effective_gamma, grid_step, h1_seminorm_1d, rel_l2


@dataclasses.dataclass
class BurgersOptions:
    normalize_input: bool = opt(False, "standardize the input per point with the training statistics (the paper "
                                       "does not)")
    normalize_target: bool = opt(False, "the model predicts the target standardized per point with the training "
                                        "statistics, decoded before the loss (for targets far from zero mean or "
                                        "unit scale; the paper does not)")


class BurgersTask(Task):
    name = "burgers"
    description = "viscous Burgers u0 -> u(., 1), periodic 1D (paper §5.1)"
    dim = 1
    default_keys = ("a", "u")
    generator = "burgers"
    options_class = BurgersOptions
    models = model_table("burgers")
    run_defaults = {
        "data": {"resolution": 512, "train_pool": 1124, "n_val": 100, "n_train": 1024, "n_test": 100},
        "train": {"epochs": 100, "batch_size": 8, "lr": 1.0e-3, "pct_start": 0.2, "gamma": 0.1},
    }
    plot_labels = {"input": "input $u_0$", "target": "target $u(\\cdot,1)$", "prediction": "prediction"}

    def model_train_overrides(self, short: str) -> dict:
        return {"gamma": 0.0} if short == "fno" else {}

    def load(self, data, options, files, splits=("train", "val", "test"), normalizers=None, test_all=False):
        keys, train_src, test_src, grid = open_pair(data, self.default_keys, files, 1)
        n_fine = grid[0]
        s = stride_for(n_fine, data.resolution, nodes=self.resolution_keeps_ends, where=train_src.describe())
        idx = split_indices(data, train_src, test_src, test_all)
        x = np.asarray(train_src.coords.get("x", np.arange(n_fine) / n_fine))[::s]

        def transform(a, u):
            a, u = sample_array(a, 1, keys[0], train_src.describe()), sample_array(u, 1, keys[1], train_src.describe())
            du = (np.roll(u, -1, axis=-1) - np.roll(u, 1, axis=-1)) * (n_fine / 2.0)  # unit period, h = 1/n_fine
            return {"input": a[:, ::s, None], "target": u[:, ::s, None], "target_grad": du[:, ::s, None]}

        arrays = SplitArrays(train_src, test_src, idx, splits, transform)
        normalizers = dict(normalizers or {})
        warnings = []
        if options.normalize_input and "input" not in normalizers:
            normalizers["input"] = UnitGaussianNormalizer.fit(arrays.train()["input"], kind="periodic", axes=[x])
            warnings = [w for w in [constant_input_warning(normalizers["input"], arrays)] if w]
        if options.normalize_target and "target" not in normalizers:
            normalizers["target"] = UnitGaussianNormalizer.fit(arrays.train()["target"], kind="periodic", axes=[x])
        datasets = {split: FieldDataset(arrays[split], {"coords": x[:, None]}, origin=arrays.origin(split))
                    for split in splits}
        return Bundle(datasets, normalizers, "periodic", (len(x),), (len(x),),
                      {"train": str(files["train"]), "test": str(files.get("test") or files["train"])},
                      warnings=warnings)

    def loss(self, pred, batch, train: TrainConfig):
        l2 = rel_l2(pred, batch["target"])
        if train.gamma <= 0:
            return l2, l2.new_zeros(l2.shape)
        n = pred.shape[1]
        h = grid_step(batch["coords"][0, 0, 0], batch["coords"][0, 1, 0])
        gamma = effective_gamma(train.gamma, n, train.gamma_convention)
        return l2, gamma * h1_seminorm_1d(pred, batch["target_grad"], h)


register_task(BurgersTask())
