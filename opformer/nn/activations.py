"""The activations every layer and model chooses from, by name (one place)."""

from __future__ import annotations

from torch import nn

__all__ = ["ACTIVATIONS", "activation"]

ACTIVATIONS = {"relu": nn.ReLU, "gelu": nn.GELU, "silu": nn.SiLU}


def activation(name: str) -> nn.Module:
    """An activation module by name (relu, gelu, silu)."""
    if name not in ACTIVATIONS:
        raise ValueError(f"unknown activation {name!r}; known: {sorted(ACTIVATIONS)}")
    return ACTIVATIONS[name]()
