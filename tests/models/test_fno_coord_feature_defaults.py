"""Which FNO presets lift periodic position features (cos/sin 2 pi x) and which the raw coordinates, and that the
model-level default stays raw: a config saved without ``coord_features`` (every FNO run and artifact from before
the field) builds the same network and gives the same outputs.  docs/models.md, "FNO across grids"."""

from __future__ import annotations

import pytest
import torch

from opformer.models import build_model, example_inputs, model_config, model_preset
from opformer.models.fno import FNO1dConfig, FNO2dConfig
from opformer.train.config import load_preset, resolve

#: run presets whose FNO lifts cos/sin 2 pi x: the 2D Navier-Stokes data, periodic on [0, 1)^2, where the raw
#: coordinates made the model grid-dependent (trained at 16^2: 4x the error at 32^2)
PERIODIC = ["ns-fno", "ns-fno-channel"]
#: non-periodic data (Darcy: Dirichlet walls); the shear layer, where the periodic features trained worse; and the 1D
#: Burgers FNOs, where the raw x showed no grid dependence (the paper's parameter count kept)
RAW = ["darcy-fno", "darcy-inverse-fno", "darcy-fno-cpu", "darcy-inverse-fno-cpu", "shear-layer-fno",
       "shear-layer-fno-channel", "burgers-fno", "burgers-traj-fno", "burgers-traj-fno-channel"]


def run_model(name: str):
    return model_config(resolve(load_preset(name)).model)


def test_the_model_level_default_is_raw():
    assert FNO1dConfig().coord_features == FNO2dConfig().coord_features == "raw"
    for name in ("fno1d", "fno2d"):
        model = build_model({"name": name, "width": 4, "modes": 3})
        assert model.config.coord_features == "raw"
        assert model.lift.in_features == 1 + model.spatial_dim


@pytest.mark.parametrize("preset", ["burgers-fno", "darcy-fno", "ns-fno"])
def test_a_saved_config_without_the_field_builds_the_raw_network_and_the_same_outputs(preset):
    """The build_model dict of a model saved before the field existed (the preset's sizes, raw coordinates, no
    ``coord_features`` key) rebuilds a raw network; its weights load strictly and predict exactly as before."""
    model = resolve(load_preset(preset)).model if preset.startswith("ns-") else model_preset(preset)
    old = {k: v for k, v in model.items() if k != "coord_features"}
    small = {"width": 8, "modes": 4} if old["name"] == "fno2d" else {"width": 8, "modes": 6, "head_width": 16}
    old.update(small)
    torch.manual_seed(0)
    saved = build_model({**old, "coord_features": "raw"}).eval()
    loaded = build_model(old).eval()
    assert loaded.config.coord_features == "raw" and loaded.config == saved.config
    loaded.load_state_dict(saved.state_dict(), strict=True)
    inputs = example_inputs(old, batch=2, resolution=32 if old["name"] == "fno1d" else 15)
    if old.get("time_conditioning", "none") != "none":  # ns-fno: lead-time conditioned
        inputs = (*inputs, torch.tensor([0.5, 1.0]))
    with torch.no_grad():
        torch.testing.assert_close(loaded(*inputs), saved(*inputs), rtol=0, atol=0)
    # the preset's own network now differs in its lift when periodic: old weights cannot load into it by accident
    fresh = build_model({**model, **small})
    if fresh.config.coord_features == "periodic":
        with pytest.raises(RuntimeError, match="lift.weight"):
            fresh.load_state_dict(saved.state_dict(), strict=True)


def test_a_trained_burgers_fno_artifact_from_before_loads_with_the_raw_network():
    """A checkpoint's artifact stores the model dict it trained with; one written before (no coord_features) builds
    the raw network, whatever the preset's default is now."""
    from opformer.tasks.artifact import build_operator

    old = {k: v for k, v in model_preset("burgers-fno").items() if k != "coord_features"}
    old.update(width=8, modes=6, head_width=16)
    torch.manual_seed(1)
    saved = build_model({**old, "coord_features": "raw"}).eval()
    operator, _, _ = build_operator({"task": "burgers", "model": old, "normalizers": {}})
    operator.model.load_state_dict(saved.state_dict(), strict=True)
    assert operator.model.config.coord_features == "raw"
    x, c = example_inputs(old, batch=2, resolution=64)
    with torch.no_grad():
        torch.testing.assert_close(operator.model(x, c), saved(x, c), rtol=0, atol=0)


@pytest.mark.parametrize("name", PERIODIC)
def test_fno_presets_of_periodic_problems_lift_periodic_features(name):
    assert run_model(name).coord_features == "periodic"


@pytest.mark.parametrize("name", RAW)
def test_darcy_and_shear_layer_fno_presets_keep_the_raw_coordinates(name):
    assert run_model(name).coord_features == "raw"


def test_the_paper_model_presets_keep_the_raw_coordinates():
    """The model presets of the paper's tables keep Li et al.'s raw coordinates (and the paper's parameter counts)."""
    for name in ("burgers-fno", "darcy-fno", "darcy-inverse-fno"):
        assert model_preset(name).get("coord_features", "raw") == "raw"
