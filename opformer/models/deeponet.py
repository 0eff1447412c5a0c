"""DeepONet (Lu et al. 2021): G(a)(x) = sum_k b_k(a) t_k(x) + b_0.

Branch net: an MLP on the input sampled at ``sensors x sensors`` fixed sensor points (the node grid of [0, 1]^2;
the input is interpolated there linearly along each axis from the coordinates of whatever grid it comes on, so
every grid of a function gives the branch the same sensor values up to the interpolation error; see
:func:`at_sensors`).  Trunk net: an MLP on the query point
x in [0, 1]^2, activated at its last layer too.  Each output channel c has its own ``basis`` coefficients and
basis functions: G(a)(x)_c = sum_{k < basis} b_{c,k}(a) t_{c,k}(x) + b_{0,c}.  With ``time_conditioning="norm"``
the branch coefficients get a lead-time scale and shift (:class:`~opformer.nn.ConditionalAffine`, the identity at
initialisation); with "channel" the lead time is an extra input channel of the branch.

Resolution rules: any H x W input grid with H, W >= 2 (it is resampled to the sensors).  The output is evaluated at
the coordinates of the input grid, or at the points of the ``out_size x out_size`` grid of the input grid's kind
(periodic j / m, cell (j + 1/2) / m, node j / (m - 1): :func:`~opformer.models._grid2d.output_points`), and
:meth:`DeepONet.query` evaluates it at any points.
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar, Optional

import torch
from torch import Tensor, nn

from ..nn.activations import ACTIVATIONS, activation
from ..nn.conditional import ConditionalAffine, lead_time_column
from ._grid2d import check_common, interp_axis, output_points
from .base import _CHANNELS_HELP, OperatorModel, _choice, _positive_int, _time_help

__all__ = ["DeepONetConfig", "DeepONet"]


@dataclasses.dataclass(frozen=True)
class DeepONetConfig:
    """DeepONet.  ``sensors`` per axis, ``basis`` functions per output channel, branch and trunk MLPs of
    ``*_layers`` hidden layers of ``*_width``, ``activation``, ``out_size``."""

    in_channels: int = 1
    out_channels: int = 1
    sensors: int = 16
    basis: int = 64
    branch_width: int = 128
    branch_layers: int = 2
    trunk_width: int = 128
    trunk_layers: int = 3
    activation: str = "gelu"
    out_size: Optional[int] = None
    time_conditioning: str = "none"

    #: one-line help of each field (``opformer train PRESET --help``)
    FIELD_HELP: ClassVar[dict[str, str]] = {
        **_CHANNELS_HELP,
        "sensors": "sensor points per axis: the branch net sees the input resampled (bilinear) to this node grid",
        "basis": "basis functions (trunk outputs and branch coefficients) per output channel",
        "branch_width": "hidden width of the branch MLP (on the input at the sensors)",
        "branch_layers": "hidden layers of the branch MLP",
        "trunk_width": "hidden width of the trunk MLP (on the query point)",
        "trunk_layers": "hidden layers of the trunk MLP",
        "activation": "activation of both MLPs: relu, gelu or silu",
        "out_size": "side of a square output grid whose points the output is evaluated at (null: the input grid)",
        "time_conditioning": _time_help("a lead-time scale and shift of the branch coefficients"),
    }

    def __post_init__(self):
        check_common(self)
        for name in ("basis", "branch_width", "branch_layers", "trunk_width", "trunk_layers"):
            _positive_int(name, getattr(self, name))
        if not isinstance(self.sensors, int) or isinstance(self.sensors, bool) or self.sensors < 2:
            raise ValueError(f"sensors must be an int >= 2, got {self.sensors!r}")
        _choice("activation", self.activation, ACTIVATIONS)


def at_sensors(x: Tensor, coords: Tensor, sensors: int) -> Tensor:
    """``x`` (batch, H, W, C) on the grid of ``coords`` (batch or 1, H, W, 2; the first sample's) -> its values at
    the ``sensors x sensors`` node points j / (sensors - 1) of [0, 1]^2, (batch, sensors, sensors, C), whatever the
    grid (node, cell or periodic, any size): linear interpolation along each axis between the grid's coordinates;
    a periodic axis (j / n, j < n) wraps around to 1, which is 0, and beyond the outermost points of any other
    axis the end values are held (as :func:`opformer.tasks.artifact.resample_grid` does).  No step waits for the
    device (CUDA graphs can capture it)."""
    p = torch.linspace(0, 1, sensors, dtype=coords.dtype, device=coords.device)
    return interp_axis(interp_axis(x, 1, coords[0, :, 0, 0], p), 2, coords[0, 0, :, 1], p)


def _mlp(n_in: int, width: int, layers: int, n_out: int, act: str, last_act: bool) -> nn.Sequential:
    mods, n = [], n_in
    for _ in range(layers):
        mods += [nn.Linear(n, width), activation(act)]
        n = width
    mods.append(nn.Linear(n, n_out))
    if last_act:
        mods.append(activation(act))
    return nn.Sequential(*mods)


class DeepONet(OperatorModel):
    """DeepONet on a 2D grid: ``input`` (batch, H, W, in_channels), ``coords`` (batch, H, W, 2) ->
    (batch, H, W, out_channels) at ``coords``, or on the ``out_size`` grid; :meth:`query` at any points."""

    name = "deeponet"
    config_class = DeepONetConfig
    spatial_dim = 2

    def __init__(self, config: Optional[DeepONetConfig] = None, **kwargs):
        super().__init__(config, **kwargs)
        cfg = self.config
        n_basis = cfg.basis * cfg.out_channels
        self.branch = _mlp(self.lift_channels * cfg.sensors**2, cfg.branch_width, cfg.branch_layers, n_basis,
                           cfg.activation, last_act=False)
        self.trunk = _mlp(2, cfg.trunk_width, cfg.trunk_layers, n_basis, cfg.activation, last_act=True)
        self.bias = nn.Parameter(torch.zeros(cfg.out_channels))
        self.cond = ConditionalAffine(n_basis) if cfg.time_conditioning == "norm" else None

    def _check_grid(self, grid: tuple[int, ...]) -> None:
        if min(grid) < 2:
            raise ValueError(f"DeepONet needs an input grid of at least 2 x 2 to resample to its sensors, got {grid}")

    def coefficients(self, x: Tensor, coords: Tensor, lead_time: Optional[Tensor] = None) -> Tensor:
        """Branch coefficients b(a): x (batch, H, W, lift_channels) on the grid of ``coords`` (batch or 1, H, W, 2)
        -> (batch, out_channels, basis)."""
        cfg = self.config
        b = self.branch(at_sensors(x, coords, cfg.sensors).reshape(x.shape[0], -1))
        if self.cond is not None:
            b = self.cond(b, lead_time)
        return b.view(x.shape[0], cfg.out_channels, cfg.basis)

    def evaluate(self, coef: Tensor, points: Tensor) -> Tensor:
        """sum_k b_k t_k(points) + b_0: coef (batch, out, basis), points (batch or 1, *shape, 2) -> (batch, *shape,
        out)."""
        t = self.trunk(points.to(coef.dtype))
        t = t.view(*t.shape[:-1], self.config.out_channels, self.config.basis)
        shape = (coef.shape[0],) + (1,) * (t.dim() - 3) + coef.shape[1:]
        return (t * coef.view(shape)).sum(-1) + self.bias

    def _forward(self, x: Tensor, coords: Tensor, lead_time: Optional[Tensor]) -> Tensor:
        size = self.config.out_size
        points = coords if size is None or (size, size) == tuple(coords.shape[1:3]) else output_points(coords, size)
        return self.evaluate(self.coefficients(x, coords, lead_time), points)

    def query(self, input: Tensor, coords: Tensor, points: Tensor, lead_time: Optional[Tensor] = None) -> Tensor:
        """The output at arbitrary points: ``input`` (batch, H, W, in), ``coords`` its grid (batch or 1, H, W, 2),
        ``points`` (batch or 1, n, 2) in [0, 1]^2 -> (batch, n, out_channels)."""
        self._check_inputs(input, coords)
        if points.dim() < 2 or points.shape[-1] != 2 or points.shape[0] not in (1, input.shape[0]):
            raise ValueError(f"points must have shape (batch or 1, n, 2), got {tuple(points.shape)}")
        mode, tau = self.time_conditioning, None
        if (mode == "none") != (lead_time is None):
            raise ValueError(f"DeepONet with time_conditioning={mode!r} "
                             + ("does not take lead_time" if mode == "none" else "needs lead_time (batch,)"))
        if mode != "none":
            tau = lead_time_column(lead_time, input.shape[0], input.dtype, input.device)
        if mode == "channel":
            input = torch.cat((input, tau.view(-1, 1, 1, 1).expand(*input.shape[:-1], 1)), dim=-1)
        return self.evaluate(self.coefficients(input, coords, tau[:, 0] if mode == "norm" else None), points)
