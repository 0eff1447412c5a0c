"""scripts/reference_burgers.py: the paper's own Burgers network behind opformer's model interface, and the weight
map that makes our Transformer1d the same function.

Runs only where the optional reference package is installed (pip install --no-deps galerkin-transformer==0.2.1)."""

import pytest
import torch

from opformer.bench.reference import reference_available
from opformer.models import build_model
from opformer.models.presets import PAPER_PARAMETERS, model_preset
from opformer.models.registry import count_parameters

from ..conftest import load_script

pytestmark = pytest.mark.skipif(not reference_available(), reason="the reference package is not installed")


def _script():
    return load_script("reference_burgers")


def _coords(n, dtype=torch.float32):
    return torch.linspace(0, 1, n, dtype=dtype).view(1, n, 1)


def _same_weights(mod, cfg):
    """The reference network (its p = 0.5 attention dropout off) in float64 with every weight moved away from its
    near-identity start, and our Transformer1d holding the same weights; both in training mode."""
    ref = mod.ReferenceBurgers(cfg, "off").double()
    with torch.no_grad():
        for p in ref.parameters():
            p.add_(0.1 * torch.randn_like(p))
    ours = build_model(cfg).double()
    ours.load_state_dict(mod.ours_from_reference(ref.net.state_dict(), cfg))
    return ref, ours


def _assert_same_gradients(mod, cfg, ref, ours):
    """Every parameter of ours has the gradient of its counterpart in the reference network, to 1e-10 relative."""
    ref_grads = mod.ours_from_reference({k: p.grad for k, p in ref.net.named_parameters()}, cfg)
    ours_grads = dict(ours.named_parameters())
    assert set(ref_grads) == set(ours_grads)
    for name, g_ref in ref_grads.items():
        g = ours_grads[name].grad
        assert (g - g_ref).abs().max() <= 1e-10 * g_ref.abs().max() + 1e-300, name


def test_the_reference_network_has_the_paper_parameter_count_and_ours_the_same():
    net = _script().ReferenceBurgers(model_preset("burgers-gt"))
    assert count_parameters(net) == PAPER_PARAMETERS["burgers"][0] == count_parameters(build_model(model_preset("burgers-gt")))


@pytest.mark.parametrize("preset", ["burgers-gt", "burgers-ft"])
def test_with_the_same_weights_ours_is_the_reference_function(preset):
    """Eval mode, float64, every weight perturbed away from the near-identity initialisation: the outputs agree to
    round-off, so a difference in training between the two networks can only come from their initial weights or
    their dropout."""
    mod = _script()
    cfg = model_preset(preset)
    torch.manual_seed(0)
    ref, ours = _same_weights(mod, cfg)
    ref.eval()
    ours.eval()
    x = torch.randn(3, 200, 1, dtype=torch.float64)
    with torch.no_grad():
        y_ref, y = ref(x, _coords(200, torch.float64)), ours(x, _coords(200, torch.float64))
    assert y.shape == y_ref.shape == (3, 200, 1)
    assert (y - y_ref).abs().max() <= 1e-11 * y_ref.abs().max()
    # and a different weight somewhere does change it (the comparison can fail)
    with torch.no_grad():
        ours.encoder.layers[2].attn.qkv.weight[5, 7] += 0.5
        assert (ours(x, _coords(200, torch.float64)) - y_ref).abs().max() > 1e-6 * y_ref.abs().max()


@pytest.mark.parametrize("preset", ["burgers-gt", "burgers-ft"])
def test_in_training_mode_the_gradients_are_the_reference_ones(preset):
    """Training mode (dropout rates 0), float64, the same perturbed weights: every parameter's gradient of the same
    loss agrees to round-off, so the two networks take the same optimizer steps from the same start."""
    mod = _script()
    cfg = dict(model_preset(preset), dropout=0.0)
    torch.manual_seed(1)
    ref, ours = _same_weights(mod, cfg)  # both in training mode
    x, c = torch.randn(3, 128, 1, dtype=torch.float64), _coords(128, torch.float64)
    target = torch.randn(3, 128, 1, dtype=torch.float64)
    (ref(x, c) - target).pow(2).sum().backward()
    (ours(x, c) - target).pow(2).sum().backward()
    _assert_same_gradients(mod, cfg, ref, ours)


def test_the_reference_initialisation_differs_from_ours_where_the_docstring_says():
    """The reference copies one initialised encoder layer to every layer; ours draws each layer afresh."""
    torch.manual_seed(0)
    ref = _script().ReferenceBurgers(model_preset("burgers-gt"), "off").net
    layers = ref.encoder_layers
    assert torch.equal(layers[0].ff.lr1.weight, layers[3].ff.lr1.weight)
    ours = build_model(model_preset("burgers-gt"))
    assert not torch.equal(ours.encoder.layers[0].ffn.net[0].weight, ours.encoder.layers[3].ffn.net[0].weight)


def test_the_attention_dropout_bug_modes():
    mod = _script()
    torch.manual_seed(0)
    x = torch.randn(2, 64, 1)
    cfg = dict(model_preset("burgers-gt"), dropout=0.0)
    with torch.no_grad():
        net = mod.ReferenceBurgers(cfg, "train")
        net.eval()
        assert torch.equal(net(x, _coords(64)), net(x, _coords(64)))
        net.train()
        assert not torch.equal(net(x, _coords(64)), net(x, _coords(64)))
        always = mod.ReferenceBurgers(cfg, "always").eval()
        assert not torch.equal(always(x, _coords(64)), always(x, _coords(64)))
        off = mod.ReferenceBurgers(cfg, "off")  # training mode, every dropout rate 0
        assert torch.equal(off(x, _coords(64)), off(x, _coords(64)))
    with pytest.raises(ValueError, match="train, always or off"):
        mod.ReferenceBurgers(cfg, "sometimes")
    with pytest.raises(ValueError, match="Transformer1d"):
        mod.reference_config(model_preset("burgers-fno"))


def _replayed_dropout(monkeypatch, seed):
    """Make every active dropout draw its mask from one generator seeded with ``seed``, in call order: two networks
    that apply dropout at the same places in the same order then get the same masks."""
    gen = torch.Generator().manual_seed(seed)

    def dropout(input, p=0.5, training=True, inplace=False):
        if not training or p == 0.0:
            return input
        keep = torch.rand(input.shape, generator=gen, dtype=torch.float64) >= p
        return input * keep.to(input.dtype) / (1.0 - p)

    monkeypatch.setattr(torch.nn.functional, "dropout", dropout)


@pytest.mark.parametrize("preset", ["burgers-gt", "burgers-ft"])
def test_with_the_same_dropout_masks_training_is_the_reference_one(preset, monkeypatch):
    """Training mode with the preset's dropout 0.05 on (residual branches and inside the FFN), float64, the same
    perturbed weights, and every mask drawn from one replayed sequence: the outputs and every parameter's gradient
    agree to round-off.  So the two networks apply dropout at the same places in the same order, and two runs of
    them differ only in which masks the random generator happens to draw (and float32 rounding)."""
    mod = _script()
    cfg = model_preset(preset)
    assert cfg["dropout"] > 0
    torch.manual_seed(2)
    ref, ours = _same_weights(mod, cfg)  # training mode, the reference's attention-dropout bug off
    x, c = torch.randn(3, 96, 1, dtype=torch.float64), _coords(96, torch.float64)
    target = torch.randn(3, 96, 1, dtype=torch.float64)
    _replayed_dropout(monkeypatch, 7)
    y_ref = ref(x, c)
    _replayed_dropout(monkeypatch, 7)
    y = ours(x, c)
    assert (y - y_ref).abs().max() <= 1e-10 * y_ref.abs().max()
    (y_ref - target).pow(2).sum().backward()
    (y - target).pow(2).sum().backward()
    _assert_same_gradients(mod, cfg, ref, ours)
    # the masks do act (another replayed sequence gives another output), and a network with its FFN dropout
    # elsewhere or missing is told apart: the comparison can fail
    _replayed_dropout(monkeypatch, 8)
    assert (ours(x, c) - y_ref).abs().max() > 1e-3 * y_ref.abs().max()
    other = build_model(dict(cfg, ffn_dropout=0.0)).double()
    other.load_state_dict(ours.state_dict())
    _replayed_dropout(monkeypatch, 7)
    assert (other(x, c) - y_ref).abs().max() > 1e-3 * y_ref.abs().max()
