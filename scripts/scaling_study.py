r"""Which architecture scales best (the lecture's question): test error against the number of training samples and
against model size for several models on one task, log-log plots with fitted slopes, and markdown tables.

    python scripts/scaling_study.py --task darcy --data train.h5 --test-data test.h5 \
        --models fno cno gt scot --samples 64 128 256 512 --epochs 20 --out runs/scaling \
        --sizes fno:width=8,16,32 gt:d_model=32,64,128 --size-samples 256

Every run is `opformer train TASK --model M --n-train N [--FIELD V]` with the same data, epochs and optimizer
settings.  The sample sweep uses each model's default size; the size sweep (``--sizes MODEL:FIELD=V1,V2,...``) runs
at ``--size-samples`` training samples.  Figures: OUT/scaling.png and OUT/scaling_size.png; numbers:
OUT/scaling.json.  Runs that exist already are reused (delete a run directory to redo it).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import numpy as np

from opformer.atomic import atomic_write_text, replacing
from opformer.models.presets import ATTENTION_KINDS


def _run(args, run: Path, model: str, n: int, extra: list[str]) -> dict | None:
    if not (run / "metrics.json").exists() and args.collect:
        return None
    if not (run / "metrics.json").exists():
        cmd = [sys.executable, "-m", "opformer", "train", args.task, "--model", model, "--data", args.data,
               "--n-train", str(n), "--epochs", str(args.epochs), "--out", str(run), "--no-progress", "--overwrite",
               "--lr-scale", ""]  # one rate for all parameters, as the study was measured (docs/results.md)
        if args.task == "darcy" and model.removesuffix("-regular") in ATTENTION_KINDS:  # its 2D attention models:
            cmd += ["--dropout", "0.05", "--downscaler-dropout", "0.05"]  # the preset's, as the study was measured
            if model.removesuffix("-regular") == "ft":  # and the FT's warm-up and 1/sqrt(d) of that time (the task's
                cmd += ["--pct-start", "0.3", "--scale", "sqrt"]  # defaults up to 85 a side are 15 % and none now)
        if args.test_data:
            cmd += ["--test-data", args.test_data]
        cmd += [a for a in args.extra if a != "--"] + extra
        print(" ".join(cmd), flush=True)
        try:
            subprocess.run(cmd, check=True)
        except subprocess.CalledProcessError as exc:
            raise StudyError(f"the run {run} failed (opformer train exited with {exc.returncode}; its message is "
                             "above); the finished runs are kept, rerun to go on") from None
    try:
        m = json.loads((run / "metrics.json").read_text())
        return {"n_train": n, "test_rel_l2": float(m["test_rel_l2"]), "parameters": int(m["parameters"]),
                "seconds": float(m["seconds"])}
    except (OSError, UnicodeDecodeError, ValueError, TypeError, KeyError) as exc:
        raise StudyError(f"{run / 'metrics.json'}: not a readable training record ({type(exc).__name__}: {exc}); "
                         "delete the run directory to redo it") from None


class StudyError(Exception):
    """A one-line error for the command line."""


def _slope(x, y) -> float | None:
    return float(np.polyfit(np.log(x), np.log(y), 1)[0]) if len(x) > 1 else None


def _parse_sizes(specs: list[str]) -> list[tuple[str, str, list[str]]]:
    out = []
    for spec in specs:
        model, _, rest = spec.partition(":")
        field, eq, values = rest.partition("=")
        if not (model and field and eq and values):
            raise SystemExit(f"--sizes: expected MODEL:FIELD=V1,V2,..., got {spec!r}")
        out.append((model, field.replace("_", "-"), values.split(",")))
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--task", default="darcy")
    p.add_argument("--data", required=True)
    p.add_argument("--test-data")
    p.add_argument("--models", nargs="*", default=["fno", "cno", "gt", "scot"])
    p.add_argument("--samples", nargs="+", type=int, default=[64, 128, 256, 512])
    p.add_argument("--sizes", nargs="*", default=[], metavar="MODEL:FIELD=V1,V2,...",
                   help="model-size sweep, e.g. fno:width=8,16,32 (at --size-samples training samples)")
    p.add_argument("--size-samples", type=int, default=256)
    p.add_argument("--epochs", type=int, default=20)
    p.add_argument("--out", default="runs/scaling")
    p.add_argument("--collect", action="store_true", help="train nothing: tables and plots of the finished runs")
    p.add_argument("extra", nargs=argparse.REMAINDER, help="more flags for opformer train (after --)")
    args = p.parse_args(argv)
    sizes = _parse_sizes(args.sizes)
    if not args.collect:  # a wrong path is said here, not after a training process has started and failed
        for flag, path in (("--data", args.data), ("--test-data", args.test_data)):
            if path is not None and not Path(path).is_file():
                print(f"error: {flag} {path}: no such file", file=sys.stderr)
                return 2
    try:
        return _study(args, sizes)
    except StudyError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1


def _study(args, sizes) -> int:
    out = Path(args.out)
    results: dict = {}
    for model in args.models:
        for n in args.samples:
            row = _run(args, out / f"{model}-{n}", model, n, [])
            if row is not None:
                results.setdefault(model, []).append(row)
    by_size: dict = {}
    for model, field, values in sizes:
        for v in values:
            row = _run(args, out / f"{model}-{n_tag(args.size_samples)}-{field}{v}", model, args.size_samples,
                       [f"--{field}", v])
            if row is not None:
                row["size"] = {field: v}
                by_size.setdefault(model, []).append(row)
    slopes = {m: _slope([r["n_train"] for r in rows], [r["test_rel_l2"] for r in rows]) for m, rows in results.items()}
    size_slopes = {m: _slope([r["parameters"] for r in rows], [r["test_rel_l2"] for r in rows])
                   for m, rows in by_size.items()}
    if not results and not by_size:
        raise StudyError(f"no finished run under {out} (run-dir/metrics.json) for these --models, --samples and "
                         "--sizes" + (": --collect trains nothing" if args.collect else ""))
    atomic_write_text(out / "scaling.json", json.dumps({"results": results, "slopes": slopes, "by_size": by_size,
                                                   "size_slopes": size_slopes}, indent=2))
    if results:
        _plot(out / "scaling.png", results, slopes, args.task, "n_train", "training samples",
              "error against training samples")
        print("| model | parameters | " + " | ".join(f"n = {n}" for n in args.samples) + " | slope |")
        print("|---|---|" + "---|" * len(args.samples) + "---|")
        for model, rows in results.items():
            got = {r["n_train"]: r for r in rows}
            cells = " | ".join(f"{got[n]['test_rel_l2']:.3e}" if n in got else "-" for n in args.samples)
            print(f"| {model} | {rows[0]['parameters']:,} | {cells} | {_fmt(slopes[model])} |")
    if by_size:
        _plot(out / "scaling_size.png", by_size, size_slopes, args.task, "parameters", "parameters",
              f"error against model size ({args.size_samples} samples)")
        print(f"\n| model | size field | parameters: test rel. L2 ({args.size_samples} samples) | slope |")
        print("|---|---|---|---|")
        for model, rows in by_size.items():
            field = next(iter(rows[0]["size"]))
            cells = ", ".join(f"{r['size'][field]} ({r['parameters']:,}): {r['test_rel_l2']:.3e}" for r in rows)
            print(f"| {model} | {field} | {cells} | {_fmt(size_slopes[model])} |")
    return 0


def n_tag(n: int) -> str:
    return f"n{n}"


def _fmt(v) -> str:
    return "-" if v is None else f"{v:.2f}"


def _plot(path: Path, results: dict, slopes: dict, task: str, key: str, xlabel: str, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4.2))
    for model, rows in results.items():
        x = [r[key] for r in rows]
        e = [r["test_rel_l2"] for r in rows]
        ax.loglog(x, e, marker="o", label=f"{model} (slope {_fmt(slopes[model])})")
    ax.set_xlabel(xlabel)
    ax.set_ylabel("test relative L2")
    ax.set_title(f"{task}: {title}")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    with replacing(path, "wb") as fh:  # a failed write leaves the figure that was there
        fig.savefig(fh, format="png", dpi=110)
    plt.close(fig)


if __name__ == "__main__":
    raise SystemExit(main())
