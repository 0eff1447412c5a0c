"""Burgers files on an output grid coarser than the solve grid hold the solution's point values.

The default recipe solves on 512 internal Fourier points. A file written at ``--resolution 64`` (or 63) must hold
u(x_j, T) at its own points, the values the 512-point file holds at every 8th point, and not the solution with its
modes above the output grid's Nyquist frequency cut off (0.27 % away on a steep sample).
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from opformer.pde import burgers, compute_samples, make_recipe


def _rel(u, v) -> float:
    return float(np.linalg.norm(u - v) / np.linalg.norm(v))


@pytest.fixture(scope="module")
def fine() -> dict:
    return compute_samples(make_recipe("burgers", n_samples=3, resolution=512), [0, 1, 2])


def test_coarse_output_is_the_fine_file_subsampled(fine):
    coarse = compute_samples(make_recipe("burgers", n_samples=3, resolution=64), [0, 1, 2])
    np.testing.assert_allclose(coarse["a"], fine["a"][:, ::8], rtol=0, atol=1e-12)
    for i in range(3):  # sample 2 is steep: its modes above 32 are not negligible at t = 1
        assert _rel(coarse["u"][i], fine["u"][i, ::8]) < 1e-11, i


@pytest.mark.parametrize("n", [63, 64])
def test_coarse_output_matches_cole_hopf_at_its_points(n):
    out = compute_samples(make_recipe("burgers", n_samples=3, resolution=n), [0, 1, 2])
    exact = burgers.cole_hopf(out["a"], 0.1, 1.0, 2 * math.pi)
    for i in range(3):
        assert _rel(out["u"][i], exact[i]) < 1e-8, i


def test_solve_on_a_finer_grid_returns_point_values_for_snapshots():
    u0 = compute_samples(make_recipe("burgers", n_samples=3, resolution=48), [2])["a"]
    fine = burgers.solve(u0, nu=0.1, period=2 * math.pi, times=[0.5, 1.0], steps=200, solve_resolution=480)
    for k, t in enumerate((0.5, 1.0)):
        assert _rel(fine[:, k], burgers.cole_hopf(u0, 0.1, t, 2 * math.pi)) < 1e-8
