"""Checks and grid handling shared by the 2D baselines and patched transformers (scot, vit, unet, deeponet, cno)."""

from __future__ import annotations

from typing import Any, Optional

import torch
from torch import Tensor

from ..nn.cinn import resize2d
from .base import TIME_CONDITIONING, _choice, _positive_int

__all__ = ["check_common", "check_size", "output_grid", "to_output_grid", "axis_points", "output_points"]


#: the advice of a patch model's too-small-grid error, for whoever builds a model (a trained model's loader drops it:
#: its patch size is fixed)
PATCH_ADVICE = " (choose a smaller patch_size or set grid_size)"


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


def axis_points(c: Tensor, m: int) -> Tensor:
    """``m`` points of a grid of the same kind as the 1D coordinates ``c`` (n,) of [0, 1], as
    :func:`opformer.tasks.base.grid_coords` places them: a periodic axis (c_0 = 0, c_{n-1} + h = 1) gives j / m; a
    cell axis (c_0 = 1 - c_{n-1} in (0, h / 2]: the centres (i + 1/2) / n, or a stride of a cell grid, whose kind
    the tasks keep) gives (j + 1/2) / m; any other axis (a node grid i / (n - 1)) gives ``m`` points evenly from c_0
    to c_{n-1}, as the bilinear resampling with aligned corners does.  ``c`` itself when ``m == n``.  Chosen with
    tensor operations only, so no step waits for the device (CUDA graphs can capture it)."""
    n = c.numel()
    if n == m:
        return c
    j = torch.arange(m, dtype=c.dtype, device=c.device)
    first, last, h = c[0], c[-1], c[-1] - c[-2]
    tol = 1e-2 * h.abs()  # the kinds differ by at least h / 2 at an end
    periodic = (first.abs() < tol) & ((last + h - 1).abs() < tol)
    cell = ~periodic & (first > tol) & (first <= h / 2 + tol) & ((first + last - 1).abs() < tol)
    span = (last - first) / max(m - 1, 1)
    return torch.where(periodic, j / m, torch.where(cell, (j + 0.5) / m, first + j * span))


def output_points(coords: Tensor, size: int) -> Tensor:
    """The points of the ``size x size`` output grid of the same kind as the grid of ``coords`` (batch or 1, H, W,
    2; the first sample's, with ``coords[..., 0]`` varying along axis 1 and ``coords[..., 1]`` along axis 2): shape
    (1, size, size, 2).  A cell or periodic grid keeps its kind (a bilinear resampling of its coordinates with
    aligned corners would put the first and last points at the input's, half an input cell from where the output
    grid's are); on a node grid these are that resampling's points.  See :func:`axis_points`."""
    px = axis_points(coords[0, :, 0, 0], size)
    py = axis_points(coords[0, 0, :, 1], size)
    return torch.stack(torch.meshgrid(px, py, indexing="ij"), dim=-1)[None]


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
