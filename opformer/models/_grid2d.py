"""Checks and grid handling shared by the 2D baselines and patched transformers (scot, vit, unet, deeponet, cno,
fno2d, transformer2d)."""

from __future__ import annotations

from typing import Any, Optional

import torch
from torch import Tensor

from ..nn.cinn import resize2d
from .base import TIME_CONDITIONING, _choice, _positive_int

__all__ = ["check_common", "check_size", "axis_kind", "node_grid", "axis_points", "output_points", "interp_axis",
           "InternalGrid", "to_grid_of_kind"]


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


def axis_kind(c: Tensor) -> tuple[Tensor, Tensor]:
    """(periodic, cell): boolean 0-dim tensors saying of the 1D coordinates ``c`` (n >= 2,) of [0, 1] whether they
    are a periodic axis (c_0 = 0, c_{n-1} + h = 1) or a cell axis (c_0 = 1 - c_{n-1} in (0, h / 2]: the centres
    (i + 1/2) / n, or a stride of a cell grid); neither: a node axis.  Tensor operations only."""
    first, last, h = c[0], c[-1], c[-1] - c[-2]
    # the kinds differ by at least h / 2 at an end; coordinates rounded to a low precision (float16, bfloat16) are
    # off by a few of its eps, which the tolerance then covers, up to h / 4
    eps = torch.finfo(c.dtype).eps if c.dtype.is_floating_point else 0.0
    tol = torch.minimum(torch.clamp(1e-2 * h.abs(), min=8 * eps), h.abs() / 4)
    periodic = (first.abs() < tol) & ((last + h - 1).abs() < tol)
    cell = ~periodic & (first > tol) & (first <= h / 2 + tol) & ((first + last - 1).abs() < tol)
    return periodic, cell


def node_grid(coords: Tensor) -> Tensor:
    """Whether the grid of ``coords`` (batch or 1, H, W, 2; the first sample's) is a node grid, both axes neither
    periodic nor cell (:func:`axis_kind`): a boolean 0-dim tensor, chosen with tensor operations only."""
    (px, cx), (py, cy) = axis_kind(coords[0, :, 0, 0]), axis_kind(coords[0, 0, :, 1])
    return ~(px | cx) & ~(py | cy)


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
    periodic, cell = axis_kind(c)
    first, last = c[0], c[-1]
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


def interp_axis(x: Tensor, axis: int, c: Tensor, p: Tensor) -> Tensor:
    """``x`` (batch, H, W, C) whose points along ``axis`` (1 or 2) sit at the coordinates ``c`` (n,), increasing ->
    its linear interpolation at the points ``p`` (m,) of that axis.  A periodic axis (c_0 = 0, c_{n-1} + h = 1)
    wraps around to 1, which is 0; beyond the outermost points of any other axis the end values are held.  Tensor
    operations only (no step waits for the device)."""
    n = c.numel()
    if n == 1:
        return x.expand(*[p.numel() if a == axis else -1 for a in range(x.dim())])
    periodic, _ = axis_kind(c)
    # one point more: on a periodic axis the first value again at 1, on any other the last one a unit further
    c = torch.cat((c, torch.where(periodic, torch.ones_like(c[-1]), c[-1] + 1).view(1)))
    x = torch.cat((x, torch.where(periodic, x.narrow(axis, 0, 1), x.narrow(axis, n - 1, 1))), dim=axis)
    i = (torch.searchsorted(c.contiguous(), p.contiguous(), right=True) - 1).clamp(0, n - 1)
    w = ((p - c[i]) / (c[i + 1] - c[i])).clamp(0, 1).to(x.dtype)
    w = w.view([p.numel() if a == axis else 1 for a in range(x.dim())])
    return x.index_select(axis, i) * (1 - w) + x.index_select(axis, i + 1) * w


def to_points(x: Tensor, cx: Tensor, cy: Tensor, px: Tensor, py: Tensor) -> Tensor:
    """``x`` (batch, H, W, C) on the grid with axis coordinates ``cx`` (H,) and ``cy`` (W,) -> its linear
    interpolation (per axis, :func:`interp_axis`) on the grid of the points ``px`` x ``py``."""
    return interp_axis(interp_axis(x, 1, cx, px.to(cx.dtype)), 2, cy, py.to(cy.dtype))


class InternalGrid:
    """The ``size x size`` internal grid of a model with ``grid_size``, of the same kind as the input grid of
    ``coords`` (batch or 1, H, W, 2; the first sample's): cell centres (j + 1/2) / size for a cell grid, j / size
    for a periodic one, and for a node grid ``size`` points evenly from the first to the last coordinate.  Inputs on
    any grid of one kind are then read at the same points of the domain, so the model computes one function
    whatever the input grid.  (A bilinear resampling with aligned corners put the first and last internal points on
    the input grid's outermost cell centres, which move with the input grid.)  :meth:`inward` resamples an input
    there, :meth:`outward` the model's output back to the input grid or to the ``out_size`` grid of the same kind
    (:func:`output_points`), both by linear interpolation along each axis.  A node grid (both axes) takes the
    bilinear resampling with aligned corners itself: the same points, and the same numbers as before.  Built with
    ``size`` the ``out_size`` of a model, :meth:`inward` and :meth:`coords` give the output grid of the input's kind
    (:func:`to_grid_of_kind`)."""

    def __init__(self, coords: Tensor, size: int):
        self.size = size
        self.cx, self.cy = coords[0, :, 0, 0], coords[0, 0, :, 1]
        self.px, self.py = axis_points(self.cx, size), axis_points(self.cy, size)
        self.node = node_grid(coords)

    def _pick(self, bilinear: Tensor, points: Tensor) -> Tensor:
        return torch.where(self.node, bilinear, points)

    def coords(self, coords: Tensor) -> Tensor:
        """The internal grid's coordinates, (batch or 1, size, size, 2), from the input's ``coords``."""
        grid = torch.stack(torch.meshgrid(self.px, self.py, indexing="ij"), dim=-1)[None].to(coords.dtype)
        return self._pick(resize2d(coords, self.size), grid)

    def inward(self, x: Tensor) -> Tensor:
        """``x`` (batch, H, W, C) on the input grid -> (batch, size, size, C) on the internal grid."""
        return self._pick(resize2d(x, self.size), to_points(x, self.cx, self.cy, self.px, self.py))

    def outward(self, y: Tensor, out_size: Optional[int]) -> Tensor:
        """``y`` (batch, size, size, C) on the internal grid -> the input grid, or the ``out_size`` grid of its kind."""
        if out_size is None:
            target, qx, qy = (self.cx.numel(), self.cy.numel()), self.cx, self.cy
        else:
            target, qx, qy = (out_size, out_size), axis_points(self.cx, out_size), axis_points(self.cy, out_size)
        return self._pick(resize2d(y, target), to_points(y, self.px, self.py, qx, qy))


def to_grid_of_kind(y: Tensor, coords: Tensor, size: int) -> Tensor:
    """``y`` (batch, H, W, C) on the grid of ``coords`` -> (batch, size, size, C) on the ``size x size`` grid of the
    same kind (:func:`output_points`: cell centres (j + 1/2) / size, periodic j / size, node grids ``size`` points
    evenly from the first to the last coordinate), by :meth:`InternalGrid.inward`; ``y`` itself when it is already
    ``size x size``.  Every input grid of one kind then gives the same output points, whatever its resolution.
    (A bilinear resampling with aligned corners put the output's outermost points on the input's, which on a cell or
    periodic grid move with the input grid: 1/34 and 1/66 for a 17 and a 33 cell grid, against 1/16 for the 8 x 8
    cell grid's first centre.)  A node grid keeps that resampling, to the last bit."""
    if tuple(y.shape[1:3]) == (size, size):
        return y
    return InternalGrid(coords, size).inward(y)


def patched_input(cfg, x: Tensor, coords: Tensor, patch: int):
    """([input, coords] on ``cfg.grid_size``'s :class:`InternalGrid` and padded to a multiple of ``patch``, the
    unpadded height and width, the internal grid or None) for the patch-based models and U-Net (whose ``patch`` is
    2**levels)."""
    from ..nn.patch import pad_to_multiple

    internal = None
    if cfg.grid_size is not None:
        internal = InternalGrid(coords, cfg.grid_size)
        x, coords = internal.inward(x), internal.coords(coords)
    x = torch.cat((x, coords), dim=-1)
    return pad_to_multiple(x, patch), x.shape[1], x.shape[2], internal


def from_internal(cfg, y: Tensor, coords: Tensor, internal: Optional[InternalGrid]) -> Tensor:
    """A model's output ``y`` to its output grid: from the internal grid (``grid_size``) by
    :meth:`InternalGrid.outward`; else ``y`` is on the input grid of ``coords``, and goes to the ``out_size`` grid
    of its kind by :func:`to_grid_of_kind` (or stays there without ``out_size``)."""
    if internal is not None:
        return internal.outward(y, cfg.out_size)
    if cfg.out_size is None:
        return y
    return to_grid_of_kind(y, coords, cfg.out_size)
