"""Markdown table of the rollouts under a directory (written by scripts/reproduce_ns.sh)."""

from __future__ import annotations

import json
import sys
from pathlib import Path


def main(argv=None) -> int:
    root = Path((argv if argv is not None else sys.argv[1:] or ["runs/ns"])[0])
    print("| run | rollout | error at T | mean over t <= horizon | mean beyond horizon (OOD) | train s | parameters |")
    print("|---|---|---|---|---|---|---|")
    for r in sorted(root.glob("*/rollout-*/rollout.json")):
        m = json.loads(r.read_text())
        run = r.parent.parent
        tm = json.loads((run / "metrics.json").read_text()) if (run / "metrics.json").exists() else {}
        known = [e for e in m["rel_l2"] if e is not None]
        fmt = lambda v: "-" if v is None else f"{v:.3e}"  # noqa: E731
        print(f"| {run.name} | {m['mode']} | {fmt(known[-1] if known else None)} | {fmt(m['mean_rel_l2_in_horizon'])} "
              f"| {fmt(m['mean_rel_l2_beyond_horizon'])} | {tm.get('seconds', '-')} | {tm.get('parameters', '-')} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
