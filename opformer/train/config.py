"""Run configurations: YAML presets in ``opformer/configs/``, command-line overrides, validation."""

from __future__ import annotations

import copy
import difflib
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

__all__ = ["ConfigError", "list_presets", "load_preset", "apply_overrides", "resolve", "DEFAULTS"]


class ConfigError(ValueError):
    """A preset name, field or value that is not valid."""


#: every field a run configuration has, with its default; presets override some of them.
DEFAULTS: dict[str, Any] = {
    "name": None,
    "problem": "burgers",  # burgers | darcy | darcy-inverse
    "description": "",
    "data": {
        "path": None,  # training file; None = generate (and cache) the default recipe
        "test_path": None,  # test file; None = the training file (Burgers R10 protocol)
        "recipe": {},  # overrides of the default generation recipe (used when path is None)
        "test_recipe": {},  # overrides for the generated test file (Darcy: independent draw)
        "resolution": 512,  # training/evaluation grid (1D points, or 2D fine grid side)
        "train_pool": 1124,  # the first train_pool samples of the training file hold train + validation
        "n_val": 100,  # validation = the last n_val samples of the pool (never test samples)
        "n_train": 1024,  # training = the first n_train samples of the pool (null: the rest of the pool)
        "test_range": [-100, None],  # slice of the test file: the last 100 samples (the paper's protocol)
        "noise": 0.0,  # inverse problem: eps of the noise in standardized units
        "noise_seed": 0,
        "coarse_factor": 4,  # inverse problem: target grid = fine grid pooled again by this factor
        "workers": None,  # processes for data generation (null: all cores)
    },
    "model": None,  # a model preset name, {preset: NAME, field: value, ...}, or a full model config dict
    "train": {
        "epochs": 100,
        "batch_size": 8,
        "eval_batch_size": 8,
        "lr": 1.0e-3,
        "pct_start": 0.2,
        "div_factor": 1.0e4,
        "final_div_factor": 1.0e4,
        "weight_decay": 0.0,
        "grad_clip": 0.999,
        "gamma": 0.1,
        "gamma_convention": "reference",  # reference: weight sqrt(gamma*h) as the paper's code; plain: gamma
        "selection": "val",  # val | test (the reference protocol: best epoch on the test set, labelled so)
        "seed": 1127802,
        "precision": "32-true",  # or bf16-mixed
        "accelerator": "auto",
        "devices": 1,
        "strategy": "auto",
        "num_nodes": 1,
        "num_workers": 0,
        "checkpoint_every_n_steps": 0,  # 0 = at the end of every epoch only
        "plot_samples": 4,
        "limit_train_batches": None,
    },
}


def _configs_dir():
    return resources.files("opformer") / "configs"


def list_presets() -> list[str]:
    return sorted(p.name[: -len(".yaml")] for p in _configs_dir().iterdir() if p.name.endswith(".yaml"))


def _merge(base: dict, over: dict, path: str = "") -> dict:
    out = copy.deepcopy(base)
    for key, val in over.items():
        where = f"{path}{key}"
        if key not in base:
            raise ConfigError(f"unknown field {where!r}{_suggest(key, list(base))}")
        if isinstance(base[key], dict) and isinstance(val, dict) and key not in ("model", "recipe", "test_recipe"):
            out[key] = _merge(base[key], val, where + ".")
        else:
            out[key] = copy.deepcopy(val)
    return out


def _suggest(key: str, options) -> str:
    near = difflib.get_close_matches(key, list(options), n=1, cutoff=0.5)
    return f"; did you mean {near[0]!r}?" if near else f"; known fields: {sorted(options)}"


def load_preset(name_or_path: str) -> dict:
    """A run config from a preset name (see :func:`list_presets`) or a YAML file path, merged over DEFAULTS."""
    path = Path(name_or_path)
    if path.suffix in (".yaml", ".yml") and path.exists():
        text = path.read_text()
    else:
        candidates = list_presets()
        if name_or_path not in candidates:
            near = difflib.get_close_matches(name_or_path, candidates, n=3, cutoff=0.5)
            hint = f" Did you mean {', '.join(near)}?" if near else ""
            raise ConfigError(f"unknown preset {name_or_path!r}.{hint} Known presets: {', '.join(candidates)}")
        text = (_configs_dir() / f"{name_or_path}.yaml").read_text()
    raw = yaml.safe_load(text) or {}
    cfg = _merge(DEFAULTS, raw)
    if cfg["name"] is None:
        cfg["name"] = path.stem
    return cfg


def _leaves(cfg: dict, prefix: str = "") -> dict[str, tuple]:
    """Dotted path -> (container dict, key) for every overridable field, model fields included."""
    out = {}
    for key, val in cfg.items():
        dotted = f"{prefix}{key}"
        if isinstance(val, dict) and key not in ("recipe", "test_recipe"):
            out.update(_leaves(val, dotted + "."))
        else:
            out[dotted] = (cfg, key)
    return out


def apply_overrides(cfg: dict, overrides: dict[str, Any]) -> dict:
    """Set fields by dotted path (``train.lr``) or by unique leaf name (``lr``, ``norm_scheme``); dashes may stand
    for underscores.  Unknown or ambiguous names raise :class:`ConfigError` naming the nearest fields."""
    cfg = copy.deepcopy(cfg)
    for raw_key, value in overrides.items():
        leaves = _leaves(cfg)
        key = raw_key.replace("-", "_")
        if key in leaves:
            matches = [key]
        else:
            matches = [p for p in leaves if p.split(".")[-1] == key or p.endswith("." + key)]
        if not matches:
            names = set(leaves) | {p.split(".")[-1] for p in leaves}
            raise ConfigError(f"unknown field {raw_key!r}{_suggest(key, names)}")
        if len(matches) > 1:
            raise ConfigError(f"field {raw_key!r} is ambiguous: {', '.join(sorted(matches))}; use the dotted name")
        container, leaf = leaves[matches[0]]
        container[leaf] = value
    return cfg


def parse_value(text: str) -> Any:
    """A command-line value read as YAML (numbers, booleans, null, lists), or the plain string."""
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            pass
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError:
        return text


def inverse_target_size(resolution: int, coarse_factor: int) -> int:
    """Side of the inverse problem's target grid: the fine grid pooled (NaN-padded, so ceil) by ``coarse_factor``:
    141, 4 -> 36 and 211, 3 -> 71 (the paper's pairs), as :class:`opformer.data.DarcyInverseDataset` pools it."""
    if not isinstance(coarse_factor, int) or isinstance(coarse_factor, bool) or coarse_factor < 1:
        raise ConfigError(f"data.coarse_factor must be a positive integer, got {coarse_factor!r}")
    if not isinstance(resolution, int) or isinstance(resolution, bool) or resolution < 2:
        raise ConfigError(f"data.resolution must be an integer >= 2, got {resolution!r}")
    return -(-resolution // coarse_factor)


def _fit_inverse_target(cfg: dict) -> None:
    """The inverse model's output grid is not a free choice: it is the data's target grid.  Set ``out_size`` to it,
    and move ``coarse_size`` along when it was tied to ``out_size`` (the paper's attention grid is the target grid:
    36 for 141, 71 for 211).  An explicitly different ``coarse_size`` is kept."""
    d, m = cfg["data"], cfg["model"]
    target = inverse_target_size(d["resolution"], d["coarse_factor"])
    if "out_size" not in m or m["out_size"] == target:
        return
    if m.get("coarse_size") == m["out_size"]:
        m["coarse_size"] = target
    m["out_size"] = target


def resolve(cfg: dict) -> dict:
    """Resolve the model preset into a full model config dict and check the fields."""
    from ..models import model_preset

    cfg = copy.deepcopy(cfg)
    if cfg["problem"] not in ("burgers", "darcy", "darcy-inverse"):
        raise ConfigError(f"problem must be burgers, darcy or darcy-inverse, got {cfg['problem']!r}")
    if cfg["model"] is None:
        raise ConfigError("the config has no model: give a model preset name or a model config dict")
    if isinstance(cfg["model"], str):
        cfg["model"] = model_preset(cfg["model"])
    elif isinstance(cfg["model"], dict) and "preset" in cfg["model"]:  # {preset: NAME, field: value, ...}
        over = dict(cfg["model"])
        cfg["model"] = {**model_preset(over.pop("preset")), **over}
    if cfg["problem"] == "darcy-inverse" and isinstance(cfg["model"], dict):
        _fit_inverse_target(cfg)
    t = cfg["train"]
    if t["selection"] not in ("val", "test"):
        raise ConfigError(f"train.selection must be 'val' or 'test', got {t['selection']!r}")
    for key in ("epochs", "batch_size", "eval_batch_size"):
        if not isinstance(t[key], int) or t[key] <= 0:
            raise ConfigError(f"train.{key} must be a positive integer, got {t[key]!r}")
    return cfg
