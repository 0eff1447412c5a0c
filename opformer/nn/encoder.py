"""Encoder layer and stack (Cao 2021, eq. (4) "galerkin" norm scheme and eq. (7) "regular" post-LN scheme; and the
pre-LN scheme of ViT-style transformers, not in the paper)."""

from __future__ import annotations

import numbers
from typing import Optional

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ._higher_order import graph_backward, transforms_active
from .activations import ACTIVATIONS, activation
from .conditional import ConditionalLayerNorm
from .attention import SimpleAttention

__all__ = ["FeedForward", "EncoderLayer", "Encoder", "NORM_SCHEMES", "ACTIVATIONS"]

NORM_SCHEMES = ("galerkin", "regular", "pre")


#: elements of a backward temporary formed at once (a block of rows): 1M floats, 4 MiB in float32
_CHUNK_ELEMENTS = 1 << 20


class _ReluFFNResidual(torch.autograd.Function):
    """y + W2 relu(W1 y + b1) + b2 over the rows of y (..., d): the ReLU in place on the hidden layer, its backward in
    place on the hidden gradient, formed a block of rows at a time (no n x d_ff temporary), the residual inside the
    products; saves y and the hidden layer only."""

    @staticmethod
    def forward(ctx, y, w1, b1, w2, b2):
        y2 = y.reshape(-1, y.shape[-1])
        rows, width = y2.shape[0], w1.shape[0]
        hidden, out = y2.new_empty(rows, width), torch.empty_like(y2)
        chunk = max(1, min(rows, _CHUNK_ELEMENTS // width))
        for s in range(0, rows, chunk):  # a block of rows at a time: each block stays in cache between its passes
            e = min(s + chunk, rows)
            h = torch.addmm(b1, y2[s:e], w1.t(), out=hidden[s:e]).relu_()
            o = torch.add(y2[s:e], b2, out=out[s:e])  # residual and bias in one pass; the product adds onto o itself
            torch.addmm(o, h, w2.t(), out=o)
        ctx.save_for_backward(y, hidden, w1, w2, b1, b2)  # y itself (an input): a graph reaches it in double backward
        ctx.shape = y.shape
        return out.view(y.shape)

    @staticmethod
    def plain(y, w1, b1, w2, b2):
        """The same function by plain differentiable ops (for gradients that are differentiated again)."""
        return y + F.linear(F.relu(F.linear(y, w1, b1)), w2, b2)

    @staticmethod
    def backward(ctx, dout):
        if torch.is_grad_enabled():  # a gradient to be differentiated again (create_graph): see _higher_order
            y, _, w1, w2, b1, b2 = ctx.saved_tensors
            return graph_backward(_ReluFFNResidual.plain, (y, w1, b1, w2, b2), ctx.needs_input_grad, (dout,))
        y, hidden, w1, w2, _, _ = ctx.saved_tensors
        y2 = y.reshape(-1, y.shape[-1])
        d2 = dout.reshape(-1, dout.shape[-1])
        need = ctx.needs_input_grad
        dw2 = torch.mm(d2.t(), hidden) if need[3] else None
        db2 = d2.sum(0) if need[4] else None
        rows, width = hidden.shape
        chunk = max(1, min(rows, _CHUNK_ELEMENTS // width))  # the hidden gradient is formed a block of rows at a time
        dh_buf = hidden.new_empty(chunk, width)
        dw1 = torch.zeros_like(w1) if need[1] else None
        db1 = hidden.new_zeros(width) if need[2] else None
        dy = torch.empty_like(y2) if need[0] else None
        for s in range(0, rows, chunk):
            e = min(s + chunk, rows)
            dh = torch.mm(d2[s:e], w2, out=dh_buf[: e - s])
            torch.ops.aten.threshold_backward.grad_input(dh, hidden[s:e], 0, grad_input=dh)
            if dw1 is not None:
                torch.addmm(dw1, dh.t(), y2[s:e], out=dw1)  # not dw1.addmm_: the FLOP counter skips in-place ops
            if db1 is not None:
                db1 += dh.sum(0)
            if dy is not None:
                torch.addmm(d2[s:e], dh, w1, out=dy[s:e])
        return None if dy is None else dy.view(ctx.shape), dw1, db1, dw2, db2


class FeedForward(nn.Module):
    """Pointwise 2-layer FFN g(.) of eq. (4): Linear(d, d_ff) -> act -> dropout -> Linear(d_ff, d)."""

    def __init__(self, d_model: int, dim_feedforward: int, dropout: float = 0.0, activation_name: str = "relu"):
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(d_model, dim_feedforward),
            activation(activation_name),
            nn.Dropout(dropout),
            nn.Linear(dim_feedforward, d_model),
        )

    def forward(self, x: Tensor) -> Tensor:
        return self.net(x)

    def residual(self, x: Tensor) -> Tensor:
        """x + self(x); for ReLU without active dropout, one fused function (no separate activation and sum)."""
        lin1, act, drop, lin2 = self.net
        if (
            type(act) is nn.ReLU
            and not (drop.training and drop.p > 0)
            and x.dtype in (torch.float32, torch.float64)
            and not torch.is_autocast_enabled(x.device.type)
            and lin1.weight.dtype == x.dtype
            and not torch.compiler.is_exporting()  # its out= products are refused by torch.export's tracing
            and not transforms_active(x)  # torch.func transforms and forward-mode AD take the plain modules
        ):
            return _ReluFFNResidual.apply(x, lin1.weight, lin1.bias, lin2.weight, lin2.bias)
        return x + self.net(x)


def _check_keywords(attn_kwargs: dict) -> None:
    """The extra keywords of an :class:`EncoderLayer` are SimpleAttention's: an unknown one is a ValueError naming
    it and the closest valid keyword."""
    import difflib
    import inspect

    own = set(inspect.signature(EncoderLayer.__init__).parameters) - {"self", "attn_kwargs"}
    valid = (set(inspect.signature(SimpleAttention.__init__).parameters)
             - {"self", "d_model", "n_heads", "kind", "pos_dim", "norm", "dropout", "norm_eps", "conditioned"})
    for key in attn_kwargs:
        if key not in valid:
            close = difflib.get_close_matches(key, sorted(valid | own), n=1)
            hint = f"; did you mean {close[0]!r}?" if close else f"; valid: {sorted(valid | own)}"
            raise ValueError(f"unknown keyword {key!r} for EncoderLayer{hint}")


class EncoderLayer(nn.Module):
    """One attention-based encoder layer.

    ``norm_scheme="galerkin"`` (eq. 4): layer norm only inside the attention (on K,V or Q,K), scale propagates:
        y = x + Drop(Attn(x)),  out = y + Drop(g(y)).
    ``norm_scheme="regular"`` (eq. 7): post-LN, no Q/K/V norm:
        y = LN1(x + Drop(Attn(x))),  out = LN2(y + Drop(g(y))).
    ``norm_scheme="pre"`` (pre-LN, as in ViT; not in the paper): no Q/K/V norm, the branches see normalized inputs
    and the residual stream is never normalized:
        y = x + Drop(Attn(LN1(x))),  out = y + Drop(g(LN2(y))).

    Shapes: ``x`` (batch, n, d_model), ``pos`` (batch, n, pos_dim), ``weights`` (batch, n) -> (batch, n, d_model).
    Extra keyword arguments go to :class:`~opformer.nn.SimpleAttention` (init, eta, delta, scale, chunk_size, ...).
    """

    def __init__(
        self,
        d_model: int,
        n_heads: int = 1,
        kind: str = "galerkin",
        dim_feedforward: Optional[int] = None,
        pos_dim: int = 0,
        norm_scheme: str = "galerkin",
        dropout: float = 0.0,
        attn_dropout: float = 0.0,
        ffn_dropout: Optional[float] = None,
        attn_branch_dropout: Optional[float] = None,
        activation: str = "relu",
        norm_eps: float = 1e-5,
        conditioned: bool = False,
        **attn_kwargs,
    ):
        super().__init__()
        if norm_scheme not in NORM_SCHEMES:
            raise ValueError(f"unknown norm_scheme {norm_scheme!r}; known: {list(NORM_SCHEMES)}")
        _check_keywords(attn_kwargs)
        dim_feedforward = 2 * d_model if dim_feedforward is None else dim_feedforward
        if not isinstance(dim_feedforward, numbers.Integral) or isinstance(dim_feedforward, bool) \
                or dim_feedforward <= 0:
            raise ValueError(f"dim_feedforward must be a positive int (the FFN's hidden width), got "
                             f"{dim_feedforward!r}")
        for name, value in (("dropout", dropout), ("attn_dropout", attn_dropout), ("ffn_dropout", ffn_dropout),
                            ("attn_branch_dropout", attn_branch_dropout)):
            if value is not None and (isinstance(value, bool) or not isinstance(value, numbers.Real)
                                      or not 0.0 <= value < 1.0):
                raise ValueError(f"{name} must be in [0, 1), got {value!r}")
        self.norm_scheme = norm_scheme
        self.attn = SimpleAttention(
            d_model,
            n_heads,
            kind,
            pos_dim,
            norm=(norm_scheme == "galerkin"),
            dropout=attn_dropout,
            norm_eps=norm_eps,
            conditioned=conditioned,
            **attn_kwargs,
        )
        self.ffn = FeedForward(d_model, dim_feedforward, dropout if ffn_dropout is None else ffn_dropout, activation)
        self.drop1 = nn.Dropout(dropout if attn_branch_dropout is None else attn_branch_dropout)  # attention branch
        self.drop2 = nn.Dropout(dropout)  # FFN branch
        self.conditioned = bool(conditioned)
        if norm_scheme in ("regular", "pre"):  # with conditioning these norms are the lead-time conditioned ones
            norm = ConditionalLayerNorm if conditioned else nn.LayerNorm
            self.ln1 = norm(d_model, eps=norm_eps)
            self.ln2 = norm(d_model, eps=norm_eps)

    def forward(self, x: Tensor, pos: Optional[Tensor] = None, weights: Optional[Tensor] = None,
                lead_time: Optional[Tensor] = None) -> Tensor:
        """``lead_time`` (batch,) conditions the norms of a ``conditioned`` layer (ignored otherwise)."""
        if not self.conditioned:
            lead_time = None
        if self.norm_scheme == "pre":
            y = x + self.drop1(self.attn(self._norm(self.ln1, x, lead_time), pos, weights, lead_time=lead_time))
            return y + self.drop2(self.ffn(self._norm(self.ln2, y, lead_time)))
        # without active residual-branch dropout the sums x + Attn(x), y + g(y) are taken inside the fused paths.
        # Whether a dropout is active is its own module's mode, so that one can be switched on in an evaluating
        # model (Monte Carlo dropout; scripts/dropout_gap.py)
        if self.drop1.training and self.drop1.p > 0:
            y = x + self.drop1(self.attn(x, pos, weights, lead_time=lead_time))
        else:
            y = self.attn(x, pos, weights, residual=True, lead_time=lead_time)
        if self.norm_scheme == "regular":
            y = self._norm(self.ln1, y, lead_time)
        out = y + self.drop2(self.ffn(y)) if self.drop2.training and self.drop2.p > 0 else self.ffn.residual(y)
        if self.norm_scheme != "regular":
            return out
        return self._norm(self.ln2, out, lead_time)

    def _norm(self, ln: nn.Module, x: Tensor, lead_time: Optional[Tensor]) -> Tensor:
        """``ln(x)``, conditioned on ``lead_time`` in a ``conditioned`` layer."""
        return ln(x, lead_time) if self.conditioned else ln(x)


class Encoder(nn.Module):
    """A stack of ``num_layers`` independently initialized :class:`EncoderLayer` s sharing ``pos`` and ``weights``."""

    def __init__(self, num_layers: int, d_model: int, n_heads: int = 1, kind: str = "galerkin", **layer_kwargs):
        super().__init__()
        if not isinstance(num_layers, numbers.Integral) or isinstance(num_layers, bool) or num_layers < 1:
            raise ValueError(f"num_layers must be an int >= 1, got {num_layers!r}")
        self.layers = nn.ModuleList(
            [EncoderLayer(d_model, n_heads, kind, **layer_kwargs) for _ in range(num_layers)]
        )

    def forward(self, x: Tensor, pos: Optional[Tensor] = None, weights: Optional[Tensor] = None,
                lead_time: Optional[Tensor] = None) -> Tensor:
        for layer in self.layers:
            x = layer(x, pos, weights, lead_time)
        return x
