"""Data in small physical units (a spread of 1e-8, e.g. a displacement in metres) are standardized as data in units
of order one are: the normalizer's eps (the reference's absolute 1e-5) is no larger than the data's own spread, so
a model is not trained on targets squeezed towards zero (a 1-epoch FNO on 30^2 Darcy-like targets with a per-point
spread of 4e-3: relative L2 0.058; the same targets times 1e-6 and 1e-8: 0.54 and 55 before, 0.058 now)."""

import numpy as np
import pytest
import torch

from opformer.data import UnitGaussianNormalizer


def _fields(n_samples=12, n=9, seed=0):
    rng = np.random.default_rng(seed)
    return 0.5 + 0.1 * rng.standard_normal((n_samples, n, n, 1))


@pytest.mark.parametrize("per_point", [True, False])
@pytest.mark.parametrize("scale", [1e-6, 1e-9, 1e-14])
def test_small_units_are_standardized_like_units_of_order_one(per_point, scale):
    x = _fields()
    unit = UnitGaussianNormalizer.fit(x, per_point=per_point)
    small = UnitGaussianNormalizer.fit(x * scale, per_point=per_point)
    z_unit = unit.encode(torch.as_tensor(x, dtype=torch.float32))
    z_small = small.encode(torch.as_tensor(x * scale, dtype=torch.float32))
    assert float(z_small.std()) > 0.3  # was about 1e-2 at a spread of 1e-7 and 1e-5 at 1e-10: the signal lost
    assert float(z_small.std()) == pytest.approx(float(z_unit.std()), rel=0.6)
    back = small.decode(z_small)
    assert torch.allclose(back.double(), torch.as_tensor(x * scale), rtol=1e-5, atol=0)


def test_units_of_order_one_keep_the_references_eps():
    """The reference's eps is kept wherever the spread is at least that (all of the paper's data), and for data that
    do not vary at all, where it is what keeps the division finite."""
    x = _fields()
    assert UnitGaussianNormalizer.fit(x).eps == 1e-5
    assert UnitGaussianNormalizer.fit(x * 1e-3, per_point=False).eps == 1e-5
    assert UnitGaussianNormalizer.fit(np.ones((4, 5, 5, 1))).eps == 1e-5
    small = UnitGaussianNormalizer.fit(x * 1e-9)
    assert 0 < small.eps < 1e-9
    rebuilt = UnitGaussianNormalizer.empty(small.describe())  # a checkpoint keeps the eps it was trained with
    assert rebuilt.eps == small.eps
