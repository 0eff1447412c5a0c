"""Interpolation-based CNN (CiNN) down- and upscalers between a fine grid and the coarse attention grid (Cao 2021,
section 4 and appendix B).  Channels-last, square or rectangular grids, any pair of sizes.

Grid rule (one rule in both directions): a map from an ``n_from`` grid to an ``n_to`` grid passes through the middle
grid ``round(sqrt(n_from * n_to))`` (the geometric mean, see :func:`middle_size`), per axis.  It gives the
reference's downscaler middle grid for 141->43 (78), 211->61 (113), 141->71 (100), 85->29 (50), 141->36 (71), and 122
(reference 123) for 211->71.  The reference instead used a rounded scale factor in the downscaler and explicit sizes
one smaller in the upscaler (77 vs 78 for 141/43); the parameter count does not depend on the rule.

Interpolation is bilinear with ``align_corners=True``: grid corners map to grid corners, so a grid of nodes including
the boundary (``linspace(0, 1, n)``) is resampled as a function on [0, 1]^2 and affine functions are reproduced
exactly.
"""

from __future__ import annotations

import math
from typing import Sequence, Union

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .activations import activation as _activation

__all__ = ["middle_size", "resize2d", "CiNNDownscaler2d", "CiNNUpscaler2d"]

Size2d = Union[int, Sequence[int]]


def _pair(size: Size2d, what: str) -> tuple[int, int]:
    pair = (size, size) if isinstance(size, int) else tuple(size)
    if len(pair) != 2 or not all(isinstance(s, int) and s >= 1 for s in pair):
        raise ValueError(f"{what} must be a positive int or a pair of positive ints, got {size!r}")
    return pair  # type: ignore[return-value]




def middle_size(n_from: int, n_to: int) -> int:
    """The middle grid between an ``n_from`` and an ``n_to`` grid: ``round(sqrt(n_from * n_to))`` (geometric mean)."""
    if n_from < 1 or n_to < 1:
        raise ValueError(f"grid sizes must be positive, got {n_from} and {n_to}")
    return max(1, round(math.sqrt(n_from * n_to)))


def resize2d(x: Tensor, size: Size2d) -> Tensor:
    """Bilinear (align_corners=True) resampling of a channels-last grid, (batch, H, W, C) -> (batch, h, w, C).

    Returns ``x`` itself when the size is unchanged.  Exact for functions affine in each coordinate.
    """
    if x.dim() != 4:
        raise ValueError(f"resize2d expects (batch, H, W, channels), got {tuple(x.shape)}")
    h, w = _pair(size, "size")
    if (h, w) == tuple(x.shape[1:3]):
        return x
    y = F.interpolate(x.permute(0, 3, 1, 2), size=(h, w), mode="bilinear", align_corners=True)
    return y.permute(0, 2, 3, 1)


def _conv3x3(c_in: int, c_out: int) -> nn.Conv2d:
    return nn.Conv2d(c_in, c_out, kernel_size=3, padding=1, bias=False)


class CiNNDownscaler2d(nn.Module):
    """CiNN feature extractor and downscaler: fine grid (n_f) -> coarse attention grid (n_c).

    Layers (``d = out_channels``, every conv 3x3, padding 1, no bias, followed by dropout and the activation):
    conv0 ``in -> d``; bilinear interpolation to the middle grid; conv1 ``d -> d//3``, conv2 ``d//3 -> d//3``,
    conv3 ``d//3 -> d - 2*(d//3)`` in sequence; channel concatenation ``[x1, x2, x3]`` (d channels, dense style);
    bilinear interpolation to the coarse grid.

    The reference also applies the activation after each interpolation; with ReLU (the paper's choice) that is the
    identity, because bilinear interpolation takes convex combinations of values that are already >= 0, so it is
    left out.  Parameters: ``9 * (in*d + d*(d//3) + (d//3)**2 + (d//3)*(d - 2*(d//3)))`` (82,044 for in=1, d=128).

    Shapes: ``x`` (batch, H, W, in_channels), ``size`` the coarse grid (int or pair) -> (batch, h, w, out_channels).
    """

    def __init__(self, in_channels: int, out_channels: int, *, activation: str = "relu", dropout: float = 0.0):
        super().__init__()
        if not isinstance(in_channels, int) or in_channels < 1:
            raise ValueError(f"in_channels must be a positive int, got {in_channels!r}")
        if not isinstance(out_channels, int) or out_channels < 3:
            raise ValueError(f"out_channels must be an int >= 3 (it is split in three), got {out_channels!r}")
        d, c = out_channels, out_channels // 3
        self.in_channels, self.out_channels = in_channels, out_channels
        self.act, self.drop = _activation(activation), nn.Dropout(dropout)
        self.conv0 = _conv3x3(in_channels, d)
        self.conv1 = _conv3x3(d, c)
        self.conv2 = _conv3x3(c, c)
        self.conv3 = _conv3x3(c, d - 2 * c)

    def forward(self, x: Tensor, size: Size2d) -> Tensor:
        if x.dim() != 4 or x.shape[-1] != self.in_channels:
            raise ValueError(
                f"CiNNDownscaler2d expects x of shape (batch, H, W, in_channels={self.in_channels}), "
                f"got {tuple(x.shape)}"
            )
        h, w = _pair(size, "size")
        mid = (middle_size(x.shape[1], h), middle_size(x.shape[2], w))
        block = lambda conv, t: self.act(self.drop(conv(t)))  # noqa: E731
        y = block(self.conv0, x.permute(0, 3, 1, 2))
        y = F.interpolate(y, size=mid, mode="bilinear", align_corners=True)
        y1 = block(self.conv1, y)
        y2 = block(self.conv2, y1)
        y3 = block(self.conv3, y2)
        y = torch.cat((y1, y2, y3), dim=1)
        y = F.interpolate(y, size=(h, w), mode="bilinear", align_corners=True)
        return y.permute(0, 2, 3, 1)


class CiNNUpscaler2d(nn.Module):
    """CiNN upscaler: coarse grid -> output grid.

    Bilinear interpolation to the middle grid, conv 3x3 ``d -> d`` (no bias), dropout, activation, bilinear
    interpolation to the output grid.  The reference applies its activation (SiLU) twice in a row; here it is applied
    once (SiLU(SiLU(x)) is just another monotone activation, and nothing in the paper asks for it).  When the output
    grid equals the coarse grid (the inverse problem) this is one conv layer.  Parameters: ``9 * d * d``.

    Shapes: ``x`` (batch, h, w, channels), ``size`` the output grid (int or pair) -> (batch, H, W, channels).
    """

    def __init__(self, channels: int, *, activation: str = "silu", dropout: float = 0.0):
        super().__init__()
        if not isinstance(channels, int) or channels < 1:
            raise ValueError(f"channels must be a positive int, got {channels!r}")
        self.channels = channels
        self.conv = _conv3x3(channels, channels)
        self.act, self.drop = _activation(activation), nn.Dropout(dropout)

    def forward(self, x: Tensor, size: Size2d) -> Tensor:
        if x.dim() != 4 or x.shape[-1] != self.channels:
            raise ValueError(
                f"CiNNUpscaler2d expects x of shape (batch, h, w, channels={self.channels}), got {tuple(x.shape)}"
            )
        h, w = _pair(size, "size")
        mid = (middle_size(x.shape[1], h), middle_size(x.shape[2], w))
        y = F.interpolate(x.permute(0, 3, 1, 2), size=mid, mode="bilinear", align_corners=True)
        y = self.act(self.drop(self.conv(y)))
        y = F.interpolate(y, size=(h, w), mode="bilinear", align_corners=True)
        return y.permute(0, 2, 3, 1)
