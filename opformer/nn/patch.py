"""Patching as operators (lecture, "Operator version" of patch embeddings): embedding, recovery, merging, expansion.

Grids are channels-last, ``(batch, H, W, C)``; token grids are ``(batch, H / p, W / p, d)``.

* :class:`PatchEmbed2d`: E(v)(x) = sum_k F(sum_{z in D_k} W(z) v(z)) 1_{D_k}(x) on non-overlapping p x p patches D_k,
  i.e. one learned linear map of the p*p*C values of each patch (the same map for every patch), plus a positional
  encoding: ``"learned"`` (a table on a reference token grid, resampled bilinearly to any other token grid),
  ``"sincos"`` (sines and cosines of the patch-centre coordinates, so it is a function on [0, 1]^2 evaluated at any
  resolution) or ``"none"``.
* :class:`PatchRecover2d`: the inverse direction, one learned linear map from a token to the p*p*C values of its
  patch.
* :class:`PatchMerge2d` / :class:`PatchExpand2d`: 2 x 2 tokens -> one token of twice the width and back (the
  down- and up-sampling of a U-shaped token hierarchy).
* :func:`pad_to_multiple` / :func:`crop`: grids that are not multiples of the patch (or window) are padded at the
  end of each axis and cropped back afterwards.
"""

from __future__ import annotations

import math
from typing import Optional

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .conditional import ConditionalLayerNorm

__all__ = [
    "pad_to_multiple",
    "crop",
    "patchify",
    "unpatchify",
    "patch_centres",
    "sincos_encoding_2d",
    "POS_ENCODINGS",
    "PatchEmbed2d",
    "PatchRecover2d",
    "PatchMerge2d",
    "PatchExpand2d",
    "LayerNorm",
    "layer_norm",
]

#: positional encodings of :class:`PatchEmbed2d`
POS_ENCODINGS = ("none", "learned", "sincos")


def pad_to_multiple(x: Tensor, multiple: int, mode: str = "replicate") -> Tensor:
    """Pad a channels-last grid (batch, H, W, C) at the end of both axes to multiples of ``multiple``.

    ``mode``: "replicate" (the field extended by its last row/column) or "constant" (zeros)."""
    h, w = x.shape[1], x.shape[2]
    ph, pw = (-h) % multiple, (-w) % multiple
    if ph == 0 and pw == 0:
        return x
    y = F.pad(x.permute(0, 3, 1, 2), (0, pw, 0, ph), mode=mode)
    return y.permute(0, 2, 3, 1)


def crop(x: Tensor, h: int, w: int) -> Tensor:
    """The first ``h`` x ``w`` points of a channels-last grid (undoes :func:`pad_to_multiple`)."""
    return x if x.shape[1:3] == (h, w) else x[:, :h, :w]


def patchify(x: Tensor, p: int) -> Tensor:
    """(batch, H, W, C) with H, W multiples of p -> (batch, H/p, W/p, p*p*C), each patch's values in (row, col, c)
    order."""
    b, h, w, c = x.shape
    if h % p or w % p:
        raise ValueError(f"a {h} x {w} grid is not a multiple of the patch size {p}; pad it first (pad_to_multiple)")
    x = x.reshape(b, h // p, p, w // p, p, c).permute(0, 1, 3, 2, 4, 5)
    return x.reshape(b, h // p, w // p, p * p * c)


def unpatchify(t: Tensor, p: int) -> Tensor:
    """Inverse of :func:`patchify`: (batch, Hp, Wp, p*p*C) -> (batch, Hp*p, Wp*p, C)."""
    b, hp, wp, ppc = t.shape
    c = ppc // (p * p)
    if c * p * p != ppc:
        raise ValueError(f"the last axis ({ppc}) is not a multiple of p*p = {p * p}")
    t = t.reshape(b, hp, wp, p, p, c).permute(0, 1, 3, 2, 4, 5)
    return t.reshape(b, hp * p, wp * p, c)


def patch_centres(coords: Tensor, p: int) -> Tensor:
    """The mean coordinate of each p x p patch: (batch, H, W, dim) (H, W multiples of p) -> (batch, H/p, W/p, dim)."""
    y = F.avg_pool2d(coords.permute(0, 3, 1, 2), kernel_size=p, stride=p)
    return y.permute(0, 2, 3, 1)


def sincos_encoding_2d(points: Tensor, d_model: int, max_frequency: float = 64.0) -> Tensor:
    """Sine-cosine encoding of points of [0, 1]^2: (..., 2) -> (..., d_model).

    Each coordinate gets d_model // 4 frequencies ``pi * f_j`` with f_j log-spaced in [1, max_frequency], and its sine
    and cosine; channels left over (d_model not a multiple of 4) are zero.  A function of position, so it is evaluated
    at any resolution."""
    n_freq = d_model // 4
    out = points.new_zeros(*points.shape[:-1], d_model)
    if n_freq == 0:
        return out
    # phases up to max_frequency * pi: formed in at least float32 (in bfloat16 they were off by up to a radian),
    # the encoding rounded once to the points' dtype
    work = points.float() if points.dtype in (torch.bfloat16, torch.float16) else points
    freqs = torch.logspace(0, math.log10(max_frequency), n_freq, dtype=work.dtype, device=work.device) * math.pi
    parts = []
    for axis in range(2):
        angle = work[..., axis : axis + 1] * freqs
        parts += [torch.sin(angle), torch.cos(angle)]
    enc = torch.cat(parts, dim=-1)
    out[..., : enc.shape[-1]] = enc
    return out


class LayerNorm(nn.LayerNorm):
    """``nn.LayerNorm`` that accepts (and ignores) a ``lead_time``: the unconditioned twin of
    :class:`~opformer.nn.ConditionalLayerNorm` (same call, no lead-time parameters)."""

    def forward(self, x: Tensor, lead_time: Optional[Tensor] = None) -> Tensor:
        return super().forward(x)


def layer_norm(width: int, conditioned: bool = False, eps: float = 1e-5) -> nn.Module:
    """A layer norm over the last axis called as ``norm(x, lead_time)``: lead-time conditioned (the lecture's
    N(w) = g(tau) LN(w) + h(tau), identity at initialisation) when ``conditioned``, else the plain one."""
    return ConditionalLayerNorm(width, eps=eps) if conditioned else LayerNorm(width, eps=eps)


class PatchEmbed2d(nn.Module):
    """Patch embedding operator: (batch, H, W, C) and coords (batch, H, W, 2) -> tokens (batch, H/p, W/p, d_model).

    ``H`` and ``W`` must be multiples of ``patch_size`` (else ValueError; see :func:`pad_to_multiple`).
    ``pos``: "none", "learned" (a (pos_grid x pos_grid x d) table, resampled bilinearly when the token grid differs)
    or "sincos" (:func:`sincos_encoding_2d` of the patch centres, computed from ``coords``).
    """

    def __init__(self, in_channels: int, d_model: int, patch_size: int, pos: str = "none", pos_grid: int = 16):
        super().__init__()
        if pos not in POS_ENCODINGS:
            raise ValueError(f"pos must be one of {POS_ENCODINGS}, got {pos!r}")
        if not isinstance(patch_size, int) or patch_size < 1:
            raise ValueError(f"patch_size must be a positive int, got {patch_size!r}")
        self.patch_size, self.pos, self.d_model = patch_size, pos, d_model
        self.proj = nn.Linear(patch_size * patch_size * in_channels, d_model)
        if pos == "learned":
            self.pos_table = nn.Parameter(torch.randn(1, d_model, pos_grid, pos_grid) * 0.02)

    def positional(self, coords: Tensor, grid: tuple[int, int]) -> Optional[Tensor]:
        """The positional encoding on a token grid, (batch or 1, Hp, Wp, d_model), or None."""
        if self.pos == "none":
            return None
        if self.pos == "sincos":  # the centres too in at least float32: their phases reach 64 pi
            work = coords.float() if coords.dtype in (torch.bfloat16, torch.float16) else coords
            return sincos_encoding_2d(patch_centres(work, self.patch_size), self.d_model).to(coords.dtype)
        table = self.pos_table
        if tuple(table.shape[-2:]) != tuple(grid):
            table = F.interpolate(table, size=grid, mode="bilinear", align_corners=True)
        return table.permute(0, 2, 3, 1)

    def forward(self, x: Tensor, coords: Optional[Tensor] = None) -> Tensor:
        t = self.proj(patchify(x, self.patch_size))
        if self.pos == "sincos" and coords is None:
            raise ValueError("PatchEmbed2d with pos='sincos' needs coords (batch, H, W, 2)")
        pos = self.positional(coords, tuple(t.shape[1:3]))
        return t if pos is None else t + pos.to(t.dtype)


class PatchRecover2d(nn.Module):
    """Patch recovery: tokens (batch, Hp, Wp, d_model) -> grid (batch, Hp*p, Wp*p, out_channels), one learned linear
    map per token to the values of its p x p patch."""

    def __init__(self, d_model: int, out_channels: int, patch_size: int):
        super().__init__()
        self.patch_size = patch_size
        self.proj = nn.Linear(d_model, patch_size * patch_size * out_channels)

    def forward(self, t: Tensor) -> Tensor:
        return unpatchify(self.proj(t), self.patch_size)


class PatchMerge2d(nn.Module):
    """2 x 2 neighbouring tokens -> one: (batch, Hp, Wp, d) -> (batch, ceil(Hp/2), ceil(Wp/2), out_dim).

    Concatenation of the four tokens (4d), a layer norm (lead-time conditioned with ``conditioned``) and a linear map 4d -> out_dim (default 2d).
    Odd token grids are padded with zero tokens first."""

    def __init__(self, d_model: int, out_dim: Optional[int] = None, eps: float = 1e-5, conditioned: bool = False):
        super().__init__()
        self.norm = layer_norm(4 * d_model, conditioned, eps)
        self.reduce = nn.Linear(4 * d_model, out_dim or 2 * d_model, bias=False)

    def forward(self, t: Tensor, lead_time: Optional[Tensor] = None) -> Tensor:
        t = pad_to_multiple(t, 2, mode="constant")
        return self.reduce(self.norm(patchify(t, 2), lead_time))


class PatchExpand2d(nn.Module):
    """One token -> 2 x 2 tokens: (batch, Hp, Wp, d) -> (batch, 2Hp, 2Wp, out_dim) (default d/2).

    A linear map d -> 4 out_dim, the four parts placed on the 2 x 2 sub-grid, a (conditioned) layer norm."""

    def __init__(self, d_model: int, out_dim: Optional[int] = None, eps: float = 1e-5, conditioned: bool = False):
        super().__init__()
        out_dim = out_dim or max(1, d_model // 2)
        self.expand = nn.Linear(d_model, 4 * out_dim, bias=False)
        self.norm = layer_norm(out_dim, conditioned, eps)

    def forward(self, t: Tensor, lead_time: Optional[Tensor] = None) -> Tensor:
        return self.norm(unpatchify(self.expand(t), 2), lead_time)
