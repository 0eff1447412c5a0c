"""From a run config to datasets: generate-and-cache the default data, or read the user's files."""

from __future__ import annotations

import hashlib
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from torch import Tensor
from torch.utils.data import Dataset

__all__ = ["DataBundle", "build_data", "cache_dir", "default_data_path"]


@dataclass
class DataBundle:
    train: Optional[Dataset]
    val: Optional[Dataset]
    test: Optional[Dataset]
    target_normalizer: Optional[tuple[Tensor, Tensor]]  # (mean, std + eps) of the targets, per point
    target_shape: Optional[tuple]


def cache_dir() -> Path:
    """Where generated data sets are cached: ``$OPFORMER_DATA`` or ``~/.cache/opformer/data``."""
    return Path(os.environ.get("OPFORMER_DATA", Path.home() / ".cache" / "opformer" / "data"))


def _generator_problem(problem: str) -> str:
    return "burgers" if problem == "burgers" else "darcy"


def default_data_path(problem: str, recipe: dict) -> Path:
    """Cache file name of a recipe: the problem and a hash of the canonical recipe."""
    key = hashlib.sha1(json.dumps(recipe, sort_keys=True).encode()).hexdigest()[:10]
    return cache_dir() / f"{recipe['problem']}-{recipe['resolution']}-{recipe['n_samples']}-{key}.h5"


def _ensure(problem: str, overrides: dict, workers) -> Path:
    from ..pde.generate import ensure_dataset, make_recipe

    recipe = make_recipe(problem, **overrides)
    path = default_data_path(problem, recipe)
    rank = int(os.environ.get("RANK", os.environ.get("LOCAL_RANK", 0)))
    if rank != 0:  # the first process generates; the others wait for the complete file (written atomically)
        while not path.exists():
            time.sleep(2.0)
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    return ensure_dataset(problem, path, workers=workers, **overrides)


def resolve_paths(cfg: dict) -> tuple[Path, Optional[Path]]:
    """The training and test files of a run, generating the default data when none is given."""
    d = cfg["data"]
    gen = _generator_problem(cfg["problem"])
    if d["path"] is not None:
        path = Path(d["path"])
        test_path = Path(d["test_path"]) if d["test_path"] else None
        return path, test_path
    path = _ensure(gen, dict(d["recipe"]), d["workers"])
    test_path = None
    if gen == "darcy":
        test_path = _ensure(gen, {**d["recipe"], "split": "test", **d["test_recipe"]}, d["workers"])
    elif d["test_recipe"]:
        test_path = _ensure(gen, {**d["recipe"], **d["test_recipe"]}, d["workers"])
    return path, test_path


def build_data(cfg: dict, splits=("train", "val", "test")) -> DataBundle:
    """Datasets of the splits, with the normalizers fitted on the train split only."""
    from ..data import BurgersDataset, DarcyDataset, DarcyInverseDataset

    d = cfg["data"]
    path, test_path = resolve_paths(cfg)
    common = dict(
        resolution=d["resolution"],
        test_path=test_path,
        train_pool=d["train_pool"],
        n_val=d["n_val"],
        n_train=d["n_train"],
        test_range=tuple(d["test_range"]),
    )
    if cfg["problem"] == "burgers":
        cls, extra = BurgersDataset, {}
    elif cfg["problem"] == "darcy":
        cls, extra = DarcyDataset, {}
    else:
        cls, extra = DarcyInverseDataset, dict(coarse_factor=d["coarse_factor"], noise=d["noise"],
                                               noise_seed=d["noise_seed"])
    first = "train" if "train" in splits else splits[0]
    ds = {first: cls(path, first, **common, **extra)}
    shared = dict(common, **extra, normalizers=ds[first].normalizers)
    for split in splits:
        if split not in ds:
            ds[split] = cls(path, split, **shared)
    norm, shape = None, None
    sample = ds[first][0]
    shape = tuple(sample["target"].shape)
    if cfg["problem"] == "darcy":
        tn = ds[first].target_normalizer
        norm = (tn.mean.float(), (tn.std + tn.eps).float())
    return DataBundle(ds.get("train"), ds.get("val"), ds.get("test"), norm, shape)
