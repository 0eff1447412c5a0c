"""The ``opformer bench`` command: ``opformer bench attention ...``, ``opformer bench model PRESET ...`` and
``opformer bench train PRESET ...`` (training overhead).

``register(subparsers)`` adds it to the top-level parser of ``opformer.cli``; each sub-command sets ``func``.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Optional

__all__ = ["register", "main"]

KINDS = ("galerkin", "fourier", "softmax", "linear")
#: kinds on a 2D grid of n = side^2 points (opformer.bench.cases.GRID_KINDS)
GRID_KIND_NAMES = ("window", "patched")
#: the values of --dtype, and the other spellings of them that are accepted
DTYPE_NAMES = ("float32", "tf32", "bfloat16")
_DTYPE_ALIASES = {"fp32": "float32", "float": "float32", "bf16": "bfloat16"}


def _dtype(text: str) -> str:
    """The --dtype value: float32, tf32 or bfloat16 (also fp32, bf16, any case); float16 and float64 are refused
    with what to use instead."""
    name = text.strip().lower()
    name = _DTYPE_ALIASES.get(name, name)
    if name in DTYPE_NAMES:
        return name
    if name in ("float16", "fp16", "half"):
        raise argparse.ArgumentTypeError(f"{text!r} is not one of the dtypes measured here; use bfloat16 (16 bits "
                                         "with float32's range) or float32")
    if name in ("float64", "fp64", "double"):
        raise argparse.ArgumentTypeError(f"{text!r} is not one of the dtypes measured here; use float32 or bfloat16")
    choices = ", ".join(repr(d) for d in DTYPE_NAMES)
    raise argparse.ArgumentTypeError(f"invalid choice: {text!r} (choose from {choices})")


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--batch", type=int, default=4, help="batch size (default 4, the paper's Table 1)")
    p.add_argument("--device", default="cpu", help="cpu or cuda[:i] (default cpu)")
    p.add_argument("--dtype", default="float32", type=_dtype, metavar="{float32,tf32,bfloat16}",
                   help="parameter/activation dtype; tf32: float32 with the TF32 matrix units allowed (CUDA); "
                        "bfloat16 (bf16) keeps float32 accumulation in the attention sums")
    p.add_argument("--compile", action="store_true", help="time torch.compile(module) (compilation is in warm-up)")
    p.add_argument("--repeats", type=int, default=5, help="timed forward+backward passes; the median is reported")
    p.add_argument("--warmup", type=int, default=1, help="untimed passes first (>= 1; the first measures memory)")
    p.add_argument("--threads", type=int, default=None,
                   help="torch threads (default: the CPUs this process may use: affinity and cgroup quota)")
    p.add_argument("--timeout", type=float, default=None, help="seconds per case before it is skipped")
    p.add_argument("--in-process", action="store_true",
                   help="run every case in this process (faster; CPU peak memory then less clean)")
    p.add_argument("--matmul-size", type=int, default=None,
                   help="size of the square product that measures the machine's matmul rate, at the start and "
                        "interleaved with every case (default 2048 CPU, 4096 GPU)")
    p.add_argument("--json", metavar="FILE", help="write the records (a JSON list) here")
    p.add_argument("--plot", metavar="PNG", help="write a log-log plot of time and memory against n here (the format "
                   "from the file's extension: .png, .pdf, .svg, ...; no extension: PNG)")


def _fmt_bytes(b) -> str:
    return "-" if b is None else f"{b / 2**20:,.0f} MiB"


#: width of the label column of the table (fits "patched [p 4: 1024 tok] [128^2]", so n= stays aligned)
_LABEL_WIDTH = 32


def _log(rec: dict) -> None:
    label = rec.get("preset") or rec.get("kind")
    if rec.get("impl") == "reference":
        label += " [ref]"
    if rec.get("chunk_size"):
        label += f" [chunk {rec['chunk_size']}]"
    if rec.get("window_size"):
        label += f" [M {rec['window_size']}]"
    if rec.get("patch_size"):
        label += f" [p {rec['patch_size']}: {rec['tokens']} tok]"
    if rec.get("grid_side"):
        label += f" [{rec['grid_side']}^2]"
    if rec.get("fourier_order") and rec["fourier_order"] != "quadratic":
        label += f" [{rec['fourier_order']}]"
    if rec.get("compile"):
        label += " [compiled]"
    if rec["status"] != "ok":
        print(f"{label:{_LABEL_WIDTH}s} n={rec['n']:>8d}  {rec['status']}: {rec['note']}", flush=True)
        return
    frac = rec.get("fraction_of_matmul_rate")
    frac_model = rec.get("fraction_of_matmul_rate_model_flops")
    model = rec.get("flops_model_fwd_bwd")
    line = (
        f"{label:{_LABEL_WIDTH}s} n={rec['n']:>8d}  {rec['seconds_fwd_bwd']:9.4f} s  {_fmt_bytes(rec['peak_memory_bytes']):>12s}  "
        f"{rec['flops_fwd_bwd'] / 1e9:8.2f} GFLOP  {rec['gflops_per_s']:7.2f} GFLOP/s"
    )
    if rec.get("peak_live_bytes") and rec.get("saved_activation_bytes"):
        line += (f"  [live peak {_fmt_bytes(rec['peak_live_bytes'])} = {rec['peak_live_over_saved']:.2f} x saved "
                 f"{_fmt_bytes(rec['saved_activation_bytes'])}]")
    if frac:
        line += f"  {frac:.2f} of matmul"
    if model and model != rec["flops_fwd_bwd"] and frac_model:
        line += f" ({model / 1e9:.2f} GFLOP of the explicit layer: {frac_model:.2f} of matmul)"
    if rec.get("matmul_gflops_interleaved"):
        line += f"  [{rec.get('matmul_dtype', 'float32')} matmul {rec['matmul_gflops_interleaved']:.1f} GFLOP/s same run]"
    if rec.get("ratio_to_reference") is not None:
        ref = "ref (eager, not compiled)" if rec.get("compile") else "ref"
        line += f"  {ref} {rec['reference_seconds_fwd_bwd']:.4f} s, ours/ref {rec['ratio_to_reference']:.3f}"
    print(line + f"  load {rec['loadavg'][0] if rec.get('loadavg') else '?'}", flush=True)


def _print_slopes(records: list[dict]) -> dict:
    """Print the log-log slope against n of FLOPs, memory (saved activations, live peak, RSS peak) and time per
    series, over the two largest n; for "patched" and "softmax" at equal n also the FLOP ratio and 1/p^4."""
    from .plot import SLOPE_FIELDS, fit_slopes

    slopes = {k: v for k, v in fit_slopes(records).items() if len(v.get("n", [])) >= 2}
    if not slopes:
        return slopes
    width = max(len(k) for k in slopes) + 2
    print(f"# log-log slopes against n (two largest n; FLOPs exact, memory and time measured)")
    print(f"{'series':{width}s}" + "".join(f"{name:>11s}" for name in SLOPE_FIELDS.values()) + "   n", flush=True)
    for label, entry in slopes.items():
        cells = "".join("          -" if entry.get(f) is None else f"{entry[f]:11.2f}" for f in SLOPE_FIELDS)
        print(f"{label:{width}s}{cells}   {entry['n'][-2]} -> {entry['n'][-1]}", flush=True)
    ok = [r for r in records if r.get("status") == "ok" and r.get("flops_fwd_bwd")]
    soft = {r["n"]: r["flops_fwd_bwd"] for r in ok if r.get("kind") == "softmax" and r.get("what") == "attention"
            and not r.get("chunk_size")}
    for r in ok:
        if r.get("kind") == "patched" and r["n"] in soft:
            p = r["patch_size"]
            print(f"# patched (p {p}) / softmax FLOPs at n={r['n']}: {r['flops_fwd_bwd'] / soft[r['n']]:.5f} "
                  f"(1/p^4 = {1 / p**4:.5f}; the rest is the n-linear work: projections, FFN, patch maps)", flush=True)
    return slopes


def _finish(records: list[dict], args) -> int:
    from .suite import write_json

    _print_slopes(records)
    if args.json:
        write_json(records, args.json)
        print(f"wrote {args.json}")
    if args.plot:
        from .plot import plot_records

        slopes = plot_records(records, args.plot)

        def _slope(value) -> str:
            return "-" if value is None else f"{value:.2f}"

        shown = {k: v for k, v in slopes.items()
                 if v.get("seconds_fwd_bwd") is not None or v.get("peak_memory_bytes") is not None}
        print(f"wrote {args.plot}" + ("; log-log slopes (two largest n): " + ", ".join(
            f"{k}: time {_slope(v.get('seconds_fwd_bwd'))} memory {_slope(v.get('peak_memory_bytes'))}"
            for k, v in shown.items()) if shown else " (no slopes: fewer than two n measured per series)"))
    failed = [r for r in records if r["status"] == "failed"]
    return 1 if failed else 0


def _interrupted(records: list[dict], args, planned: int) -> int:
    """Ctrl-C during a sweep: keep the records measured so far (--json), say so in one line, exit 130 (as a shell
    reports a command stopped by Ctrl-C)."""
    from .suite import write_json

    where = ""
    if args.json and records:
        write_json(records, args.json)
        where = f"; their records are in {args.json}"
    elif args.json:
        where = f"; nothing written to {args.json}"
    print(f"opformer: interrupted after {len(records)} of {planned} cases{where}", file=sys.stderr, flush=True)
    return 130


def _unknown_kinds_line(unknown: list[str], known: list[str]) -> str:
    """One line for --kinds names that are no kind: the nearest known name for each, then the known ones."""
    import difflib

    folded = {k.lower(): k for k in known}
    hints = []
    for name in unknown:
        near = ([folded[name.lower()]] if name.lower() in folded
                else difflib.get_close_matches(name.lower(), known, n=1))
        hints.append(f"{name!r}" + (f" (did you mean {near[0]!r}?)" if near else ""))
    return f"--kinds: unknown kind {', '.join(hints)}; known: {' '.join(known)}"


def _header(machine: dict) -> None:
    rates = ", ".join(f"{k[len('matmul_gflops_'):]} {machine.get('matmul_size', '')}^3 matmul {v:.1f} GFLOP/s"
                      for k, v in machine.items() if k.startswith("matmul_gflops_"))
    isa = f" ({machine['isa']}; torch kernels {machine.get('torch_cpu_capability')})" if machine.get("isa") else ""
    print(f"# {machine.get('gpu') or machine['cpu']}{isa}; {machine['cpu_count']} cores "
          f"({machine.get('cpus_available', '?')} available), torch {machine['torch']}, "
          f"{machine['torch_threads']} threads; {rates}; load {machine['loadavg']}", flush=True)


def _threads(args) -> int:
    """Choose and set the torch threads (``--threads`` or the CPUs available), print why and any overload."""
    from ..threads import apply_threads

    args.threads = apply_threads(args.threads, log=lambda s: print(s, flush=True))
    return args.threads


def _check_output_files(args) -> Optional[str]:
    """Why the --json / --plot files of a bench command cannot be written (checked before anything runs), or None:
    the path is a directory, or its nearest existing folder is not a writable directory."""
    from pathlib import Path

    from ..atomic import unwritable

    for flag_name in ("json", "plot"):
        value = getattr(args, flag_name, None)
        if value is not None and not value.strip():
            return f"--{flag_name} needs a file name, got an empty one"
        if not value:
            continue
        if Path(value).is_dir():
            return f"--{flag_name} {value} is a directory; give a file name"
        problem = unwritable(Path(value).parent)
        if problem is not None:
            return f"--{flag_name} {value}: {problem}"
    return None


def _check_numbers(args, positive=(), at_least_one=()) -> Optional[str]:
    """Why a numeric flag, --device or the --plot format cannot be used (checked before anything runs), or None."""
    for name in at_least_one:
        value = getattr(args, name, None)
        if value is not None and value < 1:
            return f"--{name.replace('_', '-')} must be >= 1, got {value}"
    for name in positive:
        value = getattr(args, name, None)
        if value is not None and not value > 0:
            return f"--{name.replace('_', '-')} must be > 0, got {value}"
    if getattr(args, "in_process", False) and getattr(args, "timeout", None) is not None:
        return "--timeout needs each case in its own worker process; it cannot stop a case run with --in-process"
    device = getattr(args, "device", None)
    if device is not None:
        import torch

        try:
            kind = torch.device(device).type
        except (RuntimeError, ValueError):
            return f"--device {device}: expected cpu or cuda[:i]"
        if kind not in ("cpu", "cuda"):
            return f"--device {device}: expected cpu or cuda[:i]"
        if kind == "cuda" and not torch.cuda.is_available():
            return f"--device {device}: no CUDA device is visible to torch"
        if kind == "cpu" and getattr(args, "dtype", None) == "tf32":
            return ("--dtype tf32 allows a GPU's TensorFloat-32 matrix units; on the CPU it would measure float32 "
                    "under another name: use --dtype float32 (or --device cuda)")
    plot = getattr(args, "plot", None)
    if plot:
        from pathlib import Path

        suffix = Path(plot).suffix.lower().lstrip(".")
        if suffix:
            from matplotlib.backend_bases import FigureCanvasBase

            formats = FigureCanvasBase.get_supported_filetypes()
            if suffix not in formats:
                return (f"--plot {plot}: matplotlib cannot write .{suffix} files; "
                        f"use one of .{', .'.join(sorted(formats))} (e.g. .png)")
    return None


def cmd_attention(args) -> int:
    from .cases import attention_case
    from .runner import machine_with_rates
    from .suite import Interrupted, bench_attention

    problem = _check_output_files(args)
    if problem is None and min(args.n) < 1:
        problem = f"--n must be >= 1, got {min(args.n)}"
    if problem is None:
        problem = _check_numbers(args, positive=("max_memory", "timeout"),
                                 at_least_one=("d_model", "heads", "layers", "batch", "repeats", "warmup", "threads",
                                               "chunk_size", "matmul_size", "window", "patch"))
    if problem is None and args.d_model % args.heads:
        problem = f"--d-model {args.d_model} must be a multiple of --heads {args.heads}"
    if problem is not None:
        print(f"opformer: error: {problem}", file=sys.stderr)
        return 2
    unknown = [k for k in args.kinds if k not in KINDS + GRID_KIND_NAMES]
    if unknown:
        from opformer.nn import KERNELS

        unknown = [k for k in unknown if k not in KERNELS]
        if unknown:
            known = list(KINDS + GRID_KIND_NAMES) + [k for k in KERNELS if k not in KINDS + GRID_KIND_NAMES]
            print(f"opformer: error: {_unknown_kinds_line(unknown, known)}", file=sys.stderr)
            return 2
    for kind in args.kinds:  # 2D kinds: n a perfect square (and its side a multiple of the patch)
        for n in args.n:
            try:
                attention_case(kind, n, window=args.window, patch=args.patch, compare_reference=args.reference)
            except ValueError as err:
                print(f"opformer: error: {err}", file=sys.stderr)
                return 2
    if args.reference:  # before the matmul rate is measured: a missing package is known at once
        from .reference import reference_available

        if not reference_available():
            print("opformer: error: --reference needs the reference package: "
                  "pip install --no-deps galerkin-transformer==0.2.1", file=sys.stderr)
            return 2
    _threads(args)
    machine = machine_with_rates(args.device, args.dtype, args.matmul_size)
    _header(machine)
    max_memory = None if args.max_memory is None else int(args.max_memory * 2**30)
    try:
        records = bench_attention(
            args.kinds, args.n, max_memory=max_memory, isolate=not args.in_process, timeout=args.timeout,
            machine=machine, log=_log, d_model=args.d_model, n_heads=args.heads, batch=args.batch,
            layers=args.layers, pos_dim=args.pos_dim, chunk_size=args.chunk_size,
            fourier_order=args.fourier_order, device=args.device,
            dtype=args.dtype, compile=args.compile, repeats=args.repeats, warmup=args.warmup, threads=args.threads,
            fused=not args.no_fused, compare_reference=args.reference, matmul_size=args.matmul_size,
            window=args.window, patch=args.patch,
        )
    except Interrupted as stop:
        return _interrupted(stop.records, args, len(args.kinds) * len(args.n))
    return _finish(records, args)


def cmd_model(args) -> int:
    from .cases import check_model_size, default_model_n, model_case
    from .runner import machine_with_rates
    from .suite import Interrupted, bench_model

    problem = _check_output_files(args)
    if problem is None and args.n and min(args.n) < 1:
        problem = f"--n must be >= 1, got {min(args.n)}"
    if problem is None:
        problem = _check_numbers(args, positive=("max_memory", "timeout"),
                                 at_least_one=("batch", "repeats", "warmup", "threads", "matmul_size"))
    if problem is not None:
        print(f"opformer: error: {problem}", file=sys.stderr)
        return 2
    ns = {p: args.n or [default_model_n(p)] for p in args.preset}
    for preset in args.preset:  # unknown names, and n not a perfect square for the 2D models: one line, exit 2
        for n in ns[preset]:
            try:
                check_model_size(model_case(preset, n, batch=args.batch, dtype=args.dtype))
            except ValueError as err:
                print(f"opformer: error: {str(err).splitlines()[0]}", file=sys.stderr)
                return 2
    _threads(args)
    machine = machine_with_rates(args.device, args.dtype, args.matmul_size)
    _header(machine)
    records = []
    for preset in args.preset:
        try:
            records += bench_model(
                preset, ns[preset], max_memory=None if args.max_memory is None else int(args.max_memory * 2**30),
                isolate=not args.in_process, timeout=args.timeout, machine=machine, log=_log,
                batch=args.batch, device=args.device, dtype=args.dtype, compile=args.compile, repeats=args.repeats,
                warmup=args.warmup, threads=args.threads, matmul_size=args.matmul_size,
            )
        except Interrupted as stop:
            return _interrupted(records + stop.records, args, sum(len(ns[p]) for p in args.preset))
    return _finish(records, args)


def _case_spec(text: str) -> tuple[str, dict]:
    """``PRESET`` or ``PRESET:FIELD=VALUE,FIELD=VALUE`` (the fields of ``opformer train PRESET --help``)."""
    preset, _, rest = text.partition(":")
    over = {}
    for item in filter(None, rest.split(",")):
        key, eq, val = item.partition("=")
        if not eq:
            raise ValueError(f"{text!r}: expected PRESET:FIELD=VALUE,..., got {item!r}")
        key = key.strip().lstrip("-").replace("-", "_")
        if key == "keys":  # the commas separate the fields here: the two keys are joined by + (or ;)
            val = val.replace("+", ",").replace(";", ",")
        over[_TRAIN_ALIASES.get(key, key)] = val.strip()
    return preset, over


#: the named flags of opformer train and the config fields they set
_TRAIN_ALIASES = {"data": "data.path", "test_data": "data.test_path", "keys": "data.keys"}


def _train_case_note(preset: str, overrides: dict, epochs: int, device: str) -> Optional[str]:
    """Check a case of ``bench train`` before anything runs: the preset, its overrides, a data file it names
    (ConfigError, DataError or ValueError in the user's terms).  Returns a note when the case's default data is not
    generated yet (the case generates it first, which can take long), else None."""
    from ..data.readers import resolve_paths
    from ..pde.errors import DataError
    from ..tasks.base import ensure_files
    from ..train.config import apply_overrides, load_preset, resolve

    fixed = {"epochs": epochs, "accelerator": "gpu" if device == "cuda" else "cpu", "devices": 1}  # as the run sets
    cfg, _ = apply_overrides(load_preset(preset), {**overrides, **fixed})
    run = resolve(cfg)
    for name, path in (("data", run.data.path), ("test_data", run.data.test_path)):
        if path is not None:
            try:
                resolve_paths(path)  # a file, a glob pattern or a list of them
            except DataError as err:
                raise DataError(f"{name}={err}") from None
    if ensure_files(run.task, run.data, run.options, generate=False) is not None:
        return None
    size = ""
    try:
        from ..pde.generate import make_recipe

        recipe = make_recipe(run.task.generator, **run.task.default_recipes(run.data, run.options)[0])
        size = f" ({recipe['n_samples']} samples at resolution {recipe['resolution']})"
    except (KeyError, TypeError, ValueError):
        pass
    return (f"{preset}: its default data{size} is not generated yet; it is generated first, which can take long "
            f"(`opformer data prepare {preset}` does it ahead; {preset}:data=FILE uses a file of yours)")


def cmd_train(args) -> int:
    from ..config import ConfigError
    from ..pde.errors import DataError
    from . import measure
    from .suite import write_json
    from .train import train_overhead

    try:
        cases = [_case_spec(c) for c in args.cases]
        shared = dict(_case_spec("x:" + ",".join(args.set))[1]) if args.set else {}
    except ValueError as err:
        print(f"opformer: error: {err}", file=sys.stderr)
        return 2
    problem = _check_output_files(args)
    for preset, over in [*cases, ("--set", shared)]:  # fields the bench sets itself would be silently replaced
        taken = {"epochs": "--epochs", "accelerator": "--device", "devices": "--device"}
        for key in over:
            if problem is None and key in taken:
                where = "--set" if preset == "--set" else preset
                problem = f"{where}: {key}= is set by opformer bench train; use {taken[key]} instead"
    if problem is None and args.warmup < 0:
        problem = f"--warmup must be >= 0, got {args.warmup}"
    if problem is None:
        problem = _check_numbers(args, at_least_one=("epochs", "repeats", "threads"))
    notes = []
    for preset, over in cases if problem is None else ():  # every case's preset, fields and files, before any runs
        try:
            notes.append(_train_case_note(preset, {**shared, **over}, args.epochs, args.device))
        except (ConfigError, DataError, ValueError) as err:
            problem = f"{preset}: {str(err).splitlines()[0] if str(err) else type(err).__name__}"
            break  # the first case refused is said
    if problem is not None:
        print(f"opformer: error: {problem}", file=sys.stderr)
        return 2
    from .runner import machine_with_rates

    _threads(args)
    machine = machine_with_rates(args.device)
    _header(machine)
    for note in filter(None, notes):
        print(f"# note: {note}", flush=True)
    print("# overhead = epoch (training + validation + checkpoints) / (steps x bare optimizer step); goal <= 1.25")
    print("# bare step: the median of bare steps timed " + ("after each epoch" if args.device == "cuda" else
          "between the epoch's own steps (their time taken out of the epoch's)"))
    records = []
    for preset, over in cases:
        try:
            rec = train_overhead(preset, {**shared, **over}, epochs=args.epochs, repeats=args.repeats,
                                 warmup=args.warmup, device=args.device)
        except (ConfigError, DataError) as err:
            print(f"opformer: error: {preset}: {err}", file=sys.stderr)
            return 2
        except KeyboardInterrupt:
            return _interrupted(records, args, len(cases))
        rec["machine"] = machine
        rec["matmul_gflops_fp32"] = machine.get("matmul_gflops_fp32")
        rec["loadavg"] = measure.loadavg()
        records.append(rec)
        share = rec.get("model_step_seconds")
        share = f"  network alone {share:.4f} s ({share / rec['bare_step_seconds']:.2f} of the step)" if share else ""
        print(f"{preset:22s} grid {'x'.join(map(str, rec['grid'])):>9s} batch {rec['batch']:3d}  {rec['steps']:4d} steps  "
              f"epoch {rec['epoch_seconds']:8.2f} s  bare step {rec['bare_step_seconds']:.4f} s{share}  "
              f"validation {rec['validation_seconds']:.2f} s  checkpoints {rec['checkpoint_seconds']:.2f} s  "
              f"gc {rec['gc_seconds']:.3f} s  "
              f"overhead {rec['overhead']:.3f}x{'  (CUDA graphs)' if rec.get('cuda_graphs') else ''}  "
              f"load {rec['loadavg'][0]}", flush=True)
        doubt = _train_timing_doubt(rec)
        if doubt:
            rec["timing_note"] = doubt
            print(f"note: {preset}: {doubt}", flush=True)
    if args.json:
        write_json(records, args.json)
        print(f"wrote {args.json}")
    return 0


def _train_timing_doubt(rec: dict) -> Optional[str]:
    """Why a training-overhead record's figures cannot all be right, or None: an epoch cannot take less than its
    bare steps (an overhead under 0.95), nor the network alone longer than the whole bare step; either means the
    step times varied during the run (other work on the machine)."""
    why = []
    if rec.get("overhead") is not None and rec["overhead"] < 0.95:
        why.append(f"an overhead of {rec['overhead']:.3f} (an epoch shorter than its bare steps)")
    share, bare = rec.get("model_step_seconds"), rec.get("bare_step_seconds")
    if share and bare and share > 1.05 * bare:
        why.append(f"the network alone at {share / bare:.2f} of the whole step")
    if not why:
        return None
    load = rec.get("loadavg") or ["?"]
    return (f"{' and '.join(why)} cannot be: the step times varied during the run (load {load[0]} on "
            f"{os.cpu_count()} CPUs); rerun on an idle machine or with more --repeats")


def register(subparsers) -> argparse.ArgumentParser:
    """Add ``bench`` (with ``attention`` and ``model``) to an argparse sub-parsers object."""
    bench = subparsers.add_parser(
        "bench", help="time, memory and FLOPs of attention kernels and models",
        description="Forward+backward time (median after warm-up), peak memory, FLOPs (torch.utils.flop_counter) "
        "and achieved GFLOP/s, with the machine's own measured matmul rate.",
    )
    sub = bench.add_subparsers(dest="bench_command", required=True)

    a = sub.add_parser("attention", help="an encoder stack of each attention kind at each n")
    a.add_argument("--kinds", nargs="+", default=list(KINDS),
                   help=f"attention kinds (default: {' '.join(KINDS)}); on a 2D grid of n = side^2 points: "
                        "window (windowed attention blocks, M x M windows, shifted), patched (softmax attention on "
                        "p x p patch tokens)")
    a.add_argument("--n", nargs="+", type=int, default=[512, 2048, 8192],
                   help="numbers of points (perfect squares for window and patched, e.g. 1024 4096 16384)")
    a.add_argument("--window", type=int, default=8, help="window size M of the window kind (default 8)")
    a.add_argument("--patch", type=int, default=4, help="patch size p of the patched kind (default 4)")
    a.add_argument("--d-model", type=int, default=128)
    a.add_argument("--heads", type=int, default=4)
    a.add_argument("--layers", type=int, default=1)
    a.add_argument("--pos-dim", type=int, default=1)
    a.add_argument("--fourier-order", default="quadratic", choices=("quadratic", "auto", "linear"),
                   help="fourier kind: form the n x n matrix (quadratic, default: the paper's cost accounting) or "
                        "evaluate Q(K^T V) (linear; auto = the cheaper, what models use by default)")
    a.add_argument("--chunk-size", type=int, default=None,
                   help="evaluate fourier/softmax over query chunks of this size (memory O(n*chunk))")
    a.add_argument("--max-memory", type=float, default=None,
                   help="GiB; cases estimated above it are skipped with a note (default 80%% of available memory)")
    a.add_argument("--reference", action="store_true",
                   help="also time the paper's reference layer (galerkin-transformer 0.2.1) on the same input, "
                        "interleaved with ours in the same process, and print ours/ref")
    a.add_argument("--no-fused", action="store_true",
                   help="evaluate galerkin/linear by the explicit heads (SimpleAttention(fused=False))")
    _common(a)
    a.set_defaults(func=_warnings_in_one_line(cmd_attention))

    m = sub.add_parser("model", help="a whole model from a named preset (e.g. burgers-gt at n = 8192, batch 4)")
    m.add_argument("preset", nargs="+",
                   help="names of opformer.models presets (e.g. burgers-gt burgers-lt; n = points per dimension) or "
                        "2D models with their default configs: scot scot-small scot-base scot-galerkin vit vit-gt "
                        "(= vit-galerkin) vit-ft unet deeponet cno (n = number of points, a perfect square: a side x "
                        "side grid)")
    m.add_argument("--n", nargs="+", type=int, default=None,
                   help="resolutions: points per dimension for the paper presets (default 8192 in 1D, 141 in 2D: "
                        "141^2 points), number of grid points side^2 for the 2D models (default 16384 = 128^2)")
    m.add_argument("--max-memory", type=float, default=None,
                   help="GiB; resolutions whose saved activations alone (counted on shapes, extrapolated from small "
                        "ones) exceed it are skipped with a note (default 80%% of available memory)")
    _common(m)
    m.set_defaults(func=_warnings_in_one_line(cmd_model))

    t = sub.add_parser("train", help="training overhead: an opformer train epoch against its bare optimizer steps",
                       description="Time one epoch of the real trainer (training, validation, checkpoints) and "
                       "the bare optimizer step on a batch in memory, and print their ratio (goal <= 1.25).")
    t.add_argument("cases", nargs="+", metavar="PRESET[:FIELD=VALUE,...]",
                   help="training presets, each with its own overrides, e.g. "
                        "darcy-gt-cpu:data=d17.h5,n_train=900,n_val=50 or burgers-gt:data=mine.npz,keys=x+y "
                        "(the two keys joined by +)")
    t.add_argument("--set", nargs="+", default=[], metavar="FIELD=VALUE", help="overrides for every case")
    t.add_argument("--epochs", type=int, default=2, help="epochs run; the last one is timed (default 2)")
    t.add_argument("--repeats", type=int, default=10, help="bare steps timed in each epoch (on the CPU, between its "
                   "steps) and after it")
    t.add_argument("--warmup", type=int, default=3)
    t.add_argument("--threads", type=int, default=None, help="torch threads (default: the CPUs this process may use)")
    t.add_argument("--device", default="cpu", choices=["cpu", "cuda"], help="where the trainer and the bare steps run "
                   "(default cpu)")
    t.add_argument("--json", metavar="FILE", help="write the records (a JSON list) here")
    t.set_defaults(func=_warnings_in_one_line(cmd_train))
    return bench


def _warnings_in_one_line(command):
    """``command(args)`` with our own warnings (a data file's notes, a resampled grid) as one line each, as the
    training commands show them, instead of Python's two lines of file, line number and source."""

    def run(args) -> int:
        from ..config import one_line_warnings

        with one_line_warnings():
            return command(args)

    run.__name__ = run.__qualname__ = command.__name__
    run.__doc__ = command.__doc__
    return run


def main(argv=None) -> int:
    """``python -m opformer.bench.cli ...`` without the top-level ``opformer`` command."""
    parser = argparse.ArgumentParser(prog="opformer")
    sub = parser.add_subparsers(dest="command", required=True)
    register(sub)
    args = parser.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
