"""Markdown table of the rollouts under a directory (written by scripts/reproduce_ns.sh or scripts/ns_models.sh),
and with ``--plot PNG`` the error against time of every run, one panel per rollout mode.

    python scripts/collect_rollouts.py runs/ns-models --plot docs/figures/ns-models-cpu.png
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("root", nargs="?", default="runs/ns")
    p.add_argument("--plot", metavar="PNG", help="write the error-against-time figure here")
    args = p.parse_args(argv)
    root = Path(args.root)
    records = []
    print("| run | rollout | error at T | mean over t <= horizon | mean beyond horizon (OOD) | train s | parameters |")
    print("|---|---|---|---|---|---|---|")
    for r in sorted(root.glob("*/rollout-*/rollout.json")):
        m = json.loads(r.read_text())
        run = r.parent.parent
        tm = json.loads((run / "metrics.json").read_text()) if (run / "metrics.json").exists() else {}
        records.append((run.name, m))
        known = [e for e in m["rel_l2"] if e is not None]
        fmt = lambda v: "-" if v is None else f"{v:.3e}"  # noqa: E731
        print(f"| {run.name} | {m['mode']} | {fmt(known[-1] if known else None)} | {fmt(m['mean_rel_l2_in_horizon'])} "
              f"| {fmt(m['mean_rel_l2_beyond_horizon'])} | {tm.get('seconds', '-')} | {tm.get('parameters', '-')} |")
    if args.plot and records:
        _plot(Path(args.plot), records)
    return 0


def _plot(path: Path, records) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    modes = sorted({m["mode"] for _, m in records})
    fig, axes = plt.subplots(1, len(modes), figsize=(5.5 * len(modes), 4.2), squeeze=False, sharey=True)
    for ax, mode in zip(axes[0], modes):
        horizon = None
        for name, m in records:
            if m["mode"] != mode:
                continue
            pts = [(t, e) for t, e in zip(m["times"], m["rel_l2"]) if e is not None]
            ax.semilogy([t for t, _ in pts], [e for _, e in pts], marker=".", label=name)
            horizon = m.get("training_horizon", horizon)
        if horizon is not None:
            ax.axvline(horizon, color="k", ls="--", lw=0.8)
        ax.set_title(f"{mode} rollout")
        ax.set_xlabel("t (dashed: training horizon)")
        ax.grid(True, which="both", alpha=0.3)
    axes[0][0].set_ylabel("test relative L2")
    axes[0][-1].legend(fontsize=7, ncol=2)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)


if __name__ == "__main__":
    raise SystemExit(main())
