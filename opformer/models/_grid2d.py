"""Checks and grid handling shared by the 2D baselines and patched transformers (scot, vit, unet, deeponet, cno)."""

from __future__ import annotations

from typing import Any, Optional

from torch import Tensor

from ..nn.cinn import resize2d
from .base import TIME_CONDITIONING, _choice, _positive_int

__all__ = ["check_common", "check_size", "output_grid", "to_output_grid"]


def check_size(name: str, value: Any, minimum: int = 2) -> None:
    """None or an int >= minimum."""
    if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < minimum):
        raise ValueError(f"{name} must be None or an int >= {minimum}, got {value!r}")


def check_common(cfg) -> None:
    """in_channels, out_channels, out_size, time_conditioning (every 2D model here has them)."""
    _positive_int("in_channels", cfg.in_channels)
    _positive_int("out_channels", cfg.out_channels)
    check_size("out_size", cfg.out_size)
    _choice("time_conditioning", cfg.time_conditioning, TIME_CONDITIONING)


def output_grid(cfg, grid: tuple[int, int]) -> tuple[int, int]:
    """The output grid: (out_size, out_size) when set, else the input grid."""
    return (cfg.out_size, cfg.out_size) if cfg.out_size is not None else tuple(grid)


def to_output_grid(y: Tensor, grid: tuple[int, int]) -> Tensor:
    """Bilinear (align_corners=True, node grids map corner to corner) resampling of y (batch, h, w, C) to ``grid``;
    y itself when it is already there."""
    return resize2d(y, grid)


def maybe_resize(x: Tensor, size: Optional[int]) -> Tensor:
    return x if size is None else resize2d(x, size)


def patched_input(cfg, x: Tensor, coords: Tensor, patch: int) -> tuple[tuple[int, int], Tensor, int, int]:
    """(output grid, [input, coords] resized to ``cfg.grid_size`` and padded to a multiple of ``patch``, the
    unpadded height and width) for the patch-based models."""
    import torch

    from ..nn.patch import pad_to_multiple

    grid_out = output_grid(cfg, x.shape[1:3])
    x = maybe_resize(torch.cat((x, coords), dim=-1), cfg.grid_size)
    return grid_out, pad_to_multiple(x, patch), x.shape[1], x.shape[2]
