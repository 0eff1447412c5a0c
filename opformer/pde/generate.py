"""Data set recipes and their generation: deterministic per sample, parallel, resumable, shardable.

A *recipe* is a JSON-serialisable dict that says everything needed to regenerate a data set; it is stored in
the file. Each sample is a function of (recipe, global index) only: its random field comes from
``np.random.default_rng([seed, stream, index])``, so shards computed on different machines or with another
number of worker processes give bit-identical samples.

Default recipes:

* :data:`BURGERS_R10`: the FNO ``burgers_data_R10`` set as measured from the published samples
  (notes/data-recipes.md §1). ``u_t + u u_x = 0.1 u_xx`` on the 2 pi-periodic domain up to t = 1 (identical to
  nu = 0.1/(2 pi), T = 1/(2 pi) on the unit period), ``u0 ~ N(0, 625 (-Delta + 25)^-2)`` on the unit period
  truncated to Fourier modes 1..20, 8192 output points ``x_j = j/8192`` (the unit coordinate), 2048 samples.
  ``domain="unit"`` is the paper's literal reading (period 1 with the same nu and T; its solutions have
  nearly decayed to 0 by T = 1).
* :data:`DARCY_R421`: the FNO ``piececonst_r421_N1024_smooth{1,2}`` sets (§2): a = 12 / 3 by the sign of a
  Neumann Gaussian field (alpha = 2, tau = 3), f = 1, 421 x 421, 1024 samples per file; ``split="train"`` and
  ``split="test"`` draw from independent random streams (0 and 1).
"""

from __future__ import annotations

import concurrent.futures as cf
import copy
import math
import os
from pathlib import Path

import numpy as np

from . import burgers, darcy
from .errors import DataError
from .grf import grf1d_periodic, sample_rng
from .storage import ShardWriter, read_header, recipe_diff

__all__ = [
    "BURGERS_R10",
    "DARCY_R421",
    "DARCY_STREAMS",
    "default_recipe",
    "make_recipe",
    "compute_samples",
    "generate_dataset",
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

_DEFAULTS = {"burgers": BURGERS_R10, "darcy": DARCY_R421}


def default_recipe(problem: str) -> dict:
    """A deep copy of the default recipe of ``problem`` (``"burgers"`` or ``"darcy"``)."""
    if problem not in _DEFAULTS:
        raise DataError(f"unknown problem {problem!r}; expected one of {sorted(_DEFAULTS)}")
    return copy.deepcopy(_DEFAULTS[problem])


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
    ``alpha``, ``tau`` for Darcy) are also accepted.
    """
    base = default_recipe(problem)
    overrides = dict(overrides)
    grf_flat = {k: overrides.pop(k) for k in list(overrides) if k in base["grf"] and k not in base}
    if grf_flat:
        overrides["grf"] = {**overrides.get("grf", {}), **grf_flat}
    recipe = _merge(base, overrides, "")
    _validate(recipe)
    return recipe


def _validate(recipe: dict) -> None:
    def need(cond: bool, msg: str) -> None:
        if not cond:
            raise DataError(f"bad {recipe['problem']} recipe: {msg}")

    need(isinstance(recipe["n_samples"], int) and recipe["n_samples"] >= 1, f"n_samples must be a positive integer, found {recipe['n_samples']!r}")
    need(isinstance(recipe["seed"], int) and recipe["seed"] >= 0, f"seed must be a non-negative integer, found {recipe['seed']!r}")
    need(recipe["dtype"] in ("float64", "float32"), f"dtype must be 'float64' or 'float32', found {recipe['dtype']!r}")
    res = recipe["resolution"]
    if recipe["problem"] == "burgers":
        need(isinstance(res, int) and res >= 8, f"resolution must be an integer >= 8, found {res!r}")
        need(recipe["domain"] in ("2pi", "unit"), f"domain must be '2pi' or 'unit', found {recipe['domain']!r}")
        need(recipe["nu"] > 0 and recipe["t_final"] > 0, "nu and t_final must be > 0")
        need(isinstance(recipe["steps"], int) and recipe["steps"] >= 1, f"steps must be a positive integer, found {recipe['steps']!r}")
        sr = recipe["solve_resolution"]
        need(sr is None or (isinstance(sr, int) and 8 <= sr), f"solve_resolution must be null or an integer >= 8, found {sr!r}")
        modes = recipe["grf"]["modes"]
        kmax = (min(res, sr or res) + 1) // 2 - 1
        need(modes is None or (isinstance(modes, int) and 1 <= modes <= kmax),
             f"grf.modes must be null or an integer in [1, {kmax}] (below the Nyquist mode of the output and solve grids), found {modes!r}")
    else:
        need(isinstance(res, int) and res >= 5, f"resolution must be an integer >= 5, found {res!r}")
        need(recipe["split"] in DARCY_STREAMS, f"split must be one of {sorted(DARCY_STREAMS)}, found {recipe['split']!r}")
        need(recipe["grid"] in ("cell", "node"), f"grid must be 'cell' or 'node', found {recipe['grid']!r}")
        need(recipe["face"] in ("arithmetic", "harmonic"), f"face must be 'arithmetic' or 'harmonic', found {recipe['face']!r}")
        need(recipe["solver"] in ("direct", "amg"), f"solver must be 'direct' or 'amg', found {recipe['solver']!r}")
        need(recipe["high"] > 0 and recipe["low"] > 0, "the coefficient values high and low must be > 0")


def _period(recipe: dict) -> float:
    return 2.0 * math.pi if recipe["domain"] == "2pi" else 1.0


def compute_samples(recipe: dict, indices) -> dict[str, np.ndarray]:
    """Compute the samples with the given global ``indices``: ``{input key: (len, *shape), target key: ...}``, float64.

    The result for index i depends only on (recipe, i). Burgers: ``{"a": (len, n), "u": (len, n)}``,
    the samples of a call are solved as one batch. Darcy: ``{"coeff": (len, n, n), "sol": (len, n, n)}``.
    """
    indices = [int(i) for i in np.asarray(indices).reshape(-1)]
    problem = recipe["problem"]
    n = recipe["resolution"]
    if problem == "burgers":
        g = recipe["grf"]
        a = np.stack(
            [
                grf1d_periodic(n, sample_rng(recipe["seed"], i), sigma=g["sigma"], tau=g["tau"], gamma=g["gamma"],
                               mean=g["mean"], modes=g["modes"])
                for i in indices
            ]
        )
        u = burgers.solve(a, nu=recipe["nu"], t_final=recipe["t_final"], period=_period(recipe), steps=recipe["steps"],
                          solve_resolution=recipe["solve_resolution"], dealias=recipe["dealias"])
        return {"a": a, "u": u}
    if problem == "darcy":
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
    raise DataError(f"unknown problem {problem!r}")


def _layout(recipe: dict) -> tuple[dict, dict, tuple[str, ...]]:
    n = recipe["resolution"]
    if recipe["problem"] == "burgers":
        x = np.arange(n, dtype=np.float64) / n
        return {"a": (n,), "u": (n,)}, {"x": x}, ()
    grid = darcy.cell_coords(n) if recipe["grid"] == "cell" else darcy.node_coords(n)
    return {"coeff": (n, n), "sol": (n, n)}, {"x": grid, "y": grid}, ("coeff",)


def default_workers() -> int:
    """The local cores this process may use (``os.sched_getaffinity`` where available, else ``os.cpu_count()``)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - not on Linux
        return os.cpu_count() or 1


def _default_chunk(recipe: dict) -> int:
    if recipe["problem"] == "burgers":
        return 32
    return 1 if recipe["resolution"] >= 100 else 8


def generate_dataset(
    recipe: dict,
    path: str | os.PathLike,
    *,
    start: int = 0,
    stop: int | None = None,
    workers: int | None = None,
    chunk_size: int | None = None,
    progress: bool = True,
) -> Path:
    """Generate the samples ``start <= i < stop`` of ``recipe`` into the HDF5 file ``path``; return ``path``.

    Resumes ``path.partial`` if an earlier run with the same recipe and range was interrupted; returns at once
    if ``path`` is already complete with the same recipe and range; raises :class:`DataError` if it exists
    with another recipe or range.

    Args:
        recipe: a recipe from :func:`make_recipe` (it is validated again).
        path: the output file (written as ``path.partial`` and renamed when complete).
        start, stop: the global sample range of this shard (default: the whole data set ``[0, n_samples)``).
        workers: processes computing samples (default: all local cores, :func:`default_workers`); 1 computes in
            this process.
        chunk_size: samples per task (default 32 for Burgers, 1 for Darcy at resolution >= 100, else 8).
        progress: show a tqdm progress bar (rate and ETA).
    """
    if not isinstance(recipe, dict) or "problem" not in recipe:
        raise DataError(f"generate_dataset: expected a recipe dict with a 'problem' key, found {recipe!r}")
    recipe = make_recipe(recipe["problem"], **{k: v for k, v in recipe.items() if k != "problem"})
    stop = recipe["n_samples"] if stop is None else int(stop)
    if not 0 <= start < stop <= recipe["n_samples"]:
        raise DataError(f"{path}: expected 0 <= start < stop <= n_samples={recipe['n_samples']}, found start={start}, stop={stop}")
    workers = default_workers() if workers is None else int(workers)
    if workers < 1:
        raise DataError(f"generate_dataset: workers must be >= 1, found {workers}")
    shapes, coords, compress = _layout(recipe)

    with ShardWriter(path, recipe, start=start, stop=stop, shapes=shapes, coords=coords, dtype=recipe["dtype"],
                     compress=compress) as writer:
        if writer.complete:
            return writer.path
        pending = writer.pending()
        # at most the default chunk, and small enough that every worker gets about two tasks
        chunk = chunk_size or max(1, min(_default_chunk(recipe), math.ceil(len(pending) / (2 * workers))))
        tasks = [pending[i : i + chunk] for i in range(0, len(pending), chunk)]
        bar = _progress_bar(total=stop - start, initial=writer.n_done(), desc=f"{recipe['problem']} {Path(path).name}",
                            disable=not progress)
        try:
            if workers == 1 or len(tasks) <= 1:
                for idx in tasks:
                    writer.write(idx, compute_samples(recipe, idx))
                    bar.update(len(idx))
            else:
                _run_pool(recipe, tasks, workers, writer, bar)
        finally:
            bar.close()
        return writer.finish()


def _progress_bar(**kwargs):
    from tqdm.auto import tqdm

    return tqdm(unit="sample", dynamic_ncols=True, **kwargs)


def _run_pool(recipe: dict, tasks: list, workers: int, writer: ShardWriter, bar) -> None:
    """Compute ``tasks`` on a process pool (at most 2 tasks in flight per worker); the main process writes."""
    queue = list(reversed(tasks))
    with cf.ProcessPoolExecutor(max_workers=workers) as pool:
        running: dict[cf.Future, np.ndarray] = {}
        try:
            while queue or running:
                while queue and len(running) < 2 * workers:
                    idx = queue.pop()
                    running[pool.submit(compute_samples, recipe, idx)] = idx
                finished, _ = cf.wait(running, return_when=cf.FIRST_COMPLETED)
                for fut in finished:
                    idx = running.pop(fut)
                    writer.write(idx, fut.result())
                    bar.update(len(idx))
        except BaseException:
            for fut in running:
                fut.cancel()
            pool.shutdown(wait=True, cancel_futures=True)
            raise


def ensure_dataset(problem: str, path: str | os.PathLike, *, workers: int | None = None, progress: bool = True,
                   **recipe_overrides) -> Path:
    """Return ``path`` after making sure it holds the data set ``make_recipe(problem, **recipe_overrides)``.

    Creates the parent directory, generates the file (with a progress bar, resuming an interrupted run) if it is
    missing, on all local cores unless ``workers`` is given; returns the cached file
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
        if header["complete"] and (header["start"], header["stop"]) == (0, recipe["n_samples"]):
            return path
    return generate_dataset(recipe, path, workers=workers, progress=progress)
