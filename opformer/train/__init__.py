"""opformer.train: the Lightning module, and ``train`` / ``evaluate`` / ``predict`` from a run config
(docs/training.md).

Example::

    from opformer.train import load_preset, apply_overrides, train
    cfg, explicit = apply_overrides(load_preset("burgers-gt"), {"epochs": 10})
    metrics = train(cfg, "runs/gt10")
"""

import importlib

_WHERE = {
    "apply_overrides": "config", "list_presets": "config", "load_preset": "config", "resolve": "config",
    "DivergenceError": "module", "OperatorModule": "module", "RunDirError": "run",
    "evaluate": "run", "train": "run", "predict": "run",
}


def __getattr__(name: str):
    """Lazy: the command line imports ``opformer.train.cli`` without paying for Lightning."""
    if name in _WHERE:
        return getattr(importlib.import_module(f".{_WHERE[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = list(_WHERE)
