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
