#!/usr/bin/env python
"""Plot the test error of runs grouped by setting: one point per seed, the mean and sample std per group.

    python scripts/plot_seed_spread.py --out docs/figures/darcy-small-grid-seeds.png \
        "17², FNO2d=runs/small-grid/17/fno-*" "17², GT=runs/small-grid/17/gt-enclr0.1-drop0-seed*" ...

Each argument is LABEL=GLOB[|GLOB...]: the run directories (each with a ``metrics.json``) that form one group.
Groups are drawn left to right in the order given; a label "PANEL, NAME" (split at its last comma) puts the group
in panel PANEL.
"""

from __future__ import annotations

import argparse
import glob
import statistics
import sys
from pathlib import Path

from opformer.atomic import replacing
from opformer.train.records import RecordError, read_json_object


def load_groups(specs: list[str]) -> dict[str, dict[str, list[float]]]:
    panels: dict[str, dict[str, list[float]]] = {}
    for spec in specs:
        label, eq, pattern = spec.partition("=")
        if not eq or not pattern:
            raise SystemExit(f"plot_seed_spread: {spec!r} is not LABEL=GLOB")
        values = []
        for part in pattern.split("|"):  # one of several alternatives that matches nothing is likely a typo
            if not glob.glob(part):
                print(f"plot_seed_spread: note: {part!r} (group {label!r}) matches nothing", file=sys.stderr)
        for run in sorted({r for part in pattern.split("|") for r in glob.glob(part)}):
            path = Path(run) / "metrics.json"
            if path.is_file():
                try:
                    value = read_json_object(path).get("test_rel_l2")
                except RecordError as exc:
                    raise SystemExit(f"plot_seed_spread: {exc}") from None
                if not isinstance(value, (int, float)) or isinstance(value, bool):
                    raise SystemExit(f"plot_seed_spread: {path} has no test_rel_l2 (not a finished training run?)")
                values.append(value)
        if not values:
            raise SystemExit(f"plot_seed_spread: no finished run matches {pattern!r}")
        panel, comma, name = label.rpartition(",")
        panels.setdefault(panel.strip() if comma else "", {})[name.strip() if comma else label] = values
    return panels


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("groups", nargs="+", help="LABEL=GLOB[|GLOB...]")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--ylabel", default="test relative L2")
    a = p.parse_args(argv)
    panels = load_groups(a.groups)

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(panels), figsize=(3.2 * len(panels), 3.4), squeeze=False)
    names = list(dict.fromkeys(name for groups in panels.values() for name in groups))
    color = {name: f"C{i % 10}" for i, name in enumerate(names)}  # a name has one colour in every panel
    for ax, (panel, groups) in zip(axes[0], panels.items()):
        ax.set_xlim(-0.6, len(groups) - 0.4)
        for i, (name, values) in enumerate(groups.items()):
            mean = statistics.fmean(values)
            std = statistics.stdev(values) if len(values) > 1 else 0.0
            ax.errorbar([i], [mean], yerr=[std], fmt="_", markersize=18, capsize=4, color="k")
            ax.plot([i] * len(values), values, "o", alpha=0.7, color=color[name])
            print(f"{panel} {name}: {mean:.4e} ± {std:.2e} ({', '.join(f'{v:.4e}' for v in values)})")
        ax.set_xticks(range(len(groups)), list(groups), rotation=30, ha="right", fontsize=8)
        ax.set_title(panel, fontsize=9)
        ax.grid(axis="y", alpha=0.3)
    axes[0][0].set_ylabel(a.ylabel)
    fig.tight_layout()
    a.out.parent.mkdir(parents=True, exist_ok=True)
    with replacing(a.out, "wb") as fh:
        fig.savefig(fh, format="png", dpi=120)
    print(f"wrote {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
