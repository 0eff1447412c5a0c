"""``Predictor.predict(inputs, coords=...)``: the coordinates of the points, shared by all samples or one set per
sample, in any number of batches; coordinates of the wrong shape are refused naming ``coords`` and the shapes it
takes (not as a grid the model cannot run on)."""

import numpy as np
import pytest
import torch

import opformer
from opformer.tasks.artifact import ConfigError


@pytest.fixture(scope="module")
def model():
    return opformer.load("burgers-gt")


def _inputs(samples=5, n=64):
    g = np.arange(n) / n
    return np.stack([np.sin(2 * np.pi * (k + 1) * g) for k in range(samples)]), g


@pytest.mark.parametrize("shape", ["n", "n,1", "1,n,1", "samples,n,1"])
def test_coordinates_of_every_documented_shape_give_the_default_grids_predictions(model, shape, one_thread):
    x, g = _inputs()
    coords = {"n": g, "n,1": g[:, None], "1,n,1": g[None, :, None],
              "samples,n,1": np.repeat(g[None, :, None], len(x), axis=0)}[shape]
    expected = model.predict(x)
    for batch_size in (2, 32):  # one set per sample: each batch takes its own samples' coordinates
        got = model.predict(x, coords=coords, batch_size=batch_size)
        np.testing.assert_allclose(got, expected, rtol=0, atol=1e-6)
    got = model.predict(torch.as_tensor(x), coords=torch.as_tensor(coords), batch_size=2)
    np.testing.assert_allclose(got.numpy(), expected, rtol=0, atol=1e-6)


def test_coordinates_per_sample_are_used_per_sample(model, one_thread):
    x, g = _inputs()
    shifted = np.repeat(g[None, :, None], len(x), axis=0)
    shifted[3] = (shifted[3] + 0.25) % 1.0  # sample 3 on shifted coordinates: only its prediction changes
    base, got = model.predict(x), model.predict(x, coords=shifted, batch_size=2)
    np.testing.assert_allclose(np.delete(got, 3, 0), np.delete(base, 3, 0), rtol=0, atol=1e-6)
    assert np.abs(got[3] - base[3]).max() > 1e-4


@pytest.mark.parametrize("coords", [np.zeros(32), np.zeros((64, 2)), np.zeros((3, 64, 1)), np.zeros((1, 1, 64, 1))])
def test_coordinates_of_a_wrong_shape_are_refused_naming_the_argument(model, coords):
    x, _ = _inputs()
    with pytest.raises(ConfigError) as err:
        model.predict(x, coords=coords)
    text = str(err.value)
    assert text.startswith("coords must have shape") and str(tuple(coords.shape)) in text
    assert "resample" not in text and "\n" not in text
