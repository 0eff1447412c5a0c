"""Losses and metrics: relative L2 per sample plus the H1-seminorm regularizer (paper eqs. (1)-(2)).

Every function returns one value per sample, shape (batch,); the caller averages over the batch.

The H1 weight.  Our regularizer is ``gamma_eff * ||D_h(pred) - grad u|| / ||grad u||`` (relative, per sample).  The
reference code computes ``sqrt(gamma * h * sum(...) / sum(...))`` (it multiplies gamma by h twice; see docs/training.md), so
its effective weight on the relative seminorm is ``sqrt(gamma * h)``.  With ``gamma_convention="reference"`` (the
paper presets) we use exactly that: ``gamma_eff = sqrt(gamma * h)`` with h = 1/n; with ``"plain"`` gamma_eff = gamma.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor


def effective_gamma(gamma: float, n: int, convention: str) -> float:
    """The weight multiplying the relative H1 seminorm error (see the module docstring)."""
    if convention == "reference":
        return math.sqrt(gamma / n)
    if convention == "plain":
        return gamma
    raise ValueError(f"gamma_convention must be 'reference' or 'plain', got {convention!r}")


def grid_step(a: Tensor, b: Tensor):
    """``b - a``, the spacing of two neighbouring grid coordinates: a float on the CPU; on another device a 0-d
    tensor, since reading a device value into Python makes the host wait for the device, at every training step."""
    d = b - a
    return float(d) if d.device.type == "cpu" else d


def _flat(x: Tensor) -> Tensor:
    return x.reshape(x.shape[0], -1)


def _pow2_scale(x: Tensor) -> Tensor:
    """Per sample of a float32 (batch, m): the power of two ``2**floor(log2(max |x|))``, shape (batch, 1); 1 where
    that maximum is 0, subnormal or not finite.  Read from the exponent bits (no host sync, no transcendental), so
    dividing by it is exact and leaves every rounding of a norm computed after it unchanged."""
    top = x.detach().abs().amax(dim=1, keepdim=True)
    scale = (top.view(torch.int32) & 0x7F800000).view(torch.float32)
    return torch.where((scale > 0) & torch.isfinite(scale), scale, torch.ones_like(scale))


def _norm_ratio(num: Tensor, den: Tensor, eps: float) -> Tensor:
    """||num|| / max(||den||, eps) per sample of float32 (batch, ...), free of overflow and underflow in the squares.

    Each side is divided by its own power-of-two scale (:func:`_pow2_scale`) before its norm is taken and the ratio
    of the scales multiplied back: exact, so wherever the plain formula neither overflows nor underflows the result
    is bitwise that of ``num.norm() / den.norm().clamp_min(eps)``, with the same gradient (the scales are constants);
    targets of scale 1e-15 or 1e30 get the relative error they get at scale 1 instead of a clamp at ``eps`` or
    inf / NaN.  ``eps`` only bounds an all-zero ``den`` (its scale is 1), as before.  The cost is two reductions and
    a few elementwise operations, all on the device: this runs in every training step."""
    num, den = _flat(num), _flat(den)
    if num.shape[1] == 0 or den.shape[1] == 0:  # no points (a reduction over nothing has no maximum)
        return num.norm(dim=1) / den.norm(dim=1).clamp_min(eps)
    s_num, s_den = _pow2_scale(num), _pow2_scale(den)
    n = (num / s_num).norm(dim=1) * (s_num / s_den)[:, 0]
    return n / (den / s_den).norm(dim=1).clamp_min(eps)


def rel_l2(pred: Tensor, target: Tensor, eps: float = 1e-12) -> Tensor:
    """||pred - target|| / ||target|| per sample (discrete L2 on the grid), shape (batch,); correct at any scale of
    the target that float32 holds (see :func:`_norm_ratio`); ``eps`` bounds the norm of an all-zero target."""
    return _norm_ratio(pred.float() - target.float(), target.float(), eps)


def central_diff_1d(u: Tensor, h: float, periodic: bool = True) -> Tensor:
    """(u_{i+1} - u_{i-1}) / (2h) along dim 1 of (batch, n, c); periodic wrap, or interior points only."""
    if periodic:
        return (torch.roll(u, -1, dims=1) - torch.roll(u, 1, dims=1)) / (2 * h)
    return (u[:, 2:] - u[:, :-2]) / (2 * h)


def h1_seminorm_1d(pred: Tensor, target_grad: Tensor, h: float, eps: float = 1e-12) -> Tensor:
    """||D_h pred - u'|| / ||u'|| per sample, D_h the periodic central difference (1D grids are periodic here)."""
    dp = central_diff_1d(pred.float(), h, periodic=True)
    return _norm_ratio(dp - target_grad.float(), target_grad.float(), eps)


def grad_2d(u: Tensor, h: float) -> Tensor:
    """Central-difference gradient on interior nodes of (batch, n, n, 1) -> (batch, n-2, n-2, 2); axis 1 is x."""
    ux = (u[:, 2:, 1:-1] - u[:, :-2, 1:-1]) / (2 * h)
    uy = (u[:, 1:-1, 2:] - u[:, 1:-1, :-2]) / (2 * h)
    return torch.cat([ux, uy], dim=-1)


def h1_seminorm_2d(pred: Tensor, target_grad: Tensor, coeff: Tensor, h: float, eps: float = 1e-12) -> Tensor:
    """||a (grad_h pred - grad u)|| / ||a grad u|| over interior nodes, per sample (the coefficient-weighted term of
    eq. (1) for Darcy, made relative).  pred, coeff: (batch, n, n, 1); target_grad: (batch, n, n, 2)."""
    a = coeff.float()[:, 1:-1, 1:-1]
    g = target_grad.float()[:, 1:-1, 1:-1]
    err = a * (grad_2d(pred.float(), h) - g)
    return _norm_ratio(err, a * g, eps)
