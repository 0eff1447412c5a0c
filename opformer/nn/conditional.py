"""Lead-time conditioning: normalizations whose scale and shift are small MLPs of the lead time tau.

The lecture's conditional normalization, N(w) = g(tau) * (w - E[w]) / sqrt(Var[w] + eps) + h(tau), with g and h
small MLPs initialised so that g = 1 and h = 0 for every tau: at initialisation a conditioned model is exactly the
unconditioned one, and training makes it depend on tau.  ``lead_time`` is a tensor of shape (batch,) (or (batch, 1))
in the data's time unit; ``None`` means "no conditioning" (the plain affine norm).
"""

from __future__ import annotations

from typing import Optional

import torch
from torch import Tensor, nn

__all__ = ["LeadTimeMLP", "ConditionalLayerNorm", "ConditionalAffine", "lead_time_column"]


def lead_time_column(lead_time: Tensor, batch: int, dtype, device) -> Tensor:
    """``lead_time`` as a (batch, 1) column (a scalar or a (1,) tensor is broadcast to the batch)."""
    given = torch.as_tensor(lead_time, dtype=dtype, device=device)
    t = given.reshape(-1, 1)
    if t.shape[0] == 1 and batch != 1:
        t = t.expand(batch, 1)
    if t.shape[0] != batch:
        raise ValueError(f"lead_time must have one value per sample (batch={batch}), got shape {tuple(given.shape)}")
    return t


class LeadTimeMLP(nn.Module):
    """tau -> (scale, shift) of ``width`` features each: a 2-layer MLP whose last layer starts at zero, so that
    scale = 1 + 0 and shift = 0 at initialisation."""

    def __init__(self, width: int, hidden: int = 32):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(1, hidden), nn.SiLU(), nn.Linear(hidden, 2 * width))
        nn.init.zeros_(self.net[-1].weight)
        nn.init.zeros_(self.net[-1].bias)
        self.width = width

    def forward(self, lead_time: Tensor, batch: int, dtype, device) -> tuple[Tensor, Tensor]:
        t = lead_time_column(lead_time, batch, dtype, device)
        out = self.net(t.to(self.net[0].weight.dtype)).to(dtype)
        return 1.0 + out[:, : self.width], out[:, self.width :]


class ConditionalAffine(nn.Module):
    """x * g(tau) + h(tau) over the last axis of ``x`` (batch, ..., width); the identity when ``lead_time`` is None."""

    def __init__(self, width: int, hidden: int = 32):
        super().__init__()
        self.mlp = LeadTimeMLP(width, hidden)

    def forward(self, x: Tensor, lead_time: Optional[Tensor]) -> Tensor:
        if lead_time is None:
            return x
        g, h = self.mlp(lead_time, x.shape[0], x.dtype, x.device)
        shape = (x.shape[0],) + (1,) * (x.dim() - 2) + (x.shape[-1],)
        return x * g.view(shape) + h.view(shape)


class ConditionalLayerNorm(nn.LayerNorm):
    """Layer norm over the last axis whose affine is g(tau), h(tau) (the lecture's N(w)); with ``lead_time=None`` it
    is the plain ``nn.LayerNorm`` with its learned affine (same parameter names), and at initialisation the two
    coincide for every tau."""

    def __init__(self, width: int, eps: float = 1e-5, hidden: int = 32):
        super().__init__(width, eps=eps)
        self.cond = ConditionalAffine(width, hidden)

    def forward(self, x: Tensor, lead_time: Optional[Tensor] = None) -> Tensor:
        return self.cond(super().forward(x), lead_time)
