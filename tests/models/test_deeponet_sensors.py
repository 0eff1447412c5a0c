"""DeepONet's branch net sees the input at its sensors, the node points j / (sensors - 1) of [0, 1]^2, on every grid:
checked against functions whose linear interpolation is exact, so the sensor values are known without the model."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from opformer.models import build_model
from opformer.tasks.base import grid_coords

SENSORS = 7  # j / 6: no sensor but the ends is a point of the grids below


def branch_input(model, x, coords):
    """What the branch MLP receives for ``x`` on ``coords``, as (batch, sensors, sensors, channels)."""
    seen = []
    handle = model.branch.register_forward_pre_hook(lambda module, args: seen.append(args[0]))
    try:
        model(x, coords)
    finally:
        handle.remove()
    return seen[0].view(x.shape[0], SENSORS, SENSORS, -1)


def on_grid(f, kind, h, w):
    c = torch.as_tensor(grid_coords(kind, (h, w)))[None]
    return f(c[..., 0], c[..., 1])[..., None], c


def tent(x, y):
    """Periodic and piecewise linear with its kinks at 0 and 1/2, grid points of every even periodic grid: its
    linear interpolation from such a grid, wrapping from the last point to 1, is exact."""
    return (x - 0.5).abs() + 2 * (y - 0.5).abs()


def bilinear(x, y):
    return 1 + 2 * x - 3 * y + 4 * x * y


@pytest.fixture()
def model():
    torch.manual_seed(0)
    return build_model(dict(name="deeponet", sensors=SENSORS, basis=8, branch_width=16, trunk_width=16)).double()


@pytest.mark.parametrize("h,w", [(8, 8), (16, 32), (64, 10)])
def test_a_periodic_grid_gives_the_sensors_the_values_at_the_sensor_points(model, h, w):
    s = torch.linspace(0, 1, SENSORS, dtype=torch.float64)
    x, c = on_grid(tent, "periodic", h, w)
    torch.testing.assert_close(branch_input(model, x, c)[0, ..., 0], tent(s[:, None], s[None, :]),
                               rtol=0, atol=1e-12)


@pytest.mark.parametrize("kind", ["cell", "node"])
@pytest.mark.parametrize("h,w", [(5, 9), (17, 33)])
def test_cell_and_node_grids_give_the_values_there_held_beyond_the_outermost_points(model, kind, h, w):
    """Bilinear functions are interpolated exactly; the sensors on the walls, half a cell outside a cell grid, get
    the value of the nearest grid point's coordinate."""
    s = torch.linspace(0, 1, SENSORS, dtype=torch.float64)
    x, c = on_grid(bilinear, kind, h, w)
    sx = s.clamp(float(c[0, 0, 0, 0]), float(c[0, -1, 0, 0]))[:, None]
    sy = s.clamp(float(c[0, 0, 0, 1]), float(c[0, 0, -1, 1]))[None, :]
    torch.testing.assert_close(branch_input(model, x, c)[0, ..., 0], bilinear(sx, sy), rtol=0, atol=1e-12)


def test_outputs_on_a_periodic_grid_and_its_refinement_agree_at_the_shared_points(model):
    coarse, c16 = on_grid(tent, "periodic", 16, 16)
    fine, c32 = on_grid(tent, "periodic", 32, 32)
    torch.testing.assert_close(model(fine, c32)[:, ::2, ::2], model(coarse, c16), rtol=0, atol=1e-12)
    points = torch.rand(1, 20, 2, dtype=torch.float64)
    torch.testing.assert_close(model.query(fine, c32, points), model.query(coarse, c16, points), rtol=0, atol=1e-12)


def test_the_sensor_values_of_a_node_grid_are_its_bilinear_resampling(model):
    """On node grids the sensors were always at their points: those models predict as before."""
    from opformer.nn.cinn import resize2d

    x = torch.as_tensor(np.random.default_rng(0).standard_normal((2, 13, 21, 1)))
    c = torch.as_tensor(grid_coords("node", (13, 21)))[None]
    torch.testing.assert_close(branch_input(model, x, c), resize2d(x, SENSORS), rtol=0, atol=1e-12)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_a_periodic_grid_wraps_in_low_precision_too(dtype):
    """The sensor at 1 of a periodic axis is the value at 0 (the grid wraps around), also when the coordinates j/24
    are rounded to float16 or bfloat16 (an absolute tolerance of 1e-6 took such an axis for a node axis and held its
    last value there)."""
    from opformer.models.deeponet import at_sensors

    n = 24
    j = torch.arange(n, dtype=torch.float64) / n
    coords = torch.stack(torch.meshgrid(j, j, indexing="ij"), dim=-1)[None].to(dtype)
    x = torch.arange(n, dtype=torch.float64).view(1, n, 1, 1).expand(1, n, n, 1).to(dtype)
    y = at_sensors(x, coords, 5)
    assert float(y[0, -1, 0, 0]) == float(x[0, 0, 0, 0])  # the sensor at x = 1 is x = 0's value
