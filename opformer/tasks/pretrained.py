"""Trained models shipped inside the package: ``opformer.load("burgers-ft").predict(u0)``.

Each bundled model is a :meth:`~opformer.tasks.artifact.Predictor.save_pretrained` directory under
``opformer/pretrained/NAME`` (``config.json``, ``model.safetensors``) with a ``card.json`` that says how it was made
and how good it is:

* ``description``, ``task``, ``parameters``;
* ``data``: the commands that generate its training and test files (the data are never shipped: they are made by
  ``opformer data``, see ``docs/data.md``), and ``train``: the command that trained it;
* ``metrics``: the training run's own figures (validation and test relative L2, epochs, best epoch, wall seconds,
  seed, the machine);
* ``check``: the test samples as a recipe and a sample range (``recipe``, ``start``, ``stop``, ``keys``, ``stride``)
  and the mean relative L2 error of the shipped weights on them, ``test_rel_l2``.  :func:`check_error` regenerates
  those samples and measures the error again; the test suite asserts that it reproduces the recorded figure.

``scripts/make_pretrained.py`` writes a bundle from a training run (docs/pretrained.md).
"""

from __future__ import annotations

import hashlib
import json
import tempfile
from pathlib import Path
from typing import Optional

import numpy as np
import torch

from ..bundled import PRETRAINED_DIR, known_pretrained, list_pretrained, pretrained_path
from .losses import rel_l2

__all__ = ["PRETRAINED_DIR", "list_pretrained", "known_pretrained", "pretrained_path", "pretrained_card", "check_error"]

def pretrained_card(name: str) -> dict:
    """The ``card.json`` of a bundled model (how it was made, its metrics and its check)."""
    path = pretrained_path(name)
    if path is None:
        raise KeyError(f"no bundled model {name!r} (bundled: {known_pretrained()})")
    return json.loads((path / "card.json").read_text())


def mean_rel_l2(pred, target) -> float:
    """The mean over samples of the training metric, :func:`~opformer.tasks.losses.rel_l2` (each sample flattened)."""
    return float(rel_l2(torch.as_tensor(pred), torch.as_tensor(target)).double().mean())


def check_samples(check: dict, workdir: Path, workers: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """(inputs, targets) of a card's ``check``: its samples regenerated from the recipe, strided as recorded."""
    import h5py

    from ..pde.generate import generate_dataset

    spec = json.dumps({k: check[k] for k in ("recipe", "start", "stop")}, sort_keys=True)
    name = f"check-{hashlib.sha1(spec.encode()).hexdigest()[:12]}.h5"  # models with the same check share a file
    path = generate_dataset(check["recipe"], Path(workdir) / name, start=int(check["start"]),
                            stop=int(check["stop"]), workers=workers, progress=False)
    s = int(check.get("stride", 1))
    with h5py.File(path, "r") as f:
        x, y = (np.asarray(f[k]) for k in check["keys"])
    index = (slice(None),) + (slice(None, None, s),) * (x.ndim - 1)
    return x[index], y[index]


def check_error(name_or_path, workers: int = 1, workdir: Optional[Path] = None) -> float:
    """The mean relative L2 error of a bundled model (or a ``save_pretrained`` directory with a card) on its
    ``check`` samples, regenerated from their recipe (seconds on a CPU) into ``workdir`` (kept there, and reused by
    models with the same check samples) or a temporary directory."""
    from .artifact import LoadError, load

    path = pretrained_path(name_or_path) or Path(name_or_path)
    card = path / "card.json"
    if not card.is_file():
        raise LoadError(f"{name_or_path}: neither a bundled model ({known_pretrained()}) nor a directory with a "
                        "card.json: check_error regenerates the check samples a card records")
    try:
        check = json.loads(card.read_text())["check"]
        if not isinstance(check, dict):
            raise TypeError
    except (ValueError, KeyError, TypeError):
        raise LoadError(f"{card}: not a model card with a 'check' (its test samples' recipe and range)") from None
    with tempfile.TemporaryDirectory(prefix="opformer-check-") as tmp:
        x, y = check_samples(check, Path(workdir or tmp), workers)
    pred = load(path).predict(x)
    return mean_rel_l2(pred, y)
