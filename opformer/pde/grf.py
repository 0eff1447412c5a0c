"""Gaussian random fields by Karhunen–Loève expansion.

Two fields are used by the paper's data sets:

* 1D, periodic on the unit interval (Burgers initial conditions):
  ``u0 ~ N(m, sigma^2 (-Delta + tau^2 I)^(-gamma))``. Its L2(0, 1) Karhunen–Loève expansion is

      u0(x) = m + sum_{k>=1} sqrt(2) sigma ((2 pi k)^2 + tau^2)^(-gamma/2) (xi_k cos 2 pi k x + eta_k sin 2 pi k x)

  with xi, eta i.i.d. N(0, 1); so the cosine and sine coefficients of mode k have variance
  ``2 sigma^2 ((2 pi k)^2 + tau^2)^(-gamma)`` (:func:`grf1d_mode_variance`).

* 2D on the unit square with zero-Neumann boundary, sampled at the cell centres ``(i + 1/2)/s``
  (the Darcy coefficient). The coefficient of the Neumann eigenfunction ``cos(pi k1 x) cos(pi k2 y)``
  in the orthonormal DCT-II basis is ``s tau^(alpha-1) (pi^2 (k1^2 + k2^2) + tau^2)^(-alpha/2) xi`` with the
  (0, 0) mode set to zero, and the field is its orthonormal inverse DCT-II (MATLAB ``idct2``,
  ``scipy.fft.idctn(type=2, norm='ortho')``).

* 2D, periodic on the unit torus (Navier–Stokes initial vorticity): ``w0 ~ N(0, scale (-Delta + tau^2 I)^(-gamma))``
  with zero mean. The covariance operator has the eigenfunctions ``e^{2 pi i k.x}``, k in Z^2, with eigenvalues
  ``scale (4 pi^2 |k|^2 + tau^2)^(-gamma)`` (:func:`grf2d_periodic_mode_variance`); a sample is
  ``sum_k sqrt(eigenvalue_k) c_k e^{2 pi i k.x}`` with Hermitian standard complex normal c_k (E|c_k|^2 = 1).

Determinism: every sample is drawn from its own generator :func:`sample_rng` ``(seed, index, stream)``, so
the same (seed, index) gives the same field in any process, on any machine and in any shard.
"""

from __future__ import annotations

import numpy as np
import scipy.fft

from .errors import DataError

__all__ = [
    "sample_rng",
    "grf1d_mode_variance",
    "grf1d_periodic",
    "grf2d_mode_std",
    "grf2d_neumann",
    "grf2d_periodic_mode_variance",
    "grf2d_periodic",
]


def sample_rng(seed: int, index: int, stream: int = 0) -> np.random.Generator:
    """The random generator of one sample: ``np.random.default_rng([seed, stream, index])``.

    ``stream`` separates independent families drawn with the same seed (for example the Darcy train and
    test files). The result does not depend on the process, the shard or the order of computation.
    """
    for name, v in (("seed", seed), ("index", index), ("stream", stream)):
        if int(v) != v or v < 0:
            raise DataError(f"sample_rng: {name} must be a non-negative integer, found {v!r}")
    return np.random.default_rng([int(seed), int(stream), int(index)])


def grf1d_mode_variance(k, *, sigma: float = 25.0, tau: float = 5.0, gamma: float = 2.0) -> np.ndarray:
    """Variance of the cosine (and of the sine) coefficient of mode ``k`` of the periodic 1D field.

    ``2 sigma^2 ((2 pi k)^2 + tau^2)^(-gamma)`` for ``k >= 1`` (unit period).
    """
    k = np.asarray(k, dtype=np.float64)
    return 2.0 * sigma**2 * ((2.0 * np.pi * k) ** 2 + tau**2) ** (-gamma)


def grf1d_periodic(
    n: int,
    rng: np.random.Generator,
    *,
    sigma: float = 25.0,
    tau: float = 5.0,
    gamma: float = 2.0,
    mean: float = 0.0,
    modes: int | None = None,
    size: int | None = None,
) -> np.ndarray:
    """Sample ``N(mean, sigma^2 (-Delta + tau^2)^(-gamma))`` on the periodic grid ``x_j = j/n``, j = 0..n-1.

    Args:
        n: number of grid points (the unit period, endpoint excluded).
        rng: the generator (see :func:`sample_rng`).
        sigma, tau, gamma: the covariance parameters.
        mean: the constant mode m (each sample has exactly this mean).
        modes: keep only the Fourier modes k = 1..modes (the R10 data uses 20). ``None`` keeps every mode
            the grid resolves without aliasing, k = 1..ceil(n/2)-1 (the Nyquist mode, whose sine part is
            invisible on the grid, is left out).
        size: draw this many samples at once (shape ``(size, n)``); ``None`` gives shape ``(n,)``.

    Returns:
        float64 array ``(n,)`` or ``(size, n)``.

    The normal draws are taken mode by mode, (cosine, sine) for k = 1, 2, ..., so for one sample a field
    truncated to K modes is exactly the first K modes of the field truncated to K' > K modes drawn from the
    same generator state.
    """
    if n < 3:
        raise DataError(f"grf1d_periodic: expected n >= 3 grid points, found n={n}")
    kmax = (n + 1) // 2 - 1
    if modes is None:
        modes = kmax
    if not 1 <= modes <= kmax:
        raise DataError(
            f"grf1d_periodic: modes must be in [1, {kmax}] for n={n} points (the grid resolves k < n/2), "
            f"found modes={modes}"
        )
    batch = 1 if size is None else int(size)
    k = np.arange(1, modes + 1)
    std = np.sqrt(grf1d_mode_variance(k, sigma=sigma, tau=tau, gamma=gamma))
    xi = rng.standard_normal((batch, modes, 2))  # per mode: (cosine, sine)
    a_k = std * xi[..., 0]
    b_k = std * xi[..., 1]
    # irfft convention: x_j = (1/n) sum_k X_k e^{2 pi i k j/n}; a_k cos + b_k sin  <->  X_k = n (a_k - i b_k)/2.
    spec = np.zeros((batch, n // 2 + 1), dtype=np.complex128)
    spec[:, 0] = n * mean
    spec[:, 1 : modes + 1] = 0.5 * n * (a_k - 1j * b_k)
    field = np.fft.irfft(spec, n=n, axis=-1)
    return field[0] if size is None else field


def grf2d_mode_std(s: int, *, alpha: float = 2.0, tau: float = 3.0) -> np.ndarray:
    """Standard deviation ``(s, s)`` of each orthonormal DCT-II coefficient of the 2D Neumann field.

    ``s tau^(alpha-1) (pi^2 (k1^2 + k2^2) + tau^2)^(-alpha/2)`` for (k1, k2) in [0, s-1]^2, and 0 at (0, 0).
    """
    k = np.arange(s, dtype=np.float64)
    k1, k2 = np.meshgrid(k, k, indexing="ij")
    std = s * tau ** (alpha - 1.0) * (np.pi**2 * (k1**2 + k2**2) + tau**2) ** (-alpha / 2.0)
    std[0, 0] = 0.0
    return std


def grf2d_neumann(s: int, rng: np.random.Generator, *, alpha: float = 2.0, tau: float = 3.0) -> np.ndarray:
    """Sample the zero-Neumann field ``N(0, tau^(2 alpha - 2) (-Delta + tau^2)^(-alpha))`` on s x s cell centres.

    The grid points are ``((i + 1/2)/s, (j + 1/2)/s)``; ``out[i, j]`` is the value at x = (i+1/2)/s,
    y = (j+1/2)/s. No truncation (all s^2 modes), the constant mode is zero (this is the Darcy recipe
    ``GRF.m`` with alpha = 2, tau = 3).

    Returns:
        float64 array ``(s, s)``.
    """
    if s < 2:
        raise DataError(f"grf2d_neumann: expected s >= 2 cells per side, found s={s}")
    coef = grf2d_mode_std(s, alpha=alpha, tau=tau) * rng.standard_normal((s, s))
    return scipy.fft.idctn(coef, type=2, norm="ortho")


def grf2d_periodic_mode_variance(kx, ky, *, scale: float, tau: float, gamma: float) -> np.ndarray:
    """Eigenvalue ``scale (4 pi^2 (kx^2 + ky^2) + tau^2)^(-gamma)`` of the periodic covariance for ``e^{2 pi i k.x}``.

    It is the variance ``E|c_k|^2`` of the Fourier coefficient ``c_k = (1/n^2) FFT(w)_k`` of a sample; the
    (0, 0) entry is the formula's value, although the samples have zero mean.
    """
    kx = np.asarray(kx, dtype=np.float64)
    ky = np.asarray(ky, dtype=np.float64)
    return scale * (4.0 * np.pi**2 * (kx**2 + ky**2) + tau**2) ** (-gamma)


def grf2d_periodic(
    n: int,
    rng: np.random.Generator,
    *,
    scale: float,
    tau: float,
    gamma: float,
    modes: int | None = None,
    size: int | None = None,
) -> np.ndarray:
    """Sample the zero-mean periodic field ``N(0, scale (-Delta + tau^2)^(-gamma))`` on ``x_i = i/n, y_j = j/n``.

    ``out[..., i, j]`` is the value at (x_i, y_j). Only the Fourier modes ``|kx|, |ky| <= modes`` are drawn
    (default: every mode below the Nyquist frequency, ``(n - 1) // 2``), and the draws depend on ``modes`` but
    not on ``n``: the same generator state and ``modes`` give the same field (its trigonometric polynomial) on
    any grid with ``n > 2 modes``. For each sample ``(2 modes + 1)^2`` complex normals z_k are drawn and made
    Hermitian, ``c_k = (z_k + conj(z_-k)) / sqrt(2)``, so that ``E|c_k|^2 = 1`` and ``c_-k = conj(c_k)``.

    Returns:
        float64 ``(n, n)``, or ``(size, n, n)`` when ``size`` is given.
    """
    if n < 3:
        raise DataError(f"grf2d_periodic: expected n >= 3 grid points per side, found n={n}")
    kmax = (n - 1) // 2
    if modes is None:
        modes = kmax
    if int(modes) != modes or not 1 <= modes <= kmax:
        raise DataError(f"grf2d_periodic: modes must be an integer in [1, {kmax}] for n={n} (below the Nyquist mode), found {modes!r}")
    modes = int(modes)
    batch = 1 if size is None else int(size)
    m = 2 * modes + 1
    draws = rng.standard_normal((batch, m, m, 2))
    z = (draws[..., 0] + 1j * draws[..., 1]) / np.sqrt(2.0)
    c = (z + np.conj(z[:, ::-1, ::-1])) / np.sqrt(2.0)  # index modes + k holds mode k; [::-1] maps k -> -k
    c[:, modes, modes] = 0.0
    k = np.arange(-modes, modes + 1)
    std = np.sqrt(grf2d_periodic_mode_variance(k[:, None], k[None, :], scale=scale, tau=tau, gamma=gamma))
    coef = std * c
    spec = np.zeros((batch, n, n // 2 + 1), dtype=np.complex128)
    # numpy's irfft2: w_ij = (1/n^2) sum_k W_k e^{2 pi i (kx i + ky j)/n}; rows kx mod n, columns ky >= 0
    spec[:, k % n, : modes + 1] = (n * n) * coef[:, :, modes:]
    field = np.fft.irfft2(spec, s=(n, n), axes=(-2, -1))
    return field[0] if size is None else field
