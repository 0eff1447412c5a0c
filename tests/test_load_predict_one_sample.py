"""One sample given without its samples axis: ``predict(u0)`` with u0 of shape (n,) or (H, W) is refused naming
``inputs``; one with a channel axis, (n, 1) or (H, W, 1), reads as many samples on a grid one point wide, and the
refusal says so and how to give one sample (``inputs[None]``), not only that the grid is too small."""

import numpy as np
import pytest

import opformer
from opformer.config import ConfigError


@pytest.mark.parametrize("name, shape", [("burgers-gt", (64, 1)), ("darcy33-gt", (33, 33, 1))])
def test_one_sample_with_a_channel_axis_is_refused_saying_how_to_give_it(name, shape, one_thread):
    model = opformer.load(name)
    with pytest.raises(ConfigError) as err:
        model.predict(np.ones(shape))
    text = str(err.value)
    assert "needs at least 3 points along each axis" in text  # what it said before, still said
    assert f"inputs of shape {shape} are {shape[0]} samples" in text and "inputs[None]" in text
    assert model.predict(np.ones(shape)[None]).shape == (1, *shape)  # the way the message gives


@pytest.mark.parametrize("name, shape", [("burgers-gt", (64,)), ("darcy33-gt", (33, 33))])
def test_one_sample_without_a_samples_axis_is_refused_naming_inputs(name, shape):
    with pytest.raises(ConfigError, match=r"inputs of task \w+ must have shape \(samples, "):
        opformer.load(name).predict(np.ones(shape))


def test_a_real_grid_of_one_point_per_sample_keeps_the_plain_message():
    with pytest.raises(ConfigError) as err:
        opformer.load("burgers-gt").predict(np.ones((4, 2)))
    assert "needs at least 3 points" in str(err.value) and "inputs[None]" not in str(err.value)
