"""The ``opformer data`` sub-command: generate the Burgers, Darcy and Navier–Stokes data sets, inspect data files.

``register(subparsers)`` adds ``data`` to the top-level parser (``opformer/cli.py``)::

    opformer data burgers --samples 2048 --resolution 8192 --out data/burgers_r10.h5 [--seed 0] [--workers W]
                          [--start i --stop j] [--domain 2pi|unit] [--nu 0.1] [--t-final 1] [--modes 20|0]
                          [--sigma 25 --tau 5 --gamma 2] [--steps 400] [--solve-resolution 512|0]
                          [--snapshots K]
    opformer data darcy --samples 1024 --resolution 421 --out data/darcy_train.h5 --split train|test
                        [--seed 0] [--workers W] [--start i --stop j] [--grid cell|node]
                        [--face arithmetic|harmonic] [--solver direct|amg]
    opformer data navier-stokes --samples 1200 --resolution 64 --out data/ns_v1e-3.h5 [--ic ns|shear-layer]
                        [--nu 1e-3] [--t-final 50] [--snapshots 50] [--solve-resolution 64] [--cfl 0.25] [--dt DT]
                        [--forcing fno|none] [--device cpu|cuda] [--seed 0] [--workers W] [--start i --stop j]
    opformer data info FILE [FILE ...]

The inverse Darcy data set is not a separate file: the ``darcy-inverse`` task derives it
from the Darcy files (u as input with noise added at load time, pooled a as target).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..config import one_line_warnings
from ..interrupt import request_stop
from .errors import DataError, RecipeError
from .generate import BURGERS_R10, DARCY_R421, NS_FNO, RECIPES, SHEAR_LAYER, check_dataset, generate_dataset, make_recipe
from .storage import not_a_file, partial_path

__all__ = ["register", "main"]


# recipe keys and the flags that set them, for messages in the user's terms
_FLAGS = {
    "n_samples": "--samples", "resolution": "--resolution", "seed": "--seed", "dtype": "--dtype", "nu": "--nu",
    "t_final": "--t-final", "steps": "--steps", "solve_resolution": "--solve-resolution", "snapshots": "--snapshots",
    "domain": "--domain", "split": "--split", "grid": "--grid", "face": "--face", "solver": "--solver",
    "cfl": "--cfl", "dt": "--dt", "forcing": "--forcing", "grf.modes": "--modes", "grf.sigma": "--sigma",
    "grf.tau": "--tau", "grf.gamma": "--gamma", "grf.alpha": "--alpha", "high": "--high", "low": "--low",
}

# what a flag's 0 stands for where it sets a recipe key to null (a flag that is left out for null has no entry)
_ZERO_MEANS = {"grf.modes": "all modes", "solve_resolution": "the output grid", "snapshots": "u(T) only"}


def _in_flag_terms(exc: DataError) -> str:
    """A refused recipe value (:class:`RecipeError`) named by the flag that sets it, then the recipe key as ``data
    info`` prints the recipe (``--modes: grf.modes must be 0 (all modes) or an integer in [1, 31] (below the
    Nyquist mode of the --resolution and --solve-resolution grids), found 40``); other errors as they are."""
    flag = _FLAGS.get(exc.key) if isinstance(exc, RecipeError) else None
    if flag is None:
        return str(exc)
    zero = f"0 ({_ZERO_MEANS[exc.key]}) or " if exc.nullable and exc.key in _ZERO_MEANS else ""
    return f"{flag}: {exc.key} must be {zero}{exc.allowed_text(_FLAGS)}, found {exc.value!r}"


def _shown(value) -> str:
    return "the recipe's" if value is None else str(value)


def _common(p: argparse.ArgumentParser, defaults: dict) -> None:
    p.add_argument("--samples", type=int, default=defaults["n_samples"],
                   help=f"samples in the whole data set (default {_shown(defaults['n_samples'])})")
    p.add_argument("--resolution", type=int, default=defaults["resolution"],
                   help=f"grid points per axis (default {_shown(defaults['resolution'])})")
    p.add_argument("--out", required=True, help="output HDF5 file (written as FILE.partial, renamed when complete)")
    p.add_argument("--seed", type=int, default=defaults["seed"], help="random seed (default 0)")
    p.add_argument("--workers", type=int, default=None, help="worker processes (default: all local cores)")
    p.add_argument("--start", type=int, default=0, help="first sample index of this shard (default 0)")
    p.add_argument("--stop", type=int, default=None, help="one past the last sample index of this shard (default --samples)")
    p.add_argument("--dtype", choices=("float64", "float32"), default=defaults["dtype"],
                   help=f"stored floating type (default {_shown(defaults['dtype'])})")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")


def register(subparsers) -> argparse.ArgumentParser:
    """Add the ``data`` sub-command (with ``burgers``, ``darcy``, ``info``) to an argparse subparsers object and
    return its own subparsers (``opformer/cli.py`` adds ``data prepare`` there, which needs the tasks).

    Each leaf parser sets ``func``, a callable ``(args) -> int`` (the exit status).
    """
    data = subparsers.add_parser("data", help="generate or inspect data sets",
                                 description="Generate the paper's data sets (deterministic, parallel, resumable, shardable).")
    sub = data.add_subparsers(dest="data_command", required=True, metavar="{burgers,darcy,navier-stokes,info,prepare}")

    b = sub.add_parser("burgers", help="Burgers R10 data set (initial condition a -> u(., T))",
                       description="Burgers u_t + u u_x = nu u_xx; default: the FNO R10 recipe (see docs/data.md).")
    _common(b, BURGERS_R10)
    b.add_argument("--domain", choices=("2pi", "unit"), default=BURGERS_R10["domain"],
                   help="period of the PDE: 2pi (R10 as measured, default) or unit (the paper's literal text)")
    b.add_argument("--nu", type=float, default=BURGERS_R10["nu"], help="viscosity (default 0.1)")
    b.add_argument("--t-final", type=float, default=BURGERS_R10["t_final"], help="final time (default 1)")
    g = BURGERS_R10["grf"]
    b.add_argument("--sigma", type=float, default=g["sigma"], help="GRF sigma (default 25)")
    b.add_argument("--tau", type=float, default=g["tau"], help="GRF tau (default 5)")
    b.add_argument("--gamma", type=float, default=g["gamma"], help="GRF gamma (default 2)")
    b.add_argument("--modes", type=int, default=g["modes"], help="keep Fourier modes 1..K of the IC; 0 keeps all (default 20)")
    b.add_argument("--steps", type=int, default=BURGERS_R10["steps"], help="ETDRK4 steps over [0, T] (default 400)")
    b.add_argument("--solve-resolution", type=int, default=BURGERS_R10["solve_resolution"],
                   help="internal Fourier points, 0 = the output resolution (default 512)")
    b.add_argument("--snapshots", type=int, default=0,
                   help="store the trajectory u(t_k), t_k = k T/K, k = 0..K, as u (N, K+1, n) with the times t; "
                        "0 stores u(T) only (default)")
    b.set_defaults(func=_run_burgers)

    d = sub.add_parser("darcy", help="Darcy piececonst data set (coefficient -> solution)",
                       description="Darcy -div(a grad u) = 1, a in {12, 3}; default: the FNO piececonst r421 recipe.")
    _common(d, DARCY_R421)
    d.add_argument("--split", choices=("train", "test"), default="train",
                   help="train (random stream 0) or test (stream 1, independent of train)")
    d.add_argument("--alpha", type=float, default=DARCY_R421["grf"]["alpha"], help="GRF alpha (default 2)")
    d.add_argument("--tau", type=float, default=DARCY_R421["grf"]["tau"], help="GRF tau (default 3)")
    d.add_argument("--high", type=float, default=DARCY_R421["high"], help="a where psi >= 0 (default 12)")
    d.add_argument("--low", type=float, default=DARCY_R421["low"], help="a where psi < 0 (default 3)")
    d.add_argument("--grid", choices=("cell", "node"), default=DARCY_R421["grid"],
                   help="cell: cell centres with the spline round trip of the original (default); node: node grid")
    d.add_argument("--face", choices=("arithmetic", "harmonic"), default=DARCY_R421["face"], help="face coefficient")
    d.add_argument("--solver", choices=("direct", "amg"), default=DARCY_R421["solver"],
                   help="sparse direct (default) or pyamg AMG-CG (needs pyamg)")
    d.set_defaults(func=_run_darcy)

    ns = sub.add_parser(
        "navier-stokes", help="2D Navier–Stokes vorticity trajectories (FNO benchmark or double shear layer)",
        description="w_t + u.grad w = nu Delta w + f on the unit torus, pseudo-spectral (torch.fft). --ic ns: the FNO "
                    "benchmark (GRF initial vorticity, forcing 0.1(sin 2pi(x+y) + cos 2pi(x+y)), nu 1e-3, T 50); "
                    "--ic shear-layer: a perturbed double shear layer without forcing. Stores w (N, K+1, n, n), t, x, y.")
    ns.add_argument("--ic", choices=("ns", "shear-layer"), default="ns",
                    help="initial condition and its recipe defaults: ns (FNO benchmark, default) or shear-layer")
    _common(ns, {**NS_FNO, "n_samples": None, "resolution": None, "dtype": None})  # None: the --ic recipe's default
    ns.add_argument("--nu", type=float, default=None, help=f"viscosity (default {NS_FNO['nu']} for ns, {SHEAR_LAYER['nu']} for shear-layer)")
    ns.add_argument("--t-final", type=float, default=None, help=f"final time (default {NS_FNO['t_final']:g} / {SHEAR_LAYER['t_final']:g})")
    ns.add_argument("--snapshots", type=int, default=None,
                    help=f"K: store t_k = k T/K, k = 0..K (default {NS_FNO['snapshots']} / {SHEAR_LAYER['snapshots']})")
    ns.add_argument("--solve-resolution", type=int, default=None,
                    help=f"solve grid, a multiple of --resolution (default {NS_FNO['solve_resolution']} / "
                         f"{SHEAR_LAYER['solve_resolution']}; use 256 for nu 1e-4 and below, see docs/data.md)")
    ns.add_argument("--cfl", type=float, default=None, help=f"Courant number of the step (default {NS_FNO['cfl']})")
    ns.add_argument("--dt", type=float, default=None,
                    help="a fixed largest time step instead of the CFL rule (Courant number 0.25); a warning says "
                         "when a step moved the flow more than one grid cell: the data can then be wrong without "
                         "NaN (compare with a run without --dt)")
    ns.add_argument("--forcing", choices=("fno", "none"), default=None, help="forcing (default fno / none)")
    ns.add_argument("--device", default=None,
                    help="torch device of the solver: cpu (default) or cuda[:i] (one process, large batches)")
    ns.set_defaults(func=_run_navier_stokes)

    i = sub.add_parser("info", help="print the recipe and progress of data files, or the arrays of any data file")
    i.add_argument("files", nargs="+", help="opformer data files (FILE, FILE.partial or a quoted pattern such as "
                                            "'data/*.h5'): recipe and progress; "
                                            "other .h5/.mat/.npz/.pt files: their arrays' names, shapes and types")
    i.set_defaults(func=_run_info)

    return sub


def _generate(args, recipe: dict) -> int:
    import math
    import signal
    import threading

    for name, value in sorted(vars(args).items()):  # a value no recipe can hold, named by its flag
        if isinstance(value, float) and not math.isfinite(value):
            print(f"opformer: error: --{name.replace('_', '-')} must be a finite number, got {value}", file=sys.stderr)
            return 2
    if getattr(args, "workers", None) is not None and args.workers < 1:
        print(f"opformer: error: --workers must be >= 1, got {args.workers}", file=sys.stderr)
        return 2
    start, stop, total = args.start, recipe["n_samples"] if args.stop is None else args.stop, recipe["n_samples"]
    if not 0 <= start < stop <= total:
        print(f"opformer: error: --start {start} --stop {stop}: a shard needs 0 <= --start < --stop <= --samples "
              f"({total})", file=sys.stderr)
        return 2
    if Path(args.out).suffix.lower() not in (".h5", ".hdf5", ".hdf"):
        print(f"opformer: error: --out {args.out}: the data are written as HDF5; name the file .h5 (other formats "
              "are read for training, not written)", file=sys.stderr)
        return 2
    out = Path(args.out)
    for where in (out, partial_path(out)):  # not HDF5's two lines, and no wait on a named pipe
        what = not_a_file(where)
        if what is not None:
            if where == out:
                todo = "give a file path" + (f", such as {out / (recipe['problem'] + '.h5')}" if out.is_dir() else "")
                print(f"opformer: error: --out {args.out} is {what}; {todo}", file=sys.stderr)
            else:
                print(f"opformer: error: --out {args.out}: {where}, where the samples are written until all are done, "
                      f"is {what}; move it away or delete it", file=sys.stderr)
            return 2
    existed = out.is_file()
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, request_stop)  # stop like Ctrl-C, keeping the finished samples
    try:
        with one_line_warnings():
            path = generate_dataset(recipe, args.out, start=args.start, stop=args.stop, workers=args.workers,
                                    progress=not args.no_progress, device=getattr(args, "device", None))
    except DataError as exc:
        print(f"opformer: error: {_in_flag_terms(exc)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"interrupted: the finished samples are kept in {args.out}.partial; run the same command to resume",
              file=sys.stderr)
        return 130
    print(f"{path}: complete already, with this recipe; nothing written" if existed else f"wrote {path}")
    try:
        for message in check_dataset(path):
            print(f"warning: {path}: {message}", file=sys.stderr)
    except DataError as exc:
        print(f"warning: {path}: the samples were not checked ({exc})", file=sys.stderr)
    return 0


def _run_burgers(args) -> int:
    try:
        recipe = make_recipe(
            "burgers", n_samples=args.samples, resolution=args.resolution, seed=args.seed, domain=args.domain,
            nu=args.nu, t_final=args.t_final, steps=args.steps,
            solve_resolution=args.solve_resolution or None, dtype=args.dtype,
            grf={"sigma": args.sigma, "tau": args.tau, "gamma": args.gamma, "modes": args.modes or None},
            snapshots=args.snapshots or None,
        )
    except DataError as exc:
        print(f"opformer: error: {_in_flag_terms(exc)}", file=sys.stderr)
        return 2
    return _generate(args, recipe)


def _run_darcy(args) -> int:
    try:
        recipe = make_recipe(
            "darcy", n_samples=args.samples, resolution=args.resolution, seed=args.seed, split=args.split,
            grid=args.grid, face=args.face, solver=args.solver, high=args.high, low=args.low, dtype=args.dtype,
            grf={"alpha": args.alpha, "tau": args.tau},
        )
    except DataError as exc:
        print(f"opformer: error: {_in_flag_terms(exc)}", file=sys.stderr)
        return 2
    return _generate(args, recipe)


def _run_navier_stokes(args) -> int:
    given = {
        "n_samples": args.samples, "resolution": args.resolution, "seed": args.seed, "dtype": args.dtype,
        "nu": args.nu, "t_final": args.t_final, "snapshots": args.snapshots, "solve_resolution": args.solve_resolution,
        "cfl": args.cfl, "dt": args.dt, "forcing": args.forcing,
    }
    overrides = {k: v for k, v in given.items() if v is not None}
    # a finer output grid than the default solve grid: solve on the output grid unless told otherwise
    default_solve = RECIPES[args.ic].defaults["solve_resolution"]
    if args.solve_resolution is None and args.resolution is not None and default_solve % args.resolution:
        overrides["solve_resolution"] = args.resolution
    try:
        recipe = make_recipe(args.ic, **overrides)
    except DataError as exc:
        print(f"opformer: error: {_in_flag_terms(exc)}", file=sys.stderr)
        return 2
    return _generate(args, recipe)


_TIME_NAMES = ("t", "time", "times")


def _time_attributes(path) -> list[tuple[str, int, str | None]]:
    """``(name, length, owner)`` of the time-like HDF5 attributes that ``--time-key`` can name: of the file (owner
    None), of one dataset or of a group (for the datasets below it); ``[]`` for other files."""
    if Path(path).suffix.lower() not in (".h5", ".hdf5", ".hdf"):
        return []
    import h5py
    import numpy as np

    found: list[tuple[str, int, str | None]] = []

    def visit(dataset, obj) -> None:
        found.extend((name, int(np.asarray(obj.attrs[name]).size), dataset) for name in obj.attrs
                     if name.lower() in _TIME_NAMES)

    try:
        with h5py.File(path, "r") as h5:
            visit(None, h5)
            h5.visititems(visit)  # datasets' attributes and groups' (for the datasets below them)
    except OSError:
        pass
    return found


def _training_hint(path, arrays) -> str:
    """The flags that train on a user's file: ``--keys INPUT,TARGET`` for the (input, target) tasks, or, for
    trajectories (samples, times, *grid[, 1]), the time-dependent tasks' ``--keys KEY --time-key NAME`` (a
    time-like array or HDF5 attribute as long as the array's second axis), ``--dt`` when the file stores no times."""
    import shlex

    shapes = {key: shape for key, shape, _ in arrays}
    fields = [key for key, shape in shapes.items() if len(shape) >= 3]
    # vectors as long as a field's second axis: the snapshot times, those of a time-like name first; a (1, K) or
    # (K, 1) array is a vector too (MATLAB has no 1-D arrays: scipy.io.savemat stores a vector as a row)
    vectors = {key: max(shape) for key, shape in shapes.items()
               if len(shape) == 1 or (len(shape) == 2 and min(shape) == 1)}
    times = sorted(((key, n, None) for key, n in vectors.items()
                    if key.rsplit("/", 1)[-1].lower() in _TIME_NAMES or any(shapes[f][1] == n for f in fields)),
                   key=lambda item: item[0].rsplit("/", 1)[-1].lower() not in _TIME_NAMES)
    times += _time_attributes(path)
    timed = [(key, t) for key in fields for t, n, owner in times
             if shapes[key][1] == n and (owner in (None, key) or key.startswith(f"{owner}/"))]
    # the snapshots on the last axis instead (the FNO Navier-Stokes .mat files: u (samples, n, n, T) with the times
    # t_1..t_T, and the states at t = 0 in a separate (samples, n, n) array)
    last = [(key, t) for key in fields for t, n, owner in times
            if shapes[key][-1] == n != shapes[key][1] and (owner in (None, key) or key.startswith(f"{owner}/"))]
    if timed:
        key, time_flag, prefix = timed[0][0], f" --time-key {shlex.quote(timed[0][1])}", ""
        grid = shapes[key][2:]
    elif last:
        key = last[0][0]
        grid = shapes[key][1:-1]
        initial = [k for k, shape in shapes.items() if shape == (shapes[key][0], *grid)]
        time_flag = f" --time-axis -1 --time-key {shlex.quote(last[0][1])}" + (
            f" --initial-key {shlex.quote(initial[0])}" if initial else "")
        prefix = ""
    elif len(shapes) == 1 and fields:  # one array cannot be an (input, target) pair
        key, time_flag, prefix = fields[0], " --dt STEP", "if these are "
        grid = shapes[key][2:]
    else:
        return "train with --keys INPUT,TARGET"
    if len(grid) > 1 and grid[-1] == 1:
        grid = grid[:-1]
    tasks = {1: "1D trajectories: train burgers-traj-*", 2: "2D trajectories: train ns-* or shear-layer-*"}
    square = ("" if len(grid) != 2 or grid[0] == grid[1] else
              f"; they take square grids, this file's are {grid[0]}x{grid[1]}: resample it to a square grid first")
    return (f"{prefix}{tasks.get(len(grid), 'trajectories: train a time-dependent task')} with --keys "
            f"{shlex.quote(key)}{time_flag}{square}")


_MATLAB_NUMERIC = ("double", "single", "logical", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32",
                   "uint64")


def _unreadable(shape: tuple, dtype: str) -> str | None:
    """Why the readers refuse an array listed by ``data info`` (its shape and type as listed), or None."""
    import numpy as np

    if dtype.endswith(")"):  # already explained: "(not an array)", "(empty: no values)"
        return dtype
    if dtype in _MATLAB_NUMERIC:
        kind = "f"
    elif dtype.startswith("[("):  # a structured type (named fields)
        kind = "V"
    elif dtype in ("char", "cell", "struct", "sparse", "object", "function", "function_handle", "opaque"):
        kind = "O" if dtype == "object" else "V"
    elif dtype == "bfloat16":  # a torch type numpy does not name, read as float64
        kind = "f"
    else:
        try:
            kind = np.dtype(dtype).kind
        except (TypeError, ValueError):  # no type of numbers ("complex double": a complex MATLAB variable)
            kind = "V"
    if kind == "O":
        return "objects, not numbers: refused when read"
    if kind not in "biuf":
        return "not real numbers: cannot be read"
    if len(shape) == 0:
        return "a single value: no sample axis"
    if shape[0] == 0:
        return "no samples"
    return None


def _run_info(args) -> int:
    import glob
    import json

    from .storage import read_header

    status = 0
    names = []
    for name in args.files:  # a quoted pattern (as --data takes) names its matches; a file of that very name wins
        if any(ch in name for ch in "*?[") and not Path(name).exists():
            matches = sorted(glob.glob(name))
            if not matches:
                print(f"opformer: error: {name}: no file matches this pattern", file=sys.stderr)
                status = 2
            names += matches
        else:
            names.append(name)
    for name in names:
        try:
            h = read_header(name)
        except DataError as exc:
            try:  # not an opformer data file: a user's arrays, named for --keys
                from ..data.readers import describe_arrays

                arrays = describe_arrays(name)
            except DataError as exc2:
                hdf5 = (Path(name).suffix.lower() in (".h5", ".hdf5", ".hdf")  # then the HDF5 reader's words
                        or Path(name).suffix.lower() == ".partial")  # FILE.partial: an unfinished data file
                print(f"opformer: error: {exc if hdf5 else exc2}", file=sys.stderr)
                status = 2
                continue
            if not arrays:
                print(f"opformer: error: {name}: not an opformer data file, and it holds no arrays", file=sys.stderr)
                status = 2
                continue
            count = sum(not dtype.endswith("(not an array)") for _, _, dtype in arrays)
            usable = [(key, shape, dtype) for key, shape, dtype in arrays if _unreadable(shape, dtype) is None]
            hint = _training_hint(name, usable) if usable else "none of them can be read as training data"
            print(f"{name}: not an opformer data file; {count} array(s) (name shape dtype; {hint}):")
            for key, shape, dtype in arrays:
                why = _unreadable(shape, dtype)
                print(f"  {key}  {shape}  {dtype}" + (f"  ({why})" if why and not dtype.endswith(")") else ""))
            continue
        total = h["stop"] - h["start"]
        state = "complete" if h["complete"] else "unfinished"
        print(f"{name}: {h['problem']}, samples [{h['start']}, {h['stop']}) of {h['n_samples']}, "
              f"{h['n_done']}/{total} written ({state}), opformer {h['opformer_version']}")
        print("  recipe: " + json.dumps(h["recipe"], sort_keys=True))
        for message in check_dataset(name):
            print(f"  warning: {message}")
    return status


def main(argv=None) -> int:
    """Stand-alone entry point (``python -m opformer.pde.cli burgers ...``) with the same arguments."""
    parser = argparse.ArgumentParser(prog="opformer")
    sub = parser.add_subparsers(dest="command", required=True)
    register(sub)
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] != "data":
        argv = ["data", *argv]
    args = parser.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
