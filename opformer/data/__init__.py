"""opformer.data: Gaussian random fields, the Burgers and Darcy solvers, data set recipes, HDF5 storage,
readers for other formats, normalizers and PyTorch datasets.

Imports only numpy, scipy, h5py, tqdm and (for the datasets and ``.pt`` files) torch. The torch-based
names (:class:`BurgersDataset`, :class:`DarcyDataset`, :class:`DarcyInverseDataset`,
:class:`UnitGaussianNormalizer`, :func:`make_splits`) are loaded on first use, so generating data does not
import torch.

See ``docs/data.md`` for the recipes, how they were verified, and the commands.
"""

from __future__ import annotations

from . import burgers, darcy, grf
from .errors import DataError
from .generate import BURGERS_R10, DARCY_R421, compute_samples, default_recipe, ensure_dataset, generate_dataset, make_recipe
from .readers import ArraySource, load_arrays, open_source
from .storage import read_header

__all__ = [
    "DataError",
    "BURGERS_R10",
    "DARCY_R421",
    "default_recipe",
    "make_recipe",
    "compute_samples",
    "generate_dataset",
    "ensure_dataset",
    "read_header",
    "load_arrays",
    "open_source",
    "ArraySource",
    "burgers",
    "darcy",
    "grf",
    "UnitGaussianNormalizer",
    "make_splits",
    "BurgersDataset",
    "DarcyDataset",
    "DarcyInverseDataset",
]

_LAZY = {"UnitGaussianNormalizer", "make_splits", "BurgersDataset", "DarcyDataset", "DarcyInverseDataset"}


def __getattr__(name: str):
    if name in _LAZY:
        from . import datasets

        return getattr(datasets, name)
    raise AttributeError(f"module 'opformer.data' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | _LAZY)
