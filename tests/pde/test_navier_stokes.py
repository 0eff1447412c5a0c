"""2D Navier–Stokes (vorticity form, unit torus): exact solutions, convergence order, enstrophy balance, samplers."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from opformer.pde import DataError
from opformer.pde import navier_stokes as ns
from opformer.pde.grf import grf2d_periodic_mode_variance, sample_rng



def _taylor_green(n: int, k: int, amplitude: float = 1.0) -> np.ndarray:
    x = ns.grid(n)
    return amplitude * np.outer(np.cos(2 * np.pi * k * x), np.cos(2 * np.pi * k * x))


def _rel(a, b) -> float:
    return float(torch.linalg.vector_norm(torch.as_tensor(a) - torch.as_tensor(b)) / torch.linalg.vector_norm(torch.as_tensor(b)))


@pytest.mark.parametrize("k, solve_resolution", [(1, None), (3, None), (2, 64)])
def test_taylor_green_vortex_decays_as_exp_minus_8_pi2_k2_nu_t_to_round_off(k, solve_resolution):
    """w0 = cos(2 pi k x) cos(2 pi k y) is an eigenfunction of Delta with eigenvalue -8 pi^2 k^2 and its stream
    function is proportional to it, so u . grad w = 0 and w(t) = w0 exp(-8 pi^2 k^2 nu t) exactly."""
    n, nu = 32, 0.01
    w0 = _taylor_green(n, k, amplitude=2.0 * k)
    times = [0.0, 0.1, 0.35, 1.0]
    out = ns.solve(torch.tensor(w0), nu=nu, t_final=1.0, times=times, solve_resolution=solve_resolution)
    assert out.shape == (4, n, n) and out.dtype == torch.float64
    for j, t in enumerate(times):
        exact = w0 * math.exp(-8 * math.pi**2 * k**2 * nu * t)
        assert np.max(np.abs(out[j].numpy() - exact)) < 1e-13 * 2 * k


def test_velocity_of_the_taylor_green_vortex_is_the_curl_of_the_stream_function():
    """psi = w / (8 pi^2 k^2) solves -Delta psi = w; u = psi_y = -(A/(4 pi k)) cos(2 pi k x) sin(2 pi k y),
    v = -psi_x = (A/(4 pi k)) sin(2 pi k x) cos(2 pi k y)."""
    n, k, a = 24, 2, 3.0
    x = ns.grid(n)
    u, v = ns.velocity(_taylor_green(n, k, a))
    c = a / (4 * np.pi * k)
    np.testing.assert_allclose(u.numpy(), -c * np.outer(np.cos(2 * np.pi * k * x), np.sin(2 * np.pi * k * x)), atol=1e-14)
    np.testing.assert_allclose(v.numpy(), c * np.outer(np.sin(2 * np.pi * k * x), np.cos(2 * np.pi * k * x)), atol=1e-14)


def test_forced_shear_flow_approaches_the_steady_state_f_over_nu_lambda():
    """For f = A sin(2 pi k y) and w0 = 0 the flow stays a function of y (v = 0, u . grad w = 0), so
    w(t) = A (1 - exp(-nu lambda t)) / (nu lambda) sin(2 pi k y), lambda = 4 pi^2 k^2: exact to round-off, since
    the solver integrates the forced diffusion exactly. Also checks the callable and the array forcing."""
    n, k, a, nu = 16, 2, 0.5, 0.02
    lam = 4 * np.pi**2 * k**2
    times = [0.5, 2.0, 4.0]
    profile = np.sin(2 * np.pi * k * ns.grid(n))[None, :].repeat(n, 0)
    out = ns.solve(torch.zeros(n, n, dtype=torch.float64), nu=nu, t_final=4.0, times=times,
                   forcing=lambda x, y: a * torch.sin(2 * np.pi * k * y))
    for j, t in enumerate(times):
        exact = a * (1 - np.exp(-nu * lam * t)) / (nu * lam) * profile
        assert _rel(out[j], exact) < 1e-13
    out2 = ns.solve(torch.zeros(n, n, dtype=torch.float64), nu=nu, t_final=4.0, times=times, forcing=a * profile)
    assert _rel(out2, out) < 1e-14


def test_second_order_in_time_on_a_nonlinear_forced_flow():
    """Errors against a fine-step reference fall by 2^2 = 4 each time dt halves (Heun + exact diffusion)."""
    w0 = torch.tensor(ns.grf_vorticity(16, 2, 0, scale=2000.0))  # an O(1) velocity: advection matters
    f = ns.fno_forcing(16)
    kwargs = dict(nu=1e-3, t_final=1.0, forcing=f)
    ref = ns.solve(w0, dt=1 / 256, **kwargs)
    assert _rel(ref, w0) > 0.5  # the flow changed a lot: a nonlinear test
    errors = [_rel(ns.solve(w0, dt=1 / m, **kwargs), ref) for m in (8, 16, 32)]
    ratios = [errors[i] / errors[i + 1] for i in range(2)]
    assert all(3.6 < r < 4.4 for r in ratios), (errors, ratios)


def test_dealiased_advection_conserves_enstrophy_and_energy_to_round_off():
    """<w, A(w)> = 0 and <u, u_A> = 0 (u_A the velocity of A(w)) for the 2/3-rule advection A(w) = -P(u . grad w),
    a Galerkin projection, even for a rough field with energy in every mode."""
    n = 32
    w = torch.tensor(ns.grf_vorticity(n, 3, 5, gamma=0.5))
    adv = ns.advection(w)
    u, v = ns.velocity(w)
    ua, va = ns.velocity(adv)

    def rel_inner(a, b):
        return ((a * b).sum(dim=(-2, -1)) / (a.flatten(1).norm(dim=1) * b.flatten(1).norm(dim=1))).abs()

    assert torch.all(rel_inner(w, adv) < 1e-14)
    assert torch.all((u * ua + v * va).sum(dim=(-2, -1)).abs()
                     < 1e-14 * torch.sqrt((u**2 + v**2).sum(dim=(-2, -1)) * (ua**2 + va**2).sum(dim=(-2, -1))))
    # the plain grid product (no truncation) does not conserve enstrophy: the check above can fail
    kx = 2 * np.pi * torch.fft.fftfreq(n, 1 / n, dtype=torch.float64)[:, None]
    ky = 2 * np.pi * torch.fft.rfftfreq(n, 1 / n, dtype=torch.float64)[None, :]
    w_hat = torch.fft.rfft2(w)
    wx, wy = torch.fft.irfft2(1j * kx * w_hat, s=(n, n)), torch.fft.irfft2(1j * ky * w_hat, s=(n, n))
    assert torch.all(rel_inner(w, -(u * wx + v * wy)) > 1e-6)


def test_enstrophy_balance_over_time():
    """Z(T) - Z(0) = int_0^T (-nu |grad w|^2 + <w, f>) dt, Z = (1/2)|w|^2: the advection adds nothing. The
    residual is the error of Simpson's rule on the snapshots: it falls by about 2^4 when their spacing halves
    (a missing or wrong term would leave a residual that does not fall)."""
    n, nu, T = 32, 2e-3, 1.0
    w0 = torch.tensor(ns.grf_vorticity(n, 1, 2, scale=2000.0))
    f = torch.tensor(ns.fno_forcing(n))
    times = np.linspace(0.0, T, 81)
    w = ns.solve(w0, nu=nu, t_final=T, times=times, forcing=f, dt=1 / 400)[0]
    z = ns.enstrophy(w).numpy()
    rate = (-nu * ns.palinstrophy(w) + (w * f).mean(dim=(-2, -1))).numpy()
    change = z[-1] - z[0]
    assert np.abs(rate).max() * T > 0.2 * z[0]  # dissipation and forcing are not negligible

    def simpson(r):
        h = T / (len(r) - 1)
        return h / 3 * (r[0] + r[-1] + 4 * r[1:-1:2].sum() + 2 * r[2:-1:2].sum())

    coarse, fine = abs(change - simpson(rate[::2])), abs(change - simpson(rate))
    assert fine < 1e-6 * abs(change) and fine < coarse / 8, (coarse, fine, change)


def test_grf_vorticity_spectrum_matches_the_covariance():
    """E|c_k|^2 = 7^(3/2) (4 pi^2 |k|^2 + 49)^(-2.5) for every mode below Nyquist; zero mean; no Nyquist mode."""
    n, samples = 16, 3000
    w = ns.grf_vorticity(n, samples, sample_rng(1, 0))
    c = np.fft.fft2(w) / n**2
    power = np.mean(np.abs(c) ** 2, axis=0)
    k = np.fft.fftfreq(n, 1 / n)
    mu = grf2d_periodic_mode_variance(k[:, None], k[None, :], scale=7**1.5, tau=7.0, gamma=2.5)
    inside = (np.abs(k[:, None]) < n / 2) & (np.abs(k[None, :]) < n / 2)
    inside[0, 0] = False
    rel = power[inside] / mu[inside] - 1
    # |c_k|^2 / mu_k is exponential with mean 1: 3000 draws give a 1.8 % standard error per mode (224 modes)
    assert np.max(np.abs(rel)) < 0.1 and abs(np.mean(rel)) < 0.01
    np.testing.assert_allclose(w.mean(axis=(1, 2)), 0.0, atol=1e-16)
    assert np.max(power[~inside]) < 1e-30
    # pointwise variance = the trace of the covariance over the drawn modes
    assert abs(w.var() / mu[inside].sum() - 1) < 0.05


def test_grf_vorticity_is_the_same_trigonometric_polynomial_on_finer_grids():
    coarse = ns.grf_vorticity(16, 2, sample_rng(0, 4))
    fine = ns.grf_vorticity(48, 2, sample_rng(0, 4), modes=7)
    np.testing.assert_allclose(fine[:, ::3, ::3], coarse, atol=1e-15)
    assert not np.allclose(coarse[0], coarse[1])


def test_batch_equals_per_sample_solves_with_the_default_steps():
    """Each sample takes its own CFL steps, so a batch gives each sample's own solution."""
    w0 = torch.tensor(ns.grf_vorticity(16, 3, 0)) * torch.tensor([1.0, 20.0, 60.0])[:, None, None]
    f = ns.fno_forcing(16)
    batch = ns.solve(w0, nu=1e-3, t_final=0.5, times=[0.2, 0.5], forcing=f)
    assert batch.shape == (3, 2, 16, 16)
    for i in range(3):
        alone = ns.solve(w0[i], nu=1e-3, t_final=0.5, times=[0.2, 0.5], forcing=f)
        assert torch.max(torch.abs(alone - batch[i])) < 1e-13 * w0[i].abs().max()


def test_float32_runs_and_agrees_with_float64():
    w0 = ns.grf_vorticity(16, 2, 3, scale=2000.0)
    f = ns.fno_forcing(16)
    out32 = ns.solve(torch.tensor(w0, dtype=torch.float32), nu=1e-3, t_final=0.5, forcing=f, dt=0.01)
    out64 = ns.solve(torch.tensor(w0), nu=1e-3, t_final=0.5, forcing=f, dt=0.01)
    assert out32.dtype == torch.float32 and out32.shape == (2, 1, 16, 16)
    assert 1e-9 < _rel(out32.double(), out64) < 1e-5


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_gpu_agrees_with_cpu():
    w0 = torch.tensor(ns.grf_vorticity(32, 2, 3, scale=2000.0))
    f = ns.fno_forcing(32)
    cpu = ns.solve(w0, nu=1e-3, t_final=0.5, forcing=f, dt=0.01)
    gpu = ns.solve(w0.cuda(), nu=1e-3, t_final=0.5, forcing=f, dt=0.01)
    assert gpu.device.type == "cuda" and _rel(gpu.cpu(), cpu) < 1e-12


def test_shear_layer_vorticity_is_the_curl_of_the_stated_velocity():
    """The velocity recovered from w (zero-mean, spectrally) is the tanh double shear layer and
    v = delta sin(2 pi (x + sigma(x))) minus their means."""
    n, rho, delta = 256, 0.05, 0.05
    w = ns.shear_layer_vorticity(n, 2, sample_rng(0, 1), rho=rho, delta=delta)
    assert w.shape == (2, n, n) and abs(w.mean()) < 1e-14
    u, v = ns.velocity(w)
    y = ns.grid(n)
    u_exact = np.where(y <= 0.5, np.tanh((y - 0.25) / rho), np.tanh((0.75 - y) / rho))
    np.testing.assert_allclose(u[0].numpy(), np.broadcast_to(u_exact - u_exact.mean(), (n, n)), atol=1e-4)
    v_col = v[0].numpy()
    assert np.allclose(v_col, v_col[:, :1], atol=1e-10)  # v depends on x only
    assert 0.9 * delta < np.max(np.abs(v_col)) < 1.3 * delta
    assert not np.allclose(v[0].numpy(), v[1].numpy(), atol=1e-3)  # a different perturbation per sample


def test_fno_forcing_formula():
    f = ns.fno_forcing(8)
    x, y = 3 / 8, 6 / 8
    assert f[3, 6] == pytest.approx(0.1 * (np.sin(2 * np.pi * (x + y)) + np.cos(2 * np.pi * (x + y))), abs=1e-15)


def test_bad_inputs_are_reported():
    w0 = torch.zeros(2, 8, 8)
    with pytest.raises(DataError, match="shape"):
        ns.solve(torch.zeros(2, 8, 6), nu=1e-3, t_final=1.0)
    with pytest.raises(DataError, match="ascending"):
        ns.solve(w0, nu=1e-3, t_final=1.0, times=[0.5, 0.2])
    with pytest.raises(DataError, match="ascending"):
        ns.solve(w0, nu=1e-3, t_final=1.0, times=[2.0])
    with pytest.raises(DataError, match="multiple"):
        ns.solve(w0, nu=1e-3, t_final=1.0, solve_resolution=12)
    with pytest.raises(DataError, match="nu"):
        ns.solve(w0, nu=0.0, t_final=1.0)
    with pytest.raises(DataError, match="forcing"):
        ns.solve(w0, nu=1e-3, t_final=1.0, forcing=np.zeros((4, 4)))


def test_a_fixed_step_far_past_the_cfl_rule_is_warned_about():
    """dt = 2 on a 16^2 FNO flow moves it many grid cells a step and ends 50-105 % away from the CFL-rule solution
    with no NaN (docs/data.md): a warning says so; the CFL rule and a small fixed step give none."""
    import warnings

    from opformer.config import OpformerWarning

    w0, f = ns.grf_vorticity(16, 2, 0), ns.fno_forcing(16)
    with pytest.warns(OpformerWarning, match=r"the fixed time step dt \(--dt\) 2 moved the flow up to"):
        big = ns.solve(w0, nu=1e-3, t_final=20, forcing=f, dt=2.0)
    with warnings.catch_warnings():
        warnings.simplefilter("error", OpformerWarning)
        ref = ns.solve(w0, nu=1e-3, t_final=20, forcing=f, cfl=0.05)
        ns.solve(w0, nu=1e-3, t_final=1, forcing=f, dt=0.05)
    assert torch.isfinite(big).all()
    err = torch.linalg.norm((big - ref).reshape(2, -1), dim=1) / torch.linalg.norm(ref.reshape(2, -1), dim=1)
    assert err.min() > 0.3  # the warning is about a real error, not a formality
