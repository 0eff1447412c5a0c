"""Attention kernels and the multi-head ``SimpleAttention`` layer (Cao 2021, section 4, eqs. (5)-(6), (17)).

Every kernel is a small pure function with one signature::

    kernel(q, k, v, *, weights=None, dropout_p=0.0, scale=None) -> z

with ``q``, ``k``, ``v`` of shape ``(batch, heads, n, d)`` and ``weights`` the quadrature weights of the points,
shape ``(batch, n)``, summing to 1 for a probability-like measure (``None`` means the uniform weight ``1/n`` of a
uniform grid, the paper's ``h``).  A new kind of attention is one function plus one entry in :data:`KERNELS`.
"""

from __future__ import annotations

import math
import numbers
from typing import Callable, Optional

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ._higher_order import graph_backward, transforms_active
from .conditional import ConditionalAffine
from torch.utils.checkpoint import checkpoint

__all__ = [
    "galerkin_attention",
    "fourier_attention",
    "softmax_attention",
    "linear_attention",
    "KERNELS",
    "FOURIER_ORDERS",
    "fourier_linear_order",
    "NORMALIZED",
    "register_kernel",
    "SimpleAttention",
]

Kernel = Callable[..., Tensor]


def _fp32_if_low(t: Tensor) -> Tensor:
    """Upcast half/bfloat16 to float32 so that sums over the n points accumulate in float32."""
    return t.float() if t.dtype in (torch.bfloat16, torch.float16) else t


def _check_weights(weights: Tensor, k: Tensor) -> Tensor:
    """Weights (batch, n) broadcast to k's leading batch; returns (batch, 1, n, 1)."""
    return weights.to(k.dtype if k.dtype not in (torch.bfloat16, torch.float16) else torch.float32)[:, None, :, None]


def galerkin_attention(
    q: Tensor, k: Tensor, v: Tensor, *, weights: Optional[Tensor] = None, dropout_p: float = 0.0, scale=None
) -> Tensor:
    """Galerkin-type attention z = Q (K^T V) / n (eq. 6): a Petrov-Galerkin projection, cost O(n d^2).

    With quadrature weights w, K^T V / n becomes K^T diag(w) V.  The d x d product is accumulated in float32 when
    the inputs are bfloat16/float16.  ``dropout_p`` acts on the d x d matrix K^T V / n.
    """
    n = k.shape[-2]
    kf, vf = _fp32_if_low(k), _fp32_if_low(v)
    with torch.autocast(k.device.type, enabled=False):  # under bf16 autocast the sum over n stays in float32
        if weights is None:
            kv = torch.matmul(kf.transpose(-2, -1), vf) / n
        else:
            kv = torch.matmul((kf * _check_weights(weights, k)).transpose(-2, -1), vf)
    if scale is not None:
        kv = kv * scale
    if dropout_p > 0.0:
        kv = F.dropout(kv, p=dropout_p, training=True)
    return torch.matmul(q, kv.to(q.dtype))


#: association orders of the fourier kind (see :func:`fourier_attention`)
FOURIER_ORDERS = ("auto", "quadratic", "linear")


def fourier_linear_order(n_q: int, n_k: int, d: int, d_v: int, dropout_p: float = 0.0, order: str = "auto") -> bool:
    """Whether fourier attention with these sizes is evaluated as Q (K^T V) instead of (Q K^T) V."""
    if order not in FOURIER_ORDERS:
        raise ValueError(f"order must be one of {FOURIER_ORDERS}, got {order!r}")
    if order == "quadratic":
        return False
    if order == "linear":
        if dropout_p > 0.0:
            raise ValueError(
                f"fourier attention with order='linear' cannot apply dropout to the n x n score matrix "
                f"(dropout_p={dropout_p}); use order='auto' or 'quadratic', or dropout_p=0"
            )
        return True
    if dropout_p > 0.0:  # score dropout needs the explicit matrix
        return False
    return n_k * d * d_v + n_q * d * d_v < n_q * n_k * (d + d_v)  # multiply-adds of the two association orders


def _fourier_linear_order(q: Tensor, k: Tensor, v: Tensor, dropout_p: float, order: str) -> bool:
    return fourier_linear_order(q.shape[-2], k.shape[-2], q.shape[-1], v.shape[-1], dropout_p, order)


def fourier_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    *,
    weights: Optional[Tensor] = None,
    dropout_p: float = 0.0,
    scale=None,
    order: str = "auto",
) -> Tensor:
    """Fourier-type attention z = (Q K^T) V / n (eq. 5): a Nystrom quadrature of a learned kernel.

    There is no softmax, so the product is associative: (Q K^T) V = Q (K^T V).  ``order="auto"`` (default) evaluates
    the cheaper of the two, which for n > d is Q (K^T V) at cost O(n d^2) and memory O(n d) -- the same function,
    equal up to round-off -- unless dropout on the n x n score matrix is asked for, which needs the explicit
    matrix.  ``order="quadratic"`` always forms the n x n matrix (cost O(n^2 d), the paper's accounting; use
    ``SimpleAttention(chunk_size=...)`` to bound its memory by O(n * chunk)); ``order="linear"`` always reassociates.
    What distinguishes the Fourier type from the Galerkin type is then only where the layer norms sit (Q, K vs K, V).

    The scalar factors (``scale``, 1/n) and the quadrature weights act on the columns of the score matrix, so they
    are applied to V instead (s diag(w) V = s (w V)): an O(n d) product instead of O(n^2) passes over the scores.
    Dropout commutes with that column scaling, so the result is the same.  No mask is drawn when ``dropout_p = 0``.
    """
    if _fourier_linear_order(q, k, v, dropout_p, order):
        return galerkin_attention(q, k, v, weights=weights, scale=scale)
    n = k.shape[-2]
    c = 1.0 if scale is None else float(scale)
    if weights is None:
        v = v * (c / n)
    else:
        w = weights.to(v.dtype)[:, None, :, None]
        v = v * (w * c if c != 1.0 else w)
    s = torch.matmul(q, k.transpose(-2, -1))
    if dropout_p > 0.0:
        s = F.dropout(s, p=dropout_p, training=True)
    return torch.matmul(s, v)


def _fourier_quadratic(q: Tensor, k: Tensor, v: Tensor, *, weights=None, dropout_p: float = 0.0, scale=None):
    return fourier_attention(q, k, v, weights=weights, dropout_p=dropout_p, scale=scale, order="quadratic")


def _log_weights(weights: Tensor, dtype: torch.dtype) -> Tensor:
    """log w as a bias in ``dtype`` for the softmax kinds, a point of weight <= 0 (padding) mapped to half the most
    negative finite value (room for the score: the sum stays finite), so that its share exp(s + log w) is exactly 0
    whatever its score s.  (A clamp of w to the smallest positive value instead left a share e^(s_pad - 87) in
    float32 -- e^(s_pad - 9.7) for float16 weights, 2e-3 at 55 zero-padded points -- and a padded point of large
    score outweighed the real ones.)  The log is taken in at least float32; a row of weights all 0 stays finite."""
    wf = weights if weights.dtype in (torch.float32, torch.float64) else weights.float()
    logw = torch.log(wf.clamp_min(torch.finfo(wf.dtype).tiny)).to(dtype)
    return logw.masked_fill(wf <= 0, torch.finfo(dtype).min / 2)


def softmax_attention(
    q: Tensor, k: Tensor, v: Tensor, *, weights: Optional[Tensor] = None, dropout_p: float = 0.0, scale=None
) -> Tensor:
    """Scaled dot-product attention softmax(Q K^T / sqrt(d)) V, the ST baseline (PyTorch's fused kernel).

    Quadrature weights enter as a log-weight bias, softmax(s + log w) = w e^s / sum(w e^s), which reduces to the
    plain softmax for uniform weights.  A point of weight <= 0 (padding) gets no share at all, whatever its score.

    Under ``torch.func`` transforms and forward-mode AD the math kernel is taken (torch's fused CPU kernel has no
    forward derivative).  Its backward cannot be differentiated again either: for gradients of gradients run the
    model inside ``torch.nn.attention.sdpa_kernel(SDPBackend.MATH)``.
    """
    mask = None
    if weights is not None:
        mask = _log_weights(weights, q.dtype)[:, None, None, :]
    if transforms_active(q, k, v):
        from torch.nn.attention import SDPBackend, sdpa_kernel

        with sdpa_kernel(SDPBackend.MATH):
            return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout_p, scale=scale)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout_p, scale=scale)


def linear_attention(
    q: Tensor, k: Tensor, v: Tensor, *, weights: Optional[Tensor] = None, dropout_p: float = 0.0, scale=None
) -> Tensor:
    """Efficient attention of Shen et al. (LT baseline): softmax_features(Q) (softmax_positions(K)^T V).

    The softmax over positions already normalizes the sum over the points, so unlike the reference code there is no
    extra 1/n (which would make the output shrink with resolution).  Weights enter the position softmax as log w; a
    point of weight <= 0 (padding) gets no share at all, whatever its key.
    """
    qs = torch.softmax(_fp32_if_low(q), dim=-1)
    kf = _fp32_if_low(k)
    if scale is not None:
        kf = kf * scale
    if weights is not None:
        kf = kf + _log_weights(weights, kf.dtype)[:, None, :, None]
    ks = torch.softmax(kf, dim=-2)
    kv = torch.matmul(ks.transpose(-2, -1), _fp32_if_low(v))
    if dropout_p > 0.0:
        kv = F.dropout(kv, p=dropout_p, training=True)
    return torch.matmul(qs, kv).to(q.dtype)


#: kind -> kernel function
KERNELS: dict[str, Kernel] = {
    "galerkin": galerkin_attention,
    "fourier": fourier_attention,
    "softmax": softmax_attention,
    "linear": linear_attention,
}
#: kind -> which of Q, K, V get the per-head layer norm in the "galerkin" norm scheme
NORMALIZED: dict[str, tuple[str, ...]] = {
    "galerkin": ("k", "v"),
    "fourier": ("q", "k"),
    "softmax": ("q", "k"),
    "linear": ("k", "v"),
}
#: kinds whose score matrix is n x n (chunking applies)
QUADRATIC = {"fourier", "softmax"}
#: the kinds of this module: their layers take fused paths, so register_kernel never replaces them
BUILTIN_KINDS = frozenset(KERNELS)


def register_kernel(kind: str, kernel: Kernel, normalized: tuple[str, ...] = (), quadratic: bool = False) -> None:
    """Register a new attention kind: one function with the kernel signature, and which of q/k/v to layer-norm."""
    if kind in BUILTIN_KINDS:
        raise ValueError(f"{kind!r} is a built-in attention kind (built in: {sorted(BUILTIN_KINDS)}); register "
                         f"your kernel under another name")
    if not callable(kernel):
        raise ValueError(f"kernel must be a function kernel(q, k, v, *, weights, dropout_p, scale), got {kernel!r}")
    if not set(normalized) <= {"q", "k", "v"}:
        raise ValueError(f"normalized must be a subset of ('q', 'k', 'v'), got {normalized!r}")
    _try_kernel(kind, kernel)
    KERNELS[kind] = kernel
    NORMALIZED[kind] = tuple(normalized)
    if quadratic:
        QUADRATIC.add(kind)


def _try_kernel(kind: str, kernel: Kernel) -> None:
    """Call a kernel being registered once on small inputs as a layer calls it (q, k, v of shape (batch, heads, n,
    d), weights (batch, n), keywords weights/dropout_p/scale), so that a wrong signature or output shape is refused
    here rather than at a model's first forward."""
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 3, 5, 4, generator=g) for _ in range(3))
    for weights in (None, torch.full((2, 5), 0.2)):
        try:
            z = kernel(q, k, v, weights=weights, dropout_p=0.0, scale=None)
        except TypeError as exc:
            raise ValueError(f"kernel of kind {kind!r} must take kernel(q, k, v, *, weights, dropout_p, scale); "
                             f"calling it so failed: {exc}") from None
        if not isinstance(z, Tensor) or z.shape != v.shape:
            got = tuple(z.shape) if isinstance(z, Tensor) else type(z).__name__
            raise ValueError(f"kernel of kind {kind!r} must return a tensor shaped like v (batch, heads, n, d_v): "
                             f"for q, k, v of shape (2, 3, 5, 4) it returned {got}")


def _chunked(kernel: Kernel, chunk: int, q: Tensor, k: Tensor, v: Tensor, weights, dropout_p, scale) -> Tensor:
    """Run a quadratic kernel over query chunks; each chunk is recomputed in backward, so memory is O(n * chunk)."""
    outs = []
    for start in range(0, q.shape[-2], chunk):
        qc = q[..., start : start + chunk, :]
        if torch.is_grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad):
            outs.append(
                checkpoint(
                    lambda a, b, c: kernel(a, b, c, weights=weights, dropout_p=dropout_p, scale=scale),
                    qc,
                    k,
                    v,
                    use_reentrant=False,
                )
            )
        else:
            outs.append(kernel(qc, k, v, weights=weights, dropout_p=dropout_p, scale=scale))
    return torch.cat(outs, dim=-2)


# --- the fused Galerkin/linear layer path -----------------------------------------------------------------------
#
# With coordinates p appended to every head, K_a = [p, K~], V_a = [p, V~] and Q_a = [p, Q], the Galerkin layer is
#     out = sum_h Q_a,h M_h W_o,h^T + b_o,   M_h = K_a,h^T diag(w) V_a,h  (times the scale, possibly dropped out),
# and every factor of n on the right is a (p + d) x (p + d) or d x d_model matrix.  So the n-sized work reduces to:
#   * the raw moments of the normalized K^, V^ (K~ = K^ diag(gamma) + 1 beta^T: the per-head affine is folded into
#     the small matrices, as are the coordinate blocks [p, 1]^T diag(w) [p, 1] -- nothing is concatenated);
#   * one product out = x C + p B + c with C = W_q^T stack_h(M_h W_o,h^T) (the query projection and the output
#     projection folded into one d_model x d_model matrix per batch element: Q and the heads are never formed).
# The per-head layer norm is taken about the mean removed in weight space: K - mean_d(K) = x (P W_k)^T + P b_k with
# P = I - 11^T/d per head, so only the root-mean-square pass remains, and its backward needs no mean either (the
# centring P annihilates constants per head).  Two custom autograd functions hold the n-sized work; everything
# between them (the affine maps, scale, dropout, W_q, W_o) is ordinary autograd on small matrices.


def _head_gram(a: Tensor, b: Tensor, out: Tensor) -> Tensor:
    """sum_n a[n, h]^T b[n, h] per head into ``out``: (n, heads, d1), (n, heads, d2) -> (heads, d1, d2): one batched
    product over the heads on the strided views (as fast as a product per head at n = 8192, 2-4 % faster for the
    whole layer at n = 289, batch 16, where there are many small ones)."""
    return torch.bmm(a.permute(1, 2, 0), b.permute(1, 0, 2), out=out)


def _head_apply(a: Tensor, m: Tensor) -> Tensor:
    """a[., n, h] @ m[., h] per batch element and head: (batch, n, heads, d1), (batch, heads, d1, d2) ->
    (batch, n, heads, d2), written in that layout (per batch element one batched product over the heads, written
    into the strided rows of each head)."""
    out = a.new_empty(a.shape[0], a.shape[1], a.shape[2], m.shape[3])
    for i in range(a.shape[0]):
        torch.bmm(a[i].transpose(0, 1), m[i], out=out[i].transpose(0, 1))
    return out


def _rms_rstd(y: Tensor, eps: float) -> Tensor:
    """1 / sqrt(mean_d(y^2) + eps) over the last dim of a zero-mean y, keepdim (the layer norm's rstd)."""
    ss = torch.linalg.vector_norm(y, dim=-1, keepdim=True)
    return ss.square_().div_(y.shape[-1]).add_(eps).rsqrt_()


def _plain_rms(y: Tensor, eps: Optional[float]) -> Tensor:
    """:func:`_rms_rstd` times y by differentiable ops (y itself when ``eps`` is None): the plain forms' norm."""
    return y if eps is None else y * torch.rsqrt(y.square().mean(-1, keepdim=True) + eps)


def _plain_projections(x: Tensor, wk, bk, wv, bv, heads: int, eps: Optional[float]) -> tuple[Tensor, Tensor]:
    """K^, V^ (batch, n, heads, d) by differentiable ops, as :func:`_projected_blocks` forms them."""
    b, n, _ = x.shape
    return (_plain_rms(F.linear(x, wk, bk).view(b, n, heads, -1), eps),
            _plain_rms(F.linear(x, wv, bv).view(b, n, heads, -1), eps))


def _rms_backward_(g: Tensor, y: Tensor, rstd: Tensor) -> Tensor:
    """In place: the gradient of y = rstd * y_c w.r.t. the zero-mean y_c, g <- rstd (g - y <g, y> / d)."""
    d = g.shape[-1]
    dot = torch.linalg.vecdot(g, y).unsqueeze(-1)  # row-wise <g, y>, (..., 1)
    return g.addcmul_(y, dot, value=-1.0 / d).mul_(rstd)


# Accumulating products are written ``torch.addmm(c, a, b, out=c)`` rather than ``c.addmm_(a, b)``: the same BLAS
# call, but the in-place op is a different operator that torch.utils.flop_counter does not count.

#: elements of an n-sized temporary formed at once (a block of rows of one batch element, or a group of whole batch
#: elements when n is small): 256K, 1 MiB in float32, about a core's L2 cache (1M was 2-3 % slower at n = 8192 on a
#: Zen 4, docs/benchmarks.md)
_CHUNK_ELEMENTS = 1 << 18


def _row_blocks(x: Tensor, whole: bool = False):
    """Blocks of about :data:`_CHUNK_ELEMENTS` elements of x (batch, n, d) as (first batch index, end batch index,
    first row, end row): a group of whole batch elements where n rows fit in a block, else blocks of rows of one
    batch element (``whole=True``: one whole batch element however large).  The forward passes go a block at a
    time so that each block stays in cache between the passes over it; the backward forms its temporaries a block
    at a time."""
    b, n, dm = x.shape
    rows = max(1, _CHUNK_ELEMENTS // max(dm, 1))
    if n <= rows or whole:
        per = max(1, rows // max(n, 1))
        for i in range(0, b, per):
            yield i, min(i + per, b), 0, n
    else:
        for i in range(b):
            for s in range(0, n, rows):
                yield i, i + 1, s, min(s + rows, n)


def _rows2d(t: Tensor, i0: int, i1: int, s: int, e: int) -> Tensor:
    """The rows t[i0:i1, s:e] of a (batch, n, ...) tensor as one (rows, -1) matrix: a view of a contiguous t (a block
    is whole batch elements or rows of one), so products may write into it; a copy of another t (read only)."""
    return t[i0:i1, s:e].reshape((i1 - i0) * (e - s), -1)


def _projected_blocks(x: Tensor, wk: Tensor, bk: Tensor, wv: Tensor, bv: Tensor, heads: int, eps: Optional[float]):
    """K^ = rms(x W_k^T + b_k) and V^ = rms(x W_v^T + b_v) per head (``eps=None``: the raw projections), a group of
    whole batch elements at a time, so that each block stays in cache for the caller's passes over it.  Returns
    ``(k, v, rk, rv, blocks)``: k, v (batch, n, d_model) and the rstd's (batch, n, heads, 1), filled as the iterator
    ``blocks`` of (first batch index, end batch index, K^ block, V^ block) ((bb, n, heads, d) views) is consumed."""
    b, n, dm = x.shape
    d = dm // heads
    k, v = x.new_empty(b, n, dm), x.new_empty(b, n, dm)
    rk = rv = None
    if eps is not None:
        rk, rv = x.new_empty(b, n, heads, 1), x.new_empty(b, n, heads, 1)

    def blocks():
        for blk in _row_blocks(x, whole=True):
            i0, i1 = blk[:2]
            xs = _rows2d(x, *blk)
            kb = torch.addmm(bk, xs, wk.t(), out=_rows2d(k, *blk)).view(i1 - i0, n, heads, d)
            vb = torch.addmm(bv, xs, wv.t(), out=_rows2d(v, *blk)).view(i1 - i0, n, heads, d)
            if eps is not None:
                for t, r in ((kb, rk), (vb, rv)):
                    r[i0:i1] = _rms_rstd(t, eps)
                    t.mul_(r[i0:i1])
            yield i0, i1, kb, vb

    return k, v, rk, rv, blocks()


def _few_columns_t(cols: Tensor, w: Optional[Tensor]) -> Tensor:
    """(w * cols)^T as a (batch, m, n) tensor whose m is padded with zero rows to a multiple of 4: the n-long products
    of a few columns against a (n, d_model) block run 1.2-1.8x faster with 4 rows than with 2 or 3 (MKL, one and
    two threads, Zen 4; the padded rows' results are dropped)."""
    b, n, m = cols.shape
    out = cols.new_zeros(b, -(-m // 4) * 4, n)
    out[:, :m] = cols.transpose(1, 2) if w is None else (cols * w[..., None]).transpose(1, 2)
    return out


def _few_rows_product(a: Tensor, b: Tensor, out: Tensor) -> Tensor:
    """``a @ b`` into ``out`` for a few rows of a: (batch, m, n) @ (batch, n, d).  With several threads and one long n,
    the sum over n goes as a batch of chunks, then added up: MKL runs a product of so few rows on one thread (0.44 ms
    against 0.24 ms for 4 x 8192 by 8192 x 128 with two threads, Zen 4, operands from memory; level with one)."""
    bb, m, n = a.shape
    chunks = 1
    if bb == 1 and torch.get_num_threads() > 1:
        chunks = next((c for c in (16, 8, 4, 2) if n % c == 0 and n // c >= 512), 1)
    if chunks == 1:
        return torch.bmm(a, b, out=out)
    part = torch.bmm(a[0].view(m, chunks, n // chunks).transpose(0, 1), b[0].view(chunks, n // chunks, b.shape[-1]))
    return torch.sum(part, 0, keepdim=True, out=out)


class _ProjectionGrads:
    """Accumulates, block of rows by block, the gradients of K = x W_k^T + b_k, V = x W_v^T + b_v from dK, dV:
    dx (written block by block into one tensor), dW_k, db_k, dW_v, db_v (as ``needs_input_grad`` asks)."""

    def __init__(self, x: Tensor, wk: Tensor, wv: Tensor, need):
        self.x, self.wk, self.wv = x, wk, wv
        self.dx = x.new_empty(x.shape) if need[0] else None
        self.dwk = torch.zeros_like(wk) if need[1] else None
        self.dbk = x.new_zeros(wk.shape[0]) if need[2] else None
        self.dwv = torch.zeros_like(wv) if need[3] else None
        self.dbv = x.new_zeros(wv.shape[0]) if need[4] else None

    def add(self, blk: tuple[int, int, int, int], gk: Tensor, gv: Tensor) -> None:
        m = (blk[1] - blk[0]) * (blk[3] - blk[2])
        gk, gv = gk.reshape(m, -1), gv.reshape(m, -1)
        xs = _rows2d(self.x, *blk)
        if self.dx is not None:
            dx = torch.mm(gk, self.wk, out=_rows2d(self.dx, *blk))
            torch.addmm(dx, gv, self.wv, out=dx)
        for dw, db, g in ((self.dwk, self.dbk, gk), (self.dwv, self.dbv, gv)):
            if dw is not None:
                torch.addmm(dw, g.t(), xs, out=dw)
            if db is not None:
                db += g.sum(0)

    def result(self):
        return self.dx, self.dwk, self.dbk, self.dwv, self.dbv


class _KVMoments(torch.autograd.Function):
    """x -> raw moments of K^ = rms(x W_k^T + b_k), V^ = rms(x W_v^T + b_v) per head, with the coordinates and ones.

    Forward returns ``r_kv`` (batch, heads, d, d) = sum_n w K^_h^T V^_h, and ``r_1k``, ``r_1v`` (batch, p+1, d_model) =
    sum_n w [p, 1]^T K^ (resp. V^), with w the quadrature weights (``None``: 1, the caller divides by n).  The
    weights W_k, W_v must already be centred per head when ``eps`` is given (the rms normalization assumes
    zero-mean rows); ``eps=None`` skips the normalization.  Saves x, K^, V^ and the two rstd's (n * heads each).
    """

    @staticmethod
    def forward(ctx, x, wk, bk, wv, bv, pos1, w, heads: int, eps: Optional[float]):
        b, n, dm = x.shape
        d = dm // heads
        k, v, rk, rv, blocks = _projected_blocks(x, wk, bk, wv, bv, heads, eps)
        r_kv = x.new_empty(b, heads, d, d)
        p1w = _few_columns_t(pos1, w)
        r_1k, r_1v = x.new_empty(b, p1w.shape[1], dm), x.new_empty(b, p1w.shape[1], dm)
        for i0, i1, kb, vb in blocks:
            kw = kb if w is None else kb * w[i0:i1, :, None, None]
            for i in range(i1 - i0):
                _head_gram(kw[i], vb[i], r_kv[i0 + i])
            del kw
            _few_rows_product(p1w[i0:i1], kb.view(i1 - i0, n, dm), r_1k[i0:i1])
            _few_rows_product(p1w[i0:i1], vb.view(i1 - i0, n, dm), r_1v[i0:i1])
        r_1k, r_1v = r_1k[:, : pos1.shape[-1]], r_1v[:, : pos1.shape[-1]]
        k, v = k.view(b, n, heads, d), v.view(b, n, heads, d)
        ctx.save_for_backward(x, wk, wv, k, v, rk, rv, pos1, w, bk, bv)
        ctx.heads, ctx.eps = heads, eps
        return r_kv, r_1k, r_1v

    @staticmethod
    def plain(x, wk, bk, wv, bv, pos1, w, heads: int, eps: Optional[float]):
        """The same function by plain differentiable ops (for gradients that are differentiated again)."""
        b, n, dm = x.shape
        k, v = _plain_projections(x, wk, bk, wv, bv, heads, eps)
        kw = k if w is None else k * w[..., None, None]
        p1w = (pos1 if w is None else pos1 * w[..., None]).transpose(1, 2)
        return torch.einsum("bnhd,bnhe->bhde", kw, v), p1w @ k.reshape(b, n, dm), p1w @ v.reshape(b, n, dm)

    @staticmethod
    def backward(ctx, d_kv, d_1k, d_1v):
        if torch.is_grad_enabled():  # a gradient to be differentiated again (create_graph): see _higher_order
            x, wk, wv, _, _, _, _, pos1, w, bk, bv = ctx.saved_tensors
            return graph_backward(_KVMoments.plain, (x, wk, bk, wv, bv, pos1, w, ctx.heads, ctx.eps),
                                  ctx.needs_input_grad, (d_kv, d_1k, d_1v))
        x, wk, wv, k, v, rk, rv, pos1, w, _, _ = ctx.saved_tensors
        d_kt, d_kv = d_kv.transpose(-1, -2).contiguous(), d_kv.contiguous()
        acc = _ProjectionGrads(x, wk, wv, ctx.needs_input_grad)
        for blk in _row_blocks(x):
            i0, i1, s, e = blk
            rows = (slice(i0, i1), slice(s, e))
            gk = _head_apply(v[rows], d_kt[i0:i1])  # dK^ = V^ dR^T per head (dV^ = K^ dR)
            gv = _head_apply(k[rows], d_kv[i0:i1])
            for g, this, d_1, r in ((gk, k, d_1k, rk), (gv, v, d_1v, rv)):
                g3 = g.view(i1 - i0, e - s, -1)
                torch.baddbmm(g3, pos1[rows], d_1[i0:i1], out=g3)
                if w is not None:
                    g.mul_(w[rows][..., None, None])
                if ctx.eps is not None:
                    _rms_backward_(g, this[rows], r[rows])
            acc.add(blk, gk, gv)
        return (*acc.result(), None, None, None, None)


class _LowRankOut(torch.autograd.Function):
    """out = x C + p B + c per batch element: x (batch, n, d_in), C (batch, d_in, d_out), p (batch, n, p),
    B (batch, p, d_out), c (batch, d_out); one product and an in-place rank-p update, saves x and p only."""

    @staticmethod
    def forward(ctx, x, c_mat, c_vec, pos, b_mat):
        out = torch.baddbmm(c_vec.unsqueeze(1), x, c_mat)
        if pos.shape[-1] > 0:
            torch.baddbmm(out, pos, b_mat, out=out)
        ctx.save_for_backward(x, c_mat, pos, c_vec, b_mat)
        return out

    @staticmethod
    def plain(x, c_mat, c_vec, pos, b_mat):
        """The same function by plain differentiable ops (for gradients that are differentiated again)."""
        out = torch.baddbmm(c_vec.unsqueeze(1), x, c_mat)
        return out + pos @ b_mat if pos.shape[-1] > 0 else out

    @staticmethod
    def backward(ctx, dout):
        if torch.is_grad_enabled():  # a gradient to be differentiated again (create_graph): see _higher_order
            x, c_mat, pos, c_vec, b_mat = ctx.saved_tensors
            return graph_backward(_LowRankOut.plain, (x, c_mat, c_vec, pos, b_mat), ctx.needs_input_grad, (dout,))
        x, c_mat, pos, _, _ = ctx.saved_tensors
        need = ctx.needs_input_grad
        dx = torch.bmm(dout, c_mat.transpose(1, 2)) if need[0] else None
        dc_mat = torch.bmm(x.transpose(1, 2), dout) if need[1] else None
        dc_vec = dout.sum(1) if need[2] else None
        db = torch.bmm(pos.transpose(1, 2), dout) if need[4] else None
        return dx, dc_mat, dc_vec, None, db


class _SoftKVMoments(torch.autograd.Function):
    """The linear kind's moments: E = exp(g * K^ + c - shift) (the numerators of the softmax over positions of the key
    columns; the per-column shift cancels in that softmax) against V^ and against a small matrix ``left`` of
    columns that need no gradient ([p, 1, exp(p)]).

    Returns ``r_ev`` (batch, heads, d, d) = sum_n w E_h^T V^_h, ``r_le`` = sum_n w left^T E and ``r_lv`` =
    sum_n w left^T V^ (batch, columns of left, d_model).  K^, V^ as in :class:`_KVMoments` (rms-normalized about a
    mean removed in weight space when ``eps`` is given, else the raw projections); ``g``, ``c`` (d_model,) the key
    columns' gain and offset (the layer norm's gamma and beta times the scale; c cancels in the softmax, so its
    gradient, the column sums of dE * E, is zero up to round-off, as on the explicit path).  Saves x, K^, V^, the
    shifts and two rstd's: E lives a block at a time and the backward forms it again from K^ (as fast as saving it,
    and one n-sized tensor less: the layer's peak memory at n = 8192, batch 4, 151 MiB instead of 167).
    """

    @staticmethod
    def forward(ctx, x, wk, bk, wv, bv, g, c, left, w, heads: int, eps: Optional[float]):
        b, n, dm = x.shape
        d = dm // heads
        k, v, rk, rv, blocks = _projected_blocks(x, wk, bk, wv, bv, heads, eps)
        nshift = x.new_empty(b, 1, dm)
        r_ev = x.new_empty(b, heads, d, d)
        lw = _few_columns_t(left, w)
        r_le, r_lv = x.new_empty(b, lw.shape[1], dm), x.new_empty(b, lw.shape[1], dm)
        scratch = None
        # padded points (weight 0) are masked out of the shift and of E; only when there are any (a check on the CPU)
        padded = w is not None and bool((w <= 0).any())
        g_neg = padded and bool((g < 0).any())
        for i0, i1, kb, vb in blocks:
            bb = i1 - i0
            kb, vb = kb.view(bb, n, dm), vb.view(bb, n, dm)
            # the shift is constant per batch element and column and cancels in the softmax over the points:
            # E = exp(g K^ + c - (shift + c)), shift the largest g * K^ over the points (amin/amax: aminmax is slow)
            if not padded:
                shift = torch.where(g >= 0, g * kb.amax(1), g * kb.amin(1))
            else:  # points of weight 0 (padding, whatever their keys) neither set the shift nor enter: their E is 0
                pad = w[i0:i1, :, None] <= 0
                shift = g * kb.masked_fill(pad, -math.inf).amax(1)
                if g_neg:  # columns of negative gain: the largest g * K^ is at the smallest K^
                    shift = torch.where(g >= 0, shift, g * kb.masked_fill(pad, math.inf).amin(1))
                shift.nan_to_num_(0.0, 0.0, 0.0)  # a batch element all padding: any finite shift
            nshift[i0:i1, 0] = shift.neg_()
            if scratch is None:  # E lives a block at a time (the first block is the largest); backward recomputes it
                scratch = x.new_empty(bb * n * dm)
            eb = torch.addcmul(nshift[i0:i1], kb, g, out=scratch[: bb * n * dm].view(bb, n, dm)).exp_()
            if padded:
                eb.masked_fill_(pad, 0.0)
            ew = eb if w is None else eb * w[i0:i1, :, None]
            for i in range(bb):
                _head_gram(ew[i].view(n, heads, d), vb[i].view(n, heads, d), r_ev[i0 + i])
            del ew
            _few_rows_product(lw[i0:i1], eb, r_le[i0:i1])
            _few_rows_product(lw[i0:i1], vb, r_lv[i0:i1])
        ctx.save_for_backward(x, wk, wv, k, v, nshift, rk, rv, g, left, w, bk, bv, c)
        ctx.heads, ctx.padded, ctx.eps = heads, padded, eps
        m = left.shape[-1]
        return r_ev, r_le[:, :m], r_lv[:, :m]

    @staticmethod
    def plain(x, wk, bk, wv, bv, g, c, left, w, heads: int, eps: Optional[float], nshift: Tensor, padded: bool):
        """The same function by plain differentiable ops, with the forward's shift ``nshift`` held constant (c enters
        as c - c: no value, and the explicit path's zero-sum gradient)."""
        b, n, dm = x.shape
        k, v = _plain_projections(x, wk, bk, wv, bv, heads, eps)
        z = k.reshape(b, n, dm) * g + (c - c.detach()) + nshift
        if padded:  # exp(-inf) = 0 at the padded points: no overflow there, and a zero gradient
            z = z.masked_fill(w[..., None] <= 0, -math.inf)
        e = z.exp()
        ew = e if w is None else e * w[..., None]
        lw = (left if w is None else left * w[..., None]).transpose(1, 2)
        return torch.einsum("bnhd,bnhe->bhde", ew.view(b, n, heads, -1), v), lw @ e, lw @ v.reshape(b, n, dm)

    @staticmethod
    def backward(ctx, d_ev, d_le, d_lv):
        if torch.is_grad_enabled():  # a gradient to be differentiated again (create_graph): see _higher_order
            x, wk, wv, _, _, nshift, _, _, g, left, w, bk, bv, c = ctx.saved_tensors
            return graph_backward(
                _SoftKVMoments.plain, (x, wk, bk, wv, bv, g, c, left, w, ctx.heads, ctx.eps, nshift, ctx.padded),
                (*ctx.needs_input_grad, False, False), (d_ev, d_le, d_lv))[:-2]
        x, wk, wv, k, v, nshift, rk, rv, g, left, w, _, _, _ = ctx.saved_tensors
        b, n, dm = x.shape
        h = ctx.heads
        need = ctx.needs_input_grad
        d_et, d_ev = d_ev.transpose(-1, -2).contiguous(), d_ev.contiguous()
        acc = _ProjectionGrads(x, wk, wv, need)
        dg = x.new_zeros(dm) if need[5] else None
        dc = x.new_zeros(dm) if need[6] else None
        scratch = None
        for blk in _row_blocks(x):
            i0, i1, s, t = blk
            bb, m = i1 - i0, t - s
            rows = (slice(i0, i1), slice(s, t))
            if scratch is None:
                scratch = x.new_empty(bb * m * dm)
            eb = torch.addcmul(nshift[i0:i1], k[rows], g, out=scratch[: bb * m * dm].view(bb, m, dm)).exp_()
            if ctx.padded:  # as in forward: a padded point's E is 0 (its exponent may overflow)
                eb.masked_fill_(w[rows][..., None] <= 0, 0.0)
            de = _head_apply(v[rows].view(bb, m, h, -1), d_et[i0:i1]).view(bb, m, dm)
            torch.baddbmm(de, left[rows], d_le[i0:i1], out=de)
            dv = _head_apply(eb.view(bb, m, h, -1), d_ev[i0:i1]).view(bb, m, dm)
            torch.baddbmm(dv, left[rows], d_lv[i0:i1], out=dv)
            if w is not None:
                de.mul_(w[rows][..., None])
                dv.mul_(w[rows][..., None])
            dk = de.mul_(eb)  # d(g * K^ + c): through the exponential
            if dg is not None:
                dg += (dk * k[rows]).sum((0, 1))
            if dc is not None:
                dc += dk.sum((0, 1))
            dk.mul_(g)
            if ctx.eps is not None:
                _rms_backward_(dk.view(bb, m, h, -1), k[rows].view(bb, m, h, -1), rk[rows])
                _rms_backward_(dv.view(bb, m, h, -1), v[rows].view(bb, m, h, -1), rv[rows])
            acc.add(blk, dk, dv)
        return (*acc.result(), dg, dc, None, None, None, None)


class _FeatureSoftmaxOut(torch.autograd.Function):
    """out = softmax_features([p, Q_h]) A + c (+ x) over all heads: Q = x W_q^T + b_q (batch, n, heads, d), the softmax
    of each head's p + d features taken without concatenating p; ``a_q`` (batch, d_model, d_model) and ``a_p``
    (batch, heads * p, d_model) are the rows of A for the query features and for the coordinates.  Saves x and the
    softmax of the query features (the coordinates' share is small)."""

    @staticmethod
    def forward(ctx, x, wq, bq, pos, a_q, a_p, c_vec, heads: int, residual: bool):
        b, n, dm = x.shape
        p = pos.shape[-1]
        qs, qs_p = x.new_empty(b, n, heads, dm // heads), x.new_empty(b, n, heads, p)
        out = x.new_empty(b, n, dm)
        wqt = wq.t()
        for blk in _row_blocks(x, whole=True):
            i0, i1 = blk[:2]
            bb = i1 - i0
            q = torch.addmm(bq, _rows2d(x, *blk), wqt, out=_rows2d(qs, *blk)).view(bb, n, heads, -1)
            m = q.amax(-1, keepdim=True)
            if p > 0:
                m = torch.maximum(m, pos[i0:i1].amax(-1)[:, :, None, None])
            q.sub_(m).exp_()
            e_p = torch.sub(pos[i0:i1, :, None, :], m, out=qs_p[i0:i1]).exp_()  # (bb, n, heads, p)
            den = q.sum(-1, keepdim=True).add_(e_p.sum(-1, keepdim=True))
            q.div_(den)
            e_p.div_(den)
            ob = torch.baddbmm(c_vec[i0:i1].unsqueeze(1), q.view(bb, n, dm), a_q[i0:i1], out=out[i0:i1])
            if p > 0:
                torch.baddbmm(ob, e_p.view(bb, n, heads * p), a_p[i0:i1], out=ob)
            if residual:
                ob.add_(x[i0:i1])
        ctx.save_for_backward(x, wq, qs, qs_p, a_q, a_p, bq, pos, c_vec)
        ctx.residual, ctx.heads = residual, heads
        return out

    @staticmethod
    def plain(x, wq, bq, pos, a_q, a_p, c_vec, heads: int, residual: bool):
        """The same function by plain differentiable ops (for gradients that are differentiated again)."""
        b, n, dm = x.shape
        p = pos.shape[-1]
        q = F.linear(x, wq, bq).view(b, n, heads, -1)
        s = torch.softmax(torch.cat((pos[:, :, None, :].expand(b, n, heads, p), q), -1), -1)
        out = torch.baddbmm(c_vec.unsqueeze(1), s[..., p:].reshape(b, n, dm), a_q)
        if p > 0:
            out = out + s[..., :p].reshape(b, n, heads * p) @ a_p
        return out + x if residual else out

    @staticmethod
    def backward(ctx, dout):
        if torch.is_grad_enabled():  # a gradient to be differentiated again (create_graph): see _higher_order
            x, wq, _, _, a_q, a_p, bq, pos, c_vec = ctx.saved_tensors
            return graph_backward(_FeatureSoftmaxOut.plain, (x, wq, bq, pos, a_q, a_p, c_vec, ctx.heads, ctx.residual),
                                  ctx.needs_input_grad, (dout,))
        x, wq, qs, qs_p, a_q, a_p, _, _, _ = ctx.saved_tensors
        b, n, h, d = qs.shape
        dm, p = h * d, qs_p.shape[-1]
        need = ctx.needs_input_grad
        qs2 = qs.view(b, n, dm)
        da_q = torch.bmm(qs2.transpose(1, 2), dout) if need[4] else None
        da_p = torch.bmm(qs_p.view(b, n, h * p).transpose(1, 2), dout) if need[5] and p > 0 else None
        dc = dout.sum(1) if need[6] else None
        dx = x.new_empty(x.shape) if need[0] else None
        dwq = torch.zeros_like(wq) if need[1] else None
        dbq = x.new_zeros(dm) if need[2] else None
        a_qt = a_q.transpose(1, 2)
        for blk in _row_blocks(x):  # the query gradient a block of rows at a time
            i0, i1, s, e = blk
            bb, rows = i1 - i0, e - s
            g_out = dout[i0:i1, s:e]
            dqs = torch.bmm(g_out, a_qt[i0:i1]).view(bb, rows, h, d)
            q_blk = qs[i0:i1, s:e]
            dot = torch.linalg.vecdot(dqs, q_blk).unsqueeze(-1)  # <dqs, qs> per head
            if p > 0:
                dqs_p = torch.bmm(g_out, a_p[i0:i1].transpose(1, 2)).view(bb, rows, h, p)
                dot += (dqs_p * qs_p[i0:i1, s:e]).sum(-1, keepdim=True)
            dq = dqs.sub_(dot).mul_(q_blk).view(bb * rows, dm)  # softmax backward
            if dwq is not None:
                torch.addmm(dwq, dq.t(), _rows2d(x, *blk), out=dwq)
            if dbq is not None:
                dbq += dq.sum(0)
            if dx is not None:
                dxb = torch.mm(dq, wq, out=_rows2d(dx, *blk))
                if ctx.residual:
                    dxb += _rows2d(dout, *blk)
        return dx, dwq, dbq, None, da_q, da_p, dc, None, None


def _affine_map(gamma: Optional[Tensor], beta: Optional[Tensor], h: int, p: int, d: int, like: Tensor) -> Tensor:
    """T (heads, p+1+d, p+d) with [p, 1, K^] T = [p, K^ diag(gamma) + 1 beta^T] (gamma 1, beta 0 when None)."""
    z = like.new_zeros
    if gamma is None:
        gamma = like.new_ones(h, d)
        beta = z(h, d)
    else:
        gamma, beta = gamma.reshape(h, d).to(like.dtype), beta.reshape(h, d).to(like.dtype)
    eye_p = torch.eye(p, dtype=like.dtype, device=like.device).expand(h, p, p)
    rows_p = torch.cat((eye_p, z(h, p, d)), -1)
    row_1 = torch.cat((z(h, 1, p), beta[:, None]), -1)
    rows_d = torch.cat((z(h, d, p), torch.diag_embed(gamma)), -1)
    return torch.cat((rows_p, row_1, rows_d), -2)


class _HeadNorm(nn.Module):
    """Per-head layer norm over each head's d_k features (one affine pair per head), applied row-wise."""

    def __init__(self, n_heads: int, d_head: int, eps: float):
        super().__init__()
        self.d_head, self.eps = d_head, eps
        self.weight = nn.Parameter(torch.ones(n_heads, 1, d_head))
        self.bias = nn.Parameter(torch.zeros(n_heads, 1, d_head))

    def forward(self, x: Tensor) -> Tensor:  # x (batch, heads, n, d_head)
        y = F.layer_norm(x, (self.d_head,), eps=self.eps)
        return torch.addcmul(self.bias.to(y.dtype), y, self.weight.to(y.dtype))


class SimpleAttention(nn.Module):
    """Multi-head attention of kind ``galerkin``, ``fourier``, ``softmax`` or ``linear`` with coordinate enrichment.

    Args:
        d_model: width of the input and output.
        n_heads: number of heads; ``d_model`` must be divisible by it.
        kind: one of :data:`KERNELS`.
        pos_dim: width of the coordinates concatenated to every head's Q, K, V ("recurrent enrichment of positional
            encoding"); the heads (d_model + n_heads * pos_dim wide) are mapped back to d_model by the output
            projection.
        norm: per-head layer norm inside the attention (paper's eq. 4 scheme: on K,V for galerkin/linear, on Q,K
            for fourier/softmax).  ``False`` for the "regular" post-LN scheme (eq. 7).
        init: ``"eta_delta"`` for W = eta*U + delta*I (eq. 17, U Xavier-uniform with unit gain) or ``"xavier"``.
        eta, delta: the initialization constants (paper defaults 0.01, 0.01).
        dropout: attention dropout on the attention matrix (n x n for quadratic kinds, d x d for galerkin/linear);
            only active in ``train()`` mode.
        reference_attn_dropout: ablation switch reproducing the reference code's bug: dropout p=0.5 on the
            attention matrix, always on, in eval too.  Never the default.
        scale: multiply the score/product matrix by this factor; ``"sqrt"`` uses 1/sqrt(d_head + pos_dim) (the
            reference code's choice for fourier, and always implied for softmax).  ``None``: paper eqs. (5)-(6).
        chunk_size: evaluate fourier/softmax over query chunks of this size (memory O(n * chunk)); only where the
            n x n matrix is formed (fourier: when its order resolves to "quadratic").
        fourier_order: association order of the fourier kind, see :func:`fourier_attention`: ``"auto"`` (the
            cheaper one; Q (K^T V) for n > d without score dropout), ``"quadratic"`` or ``"linear"``.
        out_proj: whether to have an output projection; ``None`` = only when pos_dim > 0 (the paper's budget).
        norm_eps: layer-norm epsilon.
        check_finite: raise if the input holds NaN/Inf (a debug check; off by default, it costs a sync).
        fused: evaluate the galerkin and linear kinds (on the CPU, float32/float64, outside autocast, coordinates and
            weights without gradient) by the fused path: the same function reassociated so that n-sized work is only
            the K, V projections and their moments and one d_model x d_model product per batch element (see the notes
            above :func:`_head_gram`).  ``False`` always uses the kernel path (Q, K, V and the heads formed explicitly),
            which is also the path on a GPU: there it is about 3.7x faster at batch 4 (fewer, larger kernels).
        conditioned: the per-head norms (K, V for galerkin/linear, Q, K for fourier/softmax) get a lead-time
            dependent scale and shift (:class:`~opformer.nn.conditional.ConditionalAffine`, the identity at
            initialisation); used when ``forward`` is given ``lead_time`` (then always on the kernel path).  For
            fourier/softmax, whose values are not normalized, the attention output gets one too, so that the lead
            time can shift what the layer adds, not only reweight the values.

    Shapes: ``x`` (batch, n, d_model), ``pos`` (batch, n, pos_dim), ``weights`` (batch, n) -> (batch, n, d_model);
    ``pos`` and ``weights`` may have batch 1 (shared by the batch).  ``weights`` are quadrature weights (``None``: 1/n
    each); a point of weight 0 is padding: it does not change the output at the other points, so a batch of point
    sets of different sizes padded to one n with weights 0 gives on the real points what each set gives alone (with
    weights 1/n_i on set i's points for galerkin/fourier, any constant for softmax/linear).
    """

    def __init__(
        self,
        d_model: int,
        n_heads: int = 1,
        kind: str = "galerkin",
        pos_dim: int = 0,
        *,
        norm: bool = True,
        init: str = "eta_delta",
        eta: float = 1e-2,
        delta: float = 1e-2,
        dropout: float = 0.0,
        reference_attn_dropout: bool = False,
        scale=None,
        chunk_size: Optional[int] = None,
        fourier_order: str = "auto",
        out_proj: Optional[bool] = None,
        norm_eps: float = 1e-5,
        check_finite: bool = False,
        fused: bool = True,
        conditioned: bool = False,
    ):
        super().__init__()
        if not isinstance(kind, str) or kind not in KERNELS:
            raise ValueError(f"unknown attention kind {kind!r}; known kinds: {sorted(KERNELS)}")
        # numpy integers and floats are numbers (numbers.Integral / numbers.Real), as for pos_dim; kept as Python ones
        if not isinstance(d_model, numbers.Integral) or isinstance(d_model, bool) or d_model <= 0:
            raise ValueError(f"d_model must be a positive int, got {d_model!r}")
        if not isinstance(n_heads, numbers.Integral) or isinstance(n_heads, bool) or n_heads <= 0:
            raise ValueError(f"n_heads must be a positive int, got {n_heads!r}")
        d_model, n_heads = int(d_model), int(n_heads)
        if isinstance(dropout, bool) or not isinstance(dropout, numbers.Real):
            raise ValueError(f"dropout must be a number in [0, 1), got {dropout!r}")
        if chunk_size is not None and (not isinstance(chunk_size, numbers.Integral) or isinstance(chunk_size, bool)):
            raise ValueError(f"chunk_size must be a positive int or None, got {chunk_size!r}")
        if d_model % n_heads != 0:
            raise ValueError(f"d_model={d_model} must be divisible by n_heads={n_heads}")
        if not isinstance(pos_dim, numbers.Integral) or isinstance(pos_dim, bool) or pos_dim < 0:
            raise ValueError(f"pos_dim must be an int >= 0 (the width of the coordinates), got {pos_dim!r}")
        pos_dim = int(pos_dim)
        if init not in ("eta_delta", "xavier"):
            raise ValueError(f"init must be 'eta_delta' or 'xavier', got {init!r}")
        if not 0.0 <= dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {dropout}")
        if chunk_size is not None and chunk_size <= 0:
            raise ValueError(f"chunk_size must be a positive int or None, got {chunk_size}")
        if isinstance(norm_eps, bool) or not isinstance(norm_eps, numbers.Real) or not norm_eps > 0:
            raise ValueError(f"norm_eps must be a number > 0 (the layer norm's epsilon), got {norm_eps!r}")
        if chunk_size is not None and kind not in QUADRATIC:  # a setting that would do nothing is refused
            raise ValueError(f"chunk_size applies to the kinds that form an n x n matrix ({', '.join(sorted(QUADRATIC))})"
                             f"; kind {kind!r} never does (leave chunk_size at None)")
        if fourier_order != "auto" and kind != "fourier":
            raise ValueError(f"fourier_order applies to kind 'fourier' only, got {fourier_order!r} with kind {kind!r}")
        self.d_model, self.n_heads, self.kind, self.pos_dim = d_model, n_heads, kind, pos_dim
        self.d_head = d_model // n_heads
        self.kernel = KERNELS[kind]
        self.dropout, self.reference_attn_dropout = dropout, reference_attn_dropout
        if fourier_order not in FOURIER_ORDERS:
            raise ValueError(f"fourier_order must be one of {FOURIER_ORDERS}, got {fourier_order!r}")
        self.chunk_size = chunk_size
        self.fourier_order = fourier_order
        self.check_finite = check_finite
        self.fused = bool(fused)
        self.norm_eps = norm_eps
        d_cat = self.d_head + pos_dim
        if scale == "sqrt":
            scale = 1.0 / math.sqrt(d_cat)
        elif scale is not None and (isinstance(scale, bool) or not isinstance(scale, numbers.Real)
                                    or not math.isfinite(scale)):
            raise ValueError(f"scale must be None, 'sqrt' or a finite number, got {scale!r}")
        self.scale = None if scale is None else float(scale)
        self.qkv = nn.Linear(d_model, 3 * d_model)
        normed = NORMALIZED[kind] if norm else ()
        self.norms = nn.ModuleDict({name: _HeadNorm(n_heads, self.d_head, norm_eps) for name in normed})
        # lead-time conditioning of the per-head norms: their affine times g(tau) plus h(tau), identity at init
        self.cond_norms = nn.ModuleDict({name: ConditionalAffine(d_model) for name in normed}) if conditioned else None
        # fourier/softmax normalize Q and K only: conditioning those norms reshapes the attention matrix but gives the
        # lead time no way to shift the values, so their output gets a conditioned scale and shift as well
        self.cond_out = ConditionalAffine(d_model) if conditioned and normed and "v" not in normed else None
        if out_proj is None:
            out_proj = pos_dim > 0
        if not out_proj and pos_dim > 0:
            raise ValueError("out_proj=False needs pos_dim=0: with coordinates the heads are wider than d_model")
        self.out_proj = nn.Linear(d_model + n_heads * pos_dim, d_model) if out_proj else None
        self.init, self.eta, self.delta = init, eta, delta
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """W^Q, W^K, W^V = eta * U + delta * I (eq. 17) or plain Xavier; zero Q/K/V biases."""
        d = self.d_model
        with torch.no_grad():
            for i in range(3):
                w = self.qkv.weight[i * d : (i + 1) * d]
                if self.init == "eta_delta":
                    nn.init.xavier_uniform_(w, gain=self.eta)
                    w.add_(self.delta * torch.eye(d, dtype=w.dtype, device=w.device))
                else:
                    nn.init.xavier_uniform_(w)
            self.qkv.bias.zero_()

    def extra_repr(self) -> str:
        return f"kind={self.kind!r}, d_model={self.d_model}, n_heads={self.n_heads}, pos_dim={self.pos_dim}"

    def _check(self, x: Tensor, pos: Optional[Tensor], weights: Optional[Tensor]) -> None:
        for name, t in (("x", x), ("pos", pos), ("weights", weights)):
            if t is not None and not isinstance(t, Tensor):
                raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__} "
                                f"(e.g. torch.as_tensor({name}))")
        if x.dim() != 3 or x.shape[-1] != self.d_model:
            raise ValueError(f"x must have shape (batch, n, d_model={self.d_model}), got {tuple(x.shape)}")
        w_dtype = self.qkv.weight.dtype
        if not x.is_floating_point():
            raise ValueError(f"x is {str(x.dtype).replace('torch.', '')}: the layer takes floating-point values "
                             f"(e.g. x.to({w_dtype}))")
        if x.dtype != w_dtype and not torch.is_autocast_enabled(x.device.type):
            raise ValueError(f"x is {str(x.dtype).replace('torch.', '')} but the layer's parameters are "
                             f"{str(w_dtype).replace('torch.', '')}: convert one of them (e.g. layer.to(x.dtype)), or "
                             "run under torch.autocast")
        b, n, _ = x.shape
        bs = f"batch={b}" if b == 1 else f"batch={b} or 1"  # pos and weights of batch 1 are shared by the batch
        if self.pos_dim > 0:
            if pos is None:
                raise ValueError(f"pos of shape (batch, n, pos_dim={self.pos_dim}) is required, got None")
            if pos.dim() != 3 or pos.shape[0] not in (1, b) or pos.shape[1] != n or pos.shape[2] != self.pos_dim:
                raise ValueError(f"pos must have shape ({bs}, n={n}, pos_dim={self.pos_dim}), got {tuple(pos.shape)}")
        elif pos is not None and pos.shape[-1] != 0:
            raise ValueError(f"this layer has pos_dim=0 but got pos of shape {tuple(pos.shape)}; set pos_dim")
        if weights is not None and (weights.dim() != 2 or weights.shape[0] not in (1, b) or weights.shape[1] != n):
            raise ValueError(f"weights must have shape ({bs}, n={n}), got {tuple(weights.shape)}")
        if self.check_finite:
            for name, t in (("x", x), ("pos", pos), ("weights", weights)):
                if t is not None and not torch.isfinite(t).all():
                    raise ValueError(f"{name} holds NaN or Inf values")

    def _project(self, x: Tensor, lead_time: Optional[Tensor] = None) -> dict[str, Tensor]:
        """Q, K, V as (batch, n, heads, d_head) tensors, the per-head layer norm applied where the kind asks for it.

        Consecutive members of (q, k, v) that share the same treatment are projected by one matrix product (the
        rows of the fused ``qkv`` weight are contiguous), so the normalized pair comes out contiguous and is layer-
        normed in one call, without a copy and without the zero-filled gradients of indexing a stacked tensor.
        """
        b, n, _ = x.shape
        d, h, dh = self.d_model, self.n_heads, self.d_head
        names = ("q", "k", "v")
        normed = [name in self.norms for name in names]
        w, bias = self.qkv.weight, self.qkv.bias
        out: dict[str, Tensor] = {}
        i = 0
        while i < 3:
            j = i
            while j + 1 < 3 and normed[j + 1] == normed[i]:
                j += 1
            m = j - i + 1
            y = F.linear(x, w[i * d : (j + 1) * d], bias[i * d : (j + 1) * d]).view(b, n, m, h, dh)
            if normed[i]:
                norms = [self.norms[names[t]] for t in range(i, j + 1)]
                y = F.layer_norm(y, (dh,), eps=norms[0].eps)
                gamma = torch.cat([nm.weight for nm in norms]).view(m, h, dh).to(y.dtype)
                beta = torch.cat([nm.bias for nm in norms]).view(m, h, dh).to(y.dtype)
                y = torch.addcmul(beta, y, gamma)
            # unbind, not indexing: its backward stacks the gradients once instead of zero-filling per member
            for name, t in zip(names[i : j + 1], y.unbind(dim=2)):
                if lead_time is not None and self.cond_norms is not None and name in self.cond_norms:
                    t = self.cond_norms[name](t.reshape(b, n, d), lead_time).view(b, n, h, dh)
                out[name] = t
            i = j + 1
        return out

    def _fused_applies(self, x: Tensor, pos: Optional[Tensor], weights: Optional[Tensor] = None) -> bool:
        return (
            self.fused
            and x.device.type == "cpu"  # on a GPU the plain path is faster (fewer, larger kernels)
            and (self.kernel is galerkin_attention or self.kernel is linear_attention)
            and x.dtype in (torch.float32, torch.float64)
            and not torch.is_autocast_enabled(x.device.type)
            and set(self.norms) in ({"k", "v"}, set())
            and (pos is None or not pos.requires_grad)
            # the fused functions give the weights no gradient (a learned quadrature takes the explicit heads)
            and (weights is None or not weights.requires_grad)
            # torch.export traces the kernel path: the fused functions write into preallocated outputs (out=), which
            # its tracing with parameters that need gradients refuses
            and not torch.compiler.is_exporting()
            # torch.func transforms (vmap, jacrev, jvp) and forward-mode AD: the custom functions have no rules for them
            and not transforms_active(x, pos, weights, self.qkv.weight)
        )

    def _fused_inputs(self, x: Tensor, pos: Optional[Tensor]):
        """Coordinates (batch, n, p), [p, 1] (batch, n, p+1), (W_q, W_k, W_v), (b_q, b_k, b_v) in x's dtype; W_k,
        W_v, b_k, b_v centred per head when K, V are layer-normed (each head's mean removed in weight space:
        x (P W)^T + P b with P = I - 11^T/d has zero mean over the head's d features)."""
        b, n, dm = x.shape
        h, d, p = self.n_heads, self.d_head, self.pos_dim
        dt = x.dtype
        pos = x.new_zeros(b, n, 0) if p == 0 else pos.to(dt).expand(b, n, p)
        pos1 = torch.cat((pos, x.new_ones(b, n, 1)), -1)
        w_all, b_all = self.qkv.weight.to(dt), self.qkv.bias.to(dt)
        ws = [w_all[:dm], w_all[dm : 2 * dm], w_all[2 * dm :]]
        bs = [b_all[:dm], b_all[dm : 2 * dm], b_all[2 * dm :]]
        if self.norms:
            for i in (1, 2):
                ws[i] = ws[i] - ws[i].view(h, d, dm).mean(1, keepdim=True).expand(h, d, dm).reshape(dm, dm)
                bs[i] = bs[i] - bs[i].view(h, d).mean(1, keepdim=True).expand(h, d).reshape(dm)
        return pos, pos1, ws, bs

    def _head_rows(self, kv: Tensor, b: int) -> tuple[Tensor, Tensor, Tensor]:
        """A_h = kv_h W_o,h^T per head, split into the rows of the coordinates (batch, heads * p, d_model) and of
        the query features (batch, d_model, d_model, rows in Q's order), and the output bias."""
        h, d, p, dm = self.n_heads, self.d_head, self.pos_dim, self.d_model
        if self.out_proj is not None:
            wo_t = self.out_proj.weight.to(kv.dtype).view(dm, h, p + d).permute(1, 2, 0)  # (heads, p+d, d_model)
            a = kv @ wo_t
            bo = self.out_proj.bias.to(kv.dtype)
        else:  # heads written side by side (p = 0): A_h places kv_h in head h's columns
            eye_h = torch.eye(h, dtype=kv.dtype, device=kv.device)
            a = (eye_h[None, :, None, :, None] * kv[:, :, :, None, :]).reshape(b, h, d, dm)
            bo = kv.new_zeros(dm)
        return a[:, :, :p].reshape(b, h * p, dm), a[:, :, p:].reshape(b, dm, dm), bo

    def _linear_fused(self, x: Tensor, pos: Optional[Tensor], weights: Optional[Tensor], p_drop: float,
                      residual: bool) -> Tensor:
        """The linear kind, softmax_f([p, Q]) (softmax_n([p, K~] s + log w)^T [p, V~]) W_o^T + b_o, without forming
        the heads: the position-softmax numerators E of the key columns against [p, 1, V^] give the numerator and
        (the ones column) the denominator of every kv entry; V's affine and W_o act on small matrices."""
        b, n, dm = x.shape
        h, d, p = self.n_heads, self.d_head, self.pos_dim
        dt = x.dtype
        pos, pos1, (wq, wk, wv), (bq, bk, bv) = self._fused_inputs(x, pos)
        s = 1.0 if self.scale is None else self.scale
        nk, nv = (self.norms[name] if self.norms else None for name in ("k", "v"))
        g = (nk.weight.to(dt).reshape(dm) if nk is not None else x.new_ones(dm)) * s
        c = (nk.bias.to(dt).reshape(dm) if nk is not None else x.new_zeros(dm)) * s
        sp = pos * s
        # points of weight <= 0 (padding) count for nothing, as on the explicit path (log w): w clamped at 0, and
        # their coordinates, which may be anything, neither set the coordinates' shift nor enter (e^(sp - shift) = 0)
        w = None if weights is None else weights.to(dt).clamp_min(0)
        if w is None:
            e_p = (sp - sp.amax(1, keepdim=True)).exp()  # (batch, n, p): the coordinates' position-softmax numerators
        elif p > 0:
            pad = (w == 0)[..., None]
            top = sp.masked_fill(pad, -math.inf).amax(1, keepdim=True)
            e_p = (sp - top.nan_to_num(0.0, 0.0, 0.0)).exp().masked_fill(pad, 0.0)
        else:
            e_p = sp
        left = torch.cat((pos1, e_p), -1)  # (batch, n, 2p+1)
        r_ev, r_le, r_lv = _SoftKVMoments.apply(x, wk, bk, wv, bv, g, c, left, w, h, self.norm_eps if nk else None)
        epw = e_p if w is None else e_p * w[..., None]
        r_pp1 = torch.bmm(epw.transpose(1, 2), pos1)  # (batch, p, p+1): E_p^T W [p, 1]
        # N_h (batch, heads, p+d, p+1+d): rows [E_p, E_h], columns [p, 1, V^_h]
        r_pv = r_lv[:, p + 1 :].view(b, p, h, d).transpose(1, 2)  # E_p^T W V^_h
        r_e1 = r_le[:, : p + 1].view(b, p + 1, h, d).permute(0, 2, 3, 1)  # E_h^T W [p, 1]
        rows_p = torch.cat((r_pp1[:, None].expand(b, h, p, p + 1), r_pv), -1)
        rows_e = torch.cat((r_e1, r_ev), -1)
        num = torch.cat((rows_p, rows_e), -2)
        # divide each row by its column sum (the ones column): softmax over positions; a batch element of weights all
        # 0 (all padding) has sums 0 and gets kv = 0 instead of 0 / 0
        kv = num / num[..., p : p + 1].clamp_min(torch.finfo(dt).tiny)
        t_v = _affine_map(nv.weight if nv else None, nv.bias if nv else None, h, p, d, kv)
        kv = kv @ t_v  # (batch, heads, p+d, p+d) = softmax_n(K_a)^T V_a
        if p_drop > 0.0:
            kv = F.dropout(kv, p=p_drop, training=True)
        a_p, a_q, bo = self._head_rows(kv, b)
        return _FeatureSoftmaxOut.apply(x, wq, bq, pos, a_q, a_p, bo.expand(b, dm), h, residual)

    def _galerkin_fused(self, x: Tensor, pos: Optional[Tensor], weights: Optional[Tensor], p_drop: float,
                        residual: bool) -> Tensor:
        """The galerkin layer as out = x C + p B + c (see the notes above :func:`_head_gram`); same function."""
        b, n, dm = x.shape
        h, d, p = self.n_heads, self.d_head, self.pos_dim
        dt = x.dtype
        pos, pos1, (wq, wk, wv), (bq, bk, bv) = self._fused_inputs(x, pos)
        normed = bool(self.norms)
        w = None if weights is None else weights.to(dt)
        r_kv, r_1k, r_1v = _KVMoments.apply(x, wk, bk, wv, bv, pos1, w, h, self.norm_eps if normed else None)
        p1w = pos1 if w is None else pos1 * w[..., None]
        r_11 = torch.bmm(p1w.transpose(1, 2), pos1)  # (batch, p+1, p+1)
        # R (batch, heads, p+1+d, p+1+d): the moments of [p, 1, K^] against [p, 1, V^]
        r_1k = r_1k.view(b, p + 1, h, d).transpose(1, 2)
        r_1v = r_1v.view(b, p + 1, h, d).transpose(1, 2)
        top = torch.cat((r_11[:, None].expand(b, h, p + 1, p + 1), r_1v), -1)
        r = torch.cat((top, torch.cat((r_1k.transpose(-1, -2), r_kv), -1)), -2)
        nk, nv = (self.norms[name] if normed else None for name in ("k", "v"))
        t_k = _affine_map(nk.weight if nk else None, nk.bias if nk else None, h, p, d, r)
        t_v = _affine_map(nv.weight if nv else None, nv.bias if nv else None, h, p, d, r)
        m = t_k.transpose(-1, -2) @ r @ t_v  # (batch, heads, p+d, p+d) = K_a^T diag(w) V_a
        c = (1.0 / n if w is None else 1.0) * (1.0 if self.scale is None else self.scale)
        if c != 1.0:
            m = m * c
        if p_drop > 0.0:
            m = F.dropout(m, p=p_drop, training=True)
        a_p, a_q, bo = self._head_rows(m, b)
        b_mat = a_p.view(b, h, p, dm).sum(1)  # (batch, p, d_model): the coordinates' rows of all heads
        c_mat = wq.t() @ a_q  # (batch, d_model, d_model): the query projection folded in
        c_vec = bq @ a_q + bo
        if residual:
            c_mat = c_mat + torch.eye(dm, dtype=dt, device=x.device)
        return _LowRankOut.apply(x, c_mat, c_vec, pos, b_mat)

    def forward(
        self, x: Tensor, pos: Optional[Tensor] = None, weights: Optional[Tensor] = None, *, residual: bool = False,
        lead_time: Optional[Tensor] = None,
    ) -> Tensor:
        """The attention output (batch, n, d_model); ``residual=True`` returns x + attention(x) instead (on the
        fused path at no extra cost: the identity joins the folded d_model x d_model matrix).  ``lead_time``
        (batch,) conditions the per-head norms of a ``conditioned`` layer."""
        if self.cond_norms is None or not self.cond_norms:
            lead_time = None
        self._check(x, pos, weights)
        b, n, _ = x.shape
        if n == 0:  # no points: an empty output (every kind; the sums over no points are never formed)
            return x.clone() if residual else x * 0
        h, dh, p = self.n_heads, self.d_head, self.pos_dim
        if weights is not None and weights.shape[0] != b:
            weights = weights.expand(b, n)
        p_drop = 0.5 if self.reference_attn_dropout else (self.dropout if self.training else 0.0)
        if lead_time is None and self._fused_applies(x, pos, weights):
            if self.kernel is linear_attention:
                return self._linear_fused(x, pos, weights, p_drop, residual)
            return self._galerkin_fused(x, pos, weights, p_drop, residual)
        qkv = self._project(x, lead_time)  # (batch, n, heads, d_head) each
        if p > 0:
            # one copy per tensor: heads to the front and the coordinates in front of every head's features
            pos_h = pos.to(x.dtype)[:, None].expand(b, h, n, p)
            q, k, v = (torch.cat((pos_h, qkv[name].transpose(1, 2)), dim=-1) for name in ("q", "k", "v"))
        else:
            q, k, v = (qkv[name].transpose(1, 2) for name in ("q", "k", "v"))
        kernel = self.kernel
        if kernel is fourier_attention:  # resolve the association order here, so that chunking follows it
            linear = _fourier_linear_order(q, k, v, p_drop, self.fourier_order)
            kernel = galerkin_attention if linear else _fourier_quadratic  # Q (K^T V) is the same product
        if self.chunk_size is not None and self.kind in QUADRATIC and kernel is not galerkin_attention \
                and self.chunk_size < n:
            z = _chunked(kernel, self.chunk_size, q, k, v, weights, p_drop, self.scale)
        else:
            z = kernel(q, k, v, weights=weights, dropout_p=p_drop, scale=self.scale)
        z = z.transpose(1, 2).reshape(b, n, h * (dh + p))
        out = self.out_proj(z) if self.out_proj is not None else z
        if self.cond_out is not None:
            out = self.cond_out(out, lead_time)
        return x + out if residual else out

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs):
        """Weights saved before the output's conditioning existed (fourier/softmax, eq. 4) load as what they were: the
        missing scale-and-shift MLP is filled with its identity start (last layer zero), which leaves them unchanged."""
        if self.cond_out is not None and not any(key.startswith(prefix + "cond_out.") for key in state_dict):
            for name, value in self.cond_out.state_dict().items():
                last = name.startswith(f"mlp.net.{len(self.cond_out.mlp.net) - 1}.")
                state_dict[prefix + "cond_out." + name] = torch.zeros_like(value) if last else value.clone()
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)
