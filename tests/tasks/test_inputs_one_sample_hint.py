"""A single sample given without its samples axis is refused with the shape that would be taken."""

import numpy as np
import pytest

from opformer.config import ConfigError
from opformer.tasks import get_task


@pytest.mark.parametrize("task,shape", [("burgers", (64,)), ("darcy", (9, 9))])
def test_one_sample_without_samples_axis_names_the_fix(task, shape):
    with pytest.raises(ConfigError) as err:
        get_task(task).inputs_from_array(np.zeros(shape), "cell")
    assert f"(one sample: inputs[None], of shape {(1, *shape)})" in str(err.value)


def test_other_wrong_shapes_get_no_one_sample_hint():
    with pytest.raises(ConfigError) as err:
        get_task("darcy").inputs_from_array(np.zeros(9), "cell")
    assert "must have shape (samples, n1, n2[, channels])" in str(err.value)
    assert "one sample" not in str(err.value)
