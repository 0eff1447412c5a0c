"""ViT operator: a plain patched operator transformer (lecture, "ViT operator Block").

Patch embedding of (a, x, y) on p x p patches plus a positional encoding -> ``num_layers`` pre-norm blocks
``v + MSA(N1(v))``, ``u + MLP(N2(u))`` on all patch tokens -> final norm -> patch recovery.  ``kind`` picks the
attention on the tokens: "softmax" (the standard ViT, cost quadratic in the tokens), "galerkin" or "fourier"
(Cao 2021, with their per-head norms inside the attention; galerkin costs linear in the tokens) or "linear".  The
norms N are lead-time conditioned with ``time_conditioning="norm"`` (and so are the per-head norms of galerkin and
fourier).

Resolution rules: any H x W grid with H, W >= patch_size; it is padded at the end of each axis (replicating the
last row/column) to a multiple of the patch and cropped back.  A finer grid gives more tokens; the "sincos"
encoding is a function of the patch centres and "learned" is resampled bilinearly to the token grid, so the model
runs at any resolution; with ``grid_size`` the input is resampled linearly to the ``grid_size x grid_size`` grid
of the input grid's kind (``_grid2d.InternalGrid``) and the output back, for a fixed token grid.  ``out_size``: a
square output grid of the input grid's kind (cell, periodic or node: ``_grid2d.to_grid_of_kind``), resampled
linearly, so inputs of one kind at any resolution give their output at the same points.
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar, Optional

from torch import Tensor, nn

from ..nn.activations import ACTIVATIONS, activation
from ..nn.attention import KERNELS, SimpleAttention
from ..nn.patch import POS_ENCODINGS, PatchEmbed2d, PatchRecover2d, crop, layer_norm
from ._grid2d import PATCH_ADVICE, check_common, check_size, from_internal, patched_input
from .base import _CHANNELS_HELP, OperatorModel, _choice, _positive_int, _rate, _time_help

__all__ = ["ViTConfig", "ViT"]


@dataclasses.dataclass(frozen=True)
class ViTConfig:
    """ViT operator.  ``d_model`` token width, ``num_layers`` blocks, ``n_heads``, ``mlp_ratio`` (MLP width over
    ``d_model``), ``patch_size`` p, ``kind`` the attention on the tokens, ``pos_encoding`` "sincos" | "learned"
    (``pos_grid`` x ``pos_grid`` table) | "none", ``grid_size`` an optional internal grid, ``out_size``."""

    in_channels: int = 1
    out_channels: int = 1
    kind: str = "softmax"
    d_model: int = 64
    num_layers: int = 4
    n_heads: int = 4
    mlp_ratio: float = 2.0
    patch_size: int = 4
    activation: str = "gelu"
    dropout: float = 0.0
    pos_encoding: str = "sincos"
    pos_grid: int = 16
    grid_size: Optional[int] = None
    out_size: Optional[int] = None
    time_conditioning: str = "none"

    #: one-line help of each field (``opformer train PRESET --help``)
    FIELD_HELP: ClassVar[dict[str, str]] = {
        **_CHANNELS_HELP,
        "kind": "attention on the tokens: softmax (the standard ViT), galerkin, fourier or linear",
        "d_model": "token width (divisible by n_heads)",
        "num_layers": "transformer blocks",
        "n_heads": "attention heads per block",
        "mlp_ratio": "hidden width of the blocks' MLP over d_model",
        "patch_size": "side of the patches, in grid points",
        "activation": "activation of the blocks' MLP: relu, gelu or silu",
        "dropout": "dropout inside the blocks' MLP and on their residual branches",
        "pos_encoding": "position encoding added to the patch tokens: sincos (of the patch centres), learned (a "
                        "pos_grid x pos_grid table) or none",
        "pos_grid": "side of the learned position table, resampled to the token grid (pos_encoding learned only)",
        "grid_size": "side of a square grid the input is resampled to (linearly, a grid of the input grid's kind: "
                     "cell, periodic or node) and the model runs on, the output resampled back (null: the input "
                     "grid)",
        "out_size": "side of a square output grid of the input grid's kind (cell, periodic or node), resampled "
                    "linearly (null: the input grid)",
        "time_conditioning": _time_help("lead-time conditioned layer norms, and per-head norms where the kind "
                                        "has them"),
    }

    def __post_init__(self):
        check_common(self)
        _choice("kind", self.kind, KERNELS)
        for name in ("d_model", "num_layers", "n_heads", "patch_size", "pos_grid"):
            _positive_int(name, getattr(self, name))
        if self.d_model % self.n_heads:
            raise ValueError(f"d_model={self.d_model} must be divisible by n_heads={self.n_heads}")
        if not isinstance(self.mlp_ratio, (int, float)) or self.mlp_ratio <= 0:
            raise ValueError(f"mlp_ratio must be a positive number, got {self.mlp_ratio!r}")
        _choice("activation", self.activation, ACTIVATIONS)
        _choice("pos_encoding", self.pos_encoding, POS_ENCODINGS)
        _rate("dropout", self.dropout)
        check_size("grid_size", self.grid_size)
        if self.grid_size is not None and self.grid_size < self.patch_size:
            raise ValueError(f"grid_size={self.grid_size} is smaller than patch_size={self.patch_size}")


class ViTBlock(nn.Module):
    """Pre-norm transformer block on tokens (batch, n, d): v + Attn(N1(v)), then u + MLP(N2(u))."""

    def __init__(self, cfg: ViTConfig, conditioned: bool):
        super().__init__()
        d = cfg.d_model
        self.norm1, self.norm2 = layer_norm(d, conditioned), layer_norm(d, conditioned)
        # softmax: the standard scaled dot product; galerkin/fourier/linear: with their per-head norms (eq. 4)
        self.attn = SimpleAttention(d, cfg.n_heads, cfg.kind, 0, norm=cfg.kind != "softmax", init="xavier",
                                    out_proj=True, scale="sqrt" if cfg.kind == "fourier" else None,
                                    conditioned=conditioned)
        hidden = max(1, int(round(cfg.mlp_ratio * d)))
        self.mlp = nn.Sequential(nn.Linear(d, hidden), activation(cfg.activation), nn.Dropout(cfg.dropout),
                                 nn.Linear(hidden, d))
        self.drop = nn.Dropout(cfg.dropout)

    def forward(self, v: Tensor, lead_time: Optional[Tensor]) -> Tensor:
        u = v + self.drop(self.attn(self.norm1(v, lead_time), lead_time=lead_time))
        return u + self.drop(self.mlp(self.norm2(u, lead_time)))


class ViT(OperatorModel):
    """ViT operator on a 2D grid: ``input`` (batch, H, W, in_channels), ``coords`` (batch, H, W, 2) ->
    (batch, H, W, out_channels), or (batch, out_size, out_size, out_channels) with ``out_size``."""

    name = "vit"
    config_class = ViTConfig
    spatial_dim = 2

    @property
    def grid_bound(self) -> bool:
        return self.config.grid_size is None  # patches of grid cells, unless it runs on its own grid

    def __init__(self, config: Optional[ViTConfig] = None, **kwargs):
        super().__init__(config, **kwargs)
        cfg = self.config
        conditioned = cfg.time_conditioning == "norm"
        self.embed = PatchEmbed2d(self.lift_channels + 2, cfg.d_model, cfg.patch_size, pos=cfg.pos_encoding,
                                  pos_grid=cfg.pos_grid)
        self.blocks = nn.ModuleList([ViTBlock(cfg, conditioned) for _ in range(cfg.num_layers)])
        self.norm = layer_norm(cfg.d_model, conditioned)
        self.recover = PatchRecover2d(cfg.d_model, cfg.out_channels, cfg.patch_size)

    def _check_grid(self, grid: tuple[int, ...]) -> None:
        p = self.config.patch_size
        if min(grid) < 2:
            raise ValueError(f"ViT needs a grid of at least 2 x 2, got {grid[0]} x {grid[1]}")
        if self.config.grid_size is None and min(grid) < p:
            raise ValueError(f"ViT with patch_size {p} needs a grid of at least {p} x {p}; got {grid[0]} x {grid[1]}"
                             + PATCH_ADVICE)

    def _forward(self, x: Tensor, coords: Tensor, lead_time: Optional[Tensor]) -> Tensor:
        cfg = self.config
        x, h, w, internal = patched_input(cfg, x, coords, cfg.patch_size)
        t = self.embed(x, x[..., -2:])
        b, hp, wp, d = t.shape
        v = t.reshape(b, hp * wp, d)
        for block in self.blocks:
            v = block(v, lead_time)
        y = self.recover(self.norm(v, lead_time).reshape(b, hp, wp, d))
        return from_internal(cfg, crop(y, h, w), coords, internal)
