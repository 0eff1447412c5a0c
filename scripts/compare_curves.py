#!/usr/bin/env python
"""Validation error against epoch for several training runs on one plot (PNG).

    python scripts/compare_curves.py runs/d85/fno runs/d85/gt-d64 "GT, whole grid=runs/d85/gt-d64-whole" \
        --out docs/figures/darcy85-curves.png --title "Darcy 85 -> 29, 256 samples"

Each argument is a run directory (``opformer train --out``), optionally ``LABEL=DIR``; the curve is the
``val_rel_l2`` column of its ``logs/metrics.csv`` and of the parts a resumed run kept (``metrics-0.csv``, ...; add
``--metric train_rel_l2`` for the training error), marked with the run's test error from ``metrics.json`` when it
has one.  ``--x time`` puts the curves against minutes
instead of epochs: each run's recorded seconds spread evenly over its epochs (for runs of equal wall time but
different epoch counts).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from opformer.atomic import replacing
from opformer.train.plots import read_run_history
from opformer.train.records import RecordError, read_json_object


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("runs", nargs="+", help="run directories, each optionally LABEL=DIR")
    p.add_argument("--out", type=Path, required=True, help="PNG to write")
    p.add_argument("--metric", default="val_rel_l2")
    p.add_argument("--title", default="")
    p.add_argument("--x", choices=("epoch", "time"), default="epoch",
                   help="epochs, or minutes (the run's seconds from metrics.json spread evenly over its epochs)")
    a = p.parse_args(argv)

    curves = []
    for arg in a.runs:
        label, _, path = arg.rpartition("=")
        run = Path(path)
        if not (run / "logs" / "metrics.csv").is_file():
            print(f"error: {run} has no logs/metrics.csv (not an `opformer train --out` directory?)", file=sys.stderr)
            return 2
        try:
            series = read_run_history(run / "logs").get(a.metric)  # a resumed run's earlier parts too
        except (OSError, UnicodeDecodeError, ValueError) as exc:
            print(f"error: {run / 'logs'}: a metrics CSV is not readable ({str(exc).splitlines()[0]})", file=sys.stderr)
            return 2
        if not series:
            print(f"error: {run / 'logs'} has no column {a.metric!r}", file=sys.stderr)
            return 2
        metrics_path = run / "metrics.json"
        try:
            info = read_json_object(metrics_path) if metrics_path.is_file() else {}
        except RecordError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        test = info.get("test_rel_l2")
        minutes_per_epoch = None
        if a.x == "time":
            if not info.get("seconds") or not info.get("epochs"):
                print(f"error: {run} has no seconds and epochs in metrics.json (a finished run is needed for --x time)",
                      file=sys.stderr)
                return 2
            minutes_per_epoch = info["seconds"] / info["epochs"] / 60.0
        name = label or run.name
        curves.append((f"{name} (test {test:.3g})" if test is not None else name, series, minutes_per_epoch))

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    many = len(a.runs) > 5  # the legend beside the axes, where it hides no curve
    fig, ax = plt.subplots(figsize=(10.5, 4) if many else (6.5, 4))
    for label, series, per_epoch in curves:  # series: (epoch, value) sorted by epoch
        xs = [(e + 1) * per_epoch if per_epoch else e + 1 for e, _ in series]
        ax.semilogy(xs, [v for _, v in series], marker="." if len(series) < 40 else None, label=label)
    ax.set_xlabel("minutes (the run's time spread evenly over its epochs)" if a.x == "time" else "epoch")
    ax.set_ylabel(a.metric.replace("_", " "))
    ax.grid(True, which="both", alpha=0.3)
    if many:
        ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0)
    else:
        ax.legend(fontsize=8)
    if a.title:
        ax.set_title(a.title, fontsize=10)
    fig.tight_layout()
    a.out.parent.mkdir(parents=True, exist_ok=True)
    with replacing(a.out, "wb") as fh:
        fig.savefig(fh, format="png", dpi=120)
    plt.close(fig)
    print(f"wrote {a.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
