"""scripts/reference_darcy.py: the paper's own Darcy network behind opformer's model interface.

Runs only where the optional reference package is installed (pip install --no-deps galerkin-transformer==0.2.1)."""

import pytest
import torch

from opformer.bench.reference import reference_available
from opformer.models import build_model
from opformer.models.presets import PAPER_PARAMETERS, model_preset
from opformer.models.registry import count_parameters, default_coords

from ..conftest import load_script

pytestmark = pytest.mark.skipif(not reference_available(), reason="the reference package is not installed")


def _script():
    return load_script("reference_darcy")


def test_the_reference_network_has_the_paper_parameter_count_and_ours_the_same():
    net = _script().ReferenceDarcy(85, 29)
    ours = build_model(dict(model_preset("darcy-gt"), coarse_size=29))
    assert count_parameters(net) == PAPER_PARAMETERS["darcy"][0] == count_parameters(ours)


def test_the_attention_dropout_bug_modes():
    mod = _script()
    torch.manual_seed(0)
    x = torch.randn(2, 85, 85, 1)
    coords = default_coords(85, 2)
    net = mod.ReferenceDarcy(85, 29, "train")
    with torch.no_grad():
        assert net(x, coords).shape == (2, 85, 85, 1)
        net.eval()
        assert torch.equal(net(x, coords), net(x, coords))  # "train": evaluation is deterministic
        net.train()
        assert not torch.equal(net(x, coords), net(x, coords))  # the p = 0.5 dropout acts in training
        always = mod.ReferenceDarcy(85, 29, "always").eval()
        assert not torch.equal(always(x, coords), always(x, coords))  # as the paper's runs: in evaluation too
        off = mod.ReferenceDarcy(85, 29, "off")
        for layer in off.net.modules():
            if isinstance(layer, torch.nn.Dropout):
                layer.p = 0.0
        assert torch.equal(off(x, coords), off(x, coords))  # no dropout left at all
    with pytest.raises(ValueError, match="not one of"):
        mod.ReferenceDarcy(90, 29)
