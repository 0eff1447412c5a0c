#!/usr/bin/env python
"""Print a markdown table of the runs under a directory (every metrics.json below it).

    python scripts/collect_results.py runs/table2b runs/table3
    python scripts/collect_results.py --spread runs/table2a    # runs NAME, NAME-seed2, ...: mean ± std per NAME
    python scripts/collect_results.py --spread --by-name runs/d85 runs/d85-s2 runs/d85-s3   # one row per run name
    python scripts/collect_results.py --compare runs/ref-burgers runs/seeds   # every run under A against every one under B

``--compare A B`` prints each group's test errors (mean, sample std, median) and the exact two-sided Mann-Whitney U
test of "the two groups' errors come from the same distribution": with a handful of seeds a rank test is what such
counts support (no normality assumed); its p-value is the chance of a rank separation at least as large as the one
seen if the groups did not differ.
"""

from __future__ import annotations

import json
import os
import re
import statistics
import sys
from pathlib import Path


def rows(roots):
    """(run directory, metrics) of every training run under the roots, following links to directories (a group of
    runs may be a directory of links to them)."""
    for root in roots:
        found = [Path(d) / "metrics.json" for d, _, files in os.walk(root, followlinks=True) if "metrics.json" in files]
        for path in sorted(found):
            m = json.loads(path.read_text())
            if "test_rel_l2" not in m or "epochs" not in m:
                continue  # an evaluation record, not a training run
            yield path.parent, m


def spread(roots, by_name: bool = False) -> int:
    """One row per run name (a run NAME-seedS counts as NAME): the test error's mean, sample std and every value.
    ``by_name``: runs of the same directory name under different roots (one root per seed) are one group."""
    groups: dict[str, list[tuple[str, float]]] = {}
    for run, m in rows(roots):
        name = re.sub(r"-seed\d+$", "", run.name if by_name else str(run))
        groups.setdefault(name, []).append((str(m.get("seed")), m["test_rel_l2"]))
    print("| runs | seeds | test rel. L2 mean | std | values |")
    print("|---|---|---|---|---|")
    for name, vals in sorted(groups.items()):
        xs = [v for _, v in vals]
        std = statistics.stdev(xs) if len(xs) > 1 else float("nan")
        print(f"| {name} | {', '.join(s for s, _ in vals)} | {statistics.fmean(xs):.4e} | {std:.2e} | "
              f"{', '.join(f'{x:.4e}' for x in xs)} |")
    return 0


def compare(root_a: str, root_b: str) -> int:
    """Every run under ``root_a`` against every run under ``root_b``: the test errors and the exact rank test."""
    from scipy.stats import mannwhitneyu

    groups = []
    for root in (root_a, root_b):
        if not Path(root).is_dir():
            print(f"error: --compare: {root} is not a directory", file=sys.stderr)
            return 2
        xs = [m["test_rel_l2"] for _, m in rows([root])]
        if not xs:
            print(f"error: --compare: no training run (metrics.json with a test error) under {root}", file=sys.stderr)
            return 2
        groups.append(xs)
    print("| runs under | runs | test rel. L2 mean | std | median | values |")
    print("|---|---|---|---|---|---|")
    for root, xs in zip((root_a, root_b), groups):
        std = statistics.stdev(xs) if len(xs) > 1 else float("nan")
        print(f"| {root} | {len(xs)} | {statistics.fmean(xs):.4e} | {std:.2e} | {statistics.median(xs):.4e} | "
              f"{', '.join(f'{x:.4e}' for x in sorted(xs))} |")
    res = mannwhitneyu(groups[0], groups[1], alternative="two-sided", method="exact")
    n_pairs = len(groups[0]) * len(groups[1])
    print(f"\nMann-Whitney U = {res.statistic:g} of {n_pairs} pairs (a run of the first group has the lower error "
          f"in {n_pairs - res.statistic:g} of them); exact two-sided p = {res.pvalue:.3f}")
    return 0


def main(argv=None) -> int:
    roots = (argv if argv is not None else sys.argv[1:]) or ["runs"]
    if roots[0] in ("-h", "--help"):
        print(__doc__)
        return 0
    unknown = [r for r in roots if r.startswith("-") and r not in ("--compare", "--spread", "--by-name")]
    if unknown:
        print(f"error: unknown option {unknown[0]} (--help shows the usage)", file=sys.stderr)
        return 2
    if roots and roots[0] == "--compare":
        if len(roots) != 3:
            print("error: --compare takes two directories: --compare A B", file=sys.stderr)
            return 2
        return compare(roots[1], roots[2])
    if roots and roots[0] == "--spread":
        by_name = roots[1:2] == ["--by-name"]
        return spread(roots[1 + by_name:] or ["runs"], by_name)
    print("| run | preset | noise | test rel. L2 | val rel. L2 | best epoch / epochs | wall [s] | parameters |")
    print("|---|---|---|---|---|---|---|---|")
    for run, m in rows(roots):
        cfg = run / "config.yaml"
        noise = ""
        if cfg.exists():
            import yaml

            noise = str(yaml.safe_load(cfg.read_text()).get("task_options", {}).get("noise", ""))
        print(f"| {run} | {m['preset']} | {noise} | {m['test_rel_l2']:.4e} | {m['val_rel_l2']:.4e} | "
              f"{m.get('best_epoch')} / {m['epochs']} | {m['seconds']:.0f} | {m['parameters']:,} |")
    return 0


if __name__ == "__main__":
    try:
        code = main()
        sys.stdout.flush()
    except BrokenPipeError:  # the reader went away (`... | head`): stop quietly, as `opformer` does
        from opformer.cli import closed_pipe_status

        code = closed_pipe_status()
    raise SystemExit(code)
