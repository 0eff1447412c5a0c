"""``build_model(cfg)``: one dict (``name`` + constructor keyword arguments) -> model; and ``example_inputs``."""

from __future__ import annotations

import numbers
from collections.abc import Mapping
from typing import Any, Optional, Union

import torch
from torch import Tensor, nn

from .base import OperatorModel, closest, make_config
from .cno import CNO
from .deeponet import DeepONet
from .fno import FNO1d, FNO2d
from .scot import ScOT
from .transformer import Transformer1d, Transformer2d
from .unet import UNet
from .vit import ViT

__all__ = ["MODELS", "build_model", "model_config", "example_inputs", "count_parameters", "default_coords"]

#: build_model name -> model class
MODELS: dict[str, type[OperatorModel]] = {
    "transformer1d": Transformer1d,
    "transformer2d": Transformer2d,
    "fno1d": FNO1d,
    "fno2d": FNO2d,
    "scot": ScOT,
    "vit": ViT,
    "unet": UNet,
    "deeponet": DeepONet,
    "cno": CNO,
}

#: resolution used by example_inputs when none is given (the paper's training grids)
DEFAULT_RESOLUTION = {1: 512, 2: 141}


def _resolve(cfg: Union[str, Mapping[str, Any]]) -> tuple[type[OperatorModel], dict]:
    """(model class, keyword arguments) of a preset name or a ``{"name": ..., **kwargs}`` dict."""
    if isinstance(cfg, str):
        from .presets import model_preset

        cfg = model_preset(cfg)
    if not isinstance(cfg, Mapping):
        raise TypeError(f"a model config must be a dict with a 'name' key (or a preset name), got {type(cfg).__name__}")
    if "name" not in cfg:
        raise ValueError(f"a model config needs a 'name' key, one of {sorted(MODELS)}; got keys {sorted(cfg)}")
    name = cfg["name"]
    if not isinstance(name, str) or name not in MODELS:
        raise ValueError(f"unknown model name {name!r}; did you mean {closest(name, MODELS)!r}? known: {sorted(MODELS)}")
    return MODELS[name], {k: v for k, v in cfg.items() if k != "name"}


def model_config(cfg: Union[str, Mapping[str, Any]]):
    """The validated, frozen config dataclass of a preset name or a ``build_model`` dict (no model is built)."""
    cls, kwargs = _resolve(cfg)
    return make_config(cls.config_class, kwargs, f"model {cls.name!r}")


def build_model(cfg: Union[str, Mapping[str, Any]]) -> OperatorModel:
    """Build a model from ``{"name": NAME, **kwargs}``, NAME a key of :data:`MODELS` (transformer1d, transformer2d,
    fno1d, fno2d, scot, vit, unet, deeponet, cno).

    ``kwargs`` are the fields of the model's config dataclass; an unknown key raises a ValueError naming it and the
    nearest valid key.  A preset name (see :data:`opformer.models.MODEL_PRESETS`) is accepted too.
    ``build_model(model.to_config())`` rebuilds the same architecture.
    """
    cls, _ = _resolve(cfg)
    return cls(model_config(cfg))


def count_parameters(model: nn.Module) -> int:
    """Number of trainable real parameters (complex spectral weights are stored as (re, im) pairs)."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


def default_coords(resolution: int, dim: int, *, batch: int = 1, dtype=torch.float32) -> Tensor:
    """The standard coordinates: 1D ``j / n`` (periodic grid, values in [0, 1)), shape (batch, n, 1); 2D the
    meshgrid (indexing "ij") of ``linspace(0, 1, n)`` (nodes including the boundary), shape (batch, n, n, 2) with
    ``coords[..., 0]`` varying along axis 1."""
    if dim == 1:
        x = torch.arange(resolution, dtype=dtype) / resolution
        return x[None, :, None].expand(batch, resolution, 1).contiguous()
    if dim == 2:
        t = torch.linspace(0, 1, resolution, dtype=dtype)
        grid = torch.stack(torch.meshgrid(t, t, indexing="ij"), dim=-1)
        return grid[None].expand(batch, resolution, resolution, 2).contiguous()
    raise ValueError(f"dim must be 1 or 2, got {dim}")


def example_inputs(
    model_cfg_or_preset: Union[str, Mapping[str, Any], OperatorModel],
    batch: int = 4,
    resolution: Optional[int] = None,
    *,
    seed: int = 0,
    dtype=torch.float32,
) -> tuple[Tensor, Tensor]:
    """Random ``(input, coords)`` of the right shapes for a preset name, a ``build_model`` dict or a model.

    1D: input (batch, n, in_channels), coords (batch, n, 1); 2D: input (batch, n, n, in_channels), coords
    (batch, n, n, 2), with ``n = resolution`` (default 512 in 1D, 141 in 2D).  The input is standard normal
    (generator seeded with ``seed``); the coordinates are :func:`default_coords`.
    """
    if isinstance(model_cfg_or_preset, OperatorModel):
        cls, config = type(model_cfg_or_preset), model_cfg_or_preset.config
    else:
        cls = _resolve(model_cfg_or_preset)[0]
        config = model_config(model_cfg_or_preset)
    if not isinstance(batch, numbers.Integral) or isinstance(batch, bool) or batch < 1:
        raise ValueError(f"batch must be a positive int, got {batch!r}")
    dim = cls.spatial_dim
    n = DEFAULT_RESOLUTION[dim] if resolution is None else resolution
    if not isinstance(n, numbers.Integral) or isinstance(n, bool) or n < 2:
        raise ValueError(f"resolution must be an int >= 2, got {resolution!r}")
    batch, n = int(batch), int(n)  # numpy integers (numbers.Integral) as Python ints
    gen = torch.Generator().manual_seed(seed)
    shape = (batch, *([n] * dim), config.in_channels)
    x = torch.randn(shape, generator=gen, dtype=dtype)
    return x, default_coords(n, dim, batch=batch, dtype=dtype)

