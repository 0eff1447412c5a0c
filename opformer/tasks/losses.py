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


def rel_l2(pred: Tensor, target: Tensor, eps: float = 1e-12) -> Tensor:
    """||pred - target|| / ||target|| per sample (discrete L2 on the grid), shape (batch,)."""
    diff = _flat(pred.float() - target.float()).norm(dim=1)
    return diff / _flat(target.float()).norm(dim=1).clamp_min(eps)


def central_diff_1d(u: Tensor, h: float, periodic: bool = True) -> Tensor:
    """(u_{i+1} - u_{i-1}) / (2h) along dim 1 of (batch, n, c); periodic wrap, or interior points only."""
    if periodic:
        return (torch.roll(u, -1, dims=1) - torch.roll(u, 1, dims=1)) / (2 * h)
    return (u[:, 2:] - u[:, :-2]) / (2 * h)


def h1_seminorm_1d(pred: Tensor, target_grad: Tensor, h: float, eps: float = 1e-12) -> Tensor:
    """||D_h pred - u'|| / ||u'|| per sample, D_h the periodic central difference (1D grids are periodic here)."""
    dp = central_diff_1d(pred.float(), h, periodic=True)
    return _flat(dp - target_grad.float()).norm(dim=1) / _flat(target_grad.float()).norm(dim=1).clamp_min(eps)


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
    return _flat(err).norm(dim=1) / _flat(a * g).norm(dim=1).clamp_min(eps)
