"""Two-dimensional incompressible Navier–Stokes in vorticity form on the unit torus, batched on CPU or GPU.

    w_t + u . grad w = nu Delta w + f,    u = (d psi/dy, -d psi/dx),    -Delta psi = w,    (x, y) in [0, 1)^2.

Arrays hold ``w[..., i, j] = w(x_i, y_j)`` with ``x_i = i/n``, ``y_j = j/n`` (axis -2 is x, axis -1 is y).

Space: pseudo-spectral with ``torch.fft.rfft2``; the advection term is computed from the vorticity truncated to
the modes ``|kx|, |ky| < n/3`` and truncated to those modes again after the product (the 2/3 rule). The
truncated advection is then a Galerkin projection: the products of two truncated fields are exact on the
grid below n/3, and ``<w, u . grad w> = 0`` holds to round-off, so the advection neither creates nor destroys
enstrophy and the balance ``d/dt (1/2)|w|^2 = -nu |grad w|^2 + <w, f>`` holds for the semi-discrete system.
Modes at and above n/3 only diffuse (and are forced, if f has them).

Time: the linear part ``w_t = nu Delta w + f`` (f constant in time) is integrated exactly, and the advection
with Heun's method (the explicit trapezoidal rule) on the integrating-factor form (Duhamel's formula with the
trapezoidal rule for the advection integral)::

    A(w) = -P(u . grad w),   E = exp(h nu Delta),   F = (1 - E) (-nu Delta)^-1 f   (= h f for the mean mode)
    w* = E (w + h A(w)) + F
    w_next = E w + (h/2) (E A(w) + A(w*)) + F

It is second order in h (tested: the error against a fine-step reference falls by 4 when h halves). The
diffusion has no step limit, and the Taylor–Green decay and the forced Stokes flows (A = 0) are exact to
round-off. The method is explicit in the advection, like Crank–Nicolson/Heun schemes, but uses the exact
exponential instead of the Crank–Nicolson factor (1 - z/2)/(1 + z/2) for the diffusion.

Step size: unless ``dt`` is given, each sample takes its own steps
``h = min(CFL_SAFETY * dx / max(|u| + |v|), MAX_DT, time left to the next output time)``, with the velocity
of the current state (computed in the first stage of the step anyway), so the requested times are hit exactly
and a sample's trajectory does not depend on the other samples of the batch. With a fixed ``dt`` every
interval between output times is cut into ``ceil(interval / dt)`` equal steps.

Initial conditions: :func:`grf_vorticity` (the FNO benchmark's Gaussian field), :func:`shear_layer_vorticity`
(a perturbed double shear layer); forcing :func:`fno_forcing`. These use numpy only and return float64 arrays.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np
import torch

from .errors import DataError
from .grf import grf2d_periodic, sample_rng

__all__ = [
    "CFL_SAFETY",
    "MAX_DT",
    "MAX_FIXED_COURANT",
    "GRF_SCALE",
    "GRF_TAU",
    "GRF_GAMMA",
    "grid",
    "solve",
    "velocity",
    "advection",
    "enstrophy",
    "palinstrophy",
    "grf_vorticity",
    "shear_layer_vorticity",
    "fno_forcing",
]

#: Courant number of the default step: h = CFL_SAFETY * dx / max(|u| + |v|). Heun's method is only weakly
#: unstable for pure advection (its stability region touches the imaginary axis at 0); 0.25 ran the
#: nu = 1e-5 FNO flow to T = 50 at 64^2 without growth (docs/data.md).
CFL_SAFETY = 0.25
#: Largest default step, for slow or initially resting flows.
MAX_DT = 0.05
#: A fixed step (``dt``) that moves the flow more than this many grid cells in one step (its Courant number
#: h max(|u| + |v|) / dx on the solve grid) is warned about once per solve: the CFL rule keeps 0.25, and past it
#: Heun's method can amplify the advected modes with no NaN to show it.  How far is safe depends on the flow (the
#: viscous factor damps the fastest modes, a fine solve grid holds little energy there): four 16^2 FNO flows
#: (nu = 1e-3) at t = 20 against the CFL rule at 0.05 were 0.03-0.1 % away at a largest Courant number of 2.0,
#: 2.5-10 % at 4.0 and 50-105 % at about 8, while the CLI's 16^2 recipe (solved on a finer grid) reached 5.1 at
#: dt = 0.5 and stayed 3e-4 away.  So no step is refused; the warning asks for a comparison.
MAX_FIXED_COURANT = 1.0

#: FNO Navier–Stokes initial vorticity: N(0, 7^(3/2) (-Delta + 49 I)^(-2.5)).
GRF_SCALE = 7.0**1.5
GRF_TAU = 7.0
GRF_GAMMA = 2.5


def grid(n: int) -> np.ndarray:
    """The points ``i/n``, i = 0..n-1, of one axis of the periodic grid (float64)."""
    return np.arange(n, dtype=np.float64) / n


# -- spectral operators ------------------------------------------------------------------------------------------


class _Spectral:
    """Wavenumbers, the Laplacian symbol and the 2/3-rule mask of the n x n grid, on one device and dtype."""

    def __init__(self, n: int, dtype: torch.dtype, device: torch.device):
        self.n = n
        kx = torch.fft.fftfreq(n, d=1.0 / n, dtype=torch.float64, device=device)[:, None]
        ky = torch.fft.rfftfreq(n, d=1.0 / n, dtype=torch.float64, device=device)[None, :]
        k2 = (2.0 * math.pi) ** 2 * (kx**2 + ky**2)
        self.k2 = k2.to(dtype)  # -Delta
        inv = torch.where(k2 > 0, 1.0 / torch.where(k2 > 0, k2, 1.0), 0.0)
        self.inv_k2 = inv.to(dtype)  # (-Delta)^-1 on zero-mean fields
        self.ikx = (2j * math.pi * kx).to(_complex(dtype))
        self.iky = (2j * math.pi * ky).to(_complex(dtype))
        self.mask = ((kx.abs() < n / 3.0) & (ky.abs() < n / 3.0)).to(dtype)

    def irfft2(self, z: torch.Tensor) -> torch.Tensor:
        return torch.fft.irfft2(z, s=(self.n, self.n))

    def velocity_hat(self, w_hat: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        psi_hat = w_hat * self.inv_k2
        return self.iky * psi_hat, -self.ikx * psi_hat

    def advection(self, w_hat: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(-P(u . grad w))^, max(|u| + |v|)`` per sample, with the 2/3 rule P (see the module doc)."""
        wm = w_hat * self.mask
        u_hat, v_hat = self.velocity_hat(wm)
        # one inverse transform of the four fields (fewer calls: the small grids are dominated by call overhead)
        u, v, wx, wy = self.irfft2(torch.stack((u_hat, v_hat, self.ikx * wm, self.iky * wm))).unbind(0)
        adv = torch.fft.rfft2(u * wx + v * wy)
        speed = (u.abs() + v.abs()).amax(dim=(-2, -1))
        return -adv * self.mask, speed


def _complex(dtype: torch.dtype) -> torch.dtype:
    return torch.complex128 if dtype == torch.float64 else torch.complex64


def _as_tensor(w, name: str) -> tuple[torch.Tensor, bool]:
    if isinstance(w, torch.Tensor):
        t = w
    else:
        t = torch.as_tensor(np.asarray(w))
    if t.dtype not in (torch.float32, torch.float64):
        if t.is_floating_point() or t.dtype in (torch.int32, torch.int64):
            t = t.to(torch.float64)
        else:
            raise DataError(f"navier_stokes: {name} must be a real float32 or float64 array, found dtype {t.dtype}")
    squeeze = t.ndim == 2
    if squeeze:
        t = t[None]
    if t.ndim != 3 or t.shape[-1] != t.shape[-2] or t.shape[-1] < 4:
        raise DataError(f"navier_stokes: expected {name} of shape (batch, n, n) or (n, n) with n >= 4, found {tuple(np.shape(w))}")
    if not bool(torch.isfinite(t).all()):
        raise DataError(f"navier_stokes: {name} contains NaN or inf")
    return t, squeeze


def velocity(w) -> tuple[torch.Tensor, torch.Tensor]:
    """The velocity ``(u, v) = (d psi/dy, -d psi/dx)``, ``-Delta psi = w``, of the vorticity ``w`` (batch, n, n) or (n, n).

    The mean of w is ignored (a periodic velocity has zero-mean vorticity); the velocity has zero mean.
    """
    t, squeeze = _as_tensor(w, "w")
    sp = _Spectral(t.shape[-1], t.dtype, t.device)
    u_hat, v_hat = sp.velocity_hat(torch.fft.rfft2(t))
    u, v = sp.irfft2(u_hat), sp.irfft2(v_hat)
    return (u[0], v[0]) if squeeze else (u, v)


def advection(w) -> torch.Tensor:
    """The dealiased advection tendency ``-P(u . grad w)`` of the solver, in physical space, shaped like ``w``."""
    t, squeeze = _as_tensor(w, "w")
    sp = _Spectral(t.shape[-1], t.dtype, t.device)
    adv_hat, _ = sp.advection(torch.fft.rfft2(t))
    out = sp.irfft2(adv_hat)
    return out[0] if squeeze else out


def enstrophy(w) -> torch.Tensor:
    """``(1/2) int w^2 dx`` over the unit torus (the grid mean of w^2 / 2, exact for trigonometric polynomials)."""
    t, _ = _as_tensor(w, "w")
    return 0.5 * (t * t).mean(dim=(-2, -1))


def palinstrophy(w) -> torch.Tensor:
    """``int |grad w|^2 dx`` over the unit torus, computed spectrally."""
    t, _ = _as_tensor(w, "w")
    n = t.shape[-1]
    sp = _Spectral(n, t.dtype, t.device)
    w_hat = torch.fft.rfft2(t) / (n * n)
    weight = torch.full((n // 2 + 1,), 2.0, dtype=t.dtype, device=t.device)
    weight[0] = 1.0
    if n % 2 == 0:
        weight[-1] = 1.0  # the Nyquist column appears once in the full spectrum
    return (sp.k2 * weight * w_hat.abs() ** 2).sum(dim=(-2, -1))


# -- the solver ---------------------------------------------------------------------------------------------------


def _fourier_refine(w: torch.Tensor, m: int) -> torch.Tensor:
    """The trigonometric interpolant of ``w`` (…, n, n) evaluated on the m x m grid (modes below n/2 only)."""
    n = w.shape[-1]
    if m == n:
        return w
    keep = (n + 1) // 2  # modes 0 .. keep-1 below the Nyquist frequency
    w_hat = torch.fft.rfft2(w)
    out = torch.zeros(w.shape[:-2] + (m, m // 2 + 1), dtype=w_hat.dtype, device=w.device)
    out[..., :keep, :keep] = w_hat[..., :keep, :keep]
    out[..., m - keep + 1 :, :keep] = w_hat[..., n - keep + 1 :, :keep]
    return torch.fft.irfft2(out * (m * m / (n * n)), s=(m, m))


def _forcing_hat(forcing, n: int, m: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor | None:
    if forcing is None:
        return None
    if callable(forcing):
        x = torch.as_tensor(grid(m), dtype=dtype, device=device)
        xx, yy = torch.meshgrid(x, x, indexing="ij")
        f = forcing(xx, yy)
        f = torch.as_tensor(f if isinstance(f, torch.Tensor) else np.asarray(f), dtype=dtype, device=device)
        if f.shape != (m, m):
            raise DataError(f"navier_stokes.solve: forcing(x, y) must return an array of shape {(m, m)}, found {tuple(f.shape)}")
    else:
        f = torch.as_tensor(forcing if isinstance(forcing, torch.Tensor) else np.asarray(forcing), dtype=dtype, device=device)
        if f.shape != (n, n):
            raise DataError(f"navier_stokes.solve: forcing must have the shape of one sample {(n, n)}, found {tuple(f.shape)}")
        f = _fourier_refine(f, m)
    if not bool(torch.isfinite(f).all()):
        raise DataError("navier_stokes.solve: the forcing contains NaN or inf")
    return torch.fft.rfft2(f)


def solve(
    w0,
    *,
    nu: float,
    t_final: float,
    times: Sequence[float] | None = None,
    forcing: np.ndarray | torch.Tensor | Callable | None = None,
    dt: float | None = None,
    solve_resolution: int | None = None,
    cfl: float = CFL_SAFETY,
    max_dt: float = MAX_DT,
    progress: bool = False,
) -> torch.Tensor:
    """Solve ``w_t + u . grad w = nu Delta w + f`` on the unit torus from ``w0``; return w at each of ``times``.

    Args:
        w0: initial vorticity ``(batch, n, n)`` or ``(n, n)``, float32 or float64, a tensor (its device is
            used) or an array (solved on the CPU); ``w0[..., i, j] = w(i/n, j/n)``.
        nu: viscosity (> 0).
        t_final: final time (> 0).
        times: ascending output times in ``[0, t_final]`` (default ``[t_final]``); hit exactly.
        forcing: ``None``, an ``(n, n)`` array on the grid of ``w0``, or a callable ``f(x, y)`` of the
            ``(m, m)`` meshgrid tensors (indexing "ij") of the solve grid returning an ``(m, m)`` array.
        dt: fixed largest step (see the module doc); default: per sample by the CFL rule.
        solve_resolution: solve on m x m points, m a multiple of n (the initial field and an array forcing are
            extended by their trigonometric interpolant, modes below n/2), and return the values at the n x n
            points (every (m/n)-th point). Default: m = n.
        cfl, max_dt: the constants of the default step rule (:data:`CFL_SAFETY`, :data:`MAX_DT`).
        progress: show a tqdm bar over time.

    Returns:
        ``(batch, len(times), n, n)`` in the dtype and on the device of ``w0`` (``(len(times), n, n)`` for a
        2D ``w0``).
    """
    w, squeeze = _as_tensor(w0, "w0")
    n = w.shape[-1]
    dtype, device = w.dtype, w.device
    # finite numbers: an infinite t_final stepped forever, an infinite nu gave NaN, a NaN time returned the last frame
    nu = _positive_number(nu, "nu")
    t_final = _positive_number(t_final, "t_final")
    out_times = [t_final] if times is None else [float(t) for t in np.asarray(times, dtype=np.float64).reshape(-1)]
    if (not out_times or not all(math.isfinite(t) for t in out_times) or out_times[0] < 0
            or out_times[-1] > t_final * (1 + 1e-12) or any(b < a for a, b in zip(out_times, out_times[1:]))):
        raise DataError(f"navier_stokes.solve: times must be ascending in [0, t_final={t_final}], found {list(out_times)}")
    if dt is not None:
        dt = _positive_number(dt, "dt", finite=False)  # inf: one step per output interval, as any dt beyond it
    if not all(_is_number(v) and math.isfinite(v) and v > 0 for v in (cfl, max_dt)):
        raise DataError(f"navier_stokes.solve: cfl and max_dt must be finite numbers > 0, found {cfl}, {max_dt}")
    if solve_resolution is not None and not (isinstance(solve_resolution, (int, np.integer))
                                             and not isinstance(solve_resolution, bool)):
        raise DataError(f"navier_stokes.solve: solve_resolution must be an integer multiple of the grid size {n}, "
                        f"found {solve_resolution!r}")
    m = n if solve_resolution is None else int(solve_resolution)
    if m < n or m % n:
        raise DataError(f"navier_stokes.solve: solve_resolution must be a multiple of the grid size {n}, found {solve_resolution}")
    stride = m // n
    if w.shape[0] == 0:  # no samples: no solution, in its shape (the FFT of an empty batch fails)
        out = w.new_zeros((0, len(out_times), n, n))
        return out[0] if squeeze else out

    sp = _Spectral(m, dtype, device)
    f_hat = _forcing_hat(forcing, n, m, dtype, device)
    nu_k2 = nu * sp.k2
    w_hat = torch.fft.rfft2(_fourier_refine(w, m))
    batch = w.shape[0]
    t_now = torch.zeros(batch, dtype=torch.float64)  # per-sample times, on the CPU (they steer the loop)
    dx = 1.0 / m

    def forcing_step(h: torch.Tensor) -> torch.Tensor | float:
        """F = int_0^h exp(s nu Delta) f ds = (1 - E) / (nu k^2) f, and h f for k = 0."""
        if f_hat is None:
            return 0.0
        phi = torch.where(nu_k2 > 0, -torch.expm1(-nu_k2 * h) / torch.where(nu_k2 > 0, nu_k2, 1.0), h)
        return phi * f_hat

    fixed_speed = None  # the largest h max(|u| + |v|) of a fixed step, kept on the device (no sync in the loop)
    bar = None
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=float(out_times[-1]), unit="time", dynamic_ncols=True, desc=f"navier-stokes {m}x{m}")
    snaps = []
    try:
        for t_out in out_times:
            fixed_steps = None
            if dt is not None:
                interval = t_out - float(t_now[0])
                fixed_steps = max(1, math.ceil(interval / dt - 1e-9)) if interval > 0 else 0
                h_fixed = interval / fixed_steps if fixed_steps else 0.0
            step = 0
            while bool((t_now < t_out).any()):
                n1, speed = sp.advection(w_hat)
                left = t_out - t_now
                if fixed_steps is not None:
                    h = torch.full_like(t_now, h_fixed)
                    last = torch.full_like(t_now, step == fixed_steps - 1, dtype=torch.bool)
                    top = speed.detach().max() * h_fixed
                    fixed_speed = top if fixed_speed is None else torch.maximum(fixed_speed, top)
                else:
                    h_cfl = torch.clamp(cfl * dx / speed.detach().to("cpu", torch.float64).clamp_min(1e-300), max=max_dt)
                    last = left <= h_cfl
                    # two equal steps rather than one full and one tiny step before an output time
                    h = torch.where(last, left, torch.where(left < 2 * h_cfl, left / 2, h_cfl))
                h = torch.where(left > 0, h, torch.zeros_like(h))  # samples already at t_out stay (h = 0: w unchanged)
                hd = h.to(device=device, dtype=dtype)[:, None, None]
                e = torch.exp(-nu_k2 * hd)
                forced = forcing_step(hd)
                w_star = e * (w_hat + hd * n1) + forced
                n2, _ = sp.advection(w_star)
                w_hat = e * w_hat + 0.5 * hd * (e * n1 + n2) + forced
                t_now = torch.where(last & (left > 0), torch.full_like(t_now, t_out), t_now + h)
                step += 1
                if bar is not None:
                    bar.update(float(t_now.min()) - bar.n)
            if not bool(torch.isfinite(w_hat).all()):
                raise DataError(
                    f"navier_stokes.solve: the solution became NaN or inf before t = {t_out} (step too large for "
                    f"this flow? pass a smaller dt, or a finer solve_resolution)"
                )
            snaps.append(sp.irfft2(w_hat)[..., ::stride, ::stride])
    finally:
        if bar is not None:
            bar.close()
    courant_max = 0.0 if fixed_speed is None else float(fixed_speed) / dx  # the largest Courant number of a step
    if courant_max > MAX_FIXED_COURANT:
        import warnings

        from ..config import OpformerWarning

        warnings.warn(f"the fixed time step dt (--dt) {dt:g} moved the flow up to {courant_max:.2g} grid cells a step "
                      f"(the CFL rule keeps {cfl:g}); past about 1 the solution can be wrong without NaN: compare a "
                      f"few samples with a run without dt", OpformerWarning, stacklevel=2)
    out = torch.stack(snaps, dim=1)
    return out[0] if squeeze else out


# -- initial conditions and forcing --------------------------------------------------------------------------------


def _is_number(value) -> bool:
    """Whether ``value`` is one real number (a Python or numpy scalar, or a 0-d real array), not a bool."""
    if isinstance(value, np.ndarray) and value.ndim == 0:
        value = value[()]
    return isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, (bool, np.bool_))


def _positive_number(value, name: str, finite: bool = True) -> float:
    """``value`` as a float > 0 (finite unless ``finite`` is False), else a DataError naming ``name``."""
    if not _is_number(value) or not value > 0 or (finite and not math.isfinite(value)):
        what = "a finite number > 0" if finite else "a number > 0"
        raise DataError(f"navier_stokes.solve: {name} must be {what}, found {value!r}")
    return float(value)


def _rng(seed) -> np.random.Generator:
    if isinstance(seed, np.random.Generator):
        return seed
    if isinstance(seed, (int, np.integer)) and seed >= 0:
        return sample_rng(int(seed), 0)
    raise DataError(f"navier_stokes: expected a non-negative integer seed or a numpy Generator, found {seed!r}")


def grf_vorticity(
    n: int,
    batch: int | None = None,
    seed: int | np.random.Generator = 0,
    *,
    scale: float = GRF_SCALE,
    tau: float = GRF_TAU,
    gamma: float = GRF_GAMMA,
    modes: int | None = None,
) -> np.ndarray:
    """Initial vorticity ``w0 ~ N(0, scale (-Delta + tau^2 I)^(-gamma))`` with zero mean on the n x n torus grid.

    The default parameters are the FNO Navier–Stokes benchmark's ``N(0, 7^(3/2) (-Delta + 49 I)^(-2.5))``
    (:func:`opformer.pde.grf.grf2d_periodic`, Fourier modes ``|kx|, |ky| <= modes``, default all below the
    Nyquist mode). ``seed`` is a non-negative integer or a ``numpy.random.Generator``.

    Returns:
        float64 ``(batch, n, n)``, or ``(n, n)`` when ``batch`` is None.
    """
    return grf2d_periodic(n, _rng(seed), scale=scale, tau=tau, gamma=gamma, modes=modes, size=batch)


def shear_layer_vorticity(
    n: int,
    batch: int | None = None,
    seed: int | np.random.Generator = 0,
    *,
    rho: float = 0.05,
    delta: float = 0.05,
    perturbation: float = 0.05,
    perturbation_modes: int = 10,
) -> np.ndarray:
    """Vorticity ``w = dv/dx - du/dy`` of a perturbed double shear layer on the n x n torus grid.

    ``u = tanh((y - 1/4)/rho)`` for ``y <= 1/2`` and ``tanh((3/4 - y)/rho)`` above (two layers of thickness
    rho at y = 1/4 and 3/4), ``v = delta sin(2 pi (x + sigma(x)))`` with a random phase perturbation per sample
    ``sigma(x) = perturbation * sum_{k=1}^{p} a_k sin(2 pi (k x + b_k)) / sum_k a_k``, a_k, b_k ~ U[0, 1),
    p = ``perturbation_modes`` (drawn in that order from the generator). The derivatives are taken exactly,
    and the grid mean is removed (the velocity of a periodic stream function has zero-mean vorticity).

    Returns:
        float64 ``(batch, n, n)``, or ``(n, n)`` when ``batch`` is None.
    """
    if n < 4:
        raise DataError(f"shear_layer_vorticity: expected n >= 4, found {n}")
    if not (rho > 0 and perturbation_modes >= 1):
        raise DataError(f"shear_layer_vorticity: rho must be > 0 and perturbation_modes >= 1, found {rho}, {perturbation_modes}")
    rng = _rng(seed)
    size = 1 if batch is None else int(batch)
    x = grid(n)
    y = grid(n)
    # du/dy: (1/rho) sech^2 below y = 1/2, -(1/rho) sech^2 above
    du_dy = np.where(y <= 0.5, 1.0 / np.cosh((y - 0.25) / rho) ** 2, -1.0 / np.cosh((0.75 - y) / rho) ** 2) / rho
    k = np.arange(1, perturbation_modes + 1)
    out = np.empty((size, n, n))
    for s in range(size):
        ab = rng.random((2, perturbation_modes))
        a, b = ab[0] / ab[0].sum(), ab[1]
        phase = 2.0 * np.pi * (k[None, :] * x[:, None] + b[None, :])
        sigma = perturbation * np.sum(a * np.sin(phase), axis=-1)
        dsigma = perturbation * np.sum(a * 2.0 * np.pi * k * np.cos(phase), axis=-1)
        dv_dx = delta * np.cos(2.0 * np.pi * (x + sigma)) * 2.0 * np.pi * (1.0 + dsigma)
        w = dv_dx[:, None] - du_dy[None, :]
        out[s] = w - w.mean()
    return out[0] if batch is None else out


def fno_forcing(n: int) -> np.ndarray:
    """The FNO benchmark forcing ``f(x, y) = 0.1 (sin 2 pi (x + y) + cos 2 pi (x + y))`` on the n x n grid (float64)."""
    x = grid(n)
    s = 2.0 * np.pi * (x[:, None] + x[None, :])
    return 0.1 * (np.sin(s) + np.cos(s))
