"""Discretization invariance: a Transformer1d trained at n = 64 keeps its error when evaluated at n = 256.

Every part of the model acts on functions rather than on sample vectors (pointwise lift, attention with the 1/n
quadrature weight, orthonormal-FFT spectral decoder), so on smooth inputs the trained operator is the same at any
resolution; only aliasing of the nonlinear features differs, which is small for smooth data.
"""

import math

import pytest
import torch

from opformer.models import build_model

from .conftest import relative_l2

pytestmark = pytest.mark.usefixtures("one_thread")

SMALL = dict(name="transformer1d", d_model=32, num_layers=2, n_heads=1, dim_feedforward=64, decoder_width=16,
             decoder_ffn=16, modes=8)


def sample(n, batch, seed):
    """a = random trigonometric polynomial (modes 1..4); u = e^{t d^2/dx^2} a + (e^{t d^2/dx^2} a)^2 / 2, t = 0.005:
    a smooth nonlinear operator, sampled exactly at any n >= 9."""
    g = torch.Generator().manual_seed(seed)
    x = torch.arange(n, dtype=torch.float64) / n
    k = torch.arange(1, 5, dtype=torch.float64)[:, None]
    ca = torch.randn(batch, 4, 1, generator=g, dtype=torch.float64)
    cb = torch.randn(batch, 4, 1, generator=g, dtype=torch.float64)
    basis = lambda damp: ((damp * (ca * torch.cos(2 * math.pi * k * x) + cb * torch.sin(2 * math.pi * k * x))) / k).sum(1)  # noqa: E731
    a = basis(1.0)
    h = basis(torch.exp(-0.005 * (2 * math.pi * k) ** 2))
    u = h + 0.5 * h**2
    coords = x[None, :, None].expand(batch, n, 1)
    return a[..., None].float(), coords.float(), u[..., None].float()






@pytest.mark.parametrize("kind", ["galerkin", "fourier"])
def test_error_at_four_times_the_training_resolution_stays_within_a_factor(kind):
    """Trained on 16 samples at n = 64, evaluated on unseen samples at n = 64 and n = 256: the two errors agree to
    within 1.5x (the issue asks for 2-3x; in practice they agree to about 0.5%)."""
    torch.manual_seed(0)
    model = build_model({**SMALL, "kind": kind, "scale": "sqrt" if kind == "fourier" else None})
    a, c, u = sample(64, 16, seed=0)
    steps = 150
    opt = torch.optim.Adam(model.parameters(), lr=2e-3)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=2e-3, total_steps=steps, pct_start=0.1)
    for _ in range(steps):
        loss = relative_l2(model(a, c), u)
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
    model.eval()
    with torch.no_grad():
        # unseen samples at the training resolution and at 4x (the same functions, sampled finer)
        a64, c64, u64 = sample(64, 16, seed=1)
        a256, c256, u256 = sample(256, 16, seed=1)
        err64 = relative_l2(model(a64, c64), u64)
        err256 = relative_l2(model(a256, c256), u256)
    assert err64 < 0.1, err64  # it learned the operator
    assert err256 < 1.5 * err64, (err64, err256)
