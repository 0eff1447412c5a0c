"""DeepONet's ``out_size`` output grid keeps the kind of the input grid: a cell grid's output points are the cell
centres (j + 1/2) / m, a periodic grid's j / m and a node grid's j / (m - 1), the points ``grid_coords`` gives the
tasks' target grids.  (They were the bilinear resampling of the input coordinates with aligned corners, which on a
cell or periodic grid puts the first and last output points at the input's: shifted by up to half a cell.)"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from opformer.models import build_model
from opformer.nn.cinn import resize2d
from opformer.tasks.base import grid_coords

KINDS = ["cell", "periodic", "node"]


def coords_of(kind, h, w=None):
    return torch.as_tensor(grid_coords(kind, (h, h if w is None else w)))[None]


def coordinate_reader(out_size):
    """A DeepONet whose output is exactly x + 10 y at every output point (x, y): the trunk passes the point through
    (ReLU on coordinates >= 0), the branch gives the constant coefficients (1, 10, 0, ...) whatever the input."""
    model = build_model(dict(name="deeponet", sensors=4, basis=3, branch_width=8, branch_layers=1, trunk_width=2,
                             trunk_layers=2, activation="relu", out_size=out_size)).double()
    with torch.no_grad():
        for p in model.parameters():
            p.zero_()
        linears = [m for m in model.trunk if isinstance(m, torch.nn.Linear)]
        for lin in linears:
            lin.weight[:2, :2] = torch.eye(2, dtype=torch.float64)
        model.branch[-1].bias.copy_(torch.tensor([1.0, 10.0, 0.0]))
    return model


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("n,w,m", [(16, 16, 8), (9, 9, 5), (8, 12, 20), (5, 5, 2)])
def test_the_output_is_at_the_points_of_the_output_grid_of_the_input_grids_kind(kind, n, w, m):
    model = coordinate_reader(m)
    x = torch.randn(2, n, w, 1, dtype=torch.float64)
    out = model(x, coords_of(kind, n, w))
    pts = coords_of(kind, m)[0]
    assert out.shape == (2, m, m, 1)
    torch.testing.assert_close(out[0, ..., 0], pts[..., 0] + 10 * pts[..., 1], rtol=0, atol=1e-12)
    torch.testing.assert_close(out[1], out[0], rtol=0, atol=0)


def test_a_strided_cell_grid_keeps_its_kind():
    """A stride of a cell grid whose side is not a multiple of it (421 -> 141 by 3; here 13 -> 5 by 3) is no cell
    grid of its own size, but the tasks keep the file's kind (its output grid is read at (j + 1/2) / m): so does
    the model."""
    c = coords_of("cell", 13)[:, ::3, ::3]
    assert c.shape[1] == 5 and abs(float(c[0, 0, 0, 0]) - 0.5 / 13) < 1e-12
    out = coordinate_reader(4)(torch.randn(1, 5, 5, 1, dtype=torch.float64), c)
    pts = coords_of("cell", 4)[0]
    torch.testing.assert_close(out[0, ..., 0], pts[..., 0] + 10 * pts[..., 1], rtol=0, atol=1e-12)


@pytest.fixture()
def trained_like():
    """A DeepONet with random weights, and the same weights with out_size 7."""
    torch.manual_seed(0)
    cfg = dict(name="deeponet", sensors=5, basis=8, branch_width=16, trunk_width=16)
    model = build_model(cfg).double()
    coarse = build_model({**cfg, "out_size": 7}).double()
    coarse.load_state_dict(model.state_dict())
    return model, coarse


@pytest.mark.parametrize("kind", KINDS)
def test_out_size_equals_the_model_queried_at_the_output_grid(trained_like, kind):
    """Predicting on the 7 x 7 output grid directly gives what the model on the input grid gives at those points."""
    model, coarse = trained_like
    x, c = torch.randn(3, 20, 20, 1, dtype=torch.float64), coords_of(kind, 20)
    points = coords_of(kind, 7).reshape(1, -1, 2)
    torch.testing.assert_close(coarse(x, c).reshape(3, -1, 1), model.query(x, c, points), rtol=0, atol=1e-12)


def test_cell_grid_output_matches_the_model_on_a_cell_grid_of_the_output_size(trained_like):
    """A function sampled on the 28 x 28 cell grid, predicted at out_size 7, equals the prediction from its 7 x 7
    cell-grid samples up to the sensors' interpolation: the trunk sees the same points (before: half a 28-cell
    off at the ends)."""
    model, coarse = trained_like
    def f(c):
        return (torch.sin(2 * c[..., :1]) * torch.cos(3 * c[..., 1:]))

    c28, c7 = coords_of("cell", 28), coords_of("cell", 7)
    trunk_same = coarse.evaluate(coarse.coefficients(f(c28), c28), c7)
    torch.testing.assert_close(coarse(f(c28), c28), trunk_same, rtol=0, atol=1e-12)
    torch.testing.assert_close(coarse(f(c28), c28), model(f(c7), c7), rtol=0, atol=0.05)


def test_a_node_grid_gives_the_points_it_always_did(trained_like):
    """Node grids: the output points are the aligned-corner bilinear resampling of the coordinates, as before, so
    models trained on node data predict as they did."""
    _, coarse = trained_like
    x = torch.as_tensor(np.random.default_rng(0).standard_normal((2, 13, 21, 1)))
    c = coords_of("node", 13, 21)
    before = coarse.evaluate(coarse.coefficients(x, c), resize2d(c, 7))
    torch.testing.assert_close(coarse(x, c), before, rtol=0, atol=1e-12)


def test_out_size_equal_to_the_input_grid_uses_the_input_coordinates(trained_like):
    model, coarse = trained_like
    for kind in KINDS:
        x, c = torch.randn(2, 7, 7, 1, dtype=torch.float64), coords_of(kind, 7)
        torch.testing.assert_close(coarse(x, c), model(x, c), rtol=0, atol=0)
