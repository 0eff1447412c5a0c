"""Burgers ETDRK4 solver: exact solutions, convergence order, invariants."""

from __future__ import annotations

import math

import numpy as np
import pytest

from opformer.pde import DataError, burgers
from opformer.pde.grf import grf1d_periodic, sample_rng

NU_UNIT, T_UNIT = 0.1 / (2 * math.pi), 1.0 / (2 * math.pi)  # R10 on the unit period


def _rel(u, v) -> float:
    return float(np.linalg.norm(u - v) / np.linalg.norm(v))


@pytest.fixture(scope="module")
def ic20() -> np.ndarray:
    """Two R10 initial conditions (20 modes of N(0, 625(-Delta+25)^-2)) on 256 points."""
    return grf1d_periodic(256, sample_rng(0, 1), modes=20, size=2)


@pytest.mark.parametrize("period", [1.0, 2 * math.pi])
def test_etdrk4_matches_cole_hopf_random_20_modes(ic20, period):
    nu, t = (NU_UNIT, T_UNIT) if period == 1.0 else (0.1, 1.0)
    u = burgers.solve(ic20, nu=nu, t_final=t, period=period, steps=400)
    exact = burgers.cole_hopf(ic20, nu, t, period)
    assert _rel(u, exact) < 1e-8


@pytest.mark.parametrize("period", [1.0, 2 * math.pi])
def test_etdrk4_matches_bessel_closed_form_for_a_sine(period):
    n = 256
    x = np.arange(n) * period / n
    u0 = np.sin(2 * np.pi * x / period)
    nu = 0.1 * period / (2 * math.pi)  # nu = 0.1 on the 2 pi period, the same flow scaled to the unit period
    t = 1.0 * period / (2 * math.pi)
    exact = burgers.sine_exact(x, t, nu=nu, period=period)
    u = burgers.solve(u0, nu=nu, t_final=t, period=period, steps=400)
    assert _rel(u, exact) < 1e-8
    assert _rel(u, burgers.cole_hopf(u0, nu, t, period)) < 1e-8
    assert _rel(burgers.cole_hopf(u0, nu, t, period), exact) < 1e-11  # the two exact solutions agree


def test_cole_hopf_handles_nonzero_mean_by_galilean_shift(ic20):
    u0 = ic20[0] + 0.4
    ref = burgers.solve(u0, nu=NU_UNIT, t_final=T_UNIT, steps=400)
    assert _rel(burgers.cole_hopf(u0, NU_UNIT, T_UNIT), ref) < 1e-8


def test_etdrk4_is_fourth_order_in_dt(ic20):
    exact = burgers.cole_hopf(ic20, NU_UNIT, T_UNIT)
    errors = [_rel(burgers.solve(ic20, nu=NU_UNIT, t_final=T_UNIT, steps=s), exact) for s in (20, 40, 80)]
    orders = np.log2(np.array(errors[:-1]) / np.array(errors[1:]))
    assert np.all((orders > 3.5) & (orders < 4.5)), (errors, orders)


def test_two_pi_domain_equals_rescaled_unit_domain(ic20):
    """R10: nu = 0.1, T = 1 on the 2 pi period is nu' = 0.1/2pi, T' = 1/2pi on the unit period."""
    a = burgers.solve(ic20, nu=0.1, t_final=1.0, period=2 * math.pi, steps=100)
    b = burgers.solve(ic20, nu=NU_UNIT, t_final=T_UNIT, period=1.0, steps=100)
    np.testing.assert_allclose(a, b, rtol=0, atol=1e-13)


def test_mean_is_conserved_exactly_and_energy_decays_monotonically(ic20):
    u0 = ic20 + np.array([[0.0], [0.25]])
    times = np.linspace(0.0, T_UNIT, 11)
    snaps = burgers.solve(u0, nu=NU_UNIT, times=times, steps=200)
    assert snaps.shape == (2, 11, 256)
    np.testing.assert_allclose(snaps[:, 0], u0, atol=1e-15)
    np.testing.assert_allclose(snaps.mean(axis=-1), np.broadcast_to(u0.mean(axis=-1, keepdims=True), (2, 11)), rtol=0,
                               atol=1e-14)
    e = burgers.energy(snaps)
    assert np.all(np.diff(e, axis=-1) < 0)


def test_snapshots_equal_separate_solves(ic20):
    snaps = burgers.solve(ic20, nu=NU_UNIT, times=[0.05, T_UNIT], dt=T_UNIT / 100)
    last = burgers.solve(ic20, nu=NU_UNIT, t_final=T_UNIT, dt=T_UNIT / 100)
    np.testing.assert_allclose(snaps[:, -1], last, atol=1e-12)


def test_coarse_internal_grid_with_zero_padding_is_exact_for_band_limited_data():
    u0 = grf1d_periodic(2048, sample_rng(0, 2), modes=20, size=2)
    fine = burgers.solve(u0, nu=0.1, t_final=1.0, period=2 * math.pi, steps=100)
    coarse = burgers.solve(u0, nu=0.1, t_final=1.0, period=2 * math.pi, steps=100, solve_resolution=512)
    assert coarse.shape == fine.shape
    assert np.max(np.abs(coarse - fine)) < 1e-13


def test_one_dimensional_input_and_dealiasing():
    x = np.arange(128) / 128
    u = burgers.solve(np.sin(2 * np.pi * x), nu=NU_UNIT, t_final=T_UNIT, steps=100, dealias=True)
    assert u.shape == (128,)
    exact = burgers.sine_exact(x, T_UNIT, nu=NU_UNIT, period=1.0)
    assert _rel(u, exact) < 1e-6


def test_etdrk4_coefficients_at_zero_symbol_are_the_rk4_weights():
    """For L = 0 ETDRK4 reduces to classical RK4: Q = h/2 and f1 = f2 = f3 = h/6 (f2 multiplies 2 (Na + Nb))."""
    e, e2, q, f1, f2, f3 = burgers.etdrk4_coefficients(np.zeros(1), 0.1)
    np.testing.assert_allclose([e[0], e2[0], q[0], f1[0], f2[0], f3[0]], [1, 1, 0.05, 0.1 / 6, 0.1 / 6, 0.1 / 6],
                               rtol=1e-14)


def test_bad_arguments_are_reported():
    with pytest.raises(DataError, match="shape"):
        burgers.solve(np.zeros((2, 3, 4)), nu=0.1, t_final=1.0)
    with pytest.raises(DataError, match="NaN"):
        burgers.solve(np.full(8, np.nan), nu=0.1, t_final=1.0)
    with pytest.raises(DataError, match="either steps or dt"):
        burgers.solve(np.zeros(8), nu=0.1, t_final=1.0, steps=3, dt=0.1)
    with pytest.raises(DataError, match="nu"):
        burgers.solve(np.zeros(8), nu=0.0, t_final=1.0)
