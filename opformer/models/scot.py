"""scOT: a hierarchical, U-shaped scalable operator transformer (lecture, "scOT: scalable Operator Transformer").

Patch embedding of (a, x, y) on p x p patches -> encoder stages of (shifted-)window blocks (Swin V2 blocks: scaled
cosine attention, continuous relative position bias, residual post-norms that are lead-time conditioned), patch
merging between stages (2 x 2 tokens -> one of twice the width) -> decoder stages mirrored, patch expansion up and
the encoder's tokens of the same stage joined as skip connections -> final conditioned norm -> patch recovery.
Optionally every window block is followed by a global Galerkin attention block (``galerkin=True``, linear cost).

Resolution rules: any H x W grid with H, W >= patch_size.  The grid is padded at the end of each axis (replicating
the last row/column) to a multiple of the patch, token grids that are not multiples of the window are padded and
masked inside the attention, odd token grids get a zero token row/column before merging; everything is cropped
back.  A window larger than a stage's token grid is clamped to the grid's longer side (as Swin clamps it to the
resolution of a square grid): the whole grid is then one window, without a shift, and a square grid is not padded
up to the window (a 4 x 4 token grid with window 8 was one window of 64 tokens, 48 of them padding).  A token grid
longer than the window along one axis keeps the window (the shorter axis padded and masked).  The model acts on
the grid it is given (a finer grid means more tokens, each covering less of the domain); with ``grid_size`` set,
the input is first resampled linearly to the ``grid_size x grid_size`` grid of the input grid's kind (cell,
periodic or node: ``_grid2d.InternalGrid``) and the output back to the output grid, so one trained model evaluates
at any resolution.  ``out_size`` sets a square output grid of the input grid's kind, resampled linearly
(``_grid2d.to_grid_of_kind``).
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar, Optional

import torch
from torch import Tensor, nn

from ..nn.activations import ACTIVATIONS
from ..nn.patch import POS_ENCODINGS, PatchEmbed2d, PatchExpand2d, PatchMerge2d, PatchRecover2d, crop, pad_to_multiple
from ..nn.patch import layer_norm, patch_centres
from ..nn.window import WindowBlock2d
from ._grid2d import PATCH_ADVICE, check_common, check_size, from_internal, patched_input
from .base import _CHANNELS_HELP, OperatorModel, _choice, _positive_int, _rate, _time_help

__all__ = ["SCOT_SIZES", "ScOTConfig", "ScOT"]

#: named sizes: "tiny" for a CPU, "small", "base" for a GPU (scOT-B's widths and depths with a window of 8)
SCOT_SIZES = {
    "tiny": dict(embed_dim=32, depths=(2, 2), num_heads=(2, 4), window_size=4, patch_size=4),
    "small": dict(embed_dim=48, depths=(2, 2, 2), num_heads=(3, 6, 12), window_size=8, patch_size=4),
    "base": dict(embed_dim=96, depths=(4, 4, 4, 4), num_heads=(3, 6, 12, 24), window_size=8, patch_size=4),
}


@dataclasses.dataclass(frozen=True)
class ScOTConfig:
    """scOT.  ``size`` names the preset of ``embed_dim``, ``depths`` (window blocks per stage), ``num_heads`` (per
    stage), ``window_size`` and ``patch_size``; any of them set overrides the preset.  Stage s has width
    ``embed_dim * 2**s``.  ``mlp_ratio``: the blocks' MLP width over their width.  ``pos_encoding``: an absolute
    encoding added to the patch tokens ("none": positions enter only as the (x, y) input channels and the relative
    bias).  ``galerkin``: a global Galerkin block after every window block.  ``grid_size``: the internal grid (see the module)."""

    in_channels: int = 1
    out_channels: int = 1
    size: str = "tiny"
    embed_dim: Optional[int] = None
    depths: Optional[tuple[int, ...]] = None
    num_heads: Optional[tuple[int, ...]] = None
    window_size: Optional[int] = None
    patch_size: Optional[int] = None
    mlp_ratio: float = 2.0
    activation: str = "gelu"
    dropout: float = 0.0
    attn_dropout: float = 0.0
    pos_encoding: str = "none"
    galerkin: bool = False
    grid_size: Optional[int] = None
    out_size: Optional[int] = None
    time_conditioning: str = "none"

    #: one-line help of each field (``opformer train PRESET --help``)
    FIELD_HELP: ClassVar[dict[str, str]] = {
        **_CHANNELS_HELP,
        "size": "named preset of embed_dim, depths, num_heads, window_size and patch_size: tiny, small or base",
        "embed_dim": "token width of the first stage, doubled at each later one (null: the size's)",
        "depths": "window blocks per stage, one entry per stage (null: the size's)",
        "num_heads": "attention heads per stage, one entry per stage (null: the size's)",
        "window_size": "side of the attention windows, in tokens, clamped to a stage's token grid (null: the size's)",
        "patch_size": "side of the patches, in grid points (null: the size's)",
        "mlp_ratio": "hidden width of the blocks' MLP over their width",
        "activation": "activation of the blocks' MLP: relu, gelu or silu",
        "dropout": "dropout inside the blocks' MLP and on their residual branches",
        "attn_dropout": "dropout on the window attention weights",
        "pos_encoding": "absolute position encoding added to the patch tokens: none, sincos or learned",
        "galerkin": "follow every window block with a global Galerkin attention block (cost linear in the tokens)",
        "grid_size": "side of a square grid the input is resampled to (linearly, a grid of the input grid's kind: "
                     "cell, periodic or node) and the model runs on, the output resampled back (null: the input "
                     "grid)",
        "out_size": "side of a square output grid of the input grid's kind (cell, periodic or node), resampled "
                    "linearly (null: the input grid)",
        "time_conditioning": _time_help("lead-time conditioned layer norms"),
    }

    def __post_init__(self):
        check_common(self)
        _choice("size", self.size, tuple(SCOT_SIZES))
        for name in ("depths", "num_heads"):
            value = getattr(self, name)
            if value is not None:
                if isinstance(value, int) or not all(isinstance(v, int) and v >= 1 for v in value) or not value:
                    raise ValueError(f"{name} must be a non-empty list of positive ints, got {value!r}")
                object.__setattr__(self, name, tuple(value))
        for name in ("embed_dim", "window_size", "patch_size"):
            if getattr(self, name) is not None:
                _positive_int(name, getattr(self, name))
        if len(self.stage_depths) != len(self.stage_heads):
            raise ValueError(f"depths {self.stage_depths} and num_heads {self.stage_heads} need one entry per stage")
        for s, heads in enumerate(self.stage_heads):
            if (self.dim * 2**s) % heads:
                raise ValueError(f"stage {s} width {self.dim * 2**s} (embed_dim * 2**{s}) is not divisible by "
                                 f"num_heads[{s}] = {heads}")
        if not isinstance(self.mlp_ratio, (int, float)) or self.mlp_ratio <= 0:
            raise ValueError(f"mlp_ratio must be a positive number, got {self.mlp_ratio!r}")
        _choice("activation", self.activation, ACTIVATIONS)
        _choice("pos_encoding", self.pos_encoding, POS_ENCODINGS)
        _rate("dropout", self.dropout)
        _rate("attn_dropout", self.attn_dropout)
        check_size("grid_size", self.grid_size)
        if self.grid_size is not None and self.grid_size < self.patch:
            raise ValueError(f"grid_size={self.grid_size} is smaller than patch_size={self.patch} (the side of the "
                             "patches)")

    def _pick(self, name):
        value = getattr(self, name)
        return SCOT_SIZES[self.size][name] if value is None else value

    @property
    def dim(self) -> int:
        return self._pick("embed_dim")

    @property
    def stage_depths(self) -> tuple[int, ...]:
        return tuple(self._pick("depths"))

    @property
    def stage_heads(self) -> tuple[int, ...]:
        return tuple(self._pick("num_heads"))

    @property
    def window(self) -> int:
        return self._pick("window_size")

    @property
    def patch(self) -> int:
        return self._pick("patch_size")


def _stage(cfg: ScOTConfig, s: int, conditioned: bool) -> nn.ModuleList:
    d, m = cfg.dim * 2**s, cfg.window
    return nn.ModuleList([
        WindowBlock2d(d, cfg.stage_heads[s], m, 0 if i % 2 == 0 else m // 2, mlp_ratio=cfg.mlp_ratio,
                      activation_name=cfg.activation, dropout=cfg.dropout, attn_dropout=cfg.attn_dropout,
                      galerkin=cfg.galerkin, conditioned=conditioned)
        for i in range(cfg.stage_depths[s])
    ])


def _window(block: WindowBlock2d, t: Tensor) -> Optional[int]:
    """The window of ``block`` on the token grid ``t`` (batch, H, W, d): None (its own) unless that is larger than
    the grid's longer side, which it is clamped to; the grid is then one window, and a shifted block's shift of half
    a window is none (:class:`~opformer.nn.window.WindowAttention2d` shifts no axis that holds a single window)."""
    side = max(t.shape[1], t.shape[2])
    return side if block.attn.window_size > side else None


def _halve(pos: Tensor) -> Tensor:
    """Token coordinates of the merged grid: 2 x 2 means (odd grids padded by replication first)."""
    return patch_centres(pad_to_multiple(pos, 2), 2)


class ScOT(OperatorModel):
    """scOT on a 2D grid: ``input`` (batch, H, W, in_channels), ``coords`` (batch, H, W, 2) -> (batch, H, W, out), or
    (batch, out_size, out_size, out) with ``out_size``.  See the module docstring for the grids it accepts."""

    name = "scot"
    config_class = ScOTConfig
    spatial_dim = 2

    @property
    def grid_bound(self) -> bool:
        return self.config.grid_size is None  # patches and windows of grid cells, unless it runs on its own grid

    def __init__(self, config: Optional[ScOTConfig] = None, **kwargs):
        super().__init__(config, **kwargs)
        cfg = self.config
        conditioned = cfg.time_conditioning == "norm"
        n_stages, d, p = len(cfg.stage_depths), cfg.dim, cfg.patch
        self.embed = PatchEmbed2d(self.lift_channels + 2, d, p, pos=cfg.pos_encoding)
        self.encoder = nn.ModuleList([_stage(cfg, s, conditioned) for s in range(n_stages)])
        self.merges = nn.ModuleList([PatchMerge2d(d * 2**s, conditioned=conditioned) for s in range(n_stages - 1)])
        self.expands = nn.ModuleList([PatchExpand2d(d * 2 ** (s + 1), d * 2**s, conditioned=conditioned) for s in range(n_stages - 1)])
        self.fuse = nn.ModuleList([nn.Linear(2 * d * 2**s, d * 2**s) for s in range(n_stages - 1)])
        self.decoder = nn.ModuleList([_stage(cfg, s, conditioned) for s in range(n_stages - 1)])
        self.norm = layer_norm(d, conditioned)
        self.recover = PatchRecover2d(d, cfg.out_channels, p)

    def _check_grid(self, grid: tuple[int, ...]) -> None:
        h, w = grid
        p = self.config.patch
        if min(h, w) < 2:
            raise ValueError(f"ScOT needs a grid of at least 2 x 2, got {h} x {w}")
        if self.config.grid_size is None and min(h, w) < p:
            raise ValueError(f"ScOT with patch_size {p} needs a grid of at least {p} x {p}; got {h} x {w}"
                             + PATCH_ADVICE)

    def _forward(self, x: Tensor, coords: Tensor, lead_time: Optional[Tensor]) -> Tensor:
        cfg = self.config
        x, h, w, internal = patched_input(cfg, x, coords, cfg.patch)
        c = x[..., -2:]
        t = self.embed(x, c)
        pos = patch_centres(c, cfg.patch)
        skips = []
        for s, blocks in enumerate(self.encoder):
            if s > 0:
                t, pos = self.merges[s - 1](t, lead_time), _halve(pos)
            for block in blocks:
                t = block(t, lead_time, pos, _window(block, t))
            skips.append((t, pos))
        for s in reversed(range(len(self.decoder))):
            skip, pos = skips[s]
            t = crop(self.expands[s](t, lead_time), skip.shape[1], skip.shape[2])
            t = self.fuse[s](torch.cat((t, skip), dim=-1))
            for block in self.decoder[s]:
                t = block(t, lead_time, pos, _window(block, t))
        y = crop(self.recover(self.norm(t, lead_time)), h, w)
        return from_internal(cfg, y, coords, internal)
