"""opformer.train: losses, the Lightning module, and ``train`` / ``evaluate`` from a run config (docs/training.md).

Example::

    from opformer.train import load_preset, resolve, apply_overrides, train
    cfg = resolve(apply_overrides(resolve(load_preset("burgers-gt")), {"epochs": 10}))
    metrics = train(cfg, "runs/gt10")
"""

import importlib

_WHERE = {
    "ConfigError": "config", "apply_overrides": "config", "list_presets": "config", "load_preset": "config",
    "resolve": "config", "effective_gamma": "losses", "h1_seminorm_1d": "losses", "h1_seminorm_2d": "losses",
    "rel_l2": "losses", "DivergenceError": "module", "OperatorModule": "module", "RunDirError": "run",
    "evaluate": "run", "train": "run",
}


def __getattr__(name: str):
    """Lazy: the command line imports ``opformer.train.cli`` without paying for Lightning."""
    if name in _WHERE:
        return getattr(importlib.import_module(f".{_WHERE[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "ConfigError",
    "apply_overrides",
    "list_presets",
    "load_preset",
    "resolve",
    "effective_gamma",
    "h1_seminorm_1d",
    "h1_seminorm_2d",
    "rel_l2",
    "DivergenceError",
    "OperatorModule",
    "RunDirError",
    "evaluate",
    "train",
]
