"""Padding with quadrature weights 0: a padded point is absent from every sum over the points.

The layer's output at a point is a function of the measure sum_j w_j delta_{x_j} (galerkin/fourier: integrals
against it; softmax/linear: softmax(s + log w) = w e^s / sum w e^s).  A point of weight 0 is therefore not in the
measure, whatever its features, coordinates or score, so a batch of point sets of different sizes padded to one n
with weights 0 must give, on the real points, what each set gives alone.
"""

import itertools

import pytest
import torch

from opformer.nn import Encoder, SimpleAttention

KINDS = ["galerkin", "fourier", "softmax", "linear"]


def _padded(sets, p, pad_scale, wdtype, dtype=torch.float64, fill=None):
    """Stack the point sets (x (n_i, d), pos (n_i, p)) into one padded batch; padded rows hold pad_scale * noise."""
    g = torch.Generator().manual_seed(5)
    n = max(len(x) for x, _ in sets)
    d = sets[0][0].shape[-1]
    x = pad_scale * torch.randn(len(sets), n, d, generator=g, dtype=dtype)
    pos = pad_scale * torch.rand(len(sets), n, p, generator=g, dtype=dtype)
    w = torch.zeros(len(sets), n, dtype=wdtype)
    for i, (xi, pi) in enumerate(sets):
        x[i, : len(xi)], pos[i, : len(xi)] = xi, pi
        w[i, : len(xi)] = 1.0 / len(xi) if fill is None else fill
    return x, pos, w


def _sets(p, dtype=torch.float64, sizes=(5, 9, 1)):
    g = torch.Generator().manual_seed(3)
    return [(torch.randn(n, 12, generator=g, dtype=dtype), torch.rand(n, p, generator=g, dtype=dtype)) for n in sizes]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("fused", [True, False])
@pytest.mark.parametrize("norm", [True, False])
def test_padded_batch_equals_each_set_alone_whatever_the_padding_holds(kind, fused, norm):
    """With weights 1/n_i on set i's points and 0 on the padding, out[i, :n_i] = layer(set i) (default weights 1/n_i),
    for zero padding and for padding of features and coordinates 1000 times larger than the data (float64; the
    softmax kinds used to let such padding through: a weight 0 was clamped to the smallest positive one)."""
    torch.manual_seed(0)
    for p, pad_scale in itertools.product([0, 2], [0.0, 1000.0]):
        layer = SimpleAttention(12, 3, kind, p, norm=norm, fused=fused, init="xavier").double()
        sets = _sets(p)
        x, pos, w = _padded(sets, p, pad_scale, torch.float64)
        out = layer(x, pos if p else None, w)
        assert torch.isfinite(out).all()
        for i, (xi, pi) in enumerate(sets):
            ref = layer(xi[None], pi[None] if p else None)[0]
            torch.testing.assert_close(out[i, : len(xi)], ref, rtol=1e-10, atol=1e-12,
                                       msg=f"p={p} pad_scale={pad_scale} set {i}")


@pytest.mark.parametrize("kind", KINDS)
def test_padded_encoder_stack_equals_each_set_alone(kind):
    """The encoder's other parts (FFN, residuals, layer norms) act point by point, so a padded batch through a
    2-layer stack with coordinates gives each set's own output on its points (float64)."""
    torch.manual_seed(1)
    enc = Encoder(2, 12, 3, kind, pos_dim=2, init="xavier").double()
    sets = _sets(2)
    x, pos, w = _padded(sets, 2, 0.0, torch.float64)
    out = enc(x, pos, w)
    for i, (xi, pi) in enumerate(sets):
        torch.testing.assert_close(out[i, : len(xi)], enc(xi[None], pi[None])[0], rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("kind", ["softmax", "linear"])
def test_zero_weights_in_half_precision_exclude_the_padding(kind):
    """The softmax kinds with float16 weights 0 on 55 zero-padded points: the padding gets no share.  (The log-weight
    bias used float16's smallest normal number for 0, log 6.1e-5 = -9.7: a share e^-9.7 per padded point, an error
    of 2e-3 here.)  The real points' weights (0.25) are exact in float16, so the padded output equals the set alone
    up to float32 round-off."""
    torch.manual_seed(2)
    layer = SimpleAttention(16, 4, kind, 2, init="xavier", fused=False)  # the kernels' log-weight bias
    x, pos = torch.randn(1, 5, 16), torch.rand(1, 5, 2)
    xp, pp = torch.zeros(1, 60, 16), torch.zeros(1, 60, 2)
    xp[:, :5], pp[:, :5] = x, pos
    w = torch.zeros(1, 60, dtype=torch.float16)
    w[:, :5] = 0.25
    torch.testing.assert_close(layer(xp, pp, w)[:, :5], layer(x, pos), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("fused", [True, False])
def test_a_batch_element_of_weights_all_zero_stays_finite_and_alone(kind, fused):
    """A batch element that is all padding (weights all 0, an empty measure) gives a finite output and finite
    gradients, and the other elements are as without it.  (The fused linear path divided its position-softmax
    sums, all 0, by themselves: NaN in the output and, through the sum, in every gradient.)"""
    torch.manual_seed(3)
    layer = SimpleAttention(8, 2, kind, 1, fused=fused).double()
    x = torch.randn(2, 6, 8, dtype=torch.float64, requires_grad=True)
    pos = torch.rand(2, 6, 1, dtype=torch.float64)
    w = torch.full((2, 6), 1.0 / 6, dtype=torch.float64)
    w[1] = 0.0
    y = layer(x, pos, w)
    assert torch.isfinite(y).all()
    y.square().sum().backward()
    assert torch.isfinite(x.grad).all()
    assert all(torch.isfinite(prm.grad).all() for prm in layer.parameters())
    torch.testing.assert_close(y[0], layer(x[:1], pos[:1])[0], rtol=1e-10, atol=1e-12)


def test_negative_weights_exclude_a_point_on_both_linear_paths():
    """The softmax kinds take log w, so a weight <= 0 excludes its point; the fused linear path (which multiplies
    by w instead of adding log w) excludes it too, rather than subtracting the point's share."""
    torch.manual_seed(4)
    fused = SimpleAttention(8, 2, "linear", 1).double()
    plain = SimpleAttention(8, 2, "linear", 1, fused=False).double()
    plain.load_state_dict(fused.state_dict())
    x, pos = torch.randn(1, 7, 8, dtype=torch.float64), torch.rand(1, 7, 1, dtype=torch.float64)
    w = torch.rand(1, 7, dtype=torch.float64)
    w_neg = w.clone()
    w_neg[0, 2] = -0.3
    w_zero = w.clone()
    w_zero[0, 2] = 0.0
    torch.testing.assert_close(fused(x, pos, w_neg), plain(x, pos, w_neg), rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(fused(x, pos, w_neg), fused(x, pos, w_zero), rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("rows", [5, 46])
@pytest.mark.parametrize("norm", [False, True])
def test_padded_fused_linear_in_blocks_equals_the_explicit_heads(rows, norm, monkeypatch):
    """The fused linear path masks the padded points (weight 0) out of its softmax shift and numerators block by
    block (forward: whole batch elements; backward: blocks of 5 rows, or groups of 2 elements): with padding 1000
    times larger than the data it gives the explicit heads' outputs and gradients (x and every parameter).  With
    norm, K's layer-norm gains are drawn with both signs (a column of negative gain takes its shift at the smallest
    key)."""
    from opformer.nn import attention as A

    torch.manual_seed(6)
    fused = SimpleAttention(12, 3, "linear", 1, init="xavier", norm=norm).double()
    if norm:
        with torch.no_grad():
            fused.norms["k"].weight.copy_(3 * torch.randn_like(fused.norms["k"].weight))
    plain = SimpleAttention(12, 3, "linear", 1, init="xavier", norm=norm, fused=False).double()
    plain.load_state_dict(fused.state_dict())
    x, pos, w = _padded(_sets(1, sizes=(23, 11, 17)), 1, 1000.0, torch.float64)
    x.requires_grad_()
    monkeypatch.setattr(A, "_CHUNK_ELEMENTS", rows * 12)
    yf, yp = fused(x, pos, w), plain(x, pos, w)
    real = (w > 0)[..., None]
    torch.testing.assert_close(yf * real, yp * real, rtol=1e-10, atol=1e-12)
    loss = lambda y: (y * real).square().sum()  # noqa: E731  (the padded rows' outputs are not asked for)
    gf = torch.autograd.grad(loss(yf), [x, *fused.parameters()])
    gp = torch.autograd.grad(loss(yp), [x, *plain.parameters()])
    for (name, _), a, b in zip([("x", x), *fused.named_parameters()], gf, gp):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12, msg=name)
