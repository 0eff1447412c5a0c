"""Gradients with respect to the quadrature weights (a learned or data-dependent quadrature)."""

import pytest
import torch

from opformer.nn import EncoderLayer, SimpleAttention


@pytest.mark.parametrize("kind", ["galerkin", "linear"])
@pytest.mark.parametrize("pos_dim", [0, 2])
def test_weight_gradient_matches_finite_differences(kind, pos_dim):
    """d out / d w by torch.autograd.gradcheck (central finite differences, float64) for the layer on the CPU, where
    the fused path would otherwise be taken.  The fused functions return no gradient for w (it entered only the
    coordinate moments), so dL/dw was silently wrong by O(1); weights that require a gradient now take the explicit
    heads, whose gradient is exact."""
    torch.manual_seed(0)
    layer = SimpleAttention(6, 2, kind, pos_dim, init="xavier").double()
    x = torch.randn(2, 5, 6, dtype=torch.float64)
    pos = torch.rand(2, 5, pos_dim, dtype=torch.float64) if pos_dim else None
    w = torch.rand(2, 5, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda ww: layer(x, pos, ww), (w,))
    assert not layer._fused_applies(x, pos, w) and layer._fused_applies(x, pos, w.detach())


@pytest.mark.parametrize("kind", ["galerkin", "linear"])
def test_weight_gradient_is_the_same_with_fused_on_or_off(kind):
    """fused=True and fused=False are the same function of (x, w, parameters), so dL/dw agrees (float64, through
    an encoder layer with coordinates), and the x and parameter gradients still agree to round-off."""
    torch.manual_seed(1)
    a = EncoderLayer(12, 3, kind, pos_dim=1, init="xavier").double()
    b = EncoderLayer(12, 3, kind, pos_dim=1, init="xavier", fused=False).double()
    b.load_state_dict(a.state_dict())
    x = torch.randn(2, 9, 12, dtype=torch.float64, requires_grad=True)
    pos = torch.rand(2, 9, 1, dtype=torch.float64)
    w = (torch.rand(2, 9, dtype=torch.float64) / 9).requires_grad_()
    ga = torch.autograd.grad(a(x, pos, w).sin().sum(), [w, x, *a.parameters()])
    gb = torch.autograd.grad(b(x, pos, w).sin().sum(), [w, x, *b.parameters()])
    for u, v in zip(ga, gb):
        torch.testing.assert_close(u, v, rtol=1e-10, atol=1e-12)
