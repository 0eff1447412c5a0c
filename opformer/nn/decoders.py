"""Decoders mapping the encoder's latent functions back to the target channels (Cao 2021, section 4).

* :class:`SpectralDecoder1d`, :class:`SpectralDecoder2d`: the 2-layer spectral convolution decoder for smooth targets
  (H^{1+alpha}): optional coordinate lift, ``num_layers`` spectral layers ``act(Linear(x) + K(x))`` and a pointwise
  head ``Linear -> act -> Linear``.
* :class:`PointwiseDecoder`: a pointwise feed-forward network for non-smooth targets (L^infinity), any dimension.

Every decoder is channels-last: (batch, n, C) in 1D, (batch, H, W, C) in 2D.
"""

from __future__ import annotations

from typing import Optional

import torch
from torch import Tensor, nn

from .activations import activation as _activation
from .spectral import SpectralConv1d, SpectralConv2d

__all__ = ["SpectralDecoder1d", "SpectralDecoder2d", "PointwiseDecoder"]




def _positive(**values: int) -> None:
    for name, value in values.items():
        if not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be a positive int, got {value!r}")


def _with_coords(x: Tensor, coords: Optional[Tensor], coord_dim: int, who: str) -> Tensor:
    """Concatenate coordinates after the features when the decoder has a coordinate lift."""
    if coord_dim == 0:
        return x
    if coords is None:
        raise ValueError(f"{who} has coord_dim={coord_dim} and needs coords of shape (*x.shape[:-1], {coord_dim})")
    if coords.shape[-1] != coord_dim or coords.shape[1:-1] != x.shape[1:-1] or coords.shape[0] not in (1, x.shape[0]):
        raise ValueError(
            f"{who} expects coords of shape {(x.shape[0], *x.shape[1:-1], coord_dim)}, got {tuple(coords.shape)}"
        )
    return torch.cat((x, coords.to(x.dtype).expand(*x.shape[:-1], coord_dim)), dim=-1)


class _SpectralDecoder(nn.Module):
    conv_class: type = SpectralConv1d
    grid_dims: int = 1

    def __init__(
        self,
        in_channels: int,
        width: int,
        out_channels: int = 1,
        *,
        modes: int,
        num_layers: int = 2,
        ffn_width: Optional[int] = None,
        activation: str = "silu",
        coord_dim: int = 0,
    ):
        super().__init__()
        ffn_width = width if ffn_width is None else ffn_width
        _positive(in_channels=in_channels, width=width, out_channels=out_channels, modes=modes,
                  num_layers=num_layers, ffn_width=ffn_width)
        if not isinstance(coord_dim, int) or coord_dim < 0:
            raise ValueError(f"coord_dim must be a non-negative int, got {coord_dim!r}")
        self.in_channels, self.out_channels, self.coord_dim = in_channels, out_channels, coord_dim
        self.coord_fc = nn.Linear(in_channels + coord_dim, width) if coord_dim > 0 else None
        first = width if coord_dim > 0 else in_channels
        self.layers = nn.ModuleList(
            [self.conv_class(first if i == 0 else width, width, modes) for i in range(num_layers)]
        )
        self.act = _activation(activation)
        self.head = nn.Sequential(nn.Linear(width, ffn_width), _activation(activation), nn.Linear(ffn_width, out_channels))

    def forward(self, x: Tensor, coords: Optional[Tensor] = None) -> Tensor:
        name = type(self).__name__
        if x.dim() != 2 + self.grid_dims or x.shape[-1] != self.in_channels:
            grid = "n" if self.grid_dims == 1 else "H, W"
            raise ValueError(
                f"{name} expects x of shape (batch, {grid}, in_channels={self.in_channels}), got {tuple(x.shape)}"
            )
        if self.coord_fc is not None:
            x = self.coord_fc(_with_coords(x, coords, self.coord_dim, name))
        for layer in self.layers:
            x = self.act(layer(x))
        return self.head(x)


class SpectralDecoder1d(_SpectralDecoder):
    """Spectral decoder on a 1D grid (the paper's ex1 decoder; reference ``SpectralRegressor``).

    ``coord_dim > 0``: concatenate the coordinates and lift with ``Linear(in + coord_dim -> width)`` (the reference's
    ``spacial_fc``); then ``num_layers`` layers ``act(Linear(x) + irfft(W . rfft(x)))`` (the first maps to ``width``),
    activation after every spectral layer including the last; then ``Linear(width, ffn_width) -> act ->
    Linear(ffn_width, out)``.  ex1: in 96, width 48, 16 modes, 2 layers, ffn 48 -> 230,593 parameters.

    Shapes: ``x`` (batch, n, in_channels), ``coords`` (batch, n, coord_dim) -> (batch, n, out_channels).
    """

    conv_class = SpectralConv1d
    grid_dims = 1


class SpectralDecoder2d(_SpectralDecoder):
    """Spectral decoder on a 2D grid (the paper's ex2 decoder), same structure as :class:`SpectralDecoder1d`.

    ex2: in 128, coord_dim 2, width 32, 12 modes, 2 layers, ffn 128 -> 1,190,305 parameters.

    Shapes: ``x`` (batch, H, W, in_channels), ``coords`` (batch, H, W, coord_dim) -> (batch, H, W, out_channels).
    """

    conv_class = SpectralConv2d
    grid_dims = 2


class PointwiseDecoder(nn.Module):
    """Pointwise feed-forward decoder (the paper's ex3 decoder; reference ``PointwiseRegressor``).

    ``Linear(in + coord_dim -> width)`` without activation (only when ``coord_dim > 0`` or ``in != width``), then
    ``num_layers`` times ``Linear(width, width) -> act -> dropout``, then ``Linear(width, out)``.  It acts on each
    point separately, so it works on point sets and grids of any dimension.  ex3: in 192, coord_dim 2, width 192,
    1 layer -> 74,689 parameters.

    Shapes: ``x`` (batch, *grid, in_channels), ``coords`` (batch, *grid, coord_dim) -> (batch, *grid, out_channels).
    """

    def __init__(
        self,
        in_channels: int,
        width: int,
        out_channels: int = 1,
        *,
        num_layers: int = 1,
        activation: str = "silu",
        dropout: float = 0.0,
        coord_dim: int = 0,
    ):
        super().__init__()
        _positive(in_channels=in_channels, width=width, out_channels=out_channels)
        if not isinstance(num_layers, int) or num_layers < 0:
            raise ValueError(f"num_layers must be a non-negative int, got {num_layers!r}")
        if not isinstance(coord_dim, int) or coord_dim < 0:
            raise ValueError(f"coord_dim must be a non-negative int, got {coord_dim!r}")
        self.in_channels, self.out_channels, self.coord_dim = in_channels, out_channels, coord_dim
        need_lift = coord_dim > 0 or in_channels != width
        self.lift = nn.Linear(in_channels + coord_dim, width) if need_lift else None
        blocks = []
        for _ in range(num_layers):
            blocks += [nn.Linear(width, width), _activation(activation), nn.Dropout(dropout)]
        self.blocks = nn.Sequential(*blocks)
        self.out = nn.Linear(width, out_channels)

    def forward(self, x: Tensor, coords: Optional[Tensor] = None) -> Tensor:
        if x.dim() < 2 or x.shape[-1] != self.in_channels:
            raise ValueError(
                f"PointwiseDecoder expects x of shape (batch, *grid, in_channels={self.in_channels}), "
                f"got {tuple(x.shape)}"
            )
        x = _with_coords(x, coords, self.coord_dim, "PointwiseDecoder")
        if self.lift is not None:
            x = self.lift(x)
        return self.out(self.blocks(x))
