"""A standard 2D U-Net baseline (Ronneberger et al. 2015), as used for operator learning in the lecture.

Input (a, x, y) -> double conv (3x3 conv, [norm], activation, twice) at width c -> ``levels``
times: 2x2 max pooling and a double conv doubling the width -> ``levels`` times: 2x2 transposed convolution
halving the width, concatenation with the encoder's features of the same grid (skip connection), double conv ->
1x1 conv to the output channels.  ``norm``: "none" (the original U-Net) or "layer" (a layer norm over the channels
of each point).  With ``time_conditioning="norm"`` the layer norms are lead-time conditioned, or, without norms,
each conv gets a lead-time scale and shift (:class:`~opformer.nn.ConditionalAffine`, the identity at init).

Resolution rules: any H x W grid with H, W >= 2; it is padded at the end of each axis (replicating the last
row/column) to a multiple of 2**levels and cropped back.  The convolutions act on the grid it is given (3 x 3 grid
points, so a finer grid sees a smaller part of the domain): the model does not claim resolution transfer unless
``grid_size`` is set, which resamples the input linearly to the ``grid_size x grid_size`` grid of the input
grid's kind (``_grid2d.InternalGrid``) and the output back.
``out_size``: a square output grid of the input grid's kind (cell, periodic or node: ``_grid2d.to_grid_of_kind``),
resampled linearly, so inputs of one kind at any resolution give their output at the same points.
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar, Optional

import torch
from torch import Tensor, nn

from ..nn.activations import ACTIVATIONS, activation
from ..nn.conditional import ConditionalAffine
from ..nn.patch import crop, layer_norm
from ._grid2d import check_common, check_size, from_internal, patched_input
from .base import _CHANNELS_HELP, OperatorModel, _choice, _positive_int, _time_help

__all__ = ["UNetConfig", "UNet"]


@dataclasses.dataclass(frozen=True)
class UNetConfig:
    """U-Net.  ``width`` channels at the finest level, doubled at each of the ``levels`` coarser ones;
    ``activation``; ``grid_size`` an optional internal grid; ``out_size``."""

    in_channels: int = 1
    out_channels: int = 1
    width: int = 16
    levels: int = 3
    activation: str = "gelu"
    norm: str = "none"
    grid_size: Optional[int] = None
    out_size: Optional[int] = None
    time_conditioning: str = "none"

    #: one-line help of each field (``opformer train PRESET --help``)
    FIELD_HELP: ClassVar[dict[str, str]] = {
        **_CHANNELS_HELP,
        "width": "channels at the finest level, doubled at each coarser one",
        "levels": "coarser levels, each a 2x2 max pooling (the grid is padded to a multiple of 2**levels)",
        "activation": "activation of the convolutions: relu, gelu or silu",
        "norm": "norm after each convolution: none (the original U-Net) or layer (over the channels of each point)",
        "grid_size": "side of a square grid the input is resampled to (linearly, a grid of the input grid's kind: "
                     "cell, periodic or node) and the network runs on, the output resampled back (null: the "
                     "input grid)",
        "out_size": "side of a square output grid of the input grid's kind (cell, periodic or node), resampled "
                    "linearly (null: the input grid)",
        "time_conditioning": _time_help("lead-time conditioned layer norms, or with norm none a lead-time scale "
                                        "and shift after each convolution"),
    }

    def __post_init__(self):
        check_common(self)
        _positive_int("width", self.width)
        if not isinstance(self.levels, int) or isinstance(self.levels, bool) or self.levels < 0:
            raise ValueError(f"levels must be an int >= 0, got {self.levels!r}")
        _choice("activation", self.activation, ACTIVATIONS)
        _choice("norm", self.norm, ("none", "layer"))
        check_size("grid_size", self.grid_size)


class _Identity(nn.Module):
    def forward(self, x: Tensor, lead_time: Optional[Tensor] = None) -> Tensor:
        return x


def _norm(c: int, conditioned: bool, norm: str) -> nn.Module:
    if norm == "layer":
        return layer_norm(c, conditioned)
    return ConditionalAffine(c) if conditioned else _Identity()


class DoubleConv(nn.Module):
    """(conv 3x3 -> norm -> activation) twice; channels-last in and out.  The norm is a (conditioned) layer norm
    over the channels, a conditioned affine, or nothing."""

    def __init__(self, c_in: int, c_out: int, act: str, conditioned: bool, norm: str = "none"):
        super().__init__()
        self.conv1 = nn.Conv2d(c_in, c_out, 3, padding=1)
        self.conv2 = nn.Conv2d(c_out, c_out, 3, padding=1)
        self.norm1, self.norm2 = _norm(c_out, conditioned, norm), _norm(c_out, conditioned, norm)
        self.act = activation(act)

    def forward(self, x: Tensor, lead_time: Optional[Tensor]) -> Tensor:
        x = self.conv1(x.permute(0, 3, 1, 2)).permute(0, 2, 3, 1)
        x = self.act(self.norm1(x, lead_time))
        x = self.conv2(x.permute(0, 3, 1, 2)).permute(0, 2, 3, 1)
        return self.act(self.norm2(x, lead_time))


class UNet(OperatorModel):
    """U-Net on a 2D grid: ``input`` (batch, H, W, in_channels), ``coords`` (batch, H, W, 2) ->
    (batch, H, W, out_channels), or (batch, out_size, out_size, out_channels) with ``out_size``."""

    name = "unet"
    config_class = UNetConfig
    spatial_dim = 2

    @property
    def grid_bound(self) -> bool:
        return self.config.grid_size is None  # 3 x 3 convolutions and pooling on grid cells, unless on its own grid

    def __init__(self, config: Optional[UNetConfig] = None, **kwargs):
        super().__init__(config, **kwargs)
        cfg = self.config
        cond = cfg.time_conditioning == "norm"
        c = [cfg.width * 2**level for level in range(cfg.levels + 1)]
        self.inc = DoubleConv(self.lift_channels + 2, c[0], cfg.activation, cond, cfg.norm)
        self.down = nn.ModuleList([DoubleConv(c[i], c[i + 1], cfg.activation, cond, cfg.norm) for i in range(cfg.levels)])
        self.up = nn.ModuleList([nn.ConvTranspose2d(c[i + 1], c[i], 2, stride=2) for i in range(cfg.levels)])
        self.dec = nn.ModuleList([DoubleConv(2 * c[i], c[i], cfg.activation, cond, cfg.norm) for i in range(cfg.levels)])
        self.pool = nn.MaxPool2d(2)
        self.head = nn.Linear(c[0], cfg.out_channels)

    def _check_grid(self, grid: tuple[int, ...]) -> None:
        if min(grid) < 2:
            raise ValueError(f"UNet needs a grid of at least 2 x 2, got {grid[0]} x {grid[1]}")

    def _forward(self, x: Tensor, coords: Tensor, lead_time: Optional[Tensor]) -> Tensor:
        cfg = self.config
        # [x, coords] on the internal grid (grid_size) and padded to a multiple of 2**levels, as the patch models'
        x, h, w, internal = patched_input(cfg, x, coords, 2**cfg.levels)
        feats = [self.inc(x, lead_time)]
        for block in self.down:
            pooled = self.pool(feats[-1].permute(0, 3, 1, 2)).permute(0, 2, 3, 1)
            feats.append(block(pooled, lead_time))
        y = feats[-1]
        for i in reversed(range(cfg.levels)):
            y = self.up[i](y.permute(0, 3, 1, 2)).permute(0, 2, 3, 1)
            y = self.dec[i](torch.cat((y, feats[i]), dim=-1), lead_time)
        return from_internal(cfg, crop(self.head(y), h, w), coords, internal)
