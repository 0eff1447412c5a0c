"""Lead-time conditioning: identity at initialisation, tau-dependent after a training step, in every model."""

import pytest
import torch

from opformer.models import build_model, example_inputs, model_preset
from opformer.nn import ConditionalLayerNorm, SimpleAttention

PRESETS = ["burgers-gt", "burgers-ft", "burgers-gt-regular", "burgers-st-regular", "burgers-lt", "burgers-fno",
           "darcy-gt", "darcy-fno"]


def _small(name):
    cfg = model_preset(name)
    if cfg["name"] == "transformer2d":
        cfg.update(d_model=32, num_layers=2, dim_feedforward=32, coarse_size=9, modes=4, decoder_ffn=16)
    if cfg["name"] == "fno2d":
        cfg.update(width=8, modes=4)
    return cfg


def test_conditional_layer_norm_is_the_layer_norm_at_initialisation_for_every_lead_time():
    torch.manual_seed(0)
    cln, x = ConditionalLayerNorm(16), torch.randn(3, 5, 16)
    plain = torch.nn.functional.layer_norm(x, (16,), cln.weight, cln.bias, cln.eps)
    for tau in (0.0, 0.5, 40.0):
        torch.testing.assert_close(cln(x, torch.full((3,), tau)), plain, rtol=0, atol=0)
    torch.testing.assert_close(cln(x), plain, rtol=0, atol=0)


@pytest.mark.parametrize("name", PRESETS)
def test_conditioned_model_at_initialisation_equals_the_unconditioned_one(name):
    """With the unconditioned model's weights, a "norm"-conditioned model gives the same output for any tau
    (g = 1, h = 0 at initialisation); the parameter names of the shared layers are the same."""
    cfg = _small(name)
    torch.manual_seed(0)
    plain = build_model(cfg).eval()
    cond = build_model({**cfg, "time_conditioning": "norm"}).eval()
    result = cond.load_state_dict(plain.state_dict(), strict=False)
    assert not result.unexpected_keys and all(".cond" in k or k.startswith("cond.") for k in result.missing_keys)
    x, c = example_inputs(cfg, batch=2, resolution=64 if cfg["name"].endswith("1d") else 29)
    with torch.no_grad():
        ref = plain(x, c)
        for tau in (torch.zeros(2), torch.tensor([0.3, 7.0])):
            torch.testing.assert_close(cond(x, c, lead_time=tau), ref, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("mode", ["norm", "channel"])
@pytest.mark.parametrize("name", ["burgers-gt", "burgers-ft-regular", "burgers-fno", "darcy-gt"])
def test_output_depends_on_the_lead_time_after_a_training_step(name, mode):
    cfg = {**_small(name), "time_conditioning": mode}
    if "dropout" in cfg:
        cfg["dropout"] = 0.0
    torch.manual_seed(1)
    model = build_model(cfg)
    x, c = example_inputs(cfg, batch=4, resolution=64 if cfg["name"].endswith("1d") else 29)
    tau = torch.tensor([0.1, 0.5, 1.0, 2.0])
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    loss = (model(x, c, lead_time=tau) - tau.view(-1, *([1] * (x.dim() - 1)))).pow(2).mean()
    loss.backward()
    opt.step()
    model.eval()
    with torch.no_grad():
        a = model(x[:1], c[:1], lead_time=torch.tensor([0.1]))
        b = model(x[:1], c[:1], lead_time=torch.tensor([2.0]))
    assert (a - b).abs().max() > 1e-4


def test_lead_time_is_required_by_conditioned_models_and_refused_by_others():
    cfg = _small("burgers-gt")
    x, c = example_inputs(cfg, batch=2, resolution=32)
    with pytest.raises(ValueError, match="needs lead_time"):
        build_model({**cfg, "time_conditioning": "norm"})(x, c)
    with pytest.raises(ValueError, match="not lead-time conditioned"):
        build_model(cfg)(x, c, lead_time=torch.ones(2))
    with pytest.raises(ValueError, match="time_conditioning"):
        build_model({**cfg, "time_conditioning": "film"})


@pytest.mark.parametrize("kind", ["fourier", "softmax"])
def test_fourier_and_softmax_attention_let_the_lead_time_shift_their_output(kind):
    """Eq. 4 normalizes Q and K for these kinds: conditioning only those norms reweights the values, so where the
    values vanish (an input far smaller than the targets) the layer's output could not depend on tau; the
    conditioned scale and shift of their output lets it."""
    torch.manual_seed(0)
    attn = SimpleAttention(16, 2, kind=kind, conditioned=True)
    with torch.no_grad():
        attn.qkv.weight[32:].zero_()  # V = 0
        last = attn.cond_out.mlp.net[-1]
        last.weight.normal_()
        last.bias.normal_()
    x = torch.randn(2, 10, 16)
    with torch.no_grad():
        a = attn(x, lead_time=torch.full((2,), 0.5))
        b = attn(x, lead_time=torch.full((2,), 2.0))
    assert a.abs().max() > 1e-3 and (a - b).abs().max() > 1e-3
    assert SimpleAttention(16, 2, kind="galerkin", conditioned=True).cond_out is None  # V is a conditioned norm there


def test_fourier_weights_saved_without_the_output_conditioning_load_as_the_same_function():
    torch.manual_seed(0)
    saved = SimpleAttention(16, 2, kind="fourier", pos_dim=2, conditioned=True)
    state = {k: v for k, v in saved.state_dict().items() if not k.startswith("cond_out.")}
    loaded = SimpleAttention(16, 2, kind="fourier", pos_dim=2, conditioned=True)
    with torch.no_grad():
        for p in loaded.cond_out.parameters():
            p.normal_()
    loaded.load_state_dict(state)  # strict: the missing output conditioning is filled with its identity start
    x, pos, tau = torch.randn(2, 10, 16), torch.rand(2, 10, 2), torch.tensor([0.5, 3.0])
    with torch.no_grad():
        torch.testing.assert_close(loaded(x, pos, lead_time=tau), saved(x, pos, lead_time=tau), rtol=0, atol=0)


def test_a_lead_time_of_the_wrong_length_is_named_in_the_shape_given():
    """(The shape reported was the internal column's, (2, 1), for a lead_time of shape (2,).)"""
    from opformer.nn.conditional import lead_time_column

    with pytest.raises(ValueError, match=r"lead_time must have one value per sample \(batch=3\), got shape \(2,\)$"):
        lead_time_column(torch.tensor([0.1, 0.2]), 3, torch.float32, "cpu")
