"""Which architecture scales best (the lecture's question): test error against the number of training samples for
several models on one task, a log-log plot with fitted slopes, and a markdown table.

    python scripts/scaling_study.py --task darcy --data train.h5 --test-data test.h5 \
        --models fno cno gt scot --samples 64 128 256 512 --epochs 20 --out runs/scaling

Every run is `opformer train TASK --model M --n-train N` with the same data, epochs and optimizer settings; the
figure is OUT/scaling.png, the numbers OUT/scaling.json.  Runs that exist already are reused (delete to redo).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import numpy as np


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--task", default="darcy")
    p.add_argument("--data", required=True)
    p.add_argument("--test-data")
    p.add_argument("--models", nargs="+", default=["fno", "cno", "gt", "scot"])
    p.add_argument("--samples", nargs="+", type=int, default=[64, 128, 256, 512])
    p.add_argument("--epochs", type=int, default=20)
    p.add_argument("--out", default="runs/scaling")
    p.add_argument("extra", nargs=argparse.REMAINDER, help="more flags for opformer train (after --)")
    args = p.parse_args(argv)
    out = Path(args.out)
    results: dict = {}
    for model in args.models:
        for n in args.samples:
            run = out / f"{model}-{n}"
            if not (run / "metrics.json").exists():
                cmd = [sys.executable, "-m", "opformer", "train", args.task, "--model", model, "--data", args.data,
                       "--n-train", str(n), "--epochs", str(args.epochs), "--out", str(run), "--no-progress",
                       "--overwrite"]
                if args.test_data:
                    cmd += ["--test-data", args.test_data]
                cmd += [a for a in args.extra if a != "--"]
                print(" ".join(cmd), flush=True)
                subprocess.run(cmd, check=True)
            m = json.loads((run / "metrics.json").read_text())
            results.setdefault(model, []).append({"n_train": n, "test_rel_l2": m["test_rel_l2"],
                                                  "parameters": m["parameters"], "seconds": m["seconds"]})
    slopes = {}
    for model, rows in results.items():
        x = np.log([r["n_train"] for r in rows])
        y = np.log([r["test_rel_l2"] for r in rows])
        slopes[model] = float(np.polyfit(x, y, 1)[0]) if len(rows) > 1 else None
    (out / "scaling.json").write_text(json.dumps({"results": results, "slopes": slopes}, indent=2))
    _plot(out / "scaling.png", results, slopes, args.task)
    print("| model | parameters | " + " | ".join(f"n = {n}" for n in args.samples) + " | slope |")
    print("|---|---|" + "---|" * len(args.samples) + "---|")
    for model, rows in results.items():
        cells = " | ".join(f"{r['test_rel_l2']:.3e}" for r in rows)
        print(f"| {model} | {rows[0]['parameters']:,} | {cells} | {slopes[model]:.2f} |")
    return 0


def _plot(path: Path, results: dict, slopes: dict, task: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4.2))
    for model, rows in results.items():
        n = [r["n_train"] for r in rows]
        e = [r["test_rel_l2"] for r in rows]
        ax.loglog(n, e, marker="o", label=f"{model} (slope {slopes[model]:.2f})")
    ax.set_xlabel("training samples")
    ax.set_ylabel("test relative L2")
    ax.set_title(f"{task}: error against training samples")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


if __name__ == "__main__":
    raise SystemExit(main())
