"""CNO, the Convolutional Neural Operator (Raonic et al. 2023): a U-Net of convolutions whose activations are
alias-free, so that the network maps band-limited functions to band-limited functions.

Lift: 3x3 conv ``in -> width`` and an alias-free activation.  Encoder: ``levels`` times a block (3x3 conv,
alias-free activation) and a down block (3x3 conv to twice the width, alias-free activation whose filter keeps the
band of the half grid and samples there).  Bottleneck: ``res_blocks`` residual blocks v + conv(sigma(conv v)).
Decoder: ``levels`` times an up block (band-limited upsampling x2, 3x3 conv to half the width, alias-free
activation), concatenation with the encoder's features (skip connection) and a block.  Projection: 1x1 conv.
Every activation is :class:`~opformer.nn.alias_free.AliasFreeActivation2d` (upsample by ``up``, activate, filter,
downsample); resampling is by Fourier modes (:func:`~opformer.nn.alias_free.fourier_resample2d`), which reads the
grid as periodic; the convolutions pad circularly for the same reason.  With ``time_conditioning="norm"`` each
block's output gets a lead-time scale and shift (:class:`~opformer.nn.ConditionalAffine`, identity at init).

Resolution rules: with ``grid_size`` the network runs on the ``grid_size x grid_size`` grid (a multiple of
2**levels, at least 2 * 2**levels): an input on any grid is resampled there by Fourier modes and the output back to
the output grid the same way, so the model is one operator on band-limited functions at every resolution (the
CNO's claim; exact for inputs band-limited to the internal grid).  A grid of cell centres (i + 1/2) / n is
resampled to the internal grid's cell centres (j + 1/2) / grid_size (:func:`cell_shift`), a periodic grid is read
as the points i / n.  A node grid
(both axes; its points i / (n - 1) hold both ends, so it is no period) stays a node grid: it is resampled linearly
to the internal node grid, grid_size points from its first to its last point, and the output back, as
``_grid2d.InternalGrid`` does (read as the periodic points i / n, the node points moved with the input grid, and
the jump between the two ends rang through the Fourier resampling).  A grid with one node axis and one of another
kind takes the Fourier resampling (its node axis read as i / n).  Without ``grid_size``, the input grid (any H, W >= 2)
is padded at the end of each axis by replication to a multiple of 2**levels and cropped back.  ``out_size``: a
square output grid of the input grid's kind (cell, periodic or node), to which the output on the input grid is
resampled linearly (``_grid2d.to_grid_of_kind``).
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar, Optional

from torch import Tensor, nn
import torch

from ..nn.activations import ACTIVATIONS
from ..nn.alias_free import AliasFreeActivation2d, fourier_resample2d
from ..nn.cinn import resize2d
from ..nn.conditional import ConditionalAffine
from ..nn.patch import crop, pad_to_multiple
from ._grid2d import axis_kind, check_common, node_grid, to_grid_of_kind
from .base import _CHANNELS_HELP, OperatorModel, _choice, _positive_int, _time_help

__all__ = ["CNOConfig", "CNO"]


@dataclasses.dataclass(frozen=True)
class CNOConfig:
    """CNO.  ``width`` channels at the finest level, doubled at each of the ``levels`` coarser ones;
    ``res_blocks`` residual blocks at the coarsest level; ``activation`` and its upsampling factor ``up``;
    ``grid_size`` the internal grid (None: the input grid, padded); ``out_size``."""

    in_channels: int = 1
    out_channels: int = 1
    width: int = 16
    levels: int = 2
    res_blocks: int = 2
    activation: str = "gelu"
    up: int = 2
    grid_size: Optional[int] = None
    out_size: Optional[int] = None
    time_conditioning: str = "none"

    #: one-line help of each field (``opformer train PRESET --help``)
    FIELD_HELP: ClassVar[dict[str, str]] = {
        **_CHANNELS_HELP,
        "width": "channels at the finest level, doubled at each coarser one",
        "levels": "coarser levels, each halving the grid (the input grid is padded to a multiple of 2**levels)",
        "res_blocks": "residual blocks at the coarsest level",
        "activation": "activation, applied alias-free: relu, gelu or silu",
        "up": "upsampling factor of the alias-free activations (activate on an up times finer grid, then filter)",
        "grid_size": "side of the internal grid the input is resampled to by Fourier modes (a node grid: linearly, "
                     "to a node grid) and the output back from, a multiple of 2**levels and at least twice it "
                     "(null: the input grid, padded)",
        "out_size": "side of a square output grid of the input grid's kind (cell, periodic or node), resampled "
                    "linearly (null: the input grid)",
        "time_conditioning": _time_help("a lead-time scale and shift after each block's convolution"),
    }

    def __post_init__(self):
        check_common(self)
        for name in ("width", "up"):
            _positive_int(name, getattr(self, name))
        for name in ("levels", "res_blocks"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise ValueError(f"{name} must be an int >= 0, got {value!r}")
        _choice("activation", self.activation, ACTIVATIONS)
        if self.grid_size is not None:
            m = 2**self.levels
            if not isinstance(self.grid_size, int) or self.grid_size % m or self.grid_size < 2 * m:
                raise ValueError(f"grid_size must be None or a multiple of 2**levels = {m}, at least {2 * m}; "
                                 f"got {self.grid_size!r}")


def cell_shift(coords: Tensor, size: int) -> tuple[Tensor, Tensor]:
    """The :func:`~opformer.nn.alias_free.fourier_resample2d` shift, per axis, that takes a grid of ``coords``
    (batch or 1, H, W, 2) to the internal ``size`` grid at the same points of the period: 1 / (2 size) - 1 / (2 n)
    on a cell axis (centres (i + 1/2) / n to (j + 1/2) / size), 0 on any other (read as i / n; a node grid takes
    the linear resampling instead, see the module).  Without it a cell grid was read as if its points were i / n,
    half a cell off, and the internal grid moved with the input grid (by 1/34 - 1/32 of the period for 17 points
    to 16, 1/66 - 1/32 for 33)."""
    out = []
    for c in (coords[0, :, 0, 0], coords[0, 0, :, 1]):
        _, cell = axis_kind(c)
        delta = torch.full((), 0.5 / size - 0.5 / c.numel(), dtype=c.dtype, device=c.device)
        out.append(torch.where(cell, delta, torch.zeros_like(delta)))
    return out[0], out[1]


class _Block(nn.Module):
    """3x3 conv (circular padding) -> [lead-time affine] -> alias-free activation, to ``out_size`` (channels first)."""

    def __init__(self, c_in: int, c_out: int, act: str, up: int, conditioned: bool):
        super().__init__()
        self.conv = nn.Conv2d(c_in, c_out, 3, padding=1, padding_mode="circular")
        self.cond = ConditionalAffine(c_out) if conditioned else None
        self.act = AliasFreeActivation2d(act, up)

    def forward(self, x: Tensor, lead_time: Optional[Tensor], out_size=None) -> Tensor:
        y = self.conv(x)
        if self.cond is not None:
            y = self.cond(y.permute(0, 2, 3, 1), lead_time).permute(0, 3, 1, 2)
        return self.act(y, out_size)


class _ResBlock(nn.Module):
    def __init__(self, c: int, act: str, up: int, conditioned: bool):
        super().__init__()
        self.block = _Block(c, c, act, up, conditioned)
        self.conv = nn.Conv2d(c, c, 3, padding=1, padding_mode="circular")

    def forward(self, x: Tensor, lead_time: Optional[Tensor]) -> Tensor:
        return x + self.conv(self.block(x, lead_time))


class CNO(OperatorModel):
    """CNO on a 2D grid: ``input`` (batch, H, W, in_channels), ``coords`` (batch, H, W, 2) ->
    (batch, H, W, out_channels), or (batch, out_size, out_size, out_channels) with ``out_size``."""

    name = "cno"
    config_class = CNOConfig
    spatial_dim = 2

    @property
    def grid_bound(self) -> bool:
        return self.config.grid_size is None  # convolutions on grid cells, unless it runs on its own grid

    def __init__(self, config: Optional[CNOConfig] = None, **kwargs):
        super().__init__(config, **kwargs)
        cfg = self.config
        cond, act, up = cfg.time_conditioning == "norm", cfg.activation, cfg.up
        c = [cfg.width * 2**level for level in range(cfg.levels + 1)]
        self.lift = _Block(self.lift_channels, c[0], act, up, cond)
        self.enc = nn.ModuleList([_Block(c[i], c[i], act, up, cond) for i in range(cfg.levels)])
        self.down = nn.ModuleList([_Block(c[i], c[i + 1], act, up, cond) for i in range(cfg.levels)])
        self.res = nn.ModuleList([_ResBlock(c[-1], act, up, cond) for _ in range(cfg.res_blocks)])
        self.up = nn.ModuleList([_Block(c[i + 1], c[i], act, up, cond) for i in range(cfg.levels)])
        self.dec = nn.ModuleList([_Block(2 * c[i], c[i], act, up, cond) for i in range(cfg.levels)])
        self.project = nn.Conv2d(c[0], cfg.out_channels, 1)

    def _check_grid(self, grid: tuple[int, ...]) -> None:
        if min(grid) < 2:
            raise ValueError(f"CNO needs a grid of at least 2 x 2, got {grid[0]} x {grid[1]}")

    def _forward(self, x: Tensor, coords: Tensor, lead_time: Optional[Tensor]) -> Tensor:
        cfg = self.config
        h, w = x.shape[1], x.shape[2]
        shift, node = None, None
        if cfg.grid_size is not None:
            g = cfg.grid_size
            if (h, w) != (g, g):
                shift = cell_shift(coords, g)
            # a node grid to the internal node grid linearly, any other by Fourier modes (chosen on the device)
            node = node_grid(coords)
            v = torch.where(node, resize2d(x, g), fourier_resample2d(x, g, shift=shift))
        else:
            v = pad_to_multiple(x, 2**cfg.levels)
        v = self.lift(v.permute(0, 3, 1, 2), lead_time)
        skips = []
        for enc, down in zip(self.enc, self.down):
            skips.append(enc(v, lead_time))
            v = down(skips[-1], lead_time, (v.shape[-2] // 2, v.shape[-1] // 2))
        for res in self.res:
            v = res(v, lead_time)
        for i in reversed(range(cfg.levels)):
            skip = skips[i]
            v = fourier_resample2d(v, tuple(skip.shape[-2:]), channels_last=False)
            v = self.up[i](v, lead_time)
            v = self.dec[i](torch.cat((v, skip), dim=1), lead_time)
        y = self.project(v).permute(0, 2, 3, 1)
        if cfg.grid_size is not None:
            back = None if shift is None else (-shift[0], -shift[1])
            y = torch.where(node, resize2d(y, (h, w)), fourier_resample2d(y, (h, w), shift=back))
        else:
            y = crop(y, h, w)
        return y if cfg.out_size is None else to_grid_of_kind(y, coords, cfg.out_size)
