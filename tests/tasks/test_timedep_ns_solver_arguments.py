"""``opformer.pde.navier_stokes.solve``, which makes the trajectories of the time-dependent tasks: values it cannot
solve with are refused naming the argument (an infinite t_final stepped forever, an infinite nu ended in "the
solution became NaN", a NaN output time returned the previous frame), and an empty batch gives an empty result."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from opformer.pde import navier_stokes
from opformer.pde.errors import DataError


@pytest.fixture
def w0():
    torch.set_num_threads(1)
    return np.random.default_rng(0).normal(size=(2, 8, 8))


@pytest.mark.timeout(20)
@pytest.mark.parametrize("kwargs, message", [
    ({"t_final": float("inf")}, "t_final must be a finite number > 0, found inf"),
    ({"t_final": float("nan")}, "t_final must be a finite number > 0, found nan"),
    ({"nu": float("inf")}, "nu must be a finite number > 0, found inf"),
    ({"nu": "0.1"}, "nu must be a finite number > 0, found '0.1'"),
    ({"times": [0.0, float("nan")]}, "times must be ascending in [0, t_final=0.1], found [0.0, nan]"),
    ({"dt": float("nan")}, "dt must be a number > 0, found nan"),
    ({"cfl": float("inf")}, "cfl and max_dt must be finite numbers > 0, found inf, "),
    ({"solve_resolution": 16.5}, "solve_resolution must be an integer multiple of the grid size 8, found 16.5"),
])
def test_arguments_it_cannot_solve_with_are_refused_naming_them(w0, kwargs, message):
    args = {"nu": 1e-3, "t_final": 0.1, **kwargs}
    with pytest.raises(DataError) as info:
        navier_stokes.solve(w0, **args)
    assert f"navier_stokes.solve: {message}" in str(info.value)


def test_an_infinite_dt_is_one_step_per_output_interval_and_an_empty_batch_an_empty_result(w0):
    one = navier_stokes.solve(w0, nu=1e-3, t_final=0.01, times=[0.005, 0.01], dt=float("inf"))
    assert one.shape == (2, 2, 8, 8) and bool(torch.isfinite(one).all())
    empty = navier_stokes.solve(np.zeros((0, 8, 8)), nu=1e-3, t_final=0.1, times=[0.0, 0.05, 0.1])
    assert empty.shape == (0, 3, 8, 8) and empty.dtype == torch.float64
    single = navier_stokes.solve(w0[0], nu=1e-3, t_final=0.01, solve_resolution=np.int64(16))
    assert single.shape == (1, 8, 8)
