"""Data set recipes and their generation: deterministic per sample, parallel, resumable, shardable.

A *recipe* is a JSON-serialisable dict that says everything needed to regenerate a data set; it is stored in
the file. Each sample is a function of (recipe, global index) only: its random field comes from
``np.random.default_rng([seed, stream, index])``, so shards computed on different machines or with another
number of worker processes give the same samples (bit-identical for Burgers and Darcy).

Each kind of recipe (``recipe["problem"]``) is one :class:`RecipeKind` in :data:`RECIPES`: its defaults, its
checks, how it computes samples, the arrays it stores and its chunk size. A new data set is one
:func:`register_recipe` call; nothing else here names a problem.

Default recipes:

* :data:`BURGERS_R10`: the FNO ``burgers_data_R10`` set as measured from the published samples
  (notes/data-recipes.md §1). ``u_t + u u_x = 0.1 u_xx`` on the 2 pi-periodic domain up to t = 1 (identical to
  nu = 0.1/(2 pi), T = 1/(2 pi) on the unit period), ``u0 ~ N(0, 625 (-Delta + 25)^-2)`` on the unit period
  truncated to Fourier modes 1..20, 8192 output points ``x_j = j/8192`` (the unit coordinate), 2048 samples.
  ``domain="unit"`` is the paper's literal reading (period 1 with the same nu and T; its solutions have
  nearly decayed to 0 by T = 1). The optional key ``snapshots=K`` stores the trajectory ``u(t_k)``,
  ``t_k = k T / K``, k = 0..K, instead of u(T) alone.
* :data:`DARCY_R421`: the FNO ``piececonst_r421_N1024_smooth{1,2}`` sets (§2): a = 12 / 3 by the sign of a
  Neumann Gaussian field (alpha = 2, tau = 3), f = 1, 421 x 421, 1024 samples per file; ``split="train"`` and
  ``split="test"`` draw from independent random streams (0 and 1).
* :data:`NS_FNO` (``"ns"``): the FNO Navier–Stokes benchmark, vorticity trajectories on the unit torus from
  ``w0 ~ N(0, 7^(3/2) (-Delta + 49 I)^(-2.5))`` with the forcing ``0.1 (sin 2 pi (x + y) + cos 2 pi (x + y))``,
  nu = 1e-3, a snapshot every time unit up to T = 50, 64 x 64.
* :data:`SHEAR_LAYER` (``"shear-layer"``): a randomly perturbed double shear layer, no forcing.
"""

from __future__ import annotations

import copy
import math
import os
import sys
import time
import types
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..interrupt import check_stop, clear_stop
from . import burgers, darcy
from .errors import DataError, RecipeError
from .grf import grf1d_periodic, sample_rng
from .storage import PROBLEM_KEYS, ShardWriter, no_space_reason, read_header, recipe_diff

__all__ = [
    "BURGERS_R10",
    "DARCY_R421",
    "NS_FNO",
    "SHEAR_LAYER",
    "DARCY_STREAMS",
    "RecipeKind",
    "RECIPES",
    "register_recipe",
    "default_recipe",
    "make_recipe",
    "compute_samples",
    "generate_dataset",
    "check_dataset",
    "ensure_dataset",
]

BURGERS_R10: dict = {
    "problem": "burgers",
    "n_samples": 2048,
    "resolution": 8192,
    "seed": 0,
    # "2pi": the PDE with nu and t_final is posed on X = 2 pi x (period 2 pi) -- what R10 is, as measured;
    # "unit": on the unit period (the paper's literal text).
    "domain": "2pi",
    "nu": 0.1,
    "t_final": 1.0,
    # initial condition on the unit period: N(mean, sigma^2 (-Delta + tau^2)^-gamma), Fourier modes 1..modes
    "grf": {"sigma": 25.0, "tau": 5.0, "gamma": 2.0, "mean": 0.0, "modes": 20},
    "steps": 400,  # ETDRK4 steps over [0, t_final]: max relative error 1.6e-9 over the 2048 R10 samples (median 4e-12)
    "solve_resolution": 512,  # internal Fourier points (null: the output resolution); 512 and 1024 agree to 1e-15 for R10
    "dealias": False,
    "dtype": "float64",
}

DARCY_R421: dict = {
    "problem": "darcy",
    "n_samples": 1024,
    "resolution": 421,
    "seed": 0,
    "split": "train",  # "train" -> random stream 0, "test" -> stream 1 (independent draws)
    "grf": {"alpha": 2.0, "tau": 3.0},
    "high": 12.0,  # a where psi >= 0
    "low": 3.0,  # a where psi < 0
    "f": 1.0,
    "grid": "cell",  # "cell": cell-centre arrays with the spline round trip of solve_gwf.m; "node": node grid, no splines
    "face": "arithmetic",
    "solver": "direct",
    "dtype": "float64",
}

DARCY_STREAMS = {"train": 0, "test": 1}

NS_FNO: dict = {
    "problem": "ns",
    "n_samples": 1200,
    "resolution": 64,
    "seed": 0,
    "nu": 1e-3,
    "t_final": 50.0,
    "snapshots": 50,  # stored times t_k = k t_final / snapshots, k = 0..snapshots
    # w0 ~ N(0, scale (-Delta + tau^2)^-gamma), Fourier modes below the Nyquist mode of the output grid
    "grf": {"scale": 7.0**1.5, "tau": 7.0, "gamma": 2.5},
    "forcing": "fno",  # "fno": 0.1 (sin 2 pi (x + y) + cos 2 pi (x + y)); "none"
    # 64^2 solves agree with 128^2 to 2e-6 and with a 4x smaller step to 2e-5 at nu = 1e-3, T = 50
    # (docs/data.md); nu = 1e-4 needs 256 (64: 3e-2, 128: 1e-3 at T = 30)
    "solve_resolution": 64,
    "cfl": 0.25,  # step h = cfl dx / max(|u| + |v|) per sample (navier_stokes.CFL_SAFETY)
    "dt": None,  # a fixed largest step instead of the CFL rule
    "dtype": "float32",
}

SHEAR_LAYER: dict = {
    "problem": "shear-layer",
    "n_samples": 1024,
    "resolution": 64,
    "seed": 0,
    "nu": 4e-4,
    "t_final": 1.0,
    "snapshots": 10,
    # u = tanh((y - 1/4)/rho), tanh((3/4 - y)/rho); v = delta sin(2 pi (x + sigma(x))), sigma a random
    # sum of `modes` sines of amplitude `perturbation` (navier_stokes.shear_layer_vorticity)
    "shear": {"rho": 1.0 / 30.0, "delta": 0.05, "perturbation": 0.05, "modes": 10},
    "forcing": "none",
    "solve_resolution": 128,
    "cfl": 0.25,
    "dt": None,
    "dtype": "float32",
}

DARCY_STREAMS = {"train": 0, "test": 1}


# -- the registry -------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RecipeKind:
    """What the generator needs to know about one kind of data set (``recipe["problem"]``).

    Attributes:
        name: the ``problem`` value.
        defaults: the default recipe (its keys are the valid keys; nested dicts are overridden key by key).
        validate: ``(recipe, need)`` checks the kind's own keys: ``need(cond, key, allowed, nullable=False)``
            raises a :class:`RecipeError` naming the recipe key (dotted for a nested one), its value and what it
            accepts (``need(cond, message)``: a plain DataError).
        compute: ``(recipe, indices, device) -> {key: (len(indices), *shape)}``, float64, a function of
            (recipe, index) per sample.
        layout: ``recipe -> (shapes, coords, compress)``: the per-sample shape of each stored key (input key
            first), the coordinate arrays to store (``x``, ``y``, ``t``), the keys stored gzip-compressed.
        chunk: ``(recipe, device) -> samples per task`` (the default chunk size).
        keys: (input key, target key) of the stored arrays (one key for trajectories).
        optional: keys accepted by :func:`make_recipe` that are left out of the recipe while they are ``None``
            (so that adding an option does not change the stored recipes of existing files).
        shortcuts: the nested dict whose keys may also be given flat (``modes=20`` for ``grf={"modes": 20}``).
        devices: whether the solver runs on a torch device (``--device``).
        method: the version of how the samples are computed, stored in each file as the attribute ``method``;
            changed whenever a recipe's samples change, so that a ``FILE.partial`` begun by another version is not
            resumed (its samples and the new ones would be mixed). None: never changed.
        unmarked: ``recipe -> bool``: whether a file without the attribute (written before it was stored) holds
            the samples this version computes for ``recipe``.
    """

    name: str
    defaults: dict
    validate: Callable[[dict, Callable[[bool, str], None]], None]
    compute: Callable[[dict, list[int], str | None], dict[str, np.ndarray]]
    layout: Callable[[dict], tuple[dict, dict, tuple[str, ...]]]
    chunk: Callable[[dict, str | None], int]
    keys: tuple[str, ...]
    optional: dict = field(default_factory=dict)
    shortcuts: str | None = "grf"
    devices: bool = False
    method: str | None = None
    unmarked: Callable[[dict], bool] = lambda recipe: True


RECIPES: dict[str, RecipeKind] = {}


def register_recipe(kind: RecipeKind) -> RecipeKind:
    """Add a kind of data set; ``make_recipe(kind.name, ...)`` and ``opformer data`` generation then know it."""
    RECIPES[kind.name] = kind
    PROBLEM_KEYS[kind.name] = kind.keys
    return kind


def _kind(problem) -> RecipeKind:
    if problem not in RECIPES:
        raise DataError(f"unknown problem {problem!r}; expected one of {sorted(RECIPES)}")
    return RECIPES[problem]


def default_recipe(problem: str) -> dict:
    """A deep copy of the default recipe of ``problem`` (one of :data:`RECIPES`: ``"burgers"``, ``"darcy"``, ...)."""
    return copy.deepcopy(_kind(problem).defaults)


def _merge(base: dict, overrides: dict, where: str) -> dict:
    out = copy.deepcopy(base)
    for key, value in overrides.items():
        if key not in base:
            raise DataError(f"unknown recipe key {where}{key!r}; valid keys: {sorted(base)}")
        if isinstance(base[key], dict):
            if not isinstance(value, dict):
                raise DataError(f"recipe key {where}{key!r} expects a dict of {sorted(base[key])}, found {value!r}")
            out[key] = _merge(base[key], value, f"{where}{key}.")
        else:
            out[key] = value
    return out


def make_recipe(problem: str, **overrides) -> dict:
    """The default recipe of ``problem`` with ``overrides`` applied and checked.

    Nested keys are overridden by a dict, e.g. ``make_recipe("burgers", grf={"modes": None}, nu=0.05)``.
    Flat shortcuts for the random field (``sigma``, ``tau``, ``gamma``, ``mean``, ``modes`` for Burgers;
    ``alpha``, ``tau`` for Darcy; ``scale``, ``tau``, ``gamma`` for ``ns``) are also accepted.
    """
    kind = _kind(problem)
    base = copy.deepcopy(kind.defaults)
    overrides = dict(overrides)
    optional = {k: overrides.pop(k) for k in list(overrides) if k in kind.optional and k not in base}
    nested = kind.shortcuts
    if nested in base:
        flat = {k: overrides.pop(k) for k in list(overrides) if k in base[nested] and k not in base}
        if flat:
            overrides[nested] = {**overrides.get(nested, {}), **flat}
    recipe = _merge(base, overrides, "")
    for key, value in optional.items():
        if value is not None and value != kind.optional[key]:
            recipe[key] = value
    _validate(recipe)
    return recipe


def _value(recipe: dict, key: str):
    """The value of a recipe key, dotted for a nested one (``"grf.modes"``); None where it is absent."""
    value = recipe
    for part in key.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    return value


def _validate(recipe: dict) -> None:
    def need(cond: bool, key: str, allowed: str | None = None, *, nullable: bool = False) -> None:
        if cond:
            return
        if allowed is None:  # a message of its own, not about one key
            raise DataError(f"bad {recipe['problem']} recipe: {key}")
        raise RecipeError(recipe["problem"], key, _value(recipe, key), allowed, nullable=nullable)

    need(_is_int(recipe["n_samples"]) and recipe["n_samples"] >= 1, "n_samples", "a positive integer")
    need(_is_int(recipe["seed"]) and 0 <= recipe["seed"] < 2**64,  # stored as an HDF5 integer attribute
         "seed", "a non-negative integer below 2^64")
    need(recipe["dtype"] in ("float64", "float32"), "dtype", "'float64' or 'float32'")
    _kind(recipe["problem"]).validate(recipe, need)


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _need_positive(need, recipe: dict, keys, above: float = 0.0) -> None:
    """``need`` each of the recipe ``keys`` (dotted for nested ones) to be a finite number > ``above``."""
    for key in keys:
        v = _value(recipe, key)
        need(_is_number(v) and math.isfinite(v) and v > above, key, f"a finite number > {above:g}")


def compute_samples(recipe: dict, indices, device: str | None = None) -> dict[str, np.ndarray]:
    """Compute the samples with the given global ``indices``: ``{key: (len(indices), *shape)}``, float64.

    The result for index i depends only on (recipe, i). Burgers: ``{"a": (len, n), "u": (len, n)}`` (``u``
    is ``(len, K+1, n)`` with ``snapshots=K``), the samples of a call are solved as one batch. Darcy:
    ``{"coeff": (len, n, n), "sol": (len, n, n)}``. ``ns``, ``shear-layer``: ``{"w": (len, K+1, n, n)}``,
    solved as one batch on ``device`` (default CPU).
    """
    indices = [int(i) for i in np.asarray(indices).reshape(-1)]
    return _kind(recipe["problem"]).compute(recipe, indices, device)


def _layout(recipe: dict) -> tuple[dict, dict, tuple[str, ...]]:
    return _kind(recipe["problem"]).layout(recipe)


def same_method(recipe: dict, stored: str | None) -> bool:
    """Whether a file of ``recipe`` whose attribute ``method`` is ``stored`` (None: a file without it) holds the
    samples this version computes: the same method, or no method stored where the samples have not changed."""
    kind = _kind(recipe["problem"])
    return stored == kind.method or (stored is None and kind.unmarked(recipe))


def method_of(recipe: dict) -> str | None:
    """The ``method`` attribute this version stores in the files of ``recipe`` (see :class:`RecipeKind`)."""
    return _kind(recipe["problem"]).method


def default_workers() -> int:
    """The local cores this process may use (``os.sched_getaffinity`` where available, else ``os.cpu_count()``)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - not on Linux
        return os.cpu_count() or 1


def _default_chunk(recipe: dict, device: str | None = None) -> int:
    return _kind(recipe["problem"]).chunk(recipe, device)


def _snapshot_times(recipe: dict) -> np.ndarray:
    k = recipe["snapshots"]
    return recipe["t_final"] * np.arange(k + 1, dtype=np.float64) / k


# -- Burgers --------------------------------------------------------------------------------------------------------


def _period(recipe: dict) -> float:
    return 2.0 * math.pi if recipe["domain"] == "2pi" else 1.0


def _burgers_validate(recipe: dict, need) -> None:
    res = recipe["resolution"]
    need(_is_int(res) and res >= 8, "resolution", "an integer >= 8")
    need(recipe["domain"] in ("2pi", "unit"), "domain", "'2pi' or 'unit'")
    _need_positive(need, recipe, ("nu", "t_final"))
    need(_is_int(recipe["steps"]) and recipe["steps"] >= 1, "steps", "a positive integer")
    sr = recipe["solve_resolution"]
    need(sr is None or (_is_int(sr) and 8 <= sr), "solve_resolution", "an integer >= 8", nullable=True)
    # the covariance sigma^2 ((2 pi k)^2 + tau^2)^-gamma of modes k >= 1: a gamma <= 0 grows with k (the solver
    # then ends in NaN); tau = 0 is a valid field
    _need_positive(need, recipe, ("grf.sigma", "grf.gamma"))
    tau = recipe["grf"]["tau"]
    need(_is_number(tau) and math.isfinite(tau) and tau >= 0, "grf.tau", "a finite number >= 0")
    need(_is_number(recipe["grf"]["mean"]) and math.isfinite(recipe["grf"]["mean"]), "grf.mean", "a finite number")
    modes = recipe["grf"]["modes"]
    kmax = (min(res, sr or res) + 1) // 2 - 1
    need(modes is None or (_is_int(modes) and 1 <= modes <= kmax), "grf.modes",
         f"an integer in [1, {kmax}] (below the Nyquist mode of the {{resolution}} and {{solve_resolution}} grids)",
         nullable=True)
    if "snapshots" in recipe:
        need(_is_int(recipe["snapshots"]) and recipe["snapshots"] >= 1, "snapshots", "a positive integer",
             nullable=True)


def _burgers_compute(recipe: dict, indices: list[int], device: str | None) -> dict[str, np.ndarray]:
    g = recipe["grf"]
    n = recipe["resolution"]
    a = np.stack(
        [
            grf1d_periodic(n, sample_rng(recipe["seed"], i), sigma=g["sigma"], tau=g["tau"], gamma=g["gamma"],
                           mean=g["mean"], modes=g["modes"])
            for i in indices
        ]
    )
    times = _snapshot_times(recipe) if "snapshots" in recipe else None
    u = burgers.solve(a, nu=recipe["nu"], t_final=recipe["t_final"], period=_period(recipe), steps=recipe["steps"],
                      solve_resolution=recipe["solve_resolution"], dealias=recipe["dealias"], times=times)
    return {"a": a, "u": u}


def _burgers_layout(recipe: dict) -> tuple[dict, dict, tuple[str, ...]]:
    n = recipe["resolution"]
    x = np.arange(n, dtype=np.float64) / n
    if "snapshots" in recipe:
        return {"a": (n,), "u": (recipe["snapshots"] + 1, n)}, {"x": x, "t": _snapshot_times(recipe)}, ()
    return {"a": (n,), "u": (n,)}, {"x": x}, ()


def _burgers_unmarked(recipe: dict) -> bool:
    """Files without the ``method`` attribute were written before output grids coarser than the solve grid held
    the point values of the solve grid's interpolant (they held its modes below the output grid's Nyquist
    frequency); on output grids at least as fine as the solve grid the samples were the same."""
    sr = recipe["solve_resolution"]
    return sr is None or recipe["resolution"] >= sr


register_recipe(RecipeKind(
    name="burgers", defaults=BURGERS_R10, validate=_burgers_validate, compute=_burgers_compute,
    layout=_burgers_layout, chunk=lambda recipe, device: 32, keys=("a", "u"), optional={"snapshots": None},
    method="burgers/2",  # 2: coarse output grids hold the point values of the solve grid's interpolant
    unmarked=_burgers_unmarked,
))


# -- Darcy ----------------------------------------------------------------------------------------------------------


def _darcy_validate(recipe: dict, need) -> None:
    res = recipe["resolution"]
    need(_is_int(res) and res >= 5, "resolution", "an integer >= 5")
    need(recipe["split"] in DARCY_STREAMS, "split", f"one of {sorted(DARCY_STREAMS)}")
    need(recipe["grid"] in ("cell", "node"), "grid", "'cell' or 'node'")
    need(recipe["face"] in ("arithmetic", "harmonic"), "face", "'arithmetic' or 'harmonic'")
    need(recipe["solver"] in ("direct", "amg"), "solver", "'direct' or 'amg'")
    # the coefficient values; tau^(alpha - 1) scales the field: a negative tau flips its sign or makes it NaN
    _need_positive(need, recipe, ("high", "low", "grf.alpha", "grf.tau"))


def _darcy_compute(recipe: dict, indices: list[int], device: str | None) -> dict[str, np.ndarray]:
    n = recipe["resolution"]
    stream = DARCY_STREAMS[recipe["split"]]
    coeff = np.empty((len(indices), n, n))
    sol = np.empty((len(indices), n, n))
    for j, i in enumerate(indices):
        coeff[j], sol[j] = darcy.piececonst_sample(
            n, sample_rng(recipe["seed"], i, stream), alpha=recipe["grf"]["alpha"], tau=recipe["grf"]["tau"],
            high=recipe["high"], low=recipe["low"], f=recipe["f"], grid=recipe["grid"], face=recipe["face"],
            solver=recipe["solver"],
        )
    return {"coeff": coeff, "sol": sol}


def _darcy_layout(recipe: dict) -> tuple[dict, dict, tuple[str, ...]]:
    n = recipe["resolution"]
    grid = darcy.cell_coords(n) if recipe["grid"] == "cell" else darcy.node_coords(n)
    return {"coeff": (n, n), "sol": (n, n)}, {"x": grid, "y": grid}, ("coeff",)


register_recipe(RecipeKind(
    name="darcy", defaults=DARCY_R421, validate=_darcy_validate, compute=_darcy_compute, layout=_darcy_layout,
    chunk=lambda recipe, device: 1 if recipe["resolution"] >= 100 else 8, keys=("coeff", "sol"),
))


# -- Navier–Stokes (the FNO benchmark and the double shear layer) ---------------------------------------------------


def _ns_validate(recipe: dict, need) -> None:
    res, sr = recipe["resolution"], recipe["solve_resolution"]
    need(_is_int(res) and res >= 8, "resolution", "an integer >= 8")
    need(_is_int(sr) and _is_int(res) and sr >= res and sr % res == 0, "solve_resolution",
         f"a multiple of resolution={res}")
    _need_positive(need, recipe, ("nu", "t_final"))
    need(_is_int(recipe["snapshots"]) and recipe["snapshots"] >= 1, "snapshots", "a positive integer")
    cfl, dt = recipe["cfl"], recipe["dt"]
    need(_is_number(cfl) and 0 < cfl <= 1, "cfl", "in (0, 1]")
    need(dt is None or (_is_number(dt) and math.isfinite(dt) and dt > 0), "dt", "> 0", nullable=True)
    need(recipe["forcing"] in ("fno", "none"), "forcing", "'fno' or 'none'")
    if "grf" in recipe:
        _need_positive(need, recipe, ("grf.scale", "grf.tau"))
        _need_positive(need, recipe, ("grf.gamma",), above=1.0)
    if "shear" in recipe:
        _need_positive(need, recipe, ("shear.rho",))
        need(_is_int(recipe["shear"]["modes"]) and recipe["shear"]["modes"] >= 1, "shear.modes", "a positive integer")


def _ns_initial(recipe: dict, index: int, m: int) -> np.ndarray:
    """The initial vorticity of sample ``index`` on the m x m solve grid."""
    rng = sample_rng(recipe["seed"], index)
    if recipe["problem"] == "ns":
        from .navier_stokes import grf_vorticity

        g = recipe["grf"]
        # the modes of the output grid, evaluated on the solve grid: the same field whatever solve_resolution
        return grf_vorticity(m, None, rng, scale=g["scale"], tau=g["tau"], gamma=g["gamma"],
                             modes=(recipe["resolution"] - 1) // 2)
    from .navier_stokes import shear_layer_vorticity

    sh = recipe["shear"]
    return shear_layer_vorticity(m, None, rng, rho=sh["rho"], delta=sh["delta"], perturbation=sh["perturbation"],
                                 perturbation_modes=sh["modes"])


def _ns_compute(recipe: dict, indices: list[int], device: str | None) -> dict[str, np.ndarray]:
    import torch

    from . import navier_stokes

    n, m = recipe["resolution"], recipe["solve_resolution"]
    w0 = np.stack([_ns_initial(recipe, i, m) for i in indices])
    forcing = navier_stokes.fno_forcing(m) if recipe["forcing"] == "fno" else None
    try:
        dev = torch.device(device or "cpu")
        w0_t = torch.as_tensor(w0, dtype=torch.float64, device=dev)
    except (RuntimeError, AssertionError) as exc:
        raise DataError(f"cannot use the device {device!r} ({exc})") from exc
    # one thread on the CPU: at these grid sizes torch's threads cost more than they save (measured: 8 samples at
    # 64^2 took 95 CPU-s with 2 threads on the shared 2-core machine, 11 CPU-s with 1); worker processes are the
    # parallelism
    threads = torch.get_num_threads()
    if dev.type == "cpu":
        torch.set_num_threads(1)
    try:
        w = navier_stokes.solve(w0_t, nu=recipe["nu"], t_final=recipe["t_final"], times=_snapshot_times(recipe),
                                forcing=forcing, dt=recipe["dt"], cfl=recipe["cfl"])
    finally:
        torch.set_num_threads(threads)
    stride = m // n
    return {"w": w[..., ::stride, ::stride].cpu().numpy()}


def _ns_layout(recipe: dict) -> tuple[dict, dict, tuple[str, ...]]:
    n = recipe["resolution"]
    x = np.arange(n, dtype=np.float64) / n
    return {"w": (recipe["snapshots"] + 1, n, n)}, {"x": x, "y": x, "t": _snapshot_times(recipe)}, ()


def _ns_chunk(recipe: dict, device: str | None) -> int:
    if device is not None and str(device).startswith("cuda"):
        return 256  # one batch fills a GPU far better than a few samples
    return max(1, min(16, int(8 * (128 / recipe["solve_resolution"]) ** 2)))


for _defaults in (NS_FNO, SHEAR_LAYER):
    register_recipe(RecipeKind(
        name=_defaults["problem"], defaults=_defaults, validate=_ns_validate, compute=_ns_compute,
        layout=_ns_layout, chunk=_ns_chunk, keys=("w",), shortcuts="grf" if "grf" in _defaults else "shear",
        devices=True,
    ))


def generate_dataset(
    recipe: dict,
    path: str | os.PathLike,
    *,
    start: int = 0,
    stop: int | None = None,
    workers: int | None = None,
    chunk_size: int | None = None,
    progress: bool = True,
    device: str | None = None,
) -> Path:
    """Generate the samples ``start <= i < stop`` of ``recipe`` into the HDF5 file ``path``; return ``path``.

    Resumes ``path.partial`` if an earlier run with the same recipe and range was interrupted (and refuses one begun
    by a version of the generator that computed other samples, see :class:`RecipeKind` ``method``); returns at once
    if ``path`` is already complete with the same recipe and range; raises :class:`DataError` if it exists
    with another recipe or range.

    Args:
        recipe: a recipe from :func:`make_recipe` (it is validated again).
        path: the output file (written as ``path.partial`` and renamed when complete); missing folders above it
            are made once the request has been checked.
        start, stop: the global sample range of this shard (default: the whole data set ``[0, n_samples)``).
        workers: processes computing samples (default: all local cores, :func:`default_workers`); 1 computes in
            this process.
        chunk_size: samples per task (the recipe kind's default: 32 for Burgers, 1 for Darcy at resolution >= 100,
            else 8; Navier–Stokes 16 at a 64^2 solve grid, fewer on finer grids, 256 on a GPU).
        progress: show a tqdm progress bar (rate and ETA).
        device: the torch device of solvers that run on one (``"cpu"``, ``"cuda"``, ``"cuda:1"``; the
            Navier–Stokes recipes); a GPU device computes in this process (``workers`` is then 1).
    """
    if not isinstance(recipe, dict) or "problem" not in recipe:
        raise DataError(f"generate_dataset: expected a recipe dict with a 'problem' key, found {recipe!r}")
    recipe = make_recipe(recipe["problem"], **{k: v for k, v in recipe.items() if k != "problem"})
    stop = recipe["n_samples"] if stop is None else int(stop)
    if not 0 <= start < stop <= recipe["n_samples"]:
        raise DataError(f"{path}: expected 0 <= start < stop <= n_samples={recipe['n_samples']}, found start={start}, stop={stop}")
    if device is not None and not _kind(recipe["problem"]).devices and str(device) != "cpu":
        raise DataError(f"the {recipe['problem']} solver runs on the CPU only; --device {device} is for the Navier–Stokes recipes")
    on_gpu = device is not None and str(device) != "cpu"
    if on_gpu:  # a device torch cannot use is told before the output file is made
        import torch

        try:
            torch.empty(0, device=torch.device(device))
        except (RuntimeError, AssertionError) as exc:
            raise DataError(f"cannot use the device {str(device)!r} ({str(exc).splitlines()[0]})") from None
    workers = (1 if on_gpu else default_workers()) if workers is None else int(workers)
    if workers < 1:
        raise DataError(f"generate_dataset: workers must be >= 1, found {workers}")
    if on_gpu:
        workers = 1
    shapes, coords, compress = _layout(recipe)
    options = {"device": device} if device is not None else {}

    with ShardWriter(path, recipe, start=start, stop=stop, shapes=shapes, coords=coords, dtype=recipe["dtype"],
                     compress=compress, method=method_of(recipe),
                     same_method=lambda stored: same_method(recipe, stored)) as writer:
        if writer.complete:
            return writer.path
        pending = writer.pending()
        # at most the default chunk, and small enough that every worker gets about two tasks
        chunk = chunk_size or max(1, min(_default_chunk(recipe, device), math.ceil(len(pending) / (2 * workers))))
        tasks = [pending[i : i + chunk] for i in range(0, len(pending), chunk)]
        bar = _progress_bar(total=stop - start, initial=writer.n_done(), desc=f"{recipe['problem']} {Path(path).name}",
                            disable=not progress)
        try:
            if workers == 1 or len(tasks) <= 1:
                for idx in tasks:
                    check_stop()  # a stop request (opformer.interrupt) whose exception was lost
                    writer.write(idx, compute_samples(recipe, idx, **options))
                    bar.update(len(idx))
            else:
                _run_pool(recipe, tasks, workers, writer, bar, options)
        except OSError as exc:
            reason = no_space_reason(exc)
            if reason is None:
                raise
            raise DataError(writer.no_space_message(reason)) from exc
        finally:
            bar.close()
            clear_stop()  # a stop request ends this generation only
        return writer.finish(_summary(recipe, start))


#: the tolerance of :func:`opformer.pde.darcy.wrong_sign_samples` the stored findings were made with
_WRONG_SIGN_TOL = 0.1


def _wrong_sign_in(h5, start: int) -> list[int]:
    """The sample numbers (``start`` + row) of the finished rows of the open file ``h5`` whose Darcy solution has
    the wrong sign, read in blocks of :func:`opformer.pde.darcy.sign_check_block` samples."""
    done, sol = h5["done"], h5["sol"]
    block = darcy.sign_check_block(sol.shape)
    bad: list[int] = []
    for lo in range(0, sol.shape[0], block):
        rows = np.flatnonzero(done[lo : lo + block]) + lo
        if len(rows):
            bad.extend(int(start + rows[i]) for i in darcy.wrong_sign_samples(sol[rows], tol=_WRONG_SIGN_TOL))
    return bad


def _summary(recipe: dict, start: int):
    """The ``summarize`` of :meth:`ShardWriter.finish` for ``recipe``: the checks' findings, stored with the file."""
    if not darcy.sign_check_applies(recipe):
        return None
    return lambda h5: {"wrong_sign": _wrong_sign_in(h5, start), "wrong_sign_tol": _WRONG_SIGN_TOL}


def check_dataset(path: str | os.PathLike) -> list[str]:
    """Physical checks of the finished samples of an opformer data file; returns one message per finding (empty:
    nothing found), without the file's name.  Darcy with f > 0: the samples whose solution has the wrong sign
    (:func:`opformer.pde.darcy.wrong_sign_samples`), which the cell recipe's spline resampling produces now and
    then on coarse grids.  A complete file made by this version stores the findings when it is finished (instant
    here); other files are read, in blocks."""
    import h5py

    header = read_header(path)
    recipe = header["recipe"]
    if not darcy.sign_check_applies(recipe):
        return []
    stored = header["checks"] or {}
    if header["complete"] and "wrong_sign" in stored and stored.get("wrong_sign_tol") == _WRONG_SIGN_TOL:
        bad = [int(i) for i in stored["wrong_sign"]]
    else:
        with h5py.File(path, "r") as h5:
            bad = _wrong_sign_in(h5, header["start"])
    if not bad:
        return []
    shown = ", ".join(map(str, bad[:10])) + (", ..." if len(bad) > 10 else "")
    cause = (": the cell recipe's spline resampling made the coefficient negative next to a wall (kept, as the "
             "original recipe keeps them; --grid node has no splines; docs/data.md)" if recipe.get("grid") == "cell"
             else "")
    return [f"{len(bad)} of {header['n_done']} samples have a solution of the wrong sign (min u < -0.1 "
            f"max |u| although f > 0), samples {shown}{cause}"]


def _progress_bar(**kwargs):
    import sys

    from tqdm.auto import tqdm

    try:
        terminal = sys.stderr.isatty()
    except (AttributeError, ValueError):  # replaced or closed stream
        terminal = False
    # a text bar written to a log file is redrawn once a minute instead of ten times a second (a notebook's widget
    # bar is left as it is)
    slow = not terminal and not any(c.__module__ == "tqdm.notebook" for c in tqdm.__mro__)
    return tqdm(unit="sample", dynamic_ncols=True, mininterval=60.0 if slow else 0.1, **kwargs)


def _run_pool(recipe: dict, tasks: list, workers: int, writer: ShardWriter, bar, options: dict) -> None:
    """Compute ``tasks`` in worker processes (at most 2 tasks in flight per worker); only this process writes."""
    pool = _WorkerPool(workers)
    try:
        queue = list(reversed(tasks))
        running: dict[int, np.ndarray] = {}
        next_id = 0
        while queue or running:
            while queue and len(running) < 2 * workers:
                idx = queue.pop()
                pool.submit(next_id, recipe, idx, options)
                running[next_id] = idx
                next_id += 1
            task_id, arrays = pool.next_result()
            idx = running.pop(task_id)
            writer.write(idx, arrays)
            bar.update(len(idx))
    finally:
        pool.terminate()


class _WorkerPool:
    """Worker processes that only compute: ``compute_samples`` in, arrays out.

    * They are started with ``spawn`` (a fresh interpreter), so they inherit no open file: the output file is
      held by the main process alone, and a killed main process leaves no process holding its HDF5 lock.
    * They die with the main process: ``PR_SET_PDEATHSIG`` on Linux, and a thread that polls the parent's pid
      everywhere (a SIGKILL of the main process cannot be handled by the main process itself).
    * They ignore Ctrl-C (SIGINT goes to the whole terminal process group): the main process decides, and
      :meth:`terminate` (SIGTERM, then SIGKILL) ends them at once, mid-task.
    * A worker that dies (killed, out of memory) is reported instead of waiting for its result forever.
    * Each uses one thread for OpenMP/BLAS/torch (``OMP_NUM_THREADS=1`` ...): the processes are the parallelism.
    * They do not run the caller's script: ``spawn`` would re-import ``__main__`` in every worker, so a script that
      calls :func:`ensure_dataset` without an ``if __name__ == "__main__":`` guard (or code piped to ``python -``)
      would start the generation again in each worker and kill it. The workers need nothing from ``__main__``
      (they run this module's ``_worker_main`` on plain dicts and arrays), so it is hidden while they start.
    """

    _THREAD_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")

    def __init__(self, workers: int):
        import multiprocessing as mp

        ctx = mp.get_context("spawn")
        self.tasks = ctx.Queue()
        self.results = ctx.Queue()
        self.procs = [ctx.Process(target=_worker_main, args=(os.getpid(), self.tasks, self.results), daemon=True)
                      for _ in range(workers)]
        saved = {k: os.environ.get(k) for k in self._THREAD_VARS}
        os.environ.update({k: "1" for k in self._THREAD_VARS})  # read by the children's libraries at import
        main = sys.modules.get("__main__")
        sys.modules["__main__"] = types.ModuleType("__main__")  # what spawn's workers would re-import (see above)
        try:
            for p in self.procs:
                p.start()
        finally:
            if main is None:
                sys.modules.pop("__main__", None)
            else:
                sys.modules["__main__"] = main
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v

    def submit(self, task_id: int, recipe: dict, indices, options: dict) -> None:
        self.tasks.put((task_id, recipe, np.asarray(indices), options))

    def next_result(self) -> tuple[int, dict]:
        import queue

        while True:
            check_stop()
            try:
                task_id, arrays, error = self.results.get(timeout=0.5)
            except queue.Empty:
                dead = [p for p in self.procs if not p.is_alive()]
                if dead:
                    codes = ", ".join(str(p.exitcode) for p in dead)
                    raise DataError(f"a worker process died (exit code {codes}; out of memory?); the finished samples "
                                    f"are kept: run the same command to resume, with fewer --workers") from None
                continue
            if error is not None:
                kind, message = error
                if kind == "DataError":
                    raise DataError(message)
                raise RuntimeError(f"a worker failed: {kind}: {message}")
            return task_id, arrays

    def terminate(self) -> None:
        for p in self.procs:
            if p.is_alive():
                p.terminate()
        for p in self.procs:
            p.join(timeout=5)
            if p.is_alive():  # pragma: no cover - SIGTERM is not ignored by the workers
                p.kill()
                p.join()
        for q in (self.tasks, self.results):
            q.cancel_join_thread()  # never block the exit on a feeder thread of a dead pipe
            q.close()


def _worker_main(parent_pid: int, tasks, results) -> None:
    import signal
    import threading

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    if sys.platform.startswith("linux"):
        try:
            import ctypes

            ctypes.CDLL(None).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG = 1: killed when the parent dies
        except (OSError, AttributeError):  # pragma: no cover - the polling thread below still applies
            pass
    if os.getppid() != parent_pid:  # the parent died before prctl
        os._exit(1)

    def watch() -> None:
        while True:
            time.sleep(1.0)
            if os.getppid() != parent_pid:
                os._exit(1)

    threading.Thread(target=watch, daemon=True).start()
    from ..config import one_line_warnings

    with one_line_warnings():  # a note from the solver (a large fixed step) as the command prints its own
        _serve(tasks, results)


def _serve(tasks, results) -> None:
    """The worker's loop: compute the tasks until a None arrives."""
    while True:
        item = tasks.get()
        if item is None:
            return
        task_id, recipe, indices, options = item
        try:
            results.put((task_id, compute_samples(recipe, indices, **options), None))
        except Exception as exc:  # sent back as text: not every exception pickles
            results.put((task_id, None, (type(exc).__name__, str(exc))))


def ensure_dataset(problem: str, path: str | os.PathLike, *, workers: int | None = None, progress: bool = True,
                   device: str | None = None, **recipe_overrides) -> Path:
    """Return ``path`` after making sure it holds the data set ``make_recipe(problem, **recipe_overrides)``.

    Creates the parent directory, generates the file (with a progress bar, resuming an interrupted run) if it is
    missing, on all local cores unless ``workers`` is given (or on ``device``, for the Navier–Stokes recipes); returns the cached file
    if it is complete with the same recipe; raises :class:`DataError` naming the differing keys if the file
    holds another recipe. Example: ``ensure_dataset("darcy", "data/darcy_test.h5", split="test")``.
    """
    recipe = make_recipe(problem, **recipe_overrides)
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise DataError(f"{path}: cannot create the directory {path.parent} ({exc})") from exc
    if path.exists():
        header = read_header(path)
        diffs = recipe_diff(header["recipe"], recipe)
        if diffs:
            raise DataError(f"{path}: holds another {header['problem']} recipe than requested ({'; '.join(diffs)}); "
                            f"use another path or delete the file")
        if (header["complete"] and (header["start"], header["stop"]) == (0, recipe["n_samples"])
                and same_method(recipe, header["method"])):
            return path  # (a file of another method is refused by generate_dataset, in the same words as there)
    return generate_dataset(recipe, path, workers=workers, progress=progress, device=device)
