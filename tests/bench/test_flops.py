"""FLOP counts (torch.utils.flop_counter) obey the asymptotic costs of the paper: Galerkin attention is linear in n,
Fourier attention quadratic (section 4: O(n d^2) vs O(n^2 d))."""

import pytest
import torch

from opformer.bench.cases import attention_case, build_case
from opformer.bench.measure import count_flops, fwd_bwd_step, products_replay
from opformer.nn import fourier_attention, galerkin_attention


def _kernel_flops(kernel, n, b=2, h=2, d=8, **kw):
    q, k, v = (torch.randn(b, h, n, d, requires_grad=True) for _ in range(3))
    return count_flops(lambda: kernel(q, k, v, **kw).square().sum().backward())


def test_galerkin_kernel_flops_grow_4x_when_n_grows_4x():
    assert _kernel_flops(galerkin_attention, 256) == 4 * _kernel_flops(galerkin_attention, 64)


def test_fourier_kernel_flops_grow_16x_when_n_grows_4x():
    q = dict(order="quadratic")  # the explicit n x n evaluation, the paper's cost accounting
    assert _kernel_flops(fourier_attention, 256, **q) == 16 * _kernel_flops(fourier_attention, 64, **q)


def test_fourier_kernel_auto_order_flops_grow_4x_when_n_grows_4x():
    """Without score dropout the default evaluates Q (K^T V): the Galerkin cost, exactly."""
    assert _kernel_flops(fourier_attention, 256) == 4 * _kernel_flops(fourier_attention, 64)
    assert _kernel_flops(fourier_attention, 256) == _kernel_flops(galerkin_attention, 256)


def _layer_flops(kind, n):
    module, inputs = build_case(attention_case(kind, n, d_model=16, n_heads=2, batch=1))
    return count_flops(fwd_bwd_step(module, *inputs))


@pytest.mark.parametrize("kind,order", [("galerkin", 1), ("linear", 1), ("fourier", 2)])
def test_encoder_layer_flops_are_a_polynomial_of_the_attention_order_in_n(kind, order):
    """A whole layer costs c + a n + b n^2 FLOPs (b = 0 for linear-cost kinds; c is the n-independent work on
    d_model x d_model matrices of the fused paths): fit c, a, b on n, 2n, 3n; predict 4n exactly."""
    n = 64
    f1, f2, f3, f4 = (_layer_flops(kind, m) for m in (n, 2 * n, 3 * n, 4 * n))
    second = f3 - 2 * f2 + f1  # = 2 b n^2
    assert f4 - 3 * f3 + 3 * f2 - f1 == 0  # a quadratic polynomial: the third difference vanishes
    if order == 1:
        assert second == 0 and f2 - f1 > 0
    else:
        assert second > 0


def test_softmax_kernel_flops_are_counted_and_grow_16x():
    """PyTorch's fused CPU softmax attention is counted (the stock counter has no formula for it)."""
    f1 = _kernel_flops(lambda q, k, v: torch.nn.functional.scaled_dot_product_attention(q, k, v), 64)
    assert f1 > 0
    assert _kernel_flops(lambda q, k, v: torch.nn.functional.scaled_dot_product_attention(q, k, v), 256) == 16 * f1


def test_fused_paths_are_seen_by_the_flop_counter():
    """The fused FFN does the products of Linear-ReLU-Linear (forward 2, backward 4): the counter sees the same
    FLOPs; the fused attention reassociates the explicit heads' products and executes fewer, never more."""
    from opformer.nn import EncoderLayer

    torch.manual_seed(0)
    layer = EncoderLayer(16, 2, "galerkin", 32, pos_dim=1)
    y = torch.randn(2, 64, 16, requires_grad=True)
    fused = count_flops(lambda: layer.ffn.residual(y).square().sum().backward())
    plain = count_flops(lambda: (y + layer.ffn(y)).square().sum().backward())
    assert fused == plain > 0
    for kind in ("galerkin", "linear"):
        f, e = (_layer_flops_fused(kind, 256, fused) for fused in (True, False))
        assert 0.5 * e < f < e


def _layer_flops_fused(kind, n, fused):
    module, inputs = build_case(attention_case(kind, n, d_model=16, n_heads=2, batch=1, fused=fused))
    return count_flops(fwd_bwd_step(module, *inputs))


@pytest.mark.parametrize("kind, fused", [("galerkin", True), ("linear", True), ("galerkin", False), ("fourier", True)])
def test_the_products_replay_holds_every_product_of_the_step(kind, fused):
    """The products-only replay (benchmarks/compare_reference.py --products) runs the products that the layer's
    step executes: their FLOPs are the flop counter's count of the step (which sees products only), and the replay
    runs the same number of product calls, on tensors of the recorded shapes."""
    from opformer.nn import EncoderLayer

    torch.manual_seed(0)
    layer = EncoderLayer(16, 2, kind, dim_feedforward=24, pos_dim=1, fused=fused).train()
    x, pos = torch.randn(3, 40, 16), torch.rand(3, 40, 1)
    step = fwd_bwd_step(layer, x, pos)
    replay, calls, flops = products_replay(step)
    assert calls > 5 and flops == count_flops(step)
    again, calls2, flops2 = products_replay(replay)  # the replay records as the same products
    assert (calls2, flops2) == (calls, flops)
