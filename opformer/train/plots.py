"""PNG plots of results: predictions against targets with the pointwise error, and training curves."""

from __future__ import annotations

import csv
import textwrap
from pathlib import Path

import numpy as np

from ..atomic import replacing


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(plt, fig, path) -> Path:
    """Write ``fig`` as the PNG ``path`` through a temporary file and a rename: the earlier plot stays until the new
    one is complete."""
    path = Path(path)
    try:
        fig.tight_layout()
        path.parent.mkdir(parents=True, exist_ok=True)
        with replacing(path, "wb") as fh:
            fig.savefig(fh, format=path.suffix[1:].lower() or "png", dpi=110)
    finally:
        plt.close(fig)
    return path


def _short(name: str) -> str:
    """A sample's name with only the file name of its path ("sample 905 of d33.h5"), to fit a panel's title."""
    head, sep, where = name.partition(" of ")
    return f"{head}{sep}{Path(where).name}" if sep else name


def plot_predictions(path, inputs, targets, preds, labels: dict, errors=None, title: str = "",
                     names=None) -> Path:
    """1D: one column per sample, input/target/prediction over x and the pointwise error below.  2D: one row per
    sample, input, target, prediction and error maps.  ``labels`` ({"input", "target", "prediction"}) come from the
    task; ``names``: each sample as the user knows it ("sample 905 of FILE"; default "sample j", its position).
    Arrays: (samples, n, c) or (samples, n, n, c); the first channel is shown."""
    plt = _plt()
    inputs, targets, preds = (np.asarray(a) for a in (inputs, targets, preds))
    k = len(preds)
    names = list(names) if names is not None else [f"sample {j}" for j in range(k)]
    if preds.ndim == 3:  # 1D
        fig, axes = plt.subplots(2, k, figsize=(4 * k, 5), squeeze=False, gridspec_kw={"height_ratios": [3, 1.4]})
        for j in range(k):
            x = np.arange(preds.shape[1]) / preds.shape[1]
            ax = axes[0, j]
            ax.plot(np.arange(inputs.shape[1]) / inputs.shape[1], inputs[j, :, 0], color="0.6", lw=1, ls="--",
                    label=labels["input"])
            ax.plot(x, targets[j, :, 0], color="k", lw=1.5, label=labels["target"])
            ax.plot(x, preds[j, :, 0], color="C3", lw=1, label=labels["prediction"])
            rel = "" if errors is None else f"rel. L2 {errors[j]:.2e}"
            ax.set_title(f"{_short(names[j])}  {rel}", fontsize=9)
            if j == 0:
                ax.legend(fontsize=7)
            axes[1, j].plot(x, preds[j, :, 0] - targets[j, :, 0], color="C0", lw=1)
            axes[1, j].set_xlabel("x")
            axes[1, j].set_title("pointwise error", fontsize=8)
    else:
        heads = [labels["input"], labels["target"], labels["prediction"], "error"]
        fig, axes = plt.subplots(k, 4, figsize=(13, 3.1 * k), squeeze=False)
        for j in range(k):
            panels = [inputs[j, ..., 0], targets[j, ..., 0], preds[j, ..., 0], preds[j, ..., 0] - targets[j, ..., 0]]
            vmin, vmax = float(targets[j].min()), float(targets[j].max())
            for i, (ax, img) in enumerate(zip(axes[j], panels)):
                if i in (1, 2):  # target and prediction on one colour scale
                    kw = {"vmin": vmin, "vmax": vmax}
                elif i == 3:  # error: symmetric about zero
                    lim = float(np.abs(img).max()) or 1.0
                    kw = {"vmin": -lim, "vmax": lim}
                else:
                    kw = {}
                im = ax.imshow(img.T, origin="lower", extent=(0, 1, 0, 1), cmap="RdBu_r" if i == 3 else "viridis",
                               **kw)
                fig.colorbar(im, ax=ax, fraction=0.046, pad=0.04)
                rel = f" (rel. L2 {errors[j]:.2e})" if (errors is not None and i == 2) else ""
                # the first panel names the sample too: wrapped to the panel's width (a trajectory's "trajectory 12 of
                # ns32.h5, snapshot 0 -> 1: vorticity w(t_0)" ran past the figure's left edge on one line)
                lines = ([f"{_short(names[j])}:"] if i == 0 else []) + [heads[i] + rel]
                ax.set_title("\n".join(textwrap.fill(line, 44) for line in lines), fontsize=8)
                ax.set_xticks([])
                ax.set_yticks([])
    if title:
        fig.suptitle(title, fontsize=10)
    return _save(plt, fig, path)


def read_metrics_csv(path) -> dict[str, list[tuple[int, float]]]:
    """Lightning CSVLogger metrics.csv -> {metric: [(epoch, value), ...]} (epoch-level values only); a cell that is
    no number raises a ValueError naming the file, its line and the column."""
    out: dict[str, list[tuple[int, float]]] = {}
    with open(path) as fh:
        reader = csv.DictReader(fh)
        for row in reader:
            epoch = row.get("epoch")
            if epoch in (None, ""):
                continue
            for key, val in row.items():
                if key in ("epoch", "step") or val in (None, "") or key.endswith("_step"):
                    continue
                try:
                    out.setdefault(key, []).append((int(float(epoch)), float(val)))
                except (TypeError, ValueError):
                    raise ValueError(f"{path}: line {reader.line_num}: {key} = {val!r} (epoch {epoch!r}) is not a "
                                     "number") from None
    return out


def history_parts(logs) -> list[Path]:
    """The CSV parts of a run's history in ``logs`` in the order they were written: ``metrics-0.csv``,
    ``metrics-1.csv``, ... (kept when the run was resumed) and then ``metrics.csv`` (a user's ``metrics-old.csv`` is
    no part)."""
    logs = Path(logs)
    parts = sorted((p for p in logs.glob("metrics-*.csv") if p.stem.split("-", 1)[1].isdigit()),
                   key=lambda p: int(p.stem.split("-", 1)[1]))
    return parts + [p for p in [logs / "metrics.csv"] if p.exists()]


def read_run_history(logs) -> dict[str, list[tuple[int, float]]]:
    """The epoch-level metrics of a run's ``logs`` directory over all its processes: the earlier parts
    (``metrics-0.csv``, ``metrics-1.csv``, ..., kept when a run is resumed) and then ``metrics.csv``, later rows of an
    epoch overriding earlier ones.  {metric: [(epoch, value), ...]} sorted by epoch; empty when there is no log."""
    history: dict[str, dict[int, float]] = {}
    for part in history_parts(logs):
        for key, rows in read_metrics_csv(part).items():
            history.setdefault(key, {}).update(dict(rows))
    return {key: sorted(rows.items()) for key, rows in history.items()}


def plot_curves(path, metrics: dict[str, list[tuple[int, float]]], title: str = "") -> Path:
    """Training loss and validation error per epoch on a log scale."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6.5, 4))
    for key, label in (("train_loss_epoch", "train loss (L2 + H1)"), ("train_rel_l2", "train rel. L2"),
                       ("val_rel_l2", "validation rel. L2"), ("test_rel_l2_selection", "test rel. L2 (selection)")):
        if key in metrics:
            e, v = zip(*sorted(dict(metrics[key]).items()))
            ax.semilogy(np.asarray(e) + 1, v, label=label, marker="." if len(e) < 30 else None)
    ax.set_xlabel("epoch")
    ax.set_ylabel("relative error")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    if title:
        ax.set_title(title, fontsize=10)
    return _save(plt, fig, path)
