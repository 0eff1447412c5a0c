"""opformer.pde: Gaussian random fields, the PDE solvers (Burgers, Darcy, Navier–Stokes), data set recipes, HDF5
storage and the ``opformer data`` generation command.

Imports numpy, scipy, h5py and tqdm only, and never the training layer. The Navier–Stokes solver
(``opformer.pde.navier_stokes``, batched on CPU or GPU through ``torch.fft``) is the one module that imports
torch; it is not imported here, so Burgers and Darcy generation never load torch.
See ``docs/data.md`` for the recipes, how they were verified, and the commands.
"""

from __future__ import annotations

from . import burgers, darcy, grf
from .errors import DataError
from .generate import BURGERS_R10, DARCY_R421, check_dataset, compute_samples, default_recipe, ensure_dataset, generate_dataset, make_recipe
from .storage import read_header

__all__ = [
    "DataError",
    "BURGERS_R10",
    "DARCY_R421",
    "default_recipe",
    "make_recipe",
    "compute_samples",
    "generate_dataset",
    "check_dataset",
    "ensure_dataset",
    "read_header",
    "burgers",
    "darcy",
    "grf",
]
