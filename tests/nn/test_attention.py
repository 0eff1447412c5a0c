"""Facts about the attention kernels and SimpleAttention (paper eqs. (5), (6), (17))."""

import math

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from opformer.nn import (
    KERNELS,
    EncoderLayer,
    SimpleAttention,
    fourier_attention,
    galerkin_attention,
    linear_attention,
    register_kernel,
    softmax_attention,
)

KINDS = ["galerkin", "fourier", "softmax", "linear"]


def _qkv(b=2, h=3, n=7, d=5, dtype=torch.float64, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(b, h, n, d, generator=g, dtype=dtype) for _ in range(3)]


def test_galerkin_kernel_equals_petrov_galerkin_sum():
    """(z^j)_i = h * sum_l (k^l . v^j) (q^l)_i, eq. (14): column-wise Petrov-Galerkin form, h = 1/n."""
    q, k, v = _qkv()
    b, hh, n, d = q.shape
    z = galerkin_attention(q, k, v)
    ref = torch.zeros_like(z)
    for bi in range(b):
        for hi in range(hh):
            for i in range(n):
                for j in range(d):
                    ref[bi, hi, i, j] = sum(
                        torch.dot(k[bi, hi, :, l], v[bi, hi, :, j]) * q[bi, hi, i, l] for l in range(d)
                    ) / n
    torch.testing.assert_close(z, ref, rtol=1e-12, atol=1e-12)


def test_fourier_kernel_equals_nystrom_quadrature():
    """z_i = h * sum_l (q_i . k_l) v_l, eq. (8): a Nystrom quadrature of the kernel q(x).k(xi)."""
    q, k, v = _qkv(seed=1)
    b, hh, n, d = q.shape
    z = fourier_attention(q, k, v)
    ref = torch.zeros_like(z)
    for bi in range(b):
        for hi in range(hh):
            for i in range(n):
                ref[bi, hi, i] = sum(torch.dot(q[bi, hi, i], k[bi, hi, l]) * v[bi, hi, l] for l in range(n)) / n
    torch.testing.assert_close(z, ref, rtol=1e-12, atol=1e-12)


def test_fourier_and_galerkin_are_reassociations_of_each_other():
    """Without normalization, (Q K^T) V / n == Q (K^T V) / n: matrix multiplication is associative."""
    q, k, v = _qkv(seed=2)
    torch.testing.assert_close(fourier_attention(q, k, v), galerkin_attention(q, k, v), rtol=1e-10, atol=1e-12)


def test_softmax_and_linear_kernels_match_their_formulas():
    """ST: softmax_rows(Q K^T / sqrt(d)) V; LT (Shen et al.): softmax_feat(Q) softmax_pos(K)^T V."""
    q, k, v = _qkv(seed=3)
    d = q.shape[-1]
    st = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(d), dim=-1) @ v
    torch.testing.assert_close(softmax_attention(q, k, v), st, rtol=1e-10, atol=1e-12)
    lt = torch.softmax(q, dim=-1) @ (torch.softmax(k, dim=-2).transpose(-2, -1) @ v)
    torch.testing.assert_close(linear_attention(q, k, v), lt, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("kind", KINDS)
def test_uniform_quadrature_weights_equal_default(kind):
    """weights = 1/n at every point is the default quadrature of a uniform grid."""
    q, k, v = _qkv(seed=4)
    b, _, n, _ = q.shape
    w = torch.full((b, n), 1.0 / n, dtype=q.dtype)
    torch.testing.assert_close(KERNELS[kind](q, k, v, weights=w), KERNELS[kind](q, k, v), rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("kind", KINDS)
def test_duplicated_point_with_half_weight_is_the_same_quadrature(kind):
    """Splitting a point into two copies of half its weight leaves every weighted sum (hence the output) unchanged."""
    q, k, v = _qkv(b=1, h=2, n=6, d=4, seed=5)
    w = torch.rand(1, 6, dtype=q.dtype) + 0.5
    w = w / w.sum()
    z = KERNELS[kind](q, k, v, weights=w)
    idx = torch.tensor([0, 1, 2, 3, 4, 5, 5])
    w2 = w[:, idx].clone()
    w2[:, 5] /= 2
    w2[:, 6] /= 2
    z2 = KERNELS[kind](q[:, :, idx], k[:, :, idx], v[:, :, idx], weights=w2)
    torch.testing.assert_close(z2[:, :, :6], z, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("kind", KINDS)
def test_permutation_equivariance(kind):
    """Permuting points and their coordinates together permutes the output the same way (no order is assumed)."""
    torch.manual_seed(0)
    layer = SimpleAttention(16, 4, kind, pos_dim=2, init="xavier").double()
    x, pos = torch.randn(2, 33, 16, dtype=torch.float64), torch.rand(2, 33, 2, dtype=torch.float64)
    perm = torch.randperm(33)
    torch.testing.assert_close(layer(x[:, perm], pos[:, perm]), layer(x, pos)[:, perm], rtol=1e-10, atol=1e-12)


def _smooth_fields(x: torch.Tensor, d: int) -> torch.Tensor:
    """d smooth functions of x in [0, 1], evaluated at x (..., n) -> (..., n, d)."""
    freqs = torch.arange(1, d + 1, dtype=x.dtype)
    phases = torch.linspace(0, 2.0, d, dtype=x.dtype)
    return torch.sin(math.pi * x[..., None] * freqs / 2 + phases) + 0.3 * x[..., None] ** 2


@pytest.mark.parametrize("kind", KINDS)
def test_resolution_invariance_with_coordinates_and_trapezoid_weights(kind):
    """Same smooth fields sampled at n and 4n-3 nodes of [0, 1] (trapezoid weights): outputs agree at shared nodes
    to the O(h^2) quadrature error (second order in h), because each kernel is a quadrature of an integral operator."""
    torch.manual_seed(0)
    layer = SimpleAttention(8, 2, kind, pos_dim=1, init="xavier").double().eval()

    def run(n):
        x = torch.linspace(0, 1, n, dtype=torch.float64)
        w = torch.full((n,), 1.0 / (n - 1), dtype=torch.float64)
        w[0] = w[-1] = 0.5 / (n - 1)
        return layer(_smooth_fields(x, 8)[None], x[None, :, None], w[None])

    ref = run(1025)
    e_coarse = ((run(65) - ref[:, ::16]).norm() / ref[:, ::16].norm()).item()
    e_fine = ((run(257) - ref[:, ::4]).norm() / ref[:, ::4].norm()).item()
    assert e_fine < 5e-5, f"{kind}: n=257 differs from n=1025 by {e_fine:.2e} at shared nodes"
    # trapezoid rule: the difference shrinks ~16x when h shrinks 4x (second order)
    assert e_coarse / e_fine > 12, f"{kind}: errors {e_coarse:.2e} -> {e_fine:.2e} are not second order"


@pytest.mark.parametrize("kind", ["galerkin", "fourier"])
def test_resolution_invariance_periodic_uniform_default_weights(kind):
    """Band-limited periodic fields on x_j = j/n with the default 1/n weights: the rectangle rule is exact for the
    trigonometric products, so n=32 and n=128 agree at shared points to round-off (1/n is a quadrature weight).
    (Without the per-point layer norm, which is not band-limited; the trapezoid test above covers it.)"""
    torch.manual_seed(0)
    layer = SimpleAttention(8, 2, kind, init="xavier", norm=False).double().eval()

    def run(n):
        x = torch.arange(n, dtype=torch.float64) / n
        f = torch.stack([torch.sin(2 * math.pi * m * x + m) for m in range(1, 9)], -1)
        return layer(f[None])

    coarse, fine = run(32), run(128)
    assert (fine[:, ::4] - coarse).abs().max() < 1e-10


def _flops(layer, x, pos):
    with FlopCounterMode(display=False) as fc:
        layer(x, pos).square().mean().backward()
    return fc.get_total_flops()


def test_flops_scale_linearly_for_galerkin_and_quadratically_for_fourier():
    """Forward+backward FLOPs: Galerkin is O(n d^2) -> x4 when n x4; Fourier is O(n^2 d) -> ~x16 when n x4.

    The kernel path of Galerkin is exactly proportional to n; the fused path is a n + c, c the n-independent
    d_model x d_model matrices (exactly affine: equal increments per equal step in n; c a few % at n = 1024)."""
    d, h = 32, 2
    ratios = {}
    for kind in ("galerkin", "fourier"):
        order = {"fourier_order": "quadratic"} if kind == "fourier" else {}
        layer = SimpleAttention(d, h, kind, pos_dim=1, fused=False, **order)
        f = [_flops(layer, torch.randn(1, n, d), torch.rand(1, n, 1)) for n in (1024, 4096)]
        ratios[kind] = f[1] / f[0]
    assert ratios["galerkin"] == pytest.approx(4.0, rel=1e-6), ratios
    assert 15.0 < ratios["fourier"] <= 16.0, ratios
    fused = SimpleAttention(d, h, "galerkin", pos_dim=1)
    f1, f2, f3 = (_flops(fused, torch.randn(1, n, d), torch.rand(1, n, 1)) for n in (1024, 2048, 3072))
    assert f3 - f2 == f2 - f1 > 0  # affine in n
    assert 0 <= 2 * f1 - f2 < 0.05 * f1  # the constant part


def test_fourier_auto_order_is_linear_cost_and_the_same_function():
    """Fourier attention has no softmax, so (Q K^T) V = Q (K^T V): "auto" evaluates the cheaper association (linear
    FLOPs in n for n > d) and agrees with the explicit n x n evaluation to round-off, values and gradients."""
    d, h = 32, 2
    auto = SimpleAttention(d, h, "fourier", pos_dim=1).double()
    quad = SimpleAttention(d, h, "fourier", pos_dim=1, fourier_order="quadratic").double()
    quad.load_state_dict(auto.state_dict())
    f = [_flops(auto.float(), torch.randn(1, n, d), torch.rand(1, n, 1)) for n in (1024, 4096)]
    assert f[1] / f[0] == pytest.approx(4.0, rel=1e-6)
    auto.double()
    torch.manual_seed(3)
    x = torch.randn(2, 300, d, dtype=torch.float64, requires_grad=True)
    pos = torch.rand(2, 300, 1, dtype=torch.float64)
    w = torch.rand(2, 300, dtype=torch.float64)
    w = w / w.sum(1, keepdim=True)
    for weights in (None, w):
        ya, yq = auto(x, pos, weights), quad(x, pos, weights)
        torch.testing.assert_close(ya, yq, rtol=1e-10, atol=1e-12)
        (ga,) = torch.autograd.grad(ya.square().sum(), x)
        (gq,) = torch.autograd.grad(yq.square().sum(), x)
        torch.testing.assert_close(ga, gq, rtol=1e-10, atol=1e-12)


def test_fourier_order_choice_and_errors():
    from opformer.nn.attention import _fourier_linear_order

    q, k, v = _qkv(seed=4)  # n > d
    n, d = q.shape[-2], q.shape[-1]
    assert n > d
    assert _fourier_linear_order(q, k, v, 0.0, "auto")
    assert not _fourier_linear_order(q, k, v, 0.1, "auto")  # score dropout needs the n x n matrix
    assert not _fourier_linear_order(q, k, v, 0.0, "quadratic")
    short = q[..., : d // 2, :]
    assert not _fourier_linear_order(short, k[..., : d // 2, :], v[..., : d // 2, :], 0.0, "auto")  # n < d
    with pytest.raises(ValueError, match="cannot apply dropout"):
        fourier_attention(q, k, v, dropout_p=0.1, order="linear")
    with pytest.raises(ValueError, match="order must be"):
        fourier_attention(q, k, v, order="fast")
    with pytest.raises(ValueError, match="fourier_order must be"):
        SimpleAttention(16, 2, "fourier", fourier_order="fast")


def test_eta_delta_initialization_statistics():
    """W^Q,K,V = eta*U + delta*I (eq. 17) with U Xavier-uniform: off-diagonal entries are U(+-eta*sqrt(3/d)), mean 0,
    std eta/sqrt(d); the diagonal is shifted by delta; biases are zero."""
    d, eta, delta = 256, 0.05, 0.2
    att = SimpleAttention(d, 4, "galerkin", eta=eta, delta=delta)
    bound = eta * math.sqrt(3.0 / d)
    for i in range(3):
        w = att.qkv.weight[i * d : (i + 1) * d].detach()
        off = w - delta * torch.eye(d)
        assert off.abs().max() <= bound + 1e-7
        assert abs(off.mean().item()) < 0.02 * bound
        assert off.std().item() == pytest.approx(eta / math.sqrt(d), rel=0.02)
        assert w.diagonal().mean().item() == pytest.approx(delta, abs=3 * bound / math.sqrt(d))
    assert torch.count_nonzero(att.qkv.bias) == 0
    x = SimpleAttention(d, 4, "galerkin", init="xavier").qkv.weight[:d].detach()
    assert x.std().item() == pytest.approx(math.sqrt(1.0 / d), rel=0.02)  # gain 1: var = 2/(d+d)
    assert abs(x.diagonal().mean().item()) < 0.02


def test_layers_of_an_encoder_are_initialized_independently():
    from opformer.nn import Encoder

    enc = Encoder(3, 16, 2, "galerkin", pos_dim=1)
    w = [layer.attn.qkv.weight for layer in enc.layers]
    assert not torch.equal(w[0], w[1]) and not torch.equal(w[1], w[2])


def test_galerkin_layer_norm_makes_attention_invariant_to_rescaling_wk_wv():
    """With Ln on K,V (eq. 6; eps -> 0), positive rescaling of (W^K, b^K) and (W^V, b^V) does not change the output."""
    torch.manual_seed(0)
    att = SimpleAttention(12, 3, "galerkin", pos_dim=1, init="xavier", norm_eps=1e-14).double()
    x, pos = torch.randn(2, 20, 12, dtype=torch.float64), torch.rand(2, 20, 1, dtype=torch.float64)
    with torch.no_grad():
        att.qkv.bias.normal_()
    y = att(x, pos)
    with torch.no_grad():
        att.qkv.weight[12:] *= 7.0
        att.qkv.bias[12:] *= 7.0
    torch.testing.assert_close(att(x, pos), y, rtol=1e-6, atol=1e-8)


def test_attention_dropout_is_off_in_eval_and_on_in_train():
    torch.manual_seed(0)
    for kind in KINDS:
        att = SimpleAttention(16, 2, kind, pos_dim=1, dropout=0.3)
        x, pos = torch.randn(2, 32, 16), torch.rand(2, 32, 1)
        att.eval()
        assert torch.equal(att(x, pos), att(x, pos)), kind
        att.train()
        assert not torch.equal(att(x, pos), att(x, pos)), kind


def test_reference_attention_dropout_switch_is_stochastic_even_in_eval():
    """The ablation switch reproduces the reference's always-on p=0.5 dropout (docs/models.md, the reference's
    quirks)."""
    att = SimpleAttention(16, 2, "galerkin", pos_dim=1, reference_attn_dropout=True).eval()
    x, pos = torch.randn(2, 32, 16), torch.rand(2, 32, 1)
    assert not torch.equal(att(x, pos), att(x, pos))


@pytest.mark.parametrize("kind", ["fourier", "softmax"])
def test_chunked_quadratic_attention_equals_unchunked_with_gradients(kind):
    torch.manual_seed(0)
    order = {"fourier_order": "quadratic"} if kind == "fourier" else {}
    a = SimpleAttention(16, 2, kind, pos_dim=1, **order).double()
    b = SimpleAttention(16, 2, kind, pos_dim=1, chunk_size=7, **order).double()
    b.load_state_dict(a.state_dict())
    x = torch.randn(2, 40, 16, dtype=torch.float64, requires_grad=True)
    pos = torch.rand(2, 40, 1, dtype=torch.float64)
    ya, yb = a(x, pos), b(x, pos)
    torch.testing.assert_close(yb, ya)
    (ga,) = torch.autograd.grad(ya.square().sum(), x)
    (gb,) = torch.autograd.grad(yb.square().sum(), x)
    torch.testing.assert_close(gb, ga)


def test_register_kernel_adds_a_kind_with_one_function():
    def cosine(q, k, v, *, weights=None, dropout_p=0.0, scale=None):
        qn, kn = torch.nn.functional.normalize(q, dim=-1), torch.nn.functional.normalize(k, dim=-1)
        return galerkin_attention(qn, kn, v, weights=weights, dropout_p=dropout_p, scale=scale)

    register_kernel("cosine-test", cosine, normalized=("v",))
    try:
        att = SimpleAttention(8, 2, "cosine-test", pos_dim=1)
        assert att(torch.randn(1, 5, 8), torch.rand(1, 5, 1)).shape == (1, 5, 8)
        assert set(att.norms) == {"v"}
    finally:
        from opformer.nn import attention as A

        A.KERNELS.pop("cosine-test")
        A.NORMALIZED.pop("cosine-test")


def test_register_kernel_refuses_a_built_in_name():
    """Registering over 'galerkin' would be ignored by existing layers (their fused path) and change the norms of
    new ones: it is refused, and the built-in kernel stays."""
    from opformer.nn import attention as A

    def zero(q, k, v, *, weights=None, dropout_p=0.0, scale=None):
        return torch.zeros_like(v)

    for kind in ("galerkin", "fourier", "softmax", "linear"):
        with pytest.raises(ValueError, match=f"'{kind}' is a built-in attention kind"):
            register_kernel(kind, zero)
    assert A.KERNELS["galerkin"] is galerkin_attention and A.NORMALIZED["galerkin"] == ("k", "v")
    with pytest.raises(ValueError, match="kernel must be a function"):
        register_kernel("not-a-function", "galerkin")


def test_register_kernel_tries_the_kernel_as_a_layer_calls_it():
    """A kernel without the keywords a layer passes, or one returning another shape than v's, is refused when it is
    registered (not at a model's first forward, in torch's words), and is not registered."""
    from opformer.nn import attention as A

    with pytest.raises(ValueError, match=r"kernel of kind 'no-keywords' must take kernel\(q, k, v, \*, weights, "
                                         r"dropout_p, scale\); calling it so failed: .*unexpected keyword"):
        register_kernel("no-keywords", lambda q, k, v: v)
    with pytest.raises(ValueError, match=r"kernel of kind 'wide' must return a tensor shaped like v \(batch, heads, "
                                         r"n, d_v\): for q, k, v of shape \(2, 3, 5, 4\) it returned \(2, 3, 5, 8\)"):
        register_kernel("wide", lambda q, k, v, **kw: torch.cat((v, v), -1))
    assert "no-keywords" not in A.KERNELS and "wide" not in A.KERNELS


def test_bfloat16_galerkin_sum_accumulates_in_float32():
    """K^T V / n over n = 2^16 points of ones is exactly 1: a bfloat16 accumulator would stall at 256."""
    n = 1 << 16
    q = torch.ones(1, 1, 1, 4, dtype=torch.bfloat16)
    k = torch.ones(1, 1, n, 4, dtype=torch.bfloat16)
    z = galerkin_attention(q, k, k)
    assert z.dtype == torch.bfloat16
    assert torch.all(z == 4.0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
@pytest.mark.parametrize("kind", KINDS)
def test_dtypes_forward_backward(kind, dtype):
    torch.manual_seed(0)
    ref = SimpleAttention(16, 2, kind, pos_dim=1).double()
    att = SimpleAttention(16, 2, kind, pos_dim=1).to(dtype)
    att.load_state_dict(ref.state_dict())
    x, pos = torch.randn(2, 64, 16, dtype=torch.float64), torch.rand(2, 64, 1, dtype=torch.float64)
    y = att(x.to(dtype), pos.to(dtype))
    assert y.dtype == dtype
    y.float().square().mean().backward()
    tol = {torch.float32: 1e-5, torch.float64: 1e-12, torch.bfloat16: 3e-2}[dtype]
    err = (y.double() - ref(x, pos)).norm() / ref(x, pos).norm()
    assert err < tol, f"{kind} {dtype}: relative error vs float64 {err:.2e}"


# --- error messages ---------------------------------------------------------------------------------------------


def test_unknown_kind_lists_known_kinds():
    with pytest.raises(ValueError, match=r"unknown attention kind 'galerkn'.*fourier.*galerkin.*linear.*softmax"):
        SimpleAttention(8, 1, "galerkn")


def test_d_model_not_divisible_by_heads():
    with pytest.raises(ValueError, match=r"d_model=10 must be divisible by n_heads=4"):
        SimpleAttention(10, 4)


def test_wrong_rank_and_width_and_pos():
    att = SimpleAttention(8, 2, pos_dim=2)
    with pytest.raises(ValueError, match=r"x must have shape \(batch, n, d_model=8\), got \(5, 8\)"):
        att(torch.randn(5, 8), torch.rand(5, 2))
    with pytest.raises(ValueError, match=r"d_model=8\), got \(1, 5, 9\)"):
        att(torch.randn(1, 5, 9), torch.rand(1, 5, 2))
    with pytest.raises(ValueError, match=r"pos must have shape \(batch=1, n=5, pos_dim=2\), got \(1, 5, 1\)"):
        att(torch.randn(1, 5, 8), torch.rand(1, 5, 1))
    with pytest.raises(ValueError, match=r"pos of shape .* is required, got None"):
        att(torch.randn(1, 5, 8))
    with pytest.raises(ValueError, match=r"weights must have shape \(batch=1, n=5\), got \(1, 4\)"):
        att(torch.randn(1, 5, 8), torch.rand(1, 5, 2), torch.rand(1, 4))


def test_nan_input_raises_when_debug_check_is_on():
    x = torch.randn(1, 5, 8)
    x[0, 2, 3] = float("nan")
    with pytest.raises(ValueError, match="x holds NaN or Inf"):
        SimpleAttention(8, 2, check_finite=True)(x)
    assert torch.isnan(SimpleAttention(8, 2)(x)).any()  # off by default: no sync cost


def test_galerkin_sum_stays_float32_under_bf16_autocast():
    """Under bf16 autocast (mixed-precision training) the sum over the n points, K^T V / n, is a float32 product
    (its inputs are not rounded to bf16); only the d-wide product with Q runs in bf16."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class RecordMatmuls(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.seen = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if func.overloadpacket in (torch.ops.aten.bmm, torch.ops.aten.mm):
                self.seen.append((tuple(args[0].shape), args[0].dtype, args[1].dtype))
            return func(*args, **(kwargs or {}))

    n, d = 512, 8
    q, k, v = torch.randn(1, 1, n, d), torch.randn(1, 1, n, d), torch.randn(1, 1, n, d)
    with torch.autocast("cpu", dtype=torch.bfloat16), RecordMatmuls() as rec:
        z = galerkin_attention(q, k, v)
    assert z.dtype == torch.bfloat16
    sums = [s for s in rec.seen if s[0][-1] == n]  # the product that contracts over the n points
    assert sums and all(a == b == torch.float32 for _, a, b in sums), rec.seen


# --- the fused galerkin path --------------------------------------------------------------------------------------


def _perturbed_pair(kind, **kw):
    torch.manual_seed(0)
    fused = SimpleAttention(12, 3, kind, init="xavier", **kw).double()
    with torch.no_grad():  # move norms' affine and biases off their identity/zero values
        for prm in fused.parameters():
            prm.add_(0.1 * torch.randn_like(prm))
    plain = SimpleAttention(12, 3, kind, init="xavier", fused=False, **kw).double()
    plain.load_state_dict(fused.state_dict())
    return fused, plain


@pytest.mark.parametrize("pos_dim", [0, 1, 2])
@pytest.mark.parametrize("norm", [True, False])
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("kind", ["galerkin", "linear"])
def test_fused_path_equals_explicit_heads_values_and_gradients(kind, pos_dim, norm, weighted):
    """Galerkin: out = sum_h [p, Q_h] (K_a,h^T W V_a,h) W_o,h^T; linear: the same with softmax_f([p, Q_h]) and
    softmax_n([p, K~_h] + log w).  With the coordinate blocks, the per-head affine and W_o (galerkin: W_q too)
    folded into small matrices (nothing concatenated, the heads never formed) it is the same function as the
    explicit evaluation, to round-off in float64: outputs, the input's and every parameter's gradient, with
    residual.  (For linear, beta_k cancels in the softmax over positions: its gradient is round-off on both.)"""
    fused, plain = _perturbed_pair(kind, pos_dim=pos_dim, norm=norm, scale=0.7)
    torch.manual_seed(1)
    x = torch.randn(3, 29, 12, dtype=torch.float64, requires_grad=True)
    pos = torch.rand(3, 29, pos_dim, dtype=torch.float64) if pos_dim else None
    w = torch.rand(3, 29, dtype=torch.float64) if weighted else None
    for residual in (False, True):
        yf, yp = fused(x, pos, w, residual=residual), plain(x, pos, w, residual=residual)
        torch.testing.assert_close(yf, yp, rtol=1e-10, atol=1e-12)
        gf = torch.autograd.grad(yf.square().sum(), [x, *fused.parameters()])
        gp = torch.autograd.grad(yp.square().sum(), [x, *plain.parameters()])
        for (name, _), a, b in zip([("x", x), *fused.named_parameters()], gf, gp):
            torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12, msg=name)


@pytest.mark.parametrize("rows", [5, 46])
@pytest.mark.parametrize("kind", ["galerkin", "linear"])
def test_fused_path_in_blocks_equals_the_explicit_heads(kind, rows, monkeypatch):
    """The fused layer goes through its n-sized work a block of rows at a time (forward: whole batch elements, as
    many as fit; backward: blocks of rows, or groups of whole batch elements where n is small) and accumulates the
    weight gradients over the blocks.  Blocks of 5 rows (uneven, across batch elements) and groups of 2 of the 3
    batch elements (46 rows, n = 23: the last group one element) give the explicit heads' outputs and gradients."""
    from opformer.nn import attention as A

    fused, plain = _perturbed_pair(kind, pos_dim=1)
    torch.manual_seed(2)
    x = torch.randn(3, 23, 12, dtype=torch.float64, requires_grad=True)
    pos, w = torch.rand(3, 23, 1, dtype=torch.float64), torch.rand(3, 23, dtype=torch.float64)
    monkeypatch.setattr(A, "_CHUNK_ELEMENTS", rows * 12)
    assert len(list(A._row_blocks(x))) == (15 if rows == 5 else 2)
    for residual in (False, True):
        yf, yp = fused(x, pos, w, residual=residual), plain(x, pos, w, residual=residual)
        torch.testing.assert_close(yf, yp, rtol=1e-10, atol=1e-12)
        gf = torch.autograd.grad(yf.square().sum(), [x, *fused.parameters()])
        gp = torch.autograd.grad(yp.square().sum(), [x, *plain.parameters()])
        for a, b in zip(gf, gp):
            torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)


def test_fused_path_applies_only_where_it_is_the_same_function():
    """Falls back to the explicit heads for low precision, under autocast, for coordinates that need a gradient and
    off the CPU (on a GPU the explicit heads are faster: docs/benchmarks.md, section "GPU"); attention dropout acts
    on the small (p+d) x (p+d) matrix on both paths (same distribution, stochastic)."""
    att = SimpleAttention(8, 2, "galerkin", pos_dim=1)
    x, pos = torch.randn(1, 5, 8), torch.rand(1, 5, 1)
    assert att._fused_applies(x, pos)
    assert not att._fused_applies(x.bfloat16(), pos)
    assert not att._fused_applies(x, pos.requires_grad_())
    assert not att._fused_applies(x.to("meta"), pos.detach().to("meta"))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert not att._fused_applies(x, pos)
    assert not SimpleAttention(8, 2, "galerkin", pos_dim=1, fused=False)._fused_applies(x, pos)
    assert SimpleAttention(8, 2, "linear", pos_dim=1)._fused_applies(x, pos.detach())
    assert not SimpleAttention(8, 2, "fourier", pos_dim=1)._fused_applies(x, pos)
    assert not SimpleAttention(8, 2, "softmax", pos_dim=1)._fused_applies(x, pos)
    drop = SimpleAttention(8, 2, "galerkin", pos_dim=1, dropout=0.3).train()
    pos = pos.detach()
    assert drop._fused_applies(x, pos) and not torch.equal(drop(x, pos), drop(x, pos))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("kind", ["galerkin", "linear"])
def test_gpu_layer_equals_the_cpu_fused_layer(kind):
    """On a GPU the layer takes the explicit heads; in float64 it is the CPU's fused function to round-off, values
    and gradients, with quadrature weights and coordinates."""
    cpu, _ = _perturbed_pair(kind, pos_dim=1)
    gpu = SimpleAttention(12, 3, kind, init="xavier", pos_dim=1).double().cuda()
    gpu.load_state_dict(cpu.state_dict())
    torch.manual_seed(3)
    x = torch.randn(2, 37, 12, dtype=torch.float64, requires_grad=True)
    pos, w = torch.rand(2, 37, 1, dtype=torch.float64), torch.rand(2, 37, dtype=torch.float64)
    xg = x.detach().cuda().requires_grad_()
    assert cpu._fused_applies(x, pos) and not gpu._fused_applies(xg, pos.cuda())
    yc, yg = cpu(x, pos, w), gpu(xg, pos.cuda(), w.cuda())
    torch.testing.assert_close(yg.cpu(), yc, rtol=1e-10, atol=1e-12)
    gc = torch.autograd.grad(yc.square().sum(), [x, *cpu.parameters()])
    gg = torch.autograd.grad(yg.square().sum(), [xg, *gpu.parameters()])
    for a, b in zip(gc, gg):
        torch.testing.assert_close(b.cpu(), a, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("kind", ["galerkin", "fourier", "linear", "softmax"])
def test_no_points_give_an_empty_output(kind):
    """n = 0: an empty (batch, 0, d_model) output and gradient for every kind (no sum over no points divided by 0)."""
    layer = EncoderLayer(16, 2, kind, pos_dim=1)
    x = torch.randn(2, 0, 16, requires_grad=True)
    y = layer(x, torch.rand(2, 0, 1))
    y.sum().backward()
    assert y.shape == (2, 0, 16) and x.grad.shape == (2, 0, 16)


def test_inputs_of_another_dtype_than_the_layer_are_a_clear_error():
    """float64 features into a float32 layer: one line naming both dtypes (not torch's mat1/mat2 message); under
    autocast the layer takes them."""
    layer = EncoderLayer(16, 2, "galerkin")
    with pytest.raises(ValueError, match="x is float64 but the layer's parameters are float32"):
        layer(torch.randn(2, 5, 16, dtype=torch.float64))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert torch.isfinite(layer(torch.randn(2, 5, 16))).all()
    with pytest.raises(ValueError, match=r"^x is int64: the layer takes floating-point values \(e.g. "
                                         r"x.to\(torch.float32\)\)$"):
        layer(torch.ones(2, 5, 16, dtype=torch.int64))


def test_options_the_kind_never_uses_are_refused_not_ignored():
    """chunk_size bounds the memory of the n x n kinds only, fourier_order picks fourier's order: given to another
    kind they would do nothing, so they are refused (as the model configs refuse them)."""
    for kind in ("galerkin", "linear"):
        with pytest.raises(ValueError, match=f"chunk_size applies to the kinds that form an n x n matrix "
                                             f"\\(fourier, softmax\\); kind '{kind}' never does"):
            SimpleAttention(32, 4, kind, 1, chunk_size=8)
        with pytest.raises(ValueError, match="chunk_size applies"):
            EncoderLayer(32, 4, kind, chunk_size=8)
    for kind in ("galerkin", "softmax"):
        with pytest.raises(ValueError, match=f"fourier_order applies to kind 'fourier' only, got 'quadratic' with "
                                             f"kind '{kind}'"):
            SimpleAttention(32, 4, kind, fourier_order="quadratic")
    SimpleAttention(32, 4, "softmax", chunk_size=8)
    SimpleAttention(32, 4, "fourier", chunk_size=8, fourier_order="linear")
