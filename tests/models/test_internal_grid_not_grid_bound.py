"""A model that runs on an internal grid of its own (``grid_size``) is not grid bound.

``OperatorModel.grid_bound`` decides whether a loaded model is run on its training grid (the data interpolated
to it and the prediction back).  A model with ``grid_size`` already resamples every input to its own grid, so the
detour through the training grid would only add two interpolations.  ViT and CNO said so; scOT and U-Net reported
themselves grid bound whatever their ``grid_size``."""

import pytest

from opformer.models import build_model

CASES = [
    ({"name": "scot"}, 16),
    ({"name": "scot", "galerkin": True}, 16),
    ({"name": "unet"}, 16),
    ({"name": "vit"}, 16),
    ({"name": "cno", "levels": 2}, 16),
]


@pytest.mark.parametrize("cfg,grid_size", CASES, ids=lambda c: c["name"] if isinstance(c, dict) else str(c))
def test_grid_size_makes_a_model_resolution_free(cfg, grid_size):
    assert build_model(cfg).grid_bound is True
    assert build_model({**cfg, "grid_size": grid_size}).grid_bound is False
