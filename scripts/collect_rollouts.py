"""Markdown table of the rollouts under a directory (written by scripts/reproduce_ns.sh or scripts/ns_models.sh),
and with ``--plot PNG`` the error against time of every run, one panel per rollout mode.

    python scripts/collect_rollouts.py runs/ns-models --plot docs/figures/ns-models-cpu.png
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from opformer.train.records import RecordError, read_json_object


class RolloutsError(Exception):
    """A one-line error for the command line."""


def _records(root: Path) -> list[tuple[Path, dict, dict]]:
    """(run directory, rollout record, training metrics or {}) of every ``RUN/rollout-*/rollout.json`` under
    ``root``, each checked for the fields the table and the figure read."""
    if not root.is_dir():
        raise RolloutsError(f"{root} is not a directory")
    out = []
    for r in sorted(root.glob("*/rollout-*/rollout.json")):
        m = read_json_object(r)
        missing = [k for k in ("mode", "times", "rel_l2", "mean_rel_l2_in_horizon", "mean_rel_l2_beyond_horizon")
                   if k not in m]
        if missing:
            raise RolloutsError(f"{r}: not an `opformer rollout` record (no {', '.join(missing)})")
        if not isinstance(m["rel_l2"], list) or not isinstance(m["times"], list) or len(m["rel_l2"]) != len(m["times"]):
            raise RolloutsError(f"{r}: times and rel_l2 are not lists of one length")
        run = r.parent.parent
        tm = read_json_object(run / "metrics.json") if (run / "metrics.json").exists() else {}
        out.append((run, m, tm))
    if not out:
        raise RolloutsError(f"no rollout under {root} (RUN/rollout-MODE/rollout.json, written by `opformer rollout`)")
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("root", nargs="?", default="runs/ns")
    p.add_argument("--plot", metavar="PNG", help="write the error-against-time figure here")
    args = p.parse_args(argv)
    try:
        found = _records(Path(args.root))
    except (RolloutsError, RecordError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    records = []
    print("| run | rollout | error at T | mean over t <= horizon | mean beyond horizon (OOD) | train s | parameters |")
    print("|---|---|---|---|---|---|---|")
    for run, m, tm in found:
        records.append((run.name, m))
        known = [e for e in m["rel_l2"] if e is not None]
        fmt = lambda v: "-" if v is None else f"{v:.3e}"  # noqa: E731
        print(f"| {run.name} | {m['mode']} | {fmt(known[-1] if known else None)} | {fmt(m['mean_rel_l2_in_horizon'])} "
              f"| {fmt(m['mean_rel_l2_beyond_horizon'])} | {tm.get('seconds', '-')} | {tm.get('parameters', '-')} |")
    if args.plot:
        _plot(Path(args.plot), records)
        print(f"wrote {args.plot}")
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
    from opformer.atomic import replacing

    path.parent.mkdir(parents=True, exist_ok=True)
    with replacing(path, "wb") as fh:  # a stopped or failed write leaves the figure that was there
        fig.savefig(fh, format="png", dpi=100)
    plt.close(fig)


if __name__ == "__main__":
    raise SystemExit(main())
