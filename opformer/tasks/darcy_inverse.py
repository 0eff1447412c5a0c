"""The inverse coefficient problem (paper §5.3, Table 3): a noisy solution u -> the coefficient a on a coarse grid.

Data: the Darcy files (no file of its own).  Input: u on the fine grid plus ``noise`` times the per-point training
standard deviation of u times xi, xi ~ N(0, 1) i.i.d. per point, i.e. noise of size ``noise`` in standardized
units, as the paper.  xi is drawn once per sample from ``np.random.default_rng([noise_seed, file, sample])``
(file 0 for the training file, 1 for a separate test file): fixed across epochs, the same in every process, and
independent between the files.  Target: a mean-pooled (NaN-padded) by the fine stride and then by ``coarse_factor``:
421 -> 141 -> 36 and 421 -> 211 -> 71, the paper's pairs.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import torch

from ..config import opt
from ..data.datasets import FieldDataset, SplitArrays, UnitGaussianNormalizer, constant_input_warning, sample_array
from ..pde.darcy import pool_nanmean
from ..pde.errors import DataError
from .base import Bundle, Task, model_table, register_task, split_indices
from .darcy import ENCODER_TENTH, SCALABLE_2D, DarcyTask, coords_2d, open_square, wrong_sign_warnings


@dataclasses.dataclass
class InverseOptions:
    noise: float = opt(0.01, "noise level eps in standardized units (the paper: 0, 0.01, 0.1)", min=0.0)
    noise_seed: int = opt(0, "seed of the input noise", min=0)
    coarse_factor: int = opt(4, "the target grid is the fine grid pooled again by this factor (141 -> 36 with 4)",
                             min=1)


class DarcyInverseTask(Task):
    name = "darcy-inverse"
    description = "inverse Darcy: noisy u -> coefficient a on a coarse grid (paper §5.3)"
    dim = 2
    grid_choice = True  # the user's files may hold nodes or cell centres (--grid)
    resolution_keeps_ends = True  # the Darcy files' strides, as the forward problem's
    default_keys = ("coeff", "sol")  # (coefficient, solution) as in the Darcy files: the input is the solution
    input_first = False
    generator = "darcy"
    options_class = InverseOptions
    models = {**model_table("darcy-inverse"), **SCALABLE_2D}
    run_defaults = {
        "data": dict(DarcyTask.run_defaults["data"]),
        "train": {**DarcyTask.run_defaults["train"], "gamma": 0.0},
    }
    plot_labels = {"input": "noisy input u", "target": "true a", "prediction": "recovered a"}
    small_grid_train_defaults = (ENCODER_TENTH,)  # the forward task's rule for the Galerkin model
    default_recipes = DarcyTask.default_recipes

    def load(self, data, options, files, splits=("train", "val", "test"), normalizers=None, test_all=False):
        keys, train_src, test_src, n, x, kind, s = open_square(self, data, files)
        k = options.coarse_factor
        idx = split_indices(data, train_src, test_src, test_all)

        def transform(a, u):
            a, u = sample_array(a, 2, keys[0], train_src.describe()), sample_array(u, 2, keys[1], train_src.describe())
            return {"input": u[:, ::s, ::s, None], "target": pool_nanmean(pool_nanmean(a, s), k)[..., None]}

        arrays = SplitArrays(train_src, test_src, idx, splits, transform)
        normalizers = dict(normalizers or {})
        constant = None
        if "input" not in normalizers:
            normalizers["input"] = UnitGaussianNormalizer.fit(arrays.train()["input"], kind=kind, axes=[x[::s]] * 2)
            constant = constant_input_warning(normalizers["input"], arrays)  # on the clean inputs, as fitted
        warnings = wrong_sign_warnings(train_src, test_src, idx,  # on the clean solutions, before any noise
                                       {split: arrays[split]["input"][..., 0] for split in splits})
        warnings = warnings + ([constant] if constant else [])
        if options.noise > 0:
            norm = normalizers["input"]
            nf = arrays[splits[0]]["input"].shape[1]
            grid = torch.as_tensor(coords_2d(x[::s]))[None]
            std = norm._fields(torch.zeros(1, nf, nf, 1), grid)[1].numpy()  # std + eps on this grid
            for split in splits:
                src = test_src if split == "test" else train_src
                file_id = 1 if (split == "test" and test_src is not train_src) else 0
                xi = np.stack([np.random.default_rng([options.noise_seed, file_id, src.first_index + int(i)])
                               .standard_normal((nf, nf)) for i in idx[split]])
                arrays[split]["input"] = arrays[split]["input"] + options.noise * std[None] * xi[..., None]
        xs = x[::s]
        g = np.broadcast_to(x[:, None], (n, n))
        xc = pool_nanmean(pool_nanmean(g, s), k)[:, 0]  # the coarse grid, pooled like the target
        if len(xc) < 2:
            raise DataError(f"--coarse-factor {k} leaves a target grid of {len(xc)} point(s); choose a smaller one")
        datasets = {split: FieldDataset(arrays[split], {"coords": coords_2d(xs)}, origin=arrays.origin(split))
                    for split in splits}
        return Bundle(datasets, normalizers, kind, (len(xs),) * 2, (len(xc),) * 2,
                      {"train": str(files["train"]), "test": str(files.get("test") or files["train"])},
                      warnings=warnings)


register_task(DarcyInverseTask())
