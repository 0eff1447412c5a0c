"""Darcy five-point solver: manufactured solution, series solution, residual; resampling and pooling."""

from __future__ import annotations

import numpy as np
import pytest

from opformer.pde import DataError, darcy
from opformer.pde.grf import sample_rng

PI = np.pi


def _manufactured(n: int):
    """u* = sin(pi x) sin(2 pi y), a = 1 + 0.5 sin(2 pi x) cos(pi y), f = -div(a grad u*) on the node grid."""
    x = darcy.node_coords(n)
    X, Y = np.meshgrid(x, x, indexing="ij")
    u = np.sin(PI * X) * np.sin(2 * PI * Y)
    a = 1 + 0.5 * np.sin(2 * PI * X) * np.cos(PI * Y)
    ux, uy = PI * np.cos(PI * X) * np.sin(2 * PI * Y), 2 * PI * np.sin(PI * X) * np.cos(2 * PI * Y)
    ax, ay = PI * np.cos(2 * PI * X) * np.cos(PI * Y), -0.5 * PI * np.sin(2 * PI * X) * np.sin(PI * Y)
    f = -(ax * ux + ay * uy) + 5 * PI**2 * a * u
    return a, f, u


@pytest.mark.parametrize("face", ["arithmetic", "harmonic"])
def test_manufactured_variable_coefficient_converges_at_order_2(face):
    errors = []
    for n in (33, 65, 129):
        a, f, exact = _manufactured(n)
        errors.append(np.max(np.abs(darcy.solve(a, f, face=face) - exact)))
    orders = np.log2(np.array(errors[:-1]) / np.array(errors[1:]))
    assert np.all((orders > 1.8) & (orders < 2.2)), (errors, orders)


def test_constant_coefficient_unit_load_matches_series_maximum():
    """max u of -Laplace u = 1 on the unit square is 0.0736713 (series sum 16/(pi^4 i j (i^2+j^2)), i, j odd)."""
    i = np.arange(1, 400, 2)
    I, J = np.meshgrid(i, i, indexing="ij")
    series = np.sum(16 / (PI**4 * I * J * (I**2 + J**2)) * np.sin(I * PI / 2) * np.sin(J * PI / 2))
    assert abs(series - 0.0736713) < 1e-6
    u = darcy.solve(np.ones((65, 65)), 1.0)
    assert abs(u.max() / 0.0736713 - 1) < 1e-3
    assert abs(u[32, 32] - u.max()) == 0  # the maximum is at the centre node


def test_discrete_residual_is_at_round_off_and_boundary_is_zero():
    rng = np.random.default_rng(0)
    a = np.exp(rng.standard_normal((3, 41, 41)))
    f = rng.standard_normal((3, 41, 41))
    u = darcy.solve(a, f)
    assert u.shape == (3, 41, 41)
    for s in range(3):
        mat = darcy.assemble(a[s])
        res = mat @ u[s, 1:-1, 1:-1].ravel() - f[s, 1:-1, 1:-1].ravel()
        scale = abs(mat).sum(axis=1).max() * np.abs(u[s]).max()
        assert np.max(np.abs(res)) / scale < 1e-14
    for edge in (u[:, 0], u[:, -1], u[:, :, 0], u[:, :, -1]):
        assert np.all(edge == 0)


def test_matrix_is_symmetric_with_row_sums_from_boundary_faces_only():
    a = np.exp(np.random.default_rng(1).standard_normal((9, 9)))
    mat = darcy.assemble(a).toarray()
    np.testing.assert_allclose(mat, mat.T, rtol=1e-15)
    # a constant vector: rows away from the boundary sum to zero (flux form conserves)
    sums = mat.sum(axis=1).reshape(7, 7)
    np.testing.assert_allclose(sums[1:-1, 1:-1], 0.0, atol=1e-10)


def test_amg_solver_agrees_with_direct_solver():
    pytest.importorskip("pyamg")
    a, f, _ = _manufactured(33)
    np.testing.assert_allclose(darcy.solve(a, f, solver="amg", tol=1e-12), darcy.solve(a, f), atol=1e-10)


def test_solver_rejects_bad_input():
    with pytest.raises(DataError, match=r"\(5, 4\)"):
        darcy.solve(np.ones((5, 4)))
    with pytest.raises(DataError, match=r"expected f of shape \(5, 5\).*found \(4, 4\)"):
        darcy.solve(np.ones((5, 5)), np.ones((4, 4)))
    with pytest.raises(DataError, match="positive"):
        darcy.solve(-np.ones((5, 5)))
    with pytest.raises(DataError, match="NaN"):
        darcy.solve(np.full((5, 5), np.nan))
    with pytest.raises(DataError, match="solver"):
        darcy.solve(np.ones((5, 5)), solver="cg")


def test_spline_resampling_reproduces_cubic_polynomials_including_extrapolation():
    """Not-a-knot cubic splines are exact for cubics, also half a cell outside the data (at the walls)."""
    k = 11
    for src, dst, fn in ((darcy.cell_coords(k), darcy.node_coords(k), darcy.cell_to_node),
                         (darcy.node_coords(k), darcy.cell_coords(k), darcy.node_to_cell)):
        P = lambda x, y: 1 + x - 2 * x**2 * y + 3 * x**3 - y**3 + x * y
        Xs, Ys = np.meshgrid(src, src, indexing="ij")
        Xd, Yd = np.meshgrid(dst, dst, indexing="ij")
        np.testing.assert_allclose(fn(P(Xs, Ys)), P(Xd, Yd), atol=1e-12)


def test_spline_resampling_is_fourth_order_for_smooth_fields():
    errs = []
    for k in (21, 41, 81):
        xs, xn = darcy.cell_coords(k), darcy.node_coords(k)
        g = lambda x: np.sin(3 * x) * np.exp(x)
        errs.append(np.max(np.abs(darcy.cell_to_node(np.outer(g(xs), g(xs))) - np.outer(g(xn), g(xn)))))
    orders = np.log2(np.array(errs[:-1]) / np.array(errs[1:]))
    assert np.all((orders > 3.5) & (orders < 4.5)), (errs, orders)


def test_piececonst_sample_follows_the_recipe():
    coeff, sol = darcy.piececonst_sample(29, sample_rng(0, 3))
    assert coeff.shape == sol.shape == (29, 29)
    assert set(np.unique(coeff)) == {3.0, 12.0}
    assert 0.005 < sol.max() < 0.03  # max u is about 0.013-0.015 for this recipe
    # cell-centre solution next to the wall is small but not zero (spline back from the node grid)
    assert 0 < np.abs(sol[0]).max() < 0.3 * sol.max()
    # same (seed, index, stream) -> same sample; the test stream is independent
    coeff2, sol2 = darcy.piececonst_sample(29, sample_rng(0, 3))
    assert np.array_equal(coeff, coeff2) and np.array_equal(sol, sol2)
    assert not np.array_equal(coeff, darcy.piececonst_sample(29, sample_rng(0, 3, stream=1))[0])


def test_piececonst_node_grid_variant_solves_on_the_thresholded_nodes():
    coeff, sol = darcy.piececonst_sample(17, sample_rng(0, 0), grid="node")
    np.testing.assert_array_equal(sol, darcy.solve(coeff, 1.0))
    assert np.all(sol[0] == 0)


def test_wrong_sign_solutions_of_the_cell_recipe_are_found():
    """Sample 533 of the 17^2 training stream: the splines take the coefficient to -22 next to a wall, and the
    solution is negative and 90x the usual size.  The same coefficient solved on the node grid (no splines, a > 0:
    an M-matrix) is >= 0, as the maximum principle says, and is not flagged; nor is an ordinary sample."""
    coeff, sol = darcy.piececonst_sample(17, sample_rng(0, 533))
    assert darcy.cell_to_node(coeff).min() < 0 and sol.min() < -1.0
    node = darcy.solve(coeff, 1.0)
    assert node.min() >= 0 and 0.005 < node.max() < 0.03
    ordinary = darcy.piececonst_sample(17, sample_rng(0, 0))[1]
    assert list(darcy.wrong_sign_samples(np.stack([ordinary, sol, node, -node]))) == [1, 3]
    with pytest.raises(DataError, match="expected"):
        darcy.wrong_sign_samples(np.zeros(3))


def test_nan_padded_mean_pooling_sizes_and_values():
    assert darcy.pool_nanmean(np.zeros((421, 421)), 3).shape == (141, 141)
    assert darcy.pool_nanmean(np.zeros((141, 141)), 4).shape == (36, 36)
    assert darcy.pool_nanmean(np.zeros((421, 421)), 2).shape == (211, 211)
    assert darcy.pool_nanmean(np.zeros((211, 211)), 3).shape == (71, 71)
    v = np.arange(25.0).reshape(5, 5)
    p = darcy.pool_nanmean(v, 2)
    assert p.shape == (3, 3)
    assert p[0, 0] == np.mean([0, 1, 5, 6])
    assert p[0, 2] == np.mean([4, 9])  # the partial block averages only the values that exist
    assert p[2, 2] == 24
    np.testing.assert_array_equal(darcy.pool_nanmean(np.ones((2, 7, 7)), 3), np.ones((2, 3, 3)))
