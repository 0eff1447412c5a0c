"""The common interface of every operator learner: configs, argument checks and ``model(input, coords)``."""

from __future__ import annotations

import dataclasses
import difflib
import math
from collections.abc import Mapping
from typing import Any, ClassVar, Optional

import torch
from torch import Tensor, nn

from ..nn.attention import FOURIER_ORDERS, KERNELS, QUADRATIC
from ..nn.activations import ACTIVATIONS
from ..nn.encoder import NORM_SCHEMES

__all__ = ["OperatorModel", "EncoderConfig", "make_config", "closest", "TIME_CONDITIONING"]

#: how a model takes the lead time tau of a time-dependent task: not at all, through conditioned norms (the
#: lecture's N(w) = g(tau) * LN(w) + h(tau), identity at initialisation), or as an extra input channel
TIME_CONDITIONING = ("none", "norm", "channel")

#: help texts of the fields every model config has (``FIELD_HELP``: see :class:`EncoderConfig`)
_CHANNELS_HELP = {
    "in_channels": "input channels per grid point (the coordinates and a lead-time channel not counted)",
    "out_channels": "output channels per grid point",
}


def _time_help(norm: str) -> str:
    """The help text of a config's ``time_conditioning``; ``norm`` says what "norm" conditions in that model."""
    return f"lead time of a time-dependent task: none, norm ({norm}) or channel (an extra input channel)"


def closest(word: str, options) -> Optional[str]:
    """The option nearest to ``word`` (difflib), or None when nothing is close."""
    match = difflib.get_close_matches(str(word), [str(o) for o in options], n=1, cutoff=0.0)
    return match[0] if match else None


def _plain(value: Any) -> Any:
    """A numpy scalar (``np.int64(64)``, ``np.float32(0.5)``, ``np.bool_``) as the Python number it holds, also inside
    lists and tuples; anything else as it is.  A config holds plain values: it is compared by value, written to
    JSON and to checkpoints, and its checks take ints and floats."""
    if isinstance(value, (list, tuple)):
        return type(value)(_plain(v) for v in value)
    if type(value).__module__ == "numpy" and hasattr(value, "item") and getattr(value, "ndim", None) == 0:
        return value.item()
    return value


def make_config(config_class: type, kwargs: Mapping[str, Any], what: str):
    """Build a frozen config from keyword arguments; an unknown key raises naming the key and the nearest valid one.
    Numpy scalars (a value from a sweep over ``np.arange``, say) are taken as the Python numbers they hold."""
    valid = [f.name for f in dataclasses.fields(config_class)]
    for key in kwargs:
        if key not in valid:
            raise ValueError(
                f"unknown key {key!r} for {what}; did you mean {closest(key, valid)!r}? valid keys: {', '.join(valid)}"
            )
    return config_class(**{k: _plain(v) for k, v in kwargs.items()})


def _positive_int(name: str, value: Any) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError(f"{name} must be a positive int, got {value!r}")


def _rate(name: str, value: Any) -> None:
    if not isinstance(value, (int, float)) or not 0.0 <= value < 1.0:
        raise ValueError(f"{name} must be a probability in [0, 1), got {value!r}")


def _choice(name: str, value: Any, options) -> None:
    if value not in options:
        raise ValueError(f"{name} must be one of {sorted(options, key=repr)}, got {value!r}")


@dataclasses.dataclass(frozen=True)
class EncoderConfig:
    """Fields shared by the attention-based models; they configure :class:`opformer.nn.Encoder`.

    ``kind``: galerkin | fourier | softmax | linear.  ``norm_scheme``: "galerkin" (Ln inside the attention, eq. 4),
    "regular" (post-LN, eq. 7) or "pre" (pre-LN, not in the paper).  ``scale``: None, "sqrt" (1/sqrt(d_head +
    pos_dim)) or a number, multiplying the attention product.  ``dim_feedforward`` None means 2 * d_model.
    ``dropout`` is the residual-branch dropout, ``ffn_dropout`` the one inside the FFN and ``attn_branch_dropout`` the
    one on the attention branch's output (None: same as ``dropout``), ``attn_dropout`` the one on the attention
    matrix; ``reference_attn_dropout`` reproduces the reference's always-on p=0.5 attention dropout (ablation only).
    ``fourier_order``: "auto" evaluates Fourier attention as Q (K^T V) where that is cheaper (the same product, see
    :func:`opformer.nn.fourier_attention`), "quadratic" always forms the n x n matrix, "linear" always reassociates.
    """

    kind: str = "galerkin"
    norm_scheme: str = "galerkin"
    d_model: int = 96
    num_layers: int = 4
    n_heads: int = 1
    dim_feedforward: Optional[int] = None
    activation: str = "relu"
    dropout: float = 0.0
    ffn_dropout: Optional[float] = None
    attn_branch_dropout: Optional[float] = None
    attn_dropout: float = 0.0
    reference_attn_dropout: bool = False
    norm_eps: float = 1e-5
    init: str = "eta_delta"
    eta: float = 1e-2
    delta: float = 1e-2
    scale: Any = None
    chunk_size: Optional[int] = None
    fourier_order: str = "auto"
    time_conditioning: str = "none"

    #: one-line help of each field (``opformer train PRESET --help``); a subclass lists the fields it adds
    FIELD_HELP: ClassVar[dict[str, str]] = {
        "kind": "attention kind: galerkin, fourier, softmax or linear",
        "norm_scheme": "galerkin: per-head layer norm inside the attention, on K,V (galerkin, linear) or Q,K "
                       "(fourier, softmax), eq. 4; regular: post-LN after each residual sum, eq. 7; pre: layer norm on the "
                       "input of each residual branch (pre-LN, not in the paper)",
        "d_model": "width of the encoder's features (divisible by n_heads)",
        "num_layers": "encoder layers",
        "n_heads": "attention heads per encoder layer",
        "dim_feedforward": "hidden width of the encoder's FFN (null: 2 * d_model)",
        "activation": "activation of the encoder's FFN: relu, gelu or silu",
        "dropout": "dropout on the encoder's residual branches (attention and FFN outputs), in [0, 1)",
        "ffn_dropout": "dropout inside the encoder's FFN, after its activation (null: the same as dropout)",
        "attn_branch_dropout": "dropout on the attention branch's output before its residual sum (null: the same "
                               "as dropout; 0 keeps the FFN's dropouts and removes the one that can make a network "
                               "rely on its dropout noise, docs/models.md)",
        "attn_dropout": "dropout on the attention matrix (n x n for fourier and softmax, d x d for galerkin and "
                        "linear)",
        "reference_attn_dropout": "reproduce the reference code's always-on p=0.5 attention dropout, in eval too "
                                  "(ablation only)",
        "norm_eps": "epsilon of the encoder's layer norms",
        "init": "initialisation of the Q/K/V projections: eta_delta (eta * Xavier-uniform + delta * identity, "
                "eq. 17) or xavier (plain Xavier-uniform)",
        "eta": "gain of the Xavier-uniform part of the Q/K/V weights at initialisation (init eta_delta; paper: 1e-2)",
        "delta": "multiple of the identity added to the Q/K/V weights at initialisation (init eta_delta; paper: 1e-2)",
        "scale": "factor on the attention product: null (none, eqs. 5-6; softmax keeps its built-in 1/sqrt), "
                 "sqrt (1/sqrt(d_head + pos_dim)) or a number",
        "chunk_size": "evaluate an n x n attention matrix (fourier, softmax) over query chunks of this size to bound "
                      "memory (null: all queries at once)",
        "fourier_order": "evaluation of fourier attention: auto (the cheaper of (Q K^T) V and Q (K^T V)), "
                         "quadratic (always (Q K^T) V) or linear (always Q (K^T V))",
        "time_conditioning": _time_help("a lead-time scale and shift of the encoder's layer norms"),
    }

    def _check_encoder(self) -> None:
        _choice("time_conditioning", self.time_conditioning, TIME_CONDITIONING)
        _choice("kind", self.kind, KERNELS)
        _choice("norm_scheme", self.norm_scheme, NORM_SCHEMES)
        _choice("activation", self.activation, ACTIVATIONS)
        _choice("init", self.init, ("eta_delta", "xavier"))
        _choice("fourier_order", self.fourier_order, FOURIER_ORDERS)
        for name in ("d_model", "num_layers", "n_heads"):
            _positive_int(name, getattr(self, name))
        if self.d_model % self.n_heads:
            raise ValueError(f"d_model={self.d_model} must be divisible by n_heads={self.n_heads}")
        if self.dim_feedforward is not None:
            _positive_int("dim_feedforward", self.dim_feedforward)
        if self.chunk_size is not None:
            _positive_int("chunk_size", self.chunk_size)
            if self.kind not in QUADRATIC:  # a setting that would do nothing is refused, not ignored
                raise ValueError(f"chunk_size applies to the kinds that form an n x n matrix "
                                 f"({', '.join(sorted(QUADRATIC))}); this model's kind is {self.kind} (leave "
                                 "chunk_size at null)")
        if self.fourier_order != "auto" and self.kind != "fourier":
            raise ValueError(f"fourier_order applies to kind fourier only; this model's kind is {self.kind} (leave "
                             "fourier_order at auto)")
        _rate("dropout", self.dropout)
        _rate("attn_dropout", self.attn_dropout)
        if self.ffn_dropout is not None:
            _rate("ffn_dropout", self.ffn_dropout)
        if self.attn_branch_dropout is not None:
            _rate("attn_branch_dropout", self.attn_branch_dropout)
        if not (self.scale is None or self.scale == "sqrt" or (isinstance(self.scale, (int, float))
                                                              and not isinstance(self.scale, bool)
                                                              and math.isfinite(self.scale))):
            raise ValueError(f"scale must be None, 'sqrt' or a finite number, got {self.scale!r}")
        if not (isinstance(self.norm_eps, (int, float)) and self.norm_eps > 0):
            raise ValueError(f"norm_eps must be a positive number, got {self.norm_eps!r}")

    def encoder_kwargs(self, pos_dim: int) -> dict:
        """Keyword arguments for :class:`opformer.nn.Encoder`."""
        return dict(
            num_layers=self.num_layers,
            d_model=self.d_model,
            n_heads=self.n_heads,
            kind=self.kind,
            dim_feedforward=self.dim_feedforward,
            pos_dim=pos_dim,
            norm_scheme=self.norm_scheme,
            dropout=self.dropout,
            attn_dropout=self.attn_dropout,
            ffn_dropout=self.ffn_dropout,
            attn_branch_dropout=self.attn_branch_dropout,
            activation=self.activation,
            norm_eps=self.norm_eps,
            init=self.init,
            eta=self.eta,
            delta=self.delta,
            scale=self.scale,
            chunk_size=self.chunk_size,
            fourier_order=self.fourier_order,
            reference_attn_dropout=self.reference_attn_dropout,
            conditioned=self.time_conditioning == "norm",
        )


class OperatorModel(nn.Module):
    """Base class: ``model(input, coords)`` or ``model({"input": ..., "coords": ...})``.

    Subclasses set ``name`` (the :func:`~opformer.models.build_model` name), ``config_class``, ``spatial_dim``
    (1 or 2) and ``square_only``, and implement ``_forward(input, coords)`` and ``_check_grid(grid_shape)``.
    Inputs are channels-last grids: 1D ``input`` (batch, n, in_channels) with ``coords`` (batch, n, 1); 2D ``input``
    (batch, H, W, in_channels) with ``coords`` (batch, H, W, 2).  ``coords`` may have batch size 1 (shared grid).
    """

    name: ClassVar[str]
    config_class: ClassVar[type]
    spatial_dim: ClassVar[int]
    square_only: ClassVar[bool] = False

    def __init__(self, config=None, **kwargs):
        super().__init__()
        if config is not None and kwargs:
            raise ValueError(f"{type(self).__name__}: pass either a config or keyword arguments, not both")
        if config is None:
            config = make_config(self.config_class, kwargs, f"model {self.name!r}")
        elif not isinstance(config, self.config_class):
            raise TypeError(f"{type(self).__name__} needs a {self.config_class.__name__}, got {type(config).__name__}")
        self.config = config

    def to_config(self) -> dict:
        """The ``build_model`` dict that rebuilds this architecture: ``{"name": ..., **fields}``."""
        return {"name": self.name, **dataclasses.asdict(self.config)}

    def extra_repr(self) -> str:
        return f"name={self.name!r}"

    def _grid_text(self) -> str:
        return "n" if self.spatial_dim == 1 else "H, W"

    def _check_inputs(self, x: Any, coords: Any) -> None:
        who, d, c = type(self).__name__, self.spatial_dim, self.config.in_channels
        grid = self._grid_text()
        if not isinstance(x, Tensor):
            raise TypeError(f"{who}: input must be a tensor of shape (batch, {grid}, {c}), got {type(x).__name__}")
        if x.dim() != d + 2:
            raise ValueError(
                f"{who} expects input of shape (batch, {grid}, channels={c}) ({d + 2} dims), got {tuple(x.shape)}"
            )
        if x.shape[-1] != c:
            raise ValueError(f"{who} expects {c} input channel(s) in the last axis, got shape {tuple(x.shape)}")
        p_dtype = next((p.dtype for p in self.parameters() if p.is_floating_point()), None)
        if p_dtype is not None and x.dtype != p_dtype and not (x.is_floating_point()
                                                               and torch.is_autocast_enabled(x.device.type)):
            have, want = str(x.dtype).replace("torch.", ""), str(p_dtype).replace("torch.", "")
            fix = (f"convert one of them (input.to(torch.{want}) or model.to(torch.{have})), or run under "
                   "torch.autocast" if x.is_floating_point() else f"give floating-point values (input.to(torch.{want}))")
            raise ValueError(f"{who}: input is {have} but the model's parameters are {want}: {fix}")
        if self.square_only and x.shape[1] != x.shape[2]:
            raise ValueError(f"{who} needs a square grid (H == W), got input of shape {tuple(x.shape)}")
        if not isinstance(coords, Tensor):
            raise TypeError(
                f"{who}: coords must be a tensor of shape (batch, {grid}, {d}), got {type(coords).__name__}"
            )
        expected = (x.shape[0], *x.shape[1:-1], d)
        if coords.dim() != d + 2 or coords.shape[1:] != expected[1:] or coords.shape[0] not in (1, x.shape[0]):
            raise ValueError(f"{who} expects coords of shape {expected} for this input, got {tuple(coords.shape)}")
        self._check_grid(tuple(x.shape[1:-1]))

    def _check_grid(self, grid: tuple[int, ...]) -> None:  # pragma: no cover - overridden
        pass

    @property
    def time_conditioning(self) -> str:
        return getattr(self.config, "time_conditioning", "none")

    @property
    def lift_channels(self) -> int:
        """Input channels the first layer sees: the data's, plus one for the lead time in "channel" mode."""
        return self.config.in_channels + (1 if self.time_conditioning == "channel" else 0)

    @classmethod
    def max_modes(cls, config, grid: tuple[int, ...]) -> int:
        """The most spectral modes (``config.modes``) that an input grid ``grid`` allows (models without modes:
        unlimited)."""
        return 1 << 30

    @property
    def grid_bound(self) -> bool:
        """True when layers act on grid cells (convolutions, patches) rather than on the function, so the model is
        most accurate on its training grid; a loaded model then runs there on other grids (``opformer.load``,
        ``resample``).  Models without such layers, or with an internal grid of their own, return False."""
        return False

    def resolution_note(self, grid: tuple[int, ...]) -> Optional[str]:
        """One line saying what this model leaves out on ``grid``, or None: on a grid coarser than its spectral
        modes need, the spectral layers keep only the frequencies the grid resolves (:mod:`opformer.nn.spectral`)."""
        m = getattr(self.config, "modes", None)
        limit = self.max_modes(self.config, tuple(grid))
        if not isinstance(m, int) or limit >= m:
            return None
        return (f"the {'x'.join(map(str, grid))} grid resolves {limit} of the {m} Fourier modes per axis that this "
                f"model keeps; it predicts with those {limit}")

    def forward(self, input: Any, coords: Optional[Tensor] = None, lead_time: Optional[Tensor] = None) -> Tensor:
        """``input`` (batch, *grid, in_channels) and ``coords`` (batch, *grid, dim), or a batch dict -> prediction.

        ``lead_time`` (batch,): the time between input and output for a model with ``time_conditioning`` "norm" or
        "channel" (required there, refused elsewhere)."""
        if isinstance(input, Mapping):
            if coords is not None:
                raise ValueError("pass either a batch dict or (input, coords), not both")
            missing = [k for k in ("input", "coords") if k not in input]
            if missing:
                raise ValueError(f"the batch dict needs keys 'input' and 'coords'; missing {missing}")
            input, coords, lead_time = input["input"], input["coords"], input.get("lead_time")
        self._check_inputs(input, coords)
        coords = coords.to(input.dtype).expand(*input.shape[:-1], self.spatial_dim)
        mode = self.time_conditioning
        if mode == "none":
            if lead_time is not None:
                raise ValueError(f"{type(self).__name__} is not lead-time conditioned (time_conditioning='none') "
                                 "but was given lead_time")
            return self._forward(input, coords, None)
        if lead_time is None:
            raise ValueError(f"{type(self).__name__} has time_conditioning={mode!r} and needs lead_time (batch,)")
        from ..nn.conditional import lead_time_column

        tau = lead_time_column(lead_time, input.shape[0], input.dtype, input.device)
        if mode == "channel":
            column = tau.view(-1, *([1] * (input.dim() - 1))).expand(*input.shape[:-1], 1)
            return self._forward(torch.cat((input, column), dim=-1), coords, None)
        return self._forward(input, coords, tau[:, 0])

    def _forward(self, x: Tensor, coords: Tensor, lead_time: Optional[Tensor]) -> Tensor:  # pragma: no cover
        raise NotImplementedError
