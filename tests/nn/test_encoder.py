"""Facts about EncoderLayer / Encoder: the two norm schemes (eqs. (4), (7)), gradients, compile."""

import pytest
import torch

from opformer.nn import Encoder, EncoderLayer

KINDS = ["galerkin", "fourier", "softmax", "linear"]


@pytest.mark.parametrize("scheme", ["galerkin", "regular", "pre"])
@pytest.mark.parametrize("kind", KINDS)
def test_gradients_reach_every_parameter(kind, scheme):
    torch.manual_seed(0)
    enc = Encoder(2, 16, 2, kind, dim_feedforward=32, pos_dim=1, norm_scheme=scheme)
    x, pos = torch.randn(2, 24, 16), torch.rand(2, 24, 1)
    enc(x, pos).square().mean().backward()
    for name, p in enc.named_parameters():
        assert p.grad is not None and p.grad.abs().sum() > 0, f"no gradient for {name} ({kind}, {scheme})"


def test_ex1_layer_parameter_count_matches_reference():
    """d=96, 1 head, pos_dim 1, ffn 192: QKV 27,936 + fc 9,408 + 2 LN 384 + FFN 37,152 = 74,880 (the reference's
    count, docs/models.md)."""
    for scheme in ("galerkin", "regular"):
        layer = EncoderLayer(96, 1, "galerkin", 192, pos_dim=1, norm_scheme=scheme)
        assert sum(p.numel() for p in layer.parameters()) == 74_880


def test_regular_scheme_is_post_layer_norm():
    """Eq. (7): the output of a regular-Ln layer is a LayerNorm output: zero mean, unit variance per point."""
    torch.manual_seed(0)
    layer = EncoderLayer(32, 4, "galerkin", 64, pos_dim=1, norm_scheme="regular")
    y = layer(5 * torch.randn(2, 50, 32) + 3, torch.rand(2, 50, 1))
    torch.testing.assert_close(y.mean(-1), torch.zeros(2, 50), atol=1e-5, rtol=0)
    torch.testing.assert_close(y.var(-1, unbiased=False), torch.ones(2, 50), atol=1e-3, rtol=0)
    assert len(layer.attn.norms) == 0  # no Q/K/V norm in this scheme


def test_galerkin_scheme_propagates_scale_through_the_residual():
    """Eq. (4): no normalization outside the attention, so with the attention and FFN outputs zeroed the layer is
    the identity (scale propagates), and Ln acts on K,V only."""
    layer = EncoderLayer(32, 4, "galerkin", 64, pos_dim=1, norm_scheme="galerkin")
    assert set(layer.attn.norms) == {"k", "v"}
    assert set(EncoderLayer(32, 4, "fourier", 64, pos_dim=1).attn.norms) == {"q", "k"}
    with torch.no_grad():
        layer.attn.out_proj.weight.zero_()
        layer.attn.out_proj.bias.zero_()
        layer.ffn.net[-1].weight.zero_()
        layer.ffn.net[-1].bias.zero_()
    x = 100 * torch.randn(2, 10, 32)
    torch.testing.assert_close(layer(x, torch.rand(2, 10, 1)), x)


@pytest.mark.parametrize("kind", KINDS)
def test_pre_scheme_normalizes_the_branch_inputs_and_never_the_residual_stream(kind):
    """Pre-LN: out = y + g(LN2(y)), y = x + Attn(LN1(x)), float64; no Q/K/V norm; the layer is invariant to a shift
    and a positive scale of x in its branches only (with zeroed branches it is the identity at any scale), and a
    common shift c of x moves the output by exactly c (the norms remove it from the branches)."""
    torch.manual_seed(0)
    layer = EncoderLayer(16, 2, kind, 32, pos_dim=1, norm_scheme="pre").double()
    assert len(layer.attn.norms) == 0
    x = torch.randn(2, 21, 16, dtype=torch.float64)
    pos = torch.rand(2, 21, 1, dtype=torch.float64)
    y = x + layer.attn(torch.nn.functional.layer_norm(x, (16,), layer.ln1.weight, layer.ln1.bias, layer.ln1.eps), pos)
    want = y + layer.ffn(torch.nn.functional.layer_norm(y, (16,), layer.ln2.weight, layer.ln2.bias, layer.ln2.eps))
    torch.testing.assert_close(layer(x, pos), want, rtol=1e-12, atol=1e-12)
    shift = 3.0 * torch.ones(16, dtype=torch.float64)
    torch.testing.assert_close(layer(x + shift, pos), layer(x, pos) + shift, rtol=1e-10, atol=1e-10)
    with torch.no_grad():
        layer.attn.out_proj.weight.zero_()
        layer.attn.out_proj.bias.zero_()
        layer.ffn.net[-1].weight.zero_()
        layer.ffn.net[-1].bias.zero_()
    torch.testing.assert_close(layer(100 * x, pos), 100 * x)


def test_unknown_norm_scheme():
    with pytest.raises(ValueError, match=r"unknown norm_scheme 'post'; known: \['galerkin', 'regular', 'pre'\]"):
        EncoderLayer(8, 1, "galerkin", norm_scheme="post")


def test_dropout_layers_inactive_in_eval():
    layer = EncoderLayer(16, 2, "fourier", 32, pos_dim=1, dropout=0.5, attn_dropout=0.5).eval()
    x, pos = torch.randn(1, 20, 16), torch.rand(1, 20, 1)
    assert torch.equal(layer(x, pos), layer(x, pos))



@pytest.mark.parametrize("scheme", ["galerkin", "regular"])
@pytest.mark.parametrize("which", ["drop1", "drop2", "ffn"])
def test_one_dropout_switched_on_in_an_evaluating_layer_acts_alone(scheme, which):
    """Monte Carlo dropout: model.eval(), then one nn.Dropout back to training mode.  The layer must follow each
    dropout module's own mode (not its own), so the fused no-dropout paths must not swallow the one switched on; the
    result is the plain composition with that one mask and no other."""
    torch.manual_seed(0)
    layer = EncoderLayer(16, 2, "galerkin", 32, pos_dim=1, norm_scheme=scheme, dropout=0.3).double().eval()
    x, pos = torch.randn(2, 24, 16, dtype=torch.float64), torch.rand(1, 24, 1, dtype=torch.float64)
    off = layer(x, pos)
    module = layer.ffn.net[2] if which == "ffn" else getattr(layer, which)
    module.train()
    torch.manual_seed(1)
    on = layer(x, pos)
    assert not torch.allclose(on, off, atol=1e-6)  # the one dropout acts

    torch.manual_seed(1)  # the same mask, drawn by the plain composition
    y = x + (layer.drop1(layer.attn(x, pos)) if which == "drop1" else layer.attn(x, pos))
    if scheme == "regular":
        y = layer.ln1(y)
    g = layer.ffn(y)
    out = y + (layer.drop2(g) if which == "drop2" else g)
    if scheme == "regular":
        out = layer.ln2(out)
    torch.testing.assert_close(on, out, rtol=1e-10, atol=1e-10)
    module.eval()
    torch.testing.assert_close(layer(x, pos), off, rtol=0, atol=0)


@pytest.mark.parametrize("scheme", ["galerkin", "regular"])
def test_attention_branch_dropout_zero_keeps_only_the_ffn_dropouts(scheme):
    """``attn_branch_dropout=0`` with ``dropout`` p: a training layer is the same function, mask for mask, as the
    layer with dropout p whose attention-branch dropout alone is switched off; None follows ``dropout``."""
    torch.manual_seed(0)
    a = EncoderLayer(16, 2, "galerkin", 32, pos_dim=1, norm_scheme=scheme, dropout=0.3,
                     attn_branch_dropout=0.0).double().train()
    b = EncoderLayer(16, 2, "galerkin", 32, pos_dim=1, norm_scheme=scheme, dropout=0.3).double().train()
    b.load_state_dict(a.state_dict())
    assert a.drop1.p == 0.0 and a.drop2.p == a.ffn.net[2].p == 0.3 and b.drop1.p == 0.3
    b.drop1.eval()
    x, pos = torch.randn(2, 24, 16, dtype=torch.float64), torch.rand(1, 24, 1, dtype=torch.float64)
    torch.manual_seed(1)
    ya = a(x, pos)
    torch.manual_seed(1)
    yb = b(x, pos)
    torch.testing.assert_close(ya, yb, rtol=0, atol=0)
    torch.manual_seed(2)
    assert not torch.allclose(a(x, pos), ya)  # the FFN's dropouts still act


def test_attention_branch_dropout_is_a_model_field_checked_like_the_others():
    from opformer.models import MODEL_PRESETS, build_model

    cfg = {**MODEL_PRESETS["burgers-gt"], "d_model": 16, "dropout": 0.1}
    model = build_model({**cfg, "attn_branch_dropout": 0.0})
    assert model.to_config()["attn_branch_dropout"] == 0.0  # travels with a saved model
    assert all(layer.drop1.p == 0.0 and layer.drop2.p == 0.1 for layer in model.encoder.layers)
    assert all(layer.drop1.p == 0.1 for layer in build_model(cfg).encoder.layers)
    with pytest.raises(ValueError, match="attn_branch_dropout"):
        build_model({**cfg, "attn_branch_dropout": 1.5})


@pytest.mark.parametrize("kind", ["galerkin", "fourier"])
def test_torch_compile_matches_eager(kind):
    torch.manual_seed(0)
    layer = EncoderLayer(16, 2, kind, 32, pos_dim=1)
    compiled = torch.compile(layer)
    x, pos = torch.randn(2, 32, 16), torch.rand(2, 32, 1)
    torch.testing.assert_close(compiled(x, pos), layer(x, pos), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("chunk", [None, 7 * 32])
@pytest.mark.parametrize("scheme", ["galerkin", "regular"])
@pytest.mark.parametrize("kind", KINDS)
def test_fused_residual_sums_equal_the_plain_composition(kind, scheme, chunk, monkeypatch):
    """Without active residual dropout the layer takes x + Attn(x) and y + g(y) inside fused functions (ReLU and its
    backward in place, the hidden gradient a block of rows at a time: here also blocks of 7 rows): the same
    function as the composition of eqs. (4)/(7), values and gradients, float64."""
    if chunk is not None:
        from opformer.nn import encoder as E

        monkeypatch.setattr(E, "_CHUNK_ELEMENTS", chunk)
    torch.manual_seed(0)
    layer = EncoderLayer(16, 2, kind, 32, pos_dim=1, norm_scheme=scheme).double()
    with torch.no_grad():
        for p in layer.parameters():
            p.add_(0.1 * torch.randn_like(p))
    x = torch.randn(2, 21, 16, dtype=torch.float64, requires_grad=True)
    pos = torch.rand(2, 21, 1, dtype=torch.float64)

    def composed(x):
        y = x + layer.attn(x, pos)
        if scheme == "regular":
            y = layer.ln1(y)
            return layer.ln2(y + layer.ffn(y))
        return y + layer.ffn(y)

    y1, y2 = layer(x, pos), composed(x)
    torch.testing.assert_close(y1, y2, rtol=1e-10, atol=1e-12)
    g1 = torch.autograd.grad(y1.square().sum(), [x, *layer.parameters()])
    g2 = torch.autograd.grad(y2.square().sum(), [x, *layer.parameters()])
    for a, b in zip(g1, g2):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)


def test_a_misspelt_keyword_is_a_value_error_with_the_nearest_name():
    """Extra keywords go to SimpleAttention; a typo names the layer and the keyword meant, not an internal
    signature (it was "SimpleAttention.__init__() got an unexpected keyword argument")."""
    with pytest.raises(ValueError, match=r"unknown keyword 'chunksize' for EncoderLayer; did you mean 'chunk_size'\?"):
        EncoderLayer(16, 4, "fourier", pos_dim=2, chunksize=3)
    with pytest.raises(ValueError, match=r"unknown keyword 'dropuot' for EncoderLayer; did you mean 'dropout'\?"):
        Encoder(2, 16, 4, "galerkin", dropuot=0.1)
    with pytest.raises(ValueError, match="unknown keyword 'norm'"):  # set by norm_scheme, not a keyword of its own
        EncoderLayer(16, 4, norm=False)
    layer = EncoderLayer(16, 4, "fourier", pos_dim=2, eta=0.1, chunk_size=4, scale="sqrt", fourier_order="linear")
    assert layer.attn.chunk_size == 4
