"""opformer.data: readers for data files with any keys (.h5, .mat, .npz, .pt), normalizers, splits and PyTorch
datasets.  The solvers, recipes and HDF5 storage that make the data live in :mod:`opformer.pde`.

The torch-based names are loaded on first use, so reading arrays does not import torch.
"""

from __future__ import annotations

from ..pde.errors import DataError
from .readers import ArraySource, load_arrays, open_source

__all__ = [
    "DataError",
    "load_arrays",
    "open_source",
    "ArraySource",
    "UnitGaussianNormalizer",
    "make_splits",
    "FieldDataset",
    "stride_for",
    "read_blocks",
    "sample_array",
    "keys_pair",
]

_LAZY = {"UnitGaussianNormalizer", "make_splits", "FieldDataset", "stride_for", "read_blocks", "sample_array", "keys_pair"}


def __getattr__(name: str):
    if name in _LAZY:
        from . import datasets

        return getattr(datasets, name)
    raise AttributeError(f"module 'opformer.data' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | _LAZY)
