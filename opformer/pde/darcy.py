"""Steady Darcy flow on the unit square: the forward solver, the piececonst coefficient and the resamplers.

    -div(a(x) grad u(x)) = f(x),   x in (0, 1)^2,   u = 0 on the boundary.

Grids. The *node grid* of size n has the points ``x_i = i / (n - 1)``, i = 0..n-1, boundary included; the
*cell grid* of size K has the cell centres ``(i + 1/2) / K`` (the MATLAB ``(2i - 1)/(2K)``, i = 1..K).
Arrays are indexed ``v[i, j] = v(x_i, y_j)`` (first axis x).

The piececonst r421 recipe (FNO data sets ``piececonst_r421_N1024_smooth{1,2}``; ``GRF.m`` + ``solve_gwf.m``):
draw the Neumann Gaussian field psi on the K x K cell grid (alpha = 2, tau = 3), set a = 12 where psi >= 0 and
a = 3 where psi < 0, interpolate a and f = 1 to the node grid by a tensor not-a-knot cubic spline with
extrapolation (MATLAB ``interp2(..., 'spline')``), solve the five-point flux-form finite-difference system on
the node grid, and interpolate u back to the cell centres by the same kind of spline. ``coeff`` and ``sol``
are then both on the cell grid; ``sol`` is small but not zero next to the wall (about 3e-5 at K = 421). The spline overshoots a lot near
jumps that are close to a wall: node values of a down to about -25 occur at K = 421 (interior values stay
near [0.4, 15]); the recipe keeps them, as the original data did.
"""

from __future__ import annotations

import math

import numpy as np
import scipy.sparse
import scipy.sparse.linalg
from scipy.interpolate import make_interp_spline

from .errors import DataError
from .grf import grf2d_neumann

__all__ = [
    "assemble",
    "solve",
    "node_coords",
    "cell_coords",
    "cell_to_node",
    "node_to_cell",
    "piececonst_coefficient",
    "piececonst_sample",
    "wrong_sign_samples",
    "sign_check_applies",
    "pool_nanmean",
]


def node_coords(n: int) -> np.ndarray:
    """The node grid ``i / (n - 1)``, i = 0..n-1 (boundary included), shape ``(n,)``."""
    return np.arange(n, dtype=np.float64) / (n - 1)


def cell_coords(k: int) -> np.ndarray:
    """The cell-centre grid ``(i + 1/2) / k``, i = 0..k-1, shape ``(k,)``."""
    return (np.arange(k, dtype=np.float64) + 0.5) / k


def _face_mean(p: np.ndarray, q: np.ndarray, face: str) -> np.ndarray:
    if face == "arithmetic":
        return 0.5 * (p + q)
    if face == "harmonic":
        return 2.0 * p * q / (p + q)
    raise DataError(f"darcy: face must be 'arithmetic' or 'harmonic', found {face!r}")


def assemble(a, *, face: str = "arithmetic") -> scipy.sparse.csr_matrix:
    """Five-point flux-form matrix of ``-div(a grad .)`` on the interior nodes, Dirichlet u = 0 on the boundary.

    Args:
        a: ``(n, n)`` positive coefficient on the node grid (boundary included).
        face: the coefficient on the face between two neighbouring nodes: ``"arithmetic"`` mean of the two
            node values (the recipe) or ``"harmonic"`` mean.

    Returns:
        CSR matrix ``((n-2)^2, (n-2)^2)``, unknowns ordered row-major over the interior nodes ``[1:-1, 1:-1]``.
        Row (i, j): ``(n-1)^2 [ (a_E + a_W + a_N + a_S) u_ij - a_E u_{i+1,j} - a_W u_{i-1,j} - a_N u_{i,j+1}
        - a_S u_{i,j-1} ]`` where a_E is the face coefficient between nodes (i, j) and (i+1, j), and so on;
        neighbours on the boundary contribute their value 0. Symmetric positive definite.
    """
    a = np.asarray(a, dtype=np.float64)
    if a.ndim != 2 or a.shape[0] != a.shape[1] or a.shape[0] < 3:
        raise DataError(f"darcy.assemble: expected a square coefficient (n, n) with n >= 3, found {a.shape}")
    n = a.shape[0]
    m = n - 2
    inv_h2 = float(n - 1) ** 2
    east = _face_mean(a[1:-1, 1:-1], a[2:, 1:-1], face)  # face (i+1/2, j) for interior (i, j)
    west = _face_mean(a[1:-1, 1:-1], a[:-2, 1:-1], face)
    north = _face_mean(a[1:-1, 1:-1], a[1:-1, 2:], face)
    south = _face_mean(a[1:-1, 1:-1], a[1:-1, :-2], face)
    idx = np.arange(m * m).reshape(m, m)
    rows = [idx.ravel()]
    cols = [idx.ravel()]
    vals = [(east + west + north + south).ravel() * inv_h2]
    # couplings between interior neighbours (boundary neighbours are zero and drop out)
    rows += [idx[:-1, :].ravel(), idx[1:, :].ravel(), idx[:, :-1].ravel(), idx[:, 1:].ravel()]
    cols += [idx[1:, :].ravel(), idx[:-1, :].ravel(), idx[:, 1:].ravel(), idx[:, :-1].ravel()]
    vals += [
        -east[:-1, :].ravel() * inv_h2,
        -west[1:, :].ravel() * inv_h2,
        -north[:, :-1].ravel() * inv_h2,
        -south[:, 1:].ravel() * inv_h2,
    ]
    mat = scipy.sparse.coo_matrix(
        (np.concatenate(vals), (np.concatenate(rows), np.concatenate(cols))), shape=(m * m, m * m)
    )
    return mat.tocsr()


def _amg_solve(mat, rhs: np.ndarray, tol: float) -> np.ndarray:
    try:
        import pyamg  # optional dependency, imported only when asked for
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError(
            "darcy.solve(solver='amg') needs the optional package pyamg: pip install 'opformer[amg]' "
            "(or pip install pyamg), or use solver='direct'"
        ) from exc
    ml = pyamg.smoothed_aggregation_solver(mat, symmetry="symmetric")
    residuals: list[float] = []
    x = ml.solve(rhs, tol=tol, accel="cg", maxiter=500, residuals=residuals)
    norm_b = np.linalg.norm(rhs)
    res = np.linalg.norm(rhs - mat @ x)
    if norm_b > 0 and res > 10 * tol * norm_b:
        raise DataError(f"darcy.solve: AMG-CG did not converge (relative residual {res / norm_b:.2e} > tol {tol:.1e})")
    return x


def solve(
    a,
    f=1.0,
    *,
    face: str = "arithmetic",
    solver: str = "direct",
    tol: float = 1e-12,
    allow_nonpositive: bool = False,
) -> np.ndarray:
    """Solve ``-div(a grad u) = f`` on the node grid with u = 0 on the boundary.

    Args:
        a: coefficient ``(n, n)`` or ``(batch, n, n)`` on the node grid ``x_i = i / (n - 1)`` (boundary
            included), positive and finite.
        f: right-hand side of the same shape as ``a``, or a scalar (only its interior values are used).
        face: ``"arithmetic"`` (the recipe) or ``"harmonic"`` face coefficients, see :func:`assemble`.
        solver: ``"direct"`` (sparse LU, SuperLU with minimum-degree ordering, one factorization per sample) or ``"amg"`` (pyamg
            smoothed-aggregation AMG as a CG preconditioner; needs ``pip install pyamg``).
        tol: relative residual tolerance of the AMG solver.
        allow_nonpositive: accept coefficients <= 0 (the matrix is then not necessarily definite, but the
            direct solver still solves it). The piececonst recipe needs this: the spline resampling of a
            3/12 coefficient overshoots, at the walls down to about -25 at K = 421.

    Returns:
        float64 ``u`` of the shape of ``a``, with exact zeros on the boundary nodes.
    """
    a = np.asarray(a, dtype=np.float64)
    batched = a.ndim == 3
    if a.ndim not in (2, 3) or a.shape[-1] != a.shape[-2] or a.shape[-1] < 3:
        raise DataError(f"darcy.solve: expected a of shape (n, n) or (batch, n, n) with n >= 3, found {a.shape}")
    f = np.asarray(f, dtype=np.float64)
    if f.ndim == 0:
        f = np.full(a.shape, float(f))
    if f.shape != a.shape:
        raise DataError(f"darcy.solve: expected f of shape {a.shape} like a (or a scalar), found {f.shape}")
    if not (np.all(np.isfinite(a)) and np.all(np.isfinite(f))):
        raise DataError("darcy.solve: a or f contains NaN or inf")
    if not allow_nonpositive and np.any(a <= 0):
        raise DataError(f"darcy.solve: the coefficient must be positive, found min(a) = {a.min():.3g}")
    if solver not in ("direct", "amg"):
        raise DataError(f"darcy.solve: solver must be 'direct' or 'amg', found {solver!r}")
    a_b = a if batched else a[None]
    f_b = f if batched else f[None]
    n = a.shape[-1]
    out = np.zeros_like(a_b)
    for s in range(a_b.shape[0]):
        mat = assemble(a_b[s], face=face)
        rhs = f_b[s, 1:-1, 1:-1].ravel()
        if solver == "direct":
            # minimum-degree ordering on A^T + A: half the fill and time of the default COLAMD for this SPD-structured matrix
            lu = scipy.sparse.linalg.splu(mat.tocsc(), permc_spec="MMD_AT_PLUS_A")
            x = lu.solve(rhs)
        else:
            x = _amg_solve(mat, rhs, tol)
        out[s, 1:-1, 1:-1] = x.reshape(n - 2, n - 2)
    return out if batched else out[0]


def _spline_resample(v: np.ndarray, x_from: np.ndarray, x_to: np.ndarray) -> np.ndarray:
    """Tensor not-a-knot cubic spline interpolation (with extrapolation) of ``v`` over its last two axes."""
    out = make_interp_spline(x_from, v, k=3, axis=-2)(x_to)
    return make_interp_spline(x_from, out, k=3, axis=-1)(x_to)


def cell_to_node(v) -> np.ndarray:
    """Resample ``(..., K, K)`` values on the cell centres to the ``(K, K)`` node grid (MATLAB interp2 'spline').

    Tensor not-a-knot cubic splines along each axis, extrapolated to the boundary nodes (half a cell outside
    the outermost centre), so a piecewise-constant coefficient overshoots a little near its jumps.
    """
    v = np.asarray(v, dtype=np.float64)
    k = v.shape[-1]
    return _spline_resample(v, cell_coords(k), node_coords(k))


def node_to_cell(v) -> np.ndarray:
    """Resample ``(..., K, K)`` values on the node grid to the ``(K, K)`` cell centres (inverse of :func:`cell_to_node`'s route)."""
    v = np.asarray(v, dtype=np.float64)
    k = v.shape[-1]
    return _spline_resample(v, node_coords(k), cell_coords(k))


def piececonst_coefficient(
    k: int, rng: np.random.Generator, *, alpha: float = 2.0, tau: float = 3.0, high: float = 12.0, low: float = 3.0
) -> np.ndarray:
    """Piecewise-constant coefficient ``(k, k)`` on the cell grid: ``high`` where psi >= 0, ``low`` where psi < 0.

    psi is :func:`opformer.pde.grf.grf2d_neumann` ``(k, rng, alpha, tau)``.
    """
    psi = grf2d_neumann(k, rng, alpha=alpha, tau=tau)
    return np.where(psi >= 0.0, float(high), float(low))


def piececonst_sample(
    k: int,
    rng: np.random.Generator,
    *,
    alpha: float = 2.0,
    tau: float = 3.0,
    high: float = 12.0,
    low: float = 3.0,
    f: float = 1.0,
    grid: str = "cell",
    face: str = "arithmetic",
    solver: str = "direct",
) -> tuple[np.ndarray, np.ndarray]:
    """One sample ``(coeff, sol)``, each ``(k, k)`` float64, of the piececonst Darcy recipe.

    ``grid="cell"`` (the recipe): the coefficient drawn on the k x k cell centres is spline-resampled to the
    node grid, solved there, and the solution spline-resampled back; both arrays are on the cell grid.
    ``grid="node"``: the thresholded values are used directly as node values (no resampling, no overshoot)
    and the solution is returned on the node grid (exact zeros on the boundary).
    """
    coeff = piececonst_coefficient(k, rng, alpha=alpha, tau=tau, high=high, low=low)
    if grid == "cell":
        a_node = cell_to_node(coeff)
        f_node = np.full((k, k), float(f))  # the spline of a constant is that constant
        sol = node_to_cell(solve(a_node, f_node, face=face, solver=solver, allow_nonpositive=True))
    elif grid == "node":
        sol = solve(coeff, float(f), face=face, solver=solver)
    else:
        raise DataError(f"darcy: grid must be 'cell' or 'node', found {grid!r}")
    return coeff, sol


def wrong_sign_samples(sol, tol: float = 0.1) -> np.ndarray:
    """Indices of the samples ``sol`` (``(N, n, n)``) whose solution has the wrong sign for f > 0.

    With f > 0 and a > 0, -div(a grad u) = f with u = 0 on the wall gives u >= 0 everywhere (the maximum
    principle).  The piececonst recipe on the cell grid resamples a by splines, whose overshoot at a jump next to a
    wall can make node values of a negative; the system is then indefinite, and now and then nearly singular, and
    its solution is not the flow through any medium: large and of either sign.  A sample counts when
    ``min u < -tol * max |u|`` (the splines' own undershoot next to the wall is about 2 % of max |u| at 17^2-64^2).
    """
    sol = np.asarray(sol)
    if sol.ndim < 2:
        raise DataError(f"wrong_sign_samples: expected (N, n, n) solutions, found shape {sol.shape}")
    size = int(np.prod(sol.shape[1:]))
    block = sign_check_block(sol.shape)
    bad = []
    for lo in range(0, len(sol), block):
        flat = np.asarray(sol[lo : lo + block], dtype=np.float64).reshape(-1, size)
        bad.append(np.flatnonzero(flat.min(axis=1) < -tol * np.abs(flat).max(axis=1)) + lo)
    return np.concatenate(bad) if bad else np.zeros(0, dtype=np.intp)


#: the most bytes of solutions the wrong-sign check holds at a time (in float64)
SIGN_CHECK_BYTES = 64 << 20


def sign_check_block(shape) -> int:
    """How many samples of solutions shaped ``shape`` (N, *grid) the wrong-sign check takes at a time: at most
    :data:`SIGN_CHECK_BYTES` in float64, at least one."""
    return max(1, SIGN_CHECK_BYTES // max(1, 8 * math.prod(shape[1:])))


def sign_check_applies(recipe: dict) -> bool:
    """Whether :func:`wrong_sign_samples` applies to data made by ``recipe`` (an opformer generation recipe): Darcy
    with a source term f > 0."""
    return recipe.get("problem") == "darcy" and float(recipe.get("f", 1.0)) > 0


def pool_nanmean(v, kernel: int) -> np.ndarray:
    """Mean pooling of ``(..., n, n)`` over ``kernel x kernel`` blocks, NaN-padded: output ``(..., ceil(n/k), ceil(n/k))``.

    The last block of each axis may be partial; it is the mean of the values that exist (the reference's
    NaN padding with ``nanmean``). For the paper's inverse problem 421 -> 141 -> 36 (kernels 3, then 4) or
    421 -> 211 -> 71 (kernels 2, then 3).
    """
    v = np.asarray(v, dtype=np.float64)
    if int(kernel) != kernel or kernel < 1:
        raise DataError(f"pool_nanmean: kernel must be a positive integer, found {kernel!r}")
    if kernel == 1:
        return v.copy()
    n1, n2 = v.shape[-2:]
    c1, c2 = -(-n1 // kernel), -(-n2 // kernel)
    padded = np.full(v.shape[:-2] + (c1 * kernel, c2 * kernel), np.nan)
    padded[..., :n1, :n2] = v
    blocks = padded.reshape(v.shape[:-2] + (c1, kernel, c2, kernel))
    total = np.nansum(blocks, axis=(-3, -1))
    count = np.sum(~np.isnan(blocks), axis=(-3, -1))
    return total / count
