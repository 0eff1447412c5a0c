"""Facts about the loss and metric (paper eqs. (1)-(2))."""

import math

import pytest
import torch

from opformer.tasks.losses import central_diff_1d, effective_gamma, grad_2d, h1_seminorm_1d, h1_seminorm_2d, rel_l2


def test_rel_l2_is_per_sample_relative_norm():
    t = torch.tensor([[3.0, 4.0], [1.0, 0.0]])[..., None]
    p = torch.tensor([[3.0, 4.5], [0.0, 0.0]])[..., None]
    torch.testing.assert_close(rel_l2(p, t), torch.tensor([0.5 / 5.0, 1.0]))
    assert torch.all(rel_l2(t, t) == 0)


def test_periodic_central_difference_is_second_order():
    """D_h sin(2 pi x) -> 2 pi cos(2 pi x) with error ~ h^2: 4x smaller when h halves."""
    errs = []
    for n in (64, 128):
        x = torch.arange(n, dtype=torch.float64) / n
        u = torch.sin(2 * math.pi * x)[None, :, None]
        d = central_diff_1d(u, 1.0 / n)
        errs.append((d[0, :, 0] - 2 * math.pi * torch.cos(2 * math.pi * x)).abs().max().item())
    assert errs[0] / errs[1] == pytest.approx(4.0, rel=0.01)


def test_h1_term_vanishes_for_exact_prediction_up_to_discretization():
    n = 256
    x = torch.arange(n, dtype=torch.float64) / n
    u = torch.sin(2 * math.pi * x)[None, :, None]
    du = 2 * math.pi * torch.cos(2 * math.pi * x)[None, :, None]
    assert h1_seminorm_1d(u, du, 1.0 / n).item() < 1e-3  # (2 pi h)^2 / 6
    assert h1_seminorm_1d(u + 0.1 * torch.sin(20 * math.pi * x)[None, :, None], du, 1.0 / n).item() > 0.1


def test_gradient_2d_exact_on_quadratics_and_coefficient_weighting():
    """Central differences are exact for quadratics; the a-weighted seminorm scales with |a| consistently."""
    n = 17
    x = torch.linspace(0, 1, n, dtype=torch.float64)
    X, Y = torch.meshgrid(x, x, indexing="ij")
    u = (X**2 + 3 * X * Y - Y**2)[None, ..., None]
    g = grad_2d(u, 1.0 / (n - 1))
    torch.testing.assert_close(g[0, ..., 0], (2 * X + 3 * Y)[1:-1, 1:-1])
    torch.testing.assert_close(g[0, ..., 1], (3 * X - 2 * Y)[1:-1, 1:-1])
    grad = torch.stack([2 * X + 3 * Y, 3 * X - 2 * Y], -1)[None]
    a = torch.where(X > 0.5, 12.0, 3.0)[None, ..., None].double()
    assert h1_seminorm_2d(u, grad, a, 1.0 / (n - 1)).item() < 1e-12
    # an error confined to the high-coefficient region counts the same relative to ||a grad u|| for a and 2a
    e = u + 0.01 * torch.sin(math.pi * X)[None, ..., None]
    torch.testing.assert_close(h1_seminorm_2d(e, grad, a, 1 / (n - 1)), h1_seminorm_2d(e, grad, 2 * a, 1 / (n - 1)))


def test_effective_gamma_matches_reference_double_h():
    """The reference computes sqrt(gamma*h*S/T): our weight on the relative seminorm is sqrt(gamma*h)."""
    assert effective_gamma(0.1, 2048, "reference") == pytest.approx(math.sqrt(0.1 / 2048))
    assert effective_gamma(0.1, 2048, "plain") == 0.1
    with pytest.raises(ValueError, match="gamma_convention"):
        effective_gamma(0.1, 10, "other")


@pytest.mark.parametrize("scale", [1e-15, 1e20, 1e30, 1e-30])
def test_rel_l2_is_scale_free(scale):
    """Targets of scale 1e-15 were clamped at an absolute 1e-12 (1.2e-4 reported for a 6e-2 error); at 1e20 / 1e30
    the float32 squares overflowed (0 or NaN).  The relative error is that at scale 1, also for the H1 terms."""
    g = torch.Generator().manual_seed(0)
    t = torch.randn(4, 13, 1, generator=g, dtype=torch.float64)
    p = t + 0.05 * torch.randn(4, 13, 1, generator=g, dtype=torch.float64)
    ref = rel_l2(p, t)
    assert ref.min() > 0.02
    torch.testing.assert_close(rel_l2(p * scale, t * scale), ref, rtol=1e-6, atol=0)
    torch.testing.assert_close(h1_seminorm_1d(p * scale, t * scale, 0.1), h1_seminorm_1d(p, t, 0.1), rtol=1e-6, atol=0)
    a = torch.rand(2, 6, 6, 1, generator=g, dtype=torch.float64) + 1
    q, grad = torch.randn(2, 6, 6, 1, generator=g, dtype=torch.float64), torch.randn(2, 6, 6, 2, generator=g).double()
    torch.testing.assert_close(h1_seminorm_2d(q * scale, grad * scale, a, 0.2), h1_seminorm_2d(q, grad, a, 0.2),
                               rtol=1e-6, atol=0)


def test_rel_l2_unchanged_at_ordinary_scales_values_and_gradients():
    """The scaling is by powers of two: bitwise the plain ||p - t|| / ||t|| and its gradient wherever that neither
    overflows nor underflows (the training loss of normal runs is unchanged); an all-zero target still divides by
    eps."""
    g = torch.Generator().manual_seed(1)
    for sc in (1e-6, 0.3, 1.0, 7.0, 1e6):
        t = torch.randn(8, 37, 1, generator=g) * sc
        p = (t + 0.1 * sc * torch.randn(8, 37, 1, generator=g)).requires_grad_()
        q = p.detach().clone().requires_grad_()
        a = rel_l2(p, t)
        b = (p - t).reshape(8, -1).norm(dim=1) / t.reshape(8, -1).norm(dim=1)
        torch.testing.assert_close(a, b.detach(), rtol=0, atol=0)
        a.sum().backward()
        ((q - t).reshape(8, -1).norm(dim=1) / t.reshape(8, -1).norm(dim=1)).sum().backward()
        torch.testing.assert_close(p.grad, q.grad, rtol=0, atol=0)
    z = torch.zeros(1, 4, 1)
    torch.testing.assert_close(rel_l2(z + 1e-12, z), torch.tensor([2.0]))
