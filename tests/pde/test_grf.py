"""Gaussian random fields: Karhunen–Loève variances, truncation, conventions and determinism."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.fft

from opformer.pde import DataError
from opformer.pde.grf import grf1d_mode_variance, grf1d_periodic, grf2d_mode_std, grf2d_neumann, sample_rng


def _fourier_coefficients(u: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(a_k, b_k) of u = sum a_k cos 2 pi k x + b_k sin 2 pi k x on x_j = j/n, for k = 0..n/2."""
    n = u.shape[-1]
    spec = np.fft.rfft(u, axis=-1)
    return 2.0 * spec.real / n, -2.0 * spec.imag / n


def test_grf1d_empirical_mode_variance_matches_2_sigma2_over_kappa2_plus_tau2_to_the_gamma():
    n, samples = 64, 4000
    u = grf1d_periodic(n, sample_rng(3, 0), size=samples)  # sigma 25, tau 5, gamma 2, all 31 modes
    a, b = _fourier_coefficients(u)
    k = np.arange(1, n // 2)
    empirical = 0.5 * (a[:, k].var(axis=0) + b[:, k].var(axis=0))
    expected = grf1d_mode_variance(k, sigma=25.0, tau=5.0, gamma=2.0)
    rel = empirical / expected - 1.0
    # 8000 draws per mode: standard error of a variance estimate is sqrt(2/8000) = 1.6 %
    assert np.max(np.abs(rel)) < 0.08
    assert abs(np.mean(rel)) < 0.02


def test_grf1d_other_parameters_and_nonzero_mean():
    u = grf1d_periodic(32, sample_rng(1, 0), sigma=49.0, tau=7.0, gamma=2.5, mean=0.3, size=3000)
    a, b = _fourier_coefficients(u)
    np.testing.assert_allclose(u.mean(axis=-1), 0.3, atol=1e-13)  # the constant mode is exactly the mean
    emp = 0.5 * (a[:, 1:16].var(axis=0) + b[:, 1:16].var(axis=0))
    exp = grf1d_mode_variance(np.arange(1, 16), sigma=49.0, tau=7.0, gamma=2.5)
    assert np.max(np.abs(emp / exp - 1)) < 0.1


def test_grf1d_truncated_to_20_modes_has_no_higher_modes_and_zero_mean():
    u = grf1d_periodic(256, sample_rng(0, 5), modes=20, size=4)
    a, b = _fourier_coefficients(u)
    assert np.max(np.abs(a[:, 21:])) < 1e-13 and np.max(np.abs(b[:, 21:])) < 1e-13
    assert np.min(np.abs(a[:, 1:21])) > 0
    np.testing.assert_allclose(u.mean(axis=-1), 0.0, atol=1e-14)


def test_grf1d_truncation_is_a_prefix_of_the_longer_expansion():
    short = grf1d_periodic(128, sample_rng(0, 7), modes=20)
    long = grf1d_periodic(128, sample_rng(0, 7), modes=40)
    a_s, b_s = _fourier_coefficients(short)
    a_l, b_l = _fourier_coefficients(long)
    np.testing.assert_allclose(a_s[:21], a_l[:21], atol=1e-13)
    np.testing.assert_allclose(b_s[:21], b_l[:21], atol=1e-13)


def test_grf1d_is_a_function_of_seed_and_index_only():
    f1 = grf1d_periodic(64, sample_rng(11, 42))
    grf1d_periodic(64, sample_rng(11, 41))  # unrelated draws in between change nothing
    f2 = grf1d_periodic(64, sample_rng(11, 42))
    assert np.array_equal(f1, f2)
    assert not np.allclose(f1, grf1d_periodic(64, sample_rng(11, 43)))
    assert not np.allclose(f1, grf1d_periodic(64, sample_rng(12, 42)))
    assert not np.allclose(f1, grf1d_periodic(64, sample_rng(11, 42, stream=1)))


def test_grf1d_rejects_modes_beyond_the_grid():
    with pytest.raises(DataError, match="modes"):
        grf1d_periodic(16, sample_rng(0, 0), modes=8)
    with pytest.raises(DataError, match="non-negative"):
        sample_rng(-1, 0)


def test_grf2d_basis_is_the_neumann_eigenfunction_at_cell_centres():
    s = 12
    x = (np.arange(s) + 0.5) / s
    for k1, k2 in [(0, 3), (2, 5), (7, 7)]:
        coef = np.zeros((s, s))
        coef[k1, k2] = s  # the recipe's factor s makes the basis L2(0,1)^2-normalised
        field = scipy.fft.idctn(coef, type=2, norm="ortho")
        c1 = np.sqrt(2.0) if k1 else 1.0
        c2 = np.sqrt(2.0) if k2 else 1.0
        expected = c1 * c2 * np.outer(np.cos(np.pi * k1 * x), np.cos(np.pi * k2 * x))
        np.testing.assert_allclose(field, expected, atol=1e-13)


def test_grf2d_empirical_dct_variance_matches_s_tau_alpha_formula():
    s, samples = 12, 1500
    rng = sample_rng(0, 0)
    coefs = np.stack([scipy.fft.dctn(grf2d_neumann(s, rng), type=2, norm="ortho") for _ in range(samples)])
    std = grf2d_mode_std(s, alpha=2.0, tau=3.0)
    np.testing.assert_allclose(coefs[:, 0, 0], 0.0, atol=1e-12)  # the (0,0) mode is zero: zero-mean fields
    k1, k2 = np.nonzero(std)
    rel = coefs[:, k1, k2].var(axis=0) / std[k1, k2] ** 2 - 1.0
    # std error sqrt(2/1500) = 3.7 % per mode, 143 modes
    assert abs(np.mean(rel)) < 0.02
    assert np.max(np.abs(rel)) < 0.2
    # the formula itself: s tau^(alpha-1) (pi^2 |k|^2 + tau^2)^(-alpha/2)
    assert np.isclose(std[1, 2], s * 3.0 * (np.pi**2 * 5 + 9.0) ** -1.0)
