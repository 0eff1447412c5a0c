"""Windowed attention on a 2D token grid (lecture, "Operator version of Windowed Attention"; Swin / Swin V2 / scOT).

The token grid (batch, H, W, d) is split into non-overlapping M x M windows D_q and attention runs inside each:

    u(x) = W sum_{y in D_q(x)} softmax_y(s(Q v(x), K v(y)) + B(x - y)) V v(y),

cost O(H W M^2 d) instead of O((H W)^2 d).  Alternate layers shift the windows by M/2 (a cyclic shift of the grid
by -M/2 and a mask that keeps tokens that wrapped around apart from those that did not, as in Swin), so that
information crosses window borders from one layer to the next.

* score ``s``: scaled cosine, cos(q, k) * exp(logit_scale) with a learned per-head temperature (clamped at 100), or
  the scaled dot product q.k / sqrt(d_head).
* bias ``B``: the continuous relative position bias, a small MLP of log-spaced relative offsets
  sign(dx) log2(1 + |dx|) / 3 (per axis), 16 sigmoid(MLP) per head.  The offsets are not normalised by the window,
  so a given offset gets the same bias in any window: a model trained with one M evaluates with another.
* grids that are not multiples of M are padded with zero tokens at the end of each axis, and the padded tokens are
  masked out as keys (and cropped after the layer).

:func:`window_groups` states which tokens see each other (same group id); the tests compare the windowed
evaluation with a full attention masked by these groups.
"""

from __future__ import annotations

import math
from typing import Optional

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .activations import activation
from .encoder import EncoderLayer
from .patch import layer_norm, pad_to_multiple

__all__ = [
    "window_partition",
    "window_reverse",
    "window_groups",
    "relative_offsets",
    "ContinuousPositionBias",
    "WindowAttention2d",
    "WindowBlock2d",
    "GalerkinBlock2d",
]


def window_partition(x: Tensor, m: int) -> Tensor:
    """(batch, H, W, d) with H, W multiples of m -> (batch * H/m * W/m, m*m, d), windows in row-major order."""
    b, h, w, d = x.shape
    x = x.reshape(b, h // m, m, w // m, m, d).permute(0, 1, 3, 2, 4, 5)
    return x.reshape(-1, m * m, d)


def window_reverse(windows: Tensor, m: int, h: int, w: int) -> Tensor:
    """Inverse of :func:`window_partition`: (batch * nW, m*m, d) -> (batch, h, w, d)."""
    d = windows.shape[-1]
    x = windows.reshape(-1, h // m, w // m, m, m, d).permute(0, 1, 3, 2, 4, 5)
    return x.reshape(-1, h, w, d)


def _axis_shift(n_padded: int, m: int, shift: int) -> int:
    """The shift used on an axis: none when the (padded) axis holds a single window."""
    return shift if n_padded > m else 0


def _axis_groups(n: int, m: int, shift: int, device=None) -> Tensor:
    """Group id of each of the n (padded, n % m == 0) positions of one axis: window index after the cyclic shift by
    -shift, times 2, plus 1 for positions that wrapped around (they share a window with, but never see, the others)."""
    pos = torch.arange(n, device=device)
    rolled = (pos - shift) % n
    wrapped = (pos < shift).long()
    return (rolled // m) * 2 + wrapped


def window_groups(h: int, w: int, m: int, shift: int = 0, device=None) -> Tensor:
    """(h, w) ids: two tokens of an h x w grid attend to each other iff their ids are equal (window size m, windows
    shifted by ``shift``; the grid is padded to multiples of m first, as in :class:`WindowAttention2d`)."""
    hp, wp = h + (-h) % m, w + (-w) % m
    gh = _axis_groups(hp, m, _axis_shift(hp, m, shift), device)[:h]
    gw = _axis_groups(wp, m, _axis_shift(wp, m, shift), device)[:w]
    return gh[:, None] * (2 * wp) + gw[None, :]


def relative_offsets(m: int, dtype=torch.float32, device=None) -> Tensor:
    """The log-spaced relative offsets of an m x m window: ((2m-1)^2, 2), rows for (dh, dw) in row-major order over
    dh, dw in [-(m-1), m-1]; each coordinate is sign(d) log2(1 + |d|) / 3 (offset 7 -> 1)."""
    r = torch.arange(-(m - 1), m, dtype=dtype, device=device)
    grid = torch.stack(torch.meshgrid(r, r, indexing="ij"), dim=-1).reshape(-1, 2)
    return torch.sign(grid) * torch.log2(1.0 + grid.abs()) / 3.0


def _relative_index(m: int, device=None) -> Tensor:
    """(m*m, m*m) index into the rows of :func:`relative_offsets` of the offset between tokens i and j of a window.
    Built on ``device`` itself: a copy from the host would make every training step wait for the GPU (and keep the
    step out of a CUDA graph)."""
    r = torch.arange(m, device=device)
    coords = torch.stack(torch.meshgrid(r, r, indexing="ij")).reshape(2, -1)
    rel = coords[:, :, None] - coords[:, None, :] + (m - 1)  # (2, m*m, m*m), in [0, 2m-2]
    return rel[0] * (2 * m - 1) + rel[1]


class ContinuousPositionBias(nn.Module):
    """B(dh, dw) = 16 sigmoid(MLP(log-spaced offset)) per head: a function of the offset, not of the window size."""

    def __init__(self, n_heads: int, hidden: int = 64):
        super().__init__()
        self.mlp = nn.Sequential(nn.Linear(2, hidden), nn.ReLU(), nn.Linear(hidden, n_heads, bias=False))

    def table(self, m: int) -> Tensor:
        """(heads, 2m-1, 2m-1): the bias of offset (dh, dw) at index [dh + m - 1, dw + m - 1]."""
        w = self.mlp[0].weight
        out = 16.0 * torch.sigmoid(self.mlp(relative_offsets(m, w.dtype, w.device)))
        return out.t().reshape(-1, 2 * m - 1, 2 * m - 1)

    def forward(self, m: int) -> Tensor:
        """(heads, m*m, m*m): the bias between tokens i and j of an m x m window."""
        table = self.table(m).flatten(1)
        return table[:, _relative_index(m, table.device)]


class WindowAttention2d(nn.Module):
    """Multi-head attention inside M x M windows of a token grid, optionally shifted by ``shift`` (usually M // 2).

    ``x`` (batch, H, W, d_model) -> (batch, H, W, d_model), any H, W (padded to multiples of M and masked).
    ``cosine``: scaled cosine attention with a learned per-head temperature (else dot product / sqrt(d_head));
    ``rel_bias``: add the continuous relative position bias.  ``window_size`` / ``shift`` can be overridden per call
    (evaluation with another window).
    """

    def __init__(self, d_model: int, n_heads: int, window_size: int, shift: int = 0, *, cosine: bool = True,
                 rel_bias: bool = True, dropout: float = 0.0, bias_hidden: int = 64):
        super().__init__()
        if d_model % n_heads:
            raise ValueError(f"d_model={d_model} must be divisible by n_heads={n_heads}")
        if not isinstance(window_size, int) or window_size < 1:
            raise ValueError(f"window_size must be a positive int, got {window_size!r}")
        if not 0 <= shift < window_size:
            raise ValueError(f"shift must be in [0, window_size={window_size}), got {shift}")
        self.d_model, self.n_heads, self.window_size, self.shift = d_model, n_heads, window_size, shift
        self.cosine = cosine
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.proj = nn.Linear(d_model, d_model)
        self.attn_drop = nn.Dropout(dropout)
        if cosine:
            self.logit_scale = nn.Parameter(torch.full((n_heads, 1, 1), math.log(10.0)))
        self.bias = ContinuousPositionBias(n_heads, bias_hidden) if rel_bias else None

    def scores(self, q: Tensor, k: Tensor) -> Tensor:
        """Per-head scores (..., heads, n_q, n_k) of q (..., heads, n_q, d_head) against k."""
        if self.cosine:
            scale = torch.clamp(self.logit_scale, max=math.log(100.0)).exp()
            return (F.normalize(q, dim=-1) @ F.normalize(k, dim=-1).transpose(-2, -1)) * scale
        return (q @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1])

    def _mask(self, h: int, w: int, hp: int, wp: int, m: int, sh: int, sw: int, device) -> Optional[Tensor]:
        """(nW, m*m, m*m) bool, True where attention is allowed, in the shifted window layout; None if all is."""
        if sh == 0 and sw == 0 and hp == h and wp == w:
            return None
        gid = (_axis_groups(hp, m, sh, device)[:, None] * (2 * wp) + _axis_groups(wp, m, sw, device)[None, :])
        valid = torch.zeros(hp, wp, dtype=torch.bool, device=device)
        valid[:h, :w] = True
        # into the rolled frame, then windows
        gid = torch.roll(gid, shifts=(-sh, -sw), dims=(0, 1))
        valid = torch.roll(valid, shifts=(-sh, -sw), dims=(0, 1))
        gid = window_partition(gid[None, :, :, None], m)[..., 0]  # (nW, m*m)
        valid = window_partition(valid[None, :, :, None], m)[..., 0]
        allowed = (gid[:, :, None] == gid[:, None, :]) & valid[:, None, :]
        # a padded query with no valid key in its group sees itself (its output is cropped away)
        return allowed | torch.eye(m * m, dtype=torch.bool, device=device)

    def forward(self, x: Tensor, window_size: Optional[int] = None, shift: Optional[int] = None) -> Tensor:
        if x.dim() != 4 or x.shape[-1] != self.d_model:
            raise ValueError(f"x must have shape (batch, H, W, d_model={self.d_model}), got {tuple(x.shape)}")
        if window_size is not None and (not isinstance(window_size, int) or window_size < 1):
            raise ValueError(f"window_size must be a positive int, got {window_size!r}")
        b, h, w, d = x.shape
        m = self.window_size if window_size is None else window_size
        if shift is None:  # a window override of a shifted layer keeps "shifted by half a window"
            shift = self.shift if window_size is None or not self.shift else m // 2
        xp = pad_to_multiple(x, m, mode="constant")
        hp, wp = xp.shape[1], xp.shape[2]
        sh, sw = _axis_shift(hp, m, shift), _axis_shift(wp, m, shift)
        if sh or sw:
            xp = torch.roll(xp, shifts=(-sh, -sw), dims=(1, 2))
        win = window_partition(xp, m)  # (b * nW, m*m, d)
        nw, n = win.shape[0] // b, m * m
        qkv = self.qkv(win).reshape(-1, n, 3, self.n_heads, d // self.n_heads).permute(2, 0, 3, 1, 4)
        q, k, v = qkv[0], qkv[1], qkv[2]  # (b * nW, heads, n, d_head)
        s = self.scores(q, k)
        if self.bias is not None:
            s = s + self.bias(m).to(s.dtype)
        mask = self._mask(h, w, hp, wp, m, sh, sw, x.device)
        if mask is not None:
            s = s.view(b, nw, self.n_heads, n, n).masked_fill(~mask[None, :, None], float("-inf")).view_as(s)
        a = self.attn_drop(torch.softmax(s, dim=-1))
        out = (a @ v).transpose(1, 2).reshape(-1, n, d)
        out = window_reverse(self.proj(out), m, hp, wp)
        if sh or sw:
            out = torch.roll(out, shifts=(sh, sw), dims=(1, 2))
        return out[:, :h, :w]


class WindowBlock2d(nn.Module):
    """A Swin V2 / scOT block with residual post-norms conditioned on the lead time:

        y = x + N1(WindowAttention(x), tau),   out = y + N2(MLP(y), tau)

    with N the :class:`~opformer.nn.ConditionalLayerNorm` when ``conditioned`` (the plain layer norm otherwise, or
    when ``lead_time`` is None).
    ``galerkin``: follow the block with a global :class:`GalerkinBlock2d` over all tokens (linear cost).
    Shapes: ``x`` (batch, H, W, d_model), ``pos`` (batch, H, W, 2) token coordinates (needed with ``galerkin``)."""

    def __init__(self, d_model: int, n_heads: int, window_size: int, shift: int = 0, *, mlp_ratio: float = 2.0,
                 activation_name: str = "gelu", dropout: float = 0.0, attn_dropout: float = 0.0,
                 norm_eps: float = 1e-5, cosine: bool = True, galerkin: bool = False, conditioned: bool = False):
        super().__init__()
        self.attn = WindowAttention2d(d_model, n_heads, window_size, shift, cosine=cosine, dropout=attn_dropout)
        hidden = max(1, int(round(mlp_ratio * d_model)))
        self.mlp = nn.Sequential(nn.Linear(d_model, hidden), activation(activation_name), nn.Dropout(dropout),
                                 nn.Linear(hidden, d_model))
        self.norm1 = layer_norm(d_model, conditioned, norm_eps)
        self.norm2 = layer_norm(d_model, conditioned, norm_eps)
        self.drop = nn.Dropout(dropout)
        self.galerkin = GalerkinBlock2d(d_model, n_heads, conditioned=conditioned, norm_eps=norm_eps,
                                        activation_name=activation_name) if galerkin else None

    def forward(self, x: Tensor, lead_time: Optional[Tensor] = None, pos: Optional[Tensor] = None,
                window_size: Optional[int] = None) -> Tensor:
        y = x + self.drop(self.norm1(self.attn(x, window_size=window_size), lead_time))
        y = y + self.drop(self.norm2(self.mlp(y), lead_time))
        if self.galerkin is not None:
            y = self.galerkin(y, pos, lead_time)
        return y


class GalerkinBlock2d(nn.Module):
    """Global Galerkin attention over all tokens of a grid (cost linear in the number of tokens): an
    :class:`~opformer.nn.EncoderLayer` of kind "galerkin" with the token coordinates as positions, its per-head norms
    conditioned on the lead time when ``conditioned``.  ``x`` (batch, H, W, d), ``pos`` (batch, H, W, 2)."""

    def __init__(self, d_model: int, n_heads: int = 1, *, conditioned: bool = False, norm_eps: float = 1e-5,
                 activation_name: str = "gelu"):
        super().__init__()
        self.layer = EncoderLayer(d_model, n_heads, "galerkin", pos_dim=2, norm_scheme="galerkin",
                                  activation=activation_name, norm_eps=norm_eps, conditioned=conditioned)

    def forward(self, x: Tensor, pos: Optional[Tensor], lead_time: Optional[Tensor] = None) -> Tensor:
        if x.dim() != 4:
            raise ValueError(f"x must have shape (batch, H, W, d_model), got {tuple(x.shape)}")
        b, h, w, d = x.shape
        if pos is None:
            raise ValueError("GalerkinBlock2d needs the token coordinates pos (batch, H, W, 2)")
        pos = pos.to(x.dtype).expand(b, h, w, 2).reshape(b, h * w, 2)
        return self.layer(x.reshape(b, h * w, d), pos, None, lead_time).reshape(b, h, w, d)
