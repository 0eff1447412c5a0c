"""scOT's --grid-size below the patch side is refused naming both flags (--patch-size also when it comes from
--size), in one line."""

import pytest

from opformer.models.scot import ScOTConfig
from opformer.train.config import model_error


@pytest.mark.parametrize("kwargs, value", [({}, 4), ({"patch_size": 5}, 5)])
def test_grid_size_below_the_patch_names_both_flags(kwargs, value):
    with pytest.raises(ValueError) as info:
        ScOTConfig(grid_size=3, **kwargs)
    err = model_error(info.value, {"name": "scot"})
    assert err.cli == f"--grid-size 3 is smaller than --patch-size {value} (the side of the patches)"
