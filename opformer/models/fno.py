"""Fourier Neural Operator baselines (Li et al. 2021) as compared in Cao 2021, without batch norm.

FNO1d (ex1): lift ``Linear(in + 1 -> 64)`` on (a, x); 4 layers ``K(v) + W v`` (spectral conv, 16 modes, plus 1x1
conv), ReLU between layers (none after the last); head ``Linear(64, 128) -> ReLU -> Linear(128, out)``.
549,569 parameters.  FNO2d (ex2/ex3): the same on (a, x, y) with width 32 and 12 x 12 modes: 2,368,001 parameters.

``coord_features="periodic"`` lifts (a, cos 2 pi x, sin 2 pi x, ...) instead of (a, x, ...).  On data periodic on
[0, 1)^d the raw coordinate is a sawtooth that jumps at the boundary: not band-limited, so its discrete Fourier
coefficients, which the spectral layers act on, depend on the grid (by about pi k / n at frequency k on n points),
and a model trained on a coarse grid then differs from itself on a finer one.  The periodic features are
band-limited (frequency 1) and leave no such difference (docs/models.md, "FNO across grids").
"""

from __future__ import annotations

import dataclasses
import math
from typing import ClassVar, Optional

import torch
from torch import Tensor, nn

from ..nn.activations import ACTIVATIONS, activation
from ..nn.spectral import SpectralConv1d, SpectralConv2d
from ..nn.conditional import ConditionalAffine
from ._grid2d import InternalGrid
from .base import _CHANNELS_HELP, TIME_CONDITIONING, OperatorModel, _choice, _positive_int, _time_help

__all__ = ["FNO1dConfig", "FNO1d", "FNO2dConfig", "FNO2d"]

COORD_FEATURES = ("raw", "periodic")


@dataclasses.dataclass(frozen=True)
class FNO1dConfig:
    """FNO1d; the defaults are the paper's baseline (549,569 parameters)."""

    in_channels: int = 1
    out_channels: int = 1
    width: int = 64
    modes: int = 16
    num_layers: int = 4
    head_width: int = 128
    activation: str = "relu"
    time_conditioning: str = "none"
    coord_features: str = "raw"

    #: one-line help of each field (``opformer train PRESET --help``); FNO2dConfig lists what it adds or changes
    FIELD_HELP: ClassVar[dict[str, str]] = {
        **_CHANNELS_HELP,
        "width": "channels of the spectral layers",
        "modes": "lowest Fourier modes kept by each spectral layer (at most n // 2 + 1 on n points)",
        "num_layers": "spectral layers K(v) + W v",
        "head_width": "hidden width of the pointwise output head",
        "activation": "activation between the spectral layers (none after the last) and in the head: relu, gelu "
                      "or silu",
        "time_conditioning": _time_help("a lead-time scale and shift after each spectral layer"),
        "coord_features": "position features lifted with the input: raw (the coordinates, as Li et al.) or periodic "
                          "(cos 2 pi x and sin 2 pi x per axis: for data periodic on [0, 1), where the raw "
                          "coordinate jumps at the boundary and makes a model differ between grids)",
    }

    def __post_init__(self):
        for name in ("in_channels", "out_channels", "width", "modes", "num_layers", "head_width"):
            _positive_int(name, getattr(self, name))
        _choice("activation", self.activation, ACTIVATIONS)
        _choice("time_conditioning", self.time_conditioning, TIME_CONDITIONING)
        _choice("coord_features", self.coord_features, COORD_FEATURES)


@dataclasses.dataclass(frozen=True)
class FNO2dConfig(FNO1dConfig):
    """FNO2d; the defaults are the paper's baseline (2,368,001 parameters).

    ``out_size``: None (output on the input grid) or the side of a square output grid; then the input and its
    coordinates are first resampled to that grid and the FNO runs there (the paper's "FNO2d (only n_c)" for the
    inverse problem).  The output grid has the input grid's kind (cell centres, periodic or node points:
    ``_grid2d.to_grid_of_kind``), so inputs of one kind at any resolution are read at the same points; a node grid
    is resampled bilinearly with aligned corners, any other linearly along each axis.
    """

    width: int = 32
    modes: int = 12
    out_size: Optional[int] = None

    FIELD_HELP: ClassVar[dict[str, str]] = {
        "modes": "lowest Fourier modes per axis kept by each spectral layer (fewer where the grid resolves fewer)",
        "out_size": "side of a square grid of the input grid's kind (cell, periodic or node) the input is "
                    "resampled to (linearly) and the FNO runs and outputs on (null: the input grid)",
    }

    def __post_init__(self):
        super().__post_init__()
        if self.out_size is not None and (not isinstance(self.out_size, int) or self.out_size < 2):
            raise ValueError(f"out_size must be None or an int >= 2, got {self.out_size!r}")


class _FNO(OperatorModel):
    conv_class: type

    def __init__(self, config=None, **kwargs):
        super().__init__(config, **kwargs)
        cfg = self.config
        per_axis = 2 if cfg.coord_features == "periodic" else 1
        self.lift = nn.Linear(self.lift_channels + per_axis * self.spatial_dim, cfg.width)
        # "norm" conditioning: a lead-time scale and shift after each spectral layer, the identity at initialisation
        self.cond = nn.ModuleList([ConditionalAffine(cfg.width) for _ in range(cfg.num_layers)]) if \
            cfg.time_conditioning == "norm" else None
        self.layers = nn.ModuleList(
            [self.conv_class(cfg.width, cfg.width, cfg.modes) for _ in range(cfg.num_layers)]
        )
        self.act = activation(cfg.activation)
        self.head = nn.Sequential(
            nn.Linear(cfg.width, cfg.head_width), activation(cfg.activation), nn.Linear(cfg.head_width, cfg.out_channels)
        )

    def coord_features(self, coords: Tensor) -> Tensor:
        """What the lift sees of the position: the coordinates, or (cos 2 pi x_i ..., sin 2 pi x_i ...)."""
        if self.config.coord_features == "raw":
            return coords
        angle = 2 * math.pi * coords
        return torch.cat((torch.cos(angle), torch.sin(angle)), dim=-1)

    def _run(self, x: Tensor, coords: Tensor, lead_time: Optional[Tensor] = None) -> Tensor:
        v = self.lift(torch.cat((x, self.coord_features(coords)), dim=-1))
        for i, layer in enumerate(self.layers):
            v = layer(v)
            if self.cond is not None:
                v = self.cond[i](v, lead_time)
            if i < len(self.layers) - 1:
                v = self.act(v)
        return self.head(v)


class FNO1d(_FNO):
    """FNO on a 1D grid: ``input`` (batch, n, in_channels), ``coords`` (batch, n, 1) -> (batch, n, out_channels)."""

    name = "fno1d"
    config_class = FNO1dConfig
    spatial_dim = 1
    conv_class = SpectralConv1d

    @classmethod
    def max_modes(cls, config, grid: tuple[int, ...]) -> int:
        return grid[0] // 2 + 1

    def _check_grid(self, grid: tuple[int, ...]) -> None:
        if grid[0] < 2:
            raise ValueError(f"FNO1d needs a grid of at least 2 points, got n={grid[0]}")

    def _forward(self, x: Tensor, coords: Tensor, lead_time: Optional[Tensor]) -> Tensor:
        return self._run(x, coords, lead_time)


class FNO2d(_FNO):
    """FNO on a 2D grid: ``input`` (batch, H, W, in_channels), ``coords`` (batch, H, W, 2) -> (batch, H, W, out),
    or (batch, out_size, out_size, out) when ``out_size`` is set.  Rectangular grids are fine without ``out_size``.
    """

    name = "fno2d"
    config_class = FNO2dConfig
    spatial_dim = 2
    conv_class = SpectralConv2d

    @classmethod
    def max_modes(cls, config, grid: tuple[int, ...]) -> int:
        h, w = (config.out_size,) * 2 if config.out_size is not None else grid
        return min(h // 2, w // 2 + 1)

    def _check_grid(self, grid: tuple[int, ...]) -> None:
        if min(grid) < 2:
            raise ValueError(f"FNO2d needs a grid of at least 2 x 2 points, got {grid[0]} x {grid[1]}")

    def _forward(self, x: Tensor, coords: Tensor, lead_time: Optional[Tensor]) -> Tensor:
        size = self.config.out_size
        if size is not None and tuple(x.shape[1:3]) != (size, size):
            grid = InternalGrid(coords, size)  # the out_size grid of the input grid's kind
            x, coords = grid.inward(x), grid.coords(coords)
        return self._run(x, coords, lead_time)
