"""Derivatives of derivatives, and torch.func transforms, through the layers' fused CPU paths.

The fused Galerkin/linear attention and the ReLU feed-forward block have hand-written first-order backwards.  The
truth used here is independent of the double-backward code: the hand-written first-order gradient (itself checked by
``gradcheck`` in test_attention.py) differentiated by central finite differences in float64, and the plain
(unfused) explicit heads for the transforms.
"""

import pytest
import torch

from opformer.nn import EncoderLayer, SimpleAttention
from opformer.nn.encoder import FeedForward

DT = torch.float64


def _layer(kind, fused=True, pos_dim=1, seed=0, **kw):
    torch.manual_seed(seed)
    return EncoderLayer(12, 3, kind, pos_dim=pos_dim, dim_feedforward=10, fused=fused, **kw).to(DT)


def _inputs(pos_dim=1, weights=False, n=11, seed=1):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(2, n, 12, dtype=DT, generator=g)
    pos = torch.rand(2, n, pos_dim, dtype=DT, generator=g) if pos_dim else None
    w = None
    if weights:
        w = torch.rand(2, n, dtype=DT, generator=g) + 0.1
        w[0, 3] = 0.0  # a padded point
        w[1, -2:] = 0.0
    return x, pos, w


def _grad(layer, x, pos, w, create_graph=False):
    x = x.detach().requires_grad_(True)
    y = layer(x, pos, w)
    (g,) = torch.autograd.grad(y.square().sum(), x, create_graph=create_graph)
    return x, g


CASES = [(kind, pos_dim, weights) for kind in ("galerkin", "linear") for pos_dim in (0, 1, 2)
         for weights in (False, True)]


@pytest.mark.parametrize("kind,pos_dim,weights", CASES)
def test_gradient_with_a_graph_equals_the_plain_gradient(kind, pos_dim, weights):
    layer = _layer(kind, pos_dim=pos_dim)
    x, pos, w = _inputs(pos_dim, weights)
    _, g0 = _grad(layer, x, pos, w)
    _, g1 = _grad(layer, x, pos, w, create_graph=True)
    assert g1.requires_grad
    torch.testing.assert_close(g1, g0, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("kind,pos_dim,weights", CASES)
def test_hessian_vector_product_matches_finite_differences_of_the_gradient(kind, pos_dim, weights):
    """d/de grad(x + e v) at e = 0 by double backward against central differences of the first-order gradient."""
    layer = _layer(kind, pos_dim=pos_dim)
    x, pos, w = _inputs(pos_dim, weights)
    v = torch.randn(x.shape, dtype=DT, generator=torch.Generator().manual_seed(7))
    xg, g = _grad(layer, x, pos, w, create_graph=True)
    (hv,) = torch.autograd.grad(g, xg, v)
    eps = 1e-5
    fd = (_grad(layer, x + eps * v, pos, w)[1] - _grad(layer, x - eps * v, pos, w)[1]) / (2 * eps)
    assert hv.abs().max() > 1e-3  # not trivially zero
    torch.testing.assert_close(hv, fd, rtol=1e-6, atol=1e-6 * float(fd.abs().max()))


@pytest.mark.parametrize("kind", ["galerkin", "linear"])
def test_second_derivatives_of_the_weights_equal_the_explicit_heads(kind):
    """A gradient penalty's gradient w.r.t. every parameter: fused layer against the explicit heads."""
    x, pos, w = _inputs(1, True)
    res = []
    for fused in (True, False):
        layer = _layer(kind, fused=fused)
        xg, g = _grad(layer, x, pos, w, create_graph=True)
        res.append(torch.autograd.grad(g.square().sum(), [xg, *layer.parameters()], allow_unused=True))
    for a, b in zip(*res):
        assert a is not None and b is not None
        torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-9 * max(1.0, float(b.abs().max())))


def test_feed_forward_gradient_can_be_differentiated_again():
    torch.manual_seed(0)
    ffn = FeedForward(6, 9).to(DT)
    x = torch.randn(3, 5, 6, dtype=DT)
    v = torch.randn(3, 5, 6, dtype=DT)

    def grad(at, create_graph=False):
        at = at.detach().requires_grad_(True)
        (g,) = torch.autograd.grad(ffn.residual(at).pow(3).sum(), at, create_graph=create_graph)
        return at, g

    xg, g = grad(x, True)
    (hv,) = torch.autograd.grad(g, xg, v)
    eps = 1e-5
    fd = (grad(x + eps * v)[1] - grad(x - eps * v)[1]) / (2 * eps)
    torch.testing.assert_close(hv, fd, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("kind", ["galerkin", "linear"])
def test_torch_func_jacobian_vmap_and_jvp(kind):
    """torch.func transforms run (the plain path is taken under them) and agree with the fused layer."""
    layer = _layer(kind)
    x, pos, _ = _inputs(1, n=6)
    with torch.no_grad():
        y = layer(x, pos)
    # vmap over the samples equals the batched call
    yv = torch.func.vmap(lambda a, p: layer(a[None], p[None])[0])(x, pos)
    torch.testing.assert_close(yv, y, rtol=1e-12, atol=1e-12)
    # the Jacobian of one sample by jacrev against reverse-mode rows of the fused layer
    f = lambda a: layer(a[None], pos[:1])[0]  # noqa: E731
    jac = torch.func.jacrev(f)(x[0])  # (n, d, n, d)
    xr = x[:1].clone().requires_grad_(True)
    out = layer(xr, pos[:1])[0]
    for i, j in ((0, 0), (3, 5), (5, 11)):
        (row,) = torch.autograd.grad(out[i, j], xr, retain_graph=True)
        torch.testing.assert_close(jac[i, j], row[0], rtol=1e-10, atol=1e-12)
    # forward mode: jvp against a central difference
    v = torch.randn_like(x[0])
    _, t = torch.func.jvp(f, (x[0],), (v,))
    eps = 1e-6
    with torch.no_grad():
        fd = (f(x[0] + eps * v) - f(x[0] - eps * v)) / (2 * eps)
    torch.testing.assert_close(t, fd, rtol=1e-6, atol=1e-7)


def test_forward_mode_dual_tensors_take_the_plain_path():
    import torch.autograd.forward_ad as fwAD

    layer = _layer("galerkin")
    x, pos, _ = _inputs(1, n=6)
    v = torch.randn_like(x)
    with fwAD.dual_level():
        t = fwAD.unpack_dual(layer(fwAD.make_dual(x, v), pos)).tangent
    eps = 1e-6
    with torch.no_grad():
        fd = (layer(x + eps * v, pos) - layer(x - eps * v, pos)) / (2 * eps)
    torch.testing.assert_close(t, fd, rtol=1e-6, atol=1e-7)


def test_attention_alone_with_residual_hessian_vector_product():
    torch.manual_seed(0)
    att = SimpleAttention(12, 3, "linear", 1).to(DT)
    x, pos, w = _inputs(1, True)
    v = torch.randn(x.shape, dtype=DT, generator=torch.Generator().manual_seed(3))

    def grad(at, create_graph=False):
        at = at.detach().requires_grad_(True)
        (g,) = torch.autograd.grad(att(at, pos, w, residual=True).square().sum(), at, create_graph=create_graph)
        return at, g

    xg, g = grad(x, True)
    (hv,) = torch.autograd.grad(g, xg, v)
    eps = 1e-5
    fd = (grad(x + eps * v)[1] - grad(x - eps * v)[1]) / (2 * eps)
    torch.testing.assert_close(hv, fd, rtol=1e-6, atol=1e-6 * float(fd.abs().max()))


def test_softmax_kind_forward_mode_and_double_backward_with_the_math_kernel():
    """The softmax kind under jvp takes the math kernel by itself; gradients of gradients need it asked for
    (torch's fused CPU kernel has no derivative of its backward), and then match finite differences."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    layer = _layer("softmax")
    x, pos, w = _inputs(1, True)
    v = torch.randn_like(x)
    f = lambda a: layer(a, pos, w)  # noqa: E731
    _, t = torch.func.jvp(f, (x,), (v,))
    eps = 1e-6
    with torch.no_grad():
        fd = (f(x + eps * v) - f(x - eps * v)) / (2 * eps)
    torch.testing.assert_close(t, fd, rtol=1e-6, atol=1e-7)
    with sdpa_kernel(SDPBackend.MATH):
        xg, g = _grad(layer, x, pos, w, create_graph=True)
        (hv,) = torch.autograd.grad(g, xg, v)
    fd = (_grad(layer, x + 1e-5 * v, pos, w)[1] - _grad(layer, x - 1e-5 * v, pos, w)[1]) / 2e-5
    torch.testing.assert_close(hv, fd, rtol=1e-6, atol=1e-6 * float(fd.abs().max()))


# darcy-gt on a 7 x 7 attention grid (its preset's 43 x 43 took seconds in float64 double backward; the same layers)
@pytest.mark.parametrize("cfg,res", [("burgers-gt", 24), ("burgers-lt", 24), (("darcy-gt", {"coarse_size": 7}), 13),
                                     ({"name": "scot", "in_channels": 1, "out_channels": 1}, 13),
                                     ({"name": "cno", "in_channels": 1, "out_channels": 1}, 13)])
def test_whole_models_hessian_vector_product_and_jvp(cfg, res):
    """Whole models built from the presets: the Hessian-vector product of a squared output by double backward (the
    fused functions' graph backward) against forward-over-reverse ``torch.func.jvp(torch.func.grad(...))``, under
    which the layers take their plain path (finite differences of the gradient are no truth for deep ReLU models:
    a kink within the step makes them jump); and forward mode (jvp) against reverse mode by <u, J v> = <J^T u, v>."""
    from opformer.models import build_model, model_preset
    from opformer.models.registry import example_inputs

    if isinstance(cfg, tuple):  # a preset with some of its fields changed
        cfg = {**model_preset(cfg[0]), **cfg[1]}
    torch.manual_seed(0)
    model = build_model(cfg).to(DT).eval()
    x, c = example_inputs(model, batch=2, resolution=res, dtype=DT)
    v = torch.randn(x.shape, dtype=DT, generator=torch.Generator().manual_seed(5))
    loss = lambda a: model(a, c).square().sum()  # noqa: E731
    xg = x.clone().requires_grad_(True)
    (g,) = torch.autograd.grad(loss(xg), xg, create_graph=True)
    (hv,) = torch.autograd.grad(g, xg, v)
    _, hv_fwd = torch.func.jvp(torch.func.grad(loss), (x,), (v,))
    assert hv.abs().max() > 0
    torch.testing.assert_close(hv, hv_fwd, rtol=1e-9, atol=1e-9 * float(hv_fwd.abs().max()))
    # forward mode against reverse mode: <u, J v> = <J^T u, v> for any u
    y, t = torch.func.jvp(lambda a: model(a, c), (x,), (v,))
    u = torch.randn(y.shape, dtype=DT, generator=torch.Generator().manual_seed(6))
    xr = x.clone().requires_grad_(True)
    (jtu,) = torch.autograd.grad(model(xr, c), xr, u)
    torch.testing.assert_close((u * t).sum(), (jtu * v).sum(), rtol=1e-10, atol=0.0)
