"""Attention-based operator learners (Cao 2021, section 4): Transformer1d (Burgers, ex1) and Transformer2d (Darcy
forward ex2 and inverse ex3).

1D: lift ``Linear(in -> d)`` -> encoder with the coordinate as position -> spectral decoder.
2D: CiNN downscaler (fine -> coarse grid) -> encoder on the coarse grid with its 2D coordinates -> CiNN upscaler
(coarse -> output grid) -> spectral decoder (forward problem) or pointwise decoder (inverse problem) -> optional
zero Dirichlet ring.
"""

from __future__ import annotations

import dataclasses
from typing import Callable, ClassVar, Optional

import torch
from torch import Tensor, nn

from ..nn.cinn import CiNNDownscaler2d, CiNNUpscaler2d, resize2d
from ..nn.decoders import PointwiseDecoder, SpectralDecoder1d, SpectralDecoder2d
from ..nn.activations import ACTIVATIONS
from ..nn.encoder import Encoder
from ._grid2d import InternalGrid, to_grid_of_kind, to_points
from .base import _CHANNELS_HELP, EncoderConfig, OperatorModel, _choice, _positive_int, _rate

__all__ = [
    "Transformer1dConfig",
    "Transformer1d",
    "Transformer2dConfig",
    "Transformer2d",
    "default_coarse_size",
    "COARSE_RATIO",
]

#: default coarse/fine spacing ratio: coarse_size = round(COARSE_RATIO * (n_f - 1)) + 1 (141 -> 43, as in the paper)
COARSE_RATIO = 0.3


def default_coarse_size(fine_size: int) -> int:
    """The attention grid used when ``coarse_size`` is not set: ``round(0.3 * (n_f - 1)) + 1``, at least 2.

    A grid of nodes with about 3.33 fine cells per coarse cell: 141 -> 43 (the paper's ex2), 211 -> 64, 85 -> 26,
    29 -> 9.  Paper pairs that do not follow it (211 -> 61, 141 -> 36, ...) are set with ``coarse_size``.
    """
    return max(2, round(COARSE_RATIO * (fine_size - 1)) + 1)


@dataclasses.dataclass(frozen=True)
class Transformer1dConfig(EncoderConfig):
    """Transformer1d; the defaults are the layer sizes of the paper's ex1 GT (530,305 parameters; the burgers-gt
    preset adds its dropout).

    Decoder: ``decoder_layers`` spectral layers of width ``decoder_width`` keeping ``modes`` frequencies, head
    ``Linear(decoder_width, decoder_ffn) -> act -> Linear(decoder_ffn, out_channels)`` (``decoder_ffn`` None =
    ``decoder_width``); ``spatial_fc`` concatenates the coordinate before the decoder (the reference's
    ``spacial_fc``; off in ex1).
    """

    in_channels: int = 1
    out_channels: int = 1
    d_model: int = 96
    num_layers: int = 4
    n_heads: int = 1
    dim_feedforward: Optional[int] = 192
    decoder_width: int = 48
    decoder_layers: int = 2
    modes: int = 16
    decoder_ffn: Optional[int] = None
    decoder_activation: str = "silu"
    spatial_fc: bool = False

    FIELD_HELP: ClassVar[dict[str, str]] = {
        **_CHANNELS_HELP,
        "decoder_width": "width of the decoder's spectral layers",
        "decoder_layers": "spectral layers of the decoder",
        "modes": "lowest Fourier modes kept by each decoder spectral layer (at most n // 2 + 1 on n points)",
        "decoder_ffn": "hidden width of the decoder's pointwise head (null: decoder_width)",
        "decoder_activation": "activation of the decoder, after every spectral layer and in its head: relu, gelu "
                              "or silu",
        "spatial_fc": "concatenate the coordinate to the features and lift them before the decoder (the "
                      "reference's spacial_fc)",
    }

    def __post_init__(self):
        self._check_encoder()
        for name in ("in_channels", "out_channels", "decoder_width", "decoder_layers", "modes"):
            _positive_int(name, getattr(self, name))
        if self.decoder_ffn is not None:
            _positive_int("decoder_ffn", self.decoder_ffn)
        _choice("decoder_activation", self.decoder_activation, ACTIVATIONS)


class Transformer1d(OperatorModel):
    """Operator learner on a 1D grid (paper ex1, Burgers).

    ``input`` (batch, n, in_channels), ``coords`` (batch, n, 1) -> (batch, n, out_channels).  Needs
    ``n // 2 + 1 >= modes``.  Every part acts on functions (pointwise lift, 1/n-weighted attention, orthonormal FFT
    decoder), so a model trained at one n can be evaluated at another.
    """

    name = "transformer1d"
    config_class = Transformer1dConfig
    spatial_dim = 1

    def __init__(self, config: Optional[Transformer1dConfig] = None, **kwargs):
        super().__init__(config, **kwargs)
        cfg = self.config
        self.lift = nn.Linear(self.lift_channels, cfg.d_model)
        self.encoder = Encoder(**cfg.encoder_kwargs(pos_dim=1))
        self.decoder = SpectralDecoder1d(
            cfg.d_model,
            cfg.decoder_width,
            cfg.out_channels,
            modes=cfg.modes,
            num_layers=cfg.decoder_layers,
            ffn_width=cfg.decoder_ffn,
            activation=cfg.decoder_activation,
            coord_dim=1 if cfg.spatial_fc else 0,
        )

    @classmethod
    def max_modes(cls, config, grid: tuple[int, ...]) -> int:
        return grid[0] // 2 + 1

    def _check_grid(self, grid: tuple[int, ...]) -> None:
        if grid[0] < 2:
            raise ValueError(f"Transformer1d needs a grid of at least 2 points, got n={grid[0]}")

    def _forward(self, x: Tensor, coords: Tensor, lead_time: Optional[Tensor]) -> Tensor:
        h = self.encoder(self.lift(x), coords, lead_time=lead_time)
        return self.decoder(h, coords if self.config.spatial_fc else None)


@dataclasses.dataclass(frozen=True)
class Transformer2dConfig(EncoderConfig):
    """Transformer2d; the defaults are the layer sizes of the paper's ex2 GT (2,220,829 parameters; the darcy-gt
    preset adds its dropouts, its attention grid and the Dirichlet ring).

    Grids: ``coarse_size`` is the attention grid (None: :func:`default_coarse_size` of the fine size);
    ``out_size`` the output grid (None: the input's fine grid; the inverse problem sets it to its target grid).
    CiNN: ``downscaler_activation``/``downscaler_dropout``, ``upscaler_activation``/``upscaler_dropout``.
    Decoder: ``decoder`` "spectral" (``decoder_width``, ``decoder_layers``, ``modes``, ``decoder_ffn``) or "pointwise"
    (``decoder_width``, ``decoder_layers`` hidden layers, ``decoder_dropout``); ``spatial_fc`` concatenates the
    output-grid coordinates before it, ``input_skip`` the input fields resampled to the output grid (a path from the
    fine input to the decoder that bypasses the attention grid; not in the paper).  ``boundary``: None, or
    "dirichlet" to zero the outer ring of the output.
    """

    in_channels: int = 1
    out_channels: int = 1
    d_model: int = 128
    num_layers: int = 6
    n_heads: int = 4
    dim_feedforward: Optional[int] = 256
    norm_eps: float = 1e-7
    coarse_size: Optional[int] = None
    out_size: Optional[int] = None
    downscaler_activation: str = "relu"
    downscaler_dropout: float = 0.0
    upscaler_activation: str = "silu"
    upscaler_dropout: float = 0.0
    decoder: str = "spectral"
    decoder_width: int = 32
    decoder_layers: int = 2
    modes: int = 12
    decoder_ffn: Optional[int] = 128
    decoder_activation: str = "silu"
    decoder_dropout: float = 0.0
    spatial_fc: bool = True
    input_skip: bool = False
    boundary: Optional[str] = None

    FIELD_HELP: ClassVar[dict[str, str]] = {
        **_CHANNELS_HELP,
        "coarse_size": "side of the attention grid, the coarse grid after the CiNN downscaler (null: "
                       "round(0.3 * (n - 1)) + 1 for an n x n input)",
        "out_size": "side of the square output grid, of the input grid's kind (null: the input grid; the inverse "
                    "problem sets its target grid)",
        "downscaler_activation": "activation of the CiNN downscaler (input grid -> attention grid): relu, gelu or "
                                 "silu",
        "downscaler_dropout": "dropout after each convolution of the CiNN downscaler",
        "upscaler_activation": "activation of the CiNN upscaler (attention grid -> output grid): relu, gelu or "
                               "silu",
        "upscaler_dropout": "dropout after the convolution of the CiNN upscaler",
        "decoder": "spectral (spectral layers and a pointwise head) or pointwise (an MLP at each point)",
        "decoder_width": "width of the decoder's layers",
        "decoder_layers": "spectral layers of the spectral decoder (>= 1), or hidden layers of the pointwise one "
                          "(>= 0)",
        "modes": "lowest Fourier modes per axis kept by each spectral decoder layer (spectral decoder only)",
        "decoder_ffn": "hidden width of the spectral decoder's pointwise head (null: decoder_width; spectral "
                       "decoder only)",
        "decoder_activation": "activation of the decoder (spectral: after every spectral layer and in the head; "
                              "pointwise: in every hidden layer): relu, gelu or silu",
        "decoder_dropout": "dropout after each hidden layer of the pointwise decoder (pointwise decoder only)",
        "spatial_fc": "concatenate the output grid's coordinates to the features and lift them before the decoder",
        "input_skip": "concatenate the input fields, resampled to the output grid, to the decoder's input (a "
                      "path around the attention grid; not in the paper)",
        "boundary": "null, or dirichlet to zero the outer ring of the output grid",
    }

    def __post_init__(self):
        self._check_encoder()
        if self.d_model < 3:
            raise ValueError(f"d_model must be >= 3 for the CiNN downscaler (split in three), got {self.d_model}")
        for name in ("in_channels", "out_channels", "decoder_width", "modes"):
            _positive_int(name, getattr(self, name))
        if not isinstance(self.decoder_layers, int) or self.decoder_layers < (1 if self.decoder == "spectral" else 0):
            raise ValueError(f"decoder_layers must be a positive int, got {self.decoder_layers!r}")
        for name in ("coarse_size", "out_size"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, int) or value < 2):
                raise ValueError(f"{name} must be None or an int >= 2, got {value!r}")
        if self.decoder_ffn is not None:
            _positive_int("decoder_ffn", self.decoder_ffn)
        for name in ("downscaler_activation", "upscaler_activation", "decoder_activation"):
            _choice(name, getattr(self, name), ACTIVATIONS)
        for name in ("downscaler_dropout", "upscaler_dropout", "decoder_dropout"):
            _rate(name, getattr(self, name))
        _choice("decoder", self.decoder, ("spectral", "pointwise"))
        _choice("boundary", self.boundary, (None, "dirichlet"))


class Transformer2d(OperatorModel):
    """Operator learner on a square 2D grid (paper ex2 Darcy, ex3 inverse Darcy).

    ``input`` (batch, n_f, n_f, in_channels), ``coords`` (batch, n_f, n_f, 2) -> (batch, n_o, n_o, out_channels),
    ``n_o = out_size`` or ``n_f``.  The attention runs on the ``n_c x n_c`` coarse grid, whose coordinates are the
    bilinear restriction of ``coords`` (for the meshgrid of linspace(0, 1, n_f) that is exactly the meshgrid of
    linspace(0, 1, n_c)), and the upscaler's output sits at n_o points evenly from the input grid's first to its
    last point per axis.  Without ``out_size`` those are the input grid's points.  With ``out_size`` the output grid
    is the ``out_size`` grid of the input grid's kind (cell centres, periodic or node points:
    ``_grid2d.to_grid_of_kind``), so inputs of one kind at any resolution give their output at the same points: the
    upscaled features are interpolated linearly there (on a node grid they already are), and the decoder sees that
    grid's coordinates and, with ``input_skip``, the input resampled to it.  Any fine grid is accepted; with a
    fixed ``coarse_size`` the attention grid stays the same across resolutions.

    ``output_transform`` (attribute, default None): a callable applied to the decoder output before the Dirichlet
    ring is zeroed, e.g. the target normalizer's inverse, so that the boundary is zero in physical units as in the
    reference.  Without it the ring is zeroed in the model's output units.
    """

    name = "transformer2d"
    config_class = Transformer2dConfig
    spatial_dim = 2
    square_only = True

    @property
    def grid_bound(self) -> bool:
        return True  # the CiNN convolutions act on cells of the fine grid

    def __init__(self, config: Optional[Transformer2dConfig] = None, **kwargs):
        super().__init__(config, **kwargs)
        cfg = self.config
        d = cfg.d_model
        self.downscaler = CiNNDownscaler2d(
            self.lift_channels, d, activation=cfg.downscaler_activation, dropout=cfg.downscaler_dropout
        )
        self.encoder = Encoder(**cfg.encoder_kwargs(pos_dim=2))
        self.upscaler = CiNNUpscaler2d(d, activation=cfg.upscaler_activation, dropout=cfg.upscaler_dropout)
        coord_dim = (2 if cfg.spatial_fc else 0) + (self.lift_channels if cfg.input_skip else 0)
        if cfg.decoder == "spectral":
            self.decoder = SpectralDecoder2d(
                d,
                cfg.decoder_width,
                cfg.out_channels,
                modes=cfg.modes,
                num_layers=cfg.decoder_layers,
                ffn_width=cfg.decoder_ffn,
                activation=cfg.decoder_activation,
                coord_dim=coord_dim,
            )
        else:
            self.decoder = PointwiseDecoder(
                d,
                cfg.decoder_width,
                cfg.out_channels,
                num_layers=cfg.decoder_layers,
                activation=cfg.decoder_activation,
                dropout=cfg.decoder_dropout,
                coord_dim=coord_dim,
            )
        self.output_transform: Optional[Callable[[Tensor], Tensor]] = None

    def grid_sizes(self, fine_size: int) -> tuple[int, int]:
        """(coarse, output) grid sizes used for an ``fine_size`` x ``fine_size`` input."""
        cfg = self.config
        coarse = cfg.coarse_size if cfg.coarse_size is not None else default_coarse_size(fine_size)
        return coarse, (cfg.out_size if cfg.out_size is not None else fine_size)

    @classmethod
    def max_modes(cls, config, grid: tuple[int, ...]) -> int:
        if config.decoder != "spectral":
            return 1 << 30
        return (config.out_size if config.out_size is not None else grid[0]) // 2

    def _check_grid(self, grid: tuple[int, ...]) -> None:
        n_f = grid[0]
        if n_f < 2:
            raise ValueError(f"Transformer2d needs a fine grid of at least 2 x 2 points, got {grid}")

    def _forward(self, x: Tensor, coords: Tensor, lead_time: Optional[Tensor]) -> Tensor:
        b, n_f = x.shape[0], x.shape[1]
        n_c, n_o = self.grid_sizes(n_f)
        d = self.config.d_model
        h = self.downscaler(x, n_c)  # (b, n_c, n_c, d)
        pos = resize2d(coords, n_c).reshape(b, n_c * n_c, 2)  # row-major, matches h's flattening
        h = self.encoder(h.reshape(b, n_c * n_c, d), pos, lead_time=lead_time).reshape(b, n_c, n_c, d)
        h = self.upscaler(h, n_o)  # at n_o points evenly from the input grid's first to its last point, per axis
        grid = None
        if n_o != n_f:  # out_size: the grid of the input grid's kind, which a node grid's points already are
            grid = InternalGrid(coords, n_o)
            span = resize2d(coords[:1], n_o)
            h = torch.where(grid.node, h, to_points(h, span[0, :, 0, 0], span[0, 0, :, 1], grid.px, grid.py))
        extra = []
        if self.config.spatial_fc:
            extra.append(resize2d(coords, n_o) if grid is None else grid.coords(coords))
        if self.config.input_skip:
            extra.append(to_grid_of_kind(x, coords, n_o))
        y = self.decoder(h, torch.cat(extra, -1) if extra else None)
        if self.output_transform is not None:
            y = self.output_transform(y)
        if self.config.boundary == "dirichlet":
            y = _zero_ring(y)
        return y


def _zero_ring(y: Tensor) -> Tensor:
    """Zero the outer ring of a (batch, H, W, C) grid (homogeneous Dirichlet condition), differentiably."""
    mask = torch.zeros(y.shape[1], y.shape[2], 1, dtype=y.dtype, device=y.device)
    mask[1:-1, 1:-1] = 1
    return y * mask
