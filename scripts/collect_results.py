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

import os
import re
import statistics
import sys
from pathlib import Path

from opformer.train.records import RecordError, read_json_object


class ResultsError(Exception):
    """A one-line error for the command line (a missing directory, an unreadable metrics.json)."""


def rows(roots, unfinished: list | None = None):
    """(run directory, metrics) of every training run under the roots, following links to directories (a group of
    runs may be a directory of links to them).  A root that is not a directory or a training record without a
    numeric test error raise ResultsError, a metrics.json that is not a JSON object RecordError.  Run directories without a metrics.json (an
    interrupted or unfinished training: logs or checkpoints but no metrics) are appended to ``unfinished``."""
    for root in roots:
        if not Path(root).is_dir():
            raise ResultsError(f"{root} is not a directory")
        found = []
        for d, dirs, files in os.walk(root, followlinks=True):
            if "metrics.json" in files:
                found.append(Path(d) / "metrics.json")
            elif unfinished is not None and ("checkpoints" in dirs or "logs" in dirs):
                unfinished.append(Path(d))
        for path in sorted(found):
            m = read_json_object(path)
            if "test_rel_l2" not in m or "epochs" not in m:
                continue  # an evaluation record, not a training run
            if not isinstance(m["test_rel_l2"], (int, float)) or isinstance(m["test_rel_l2"], bool):
                raise ResultsError(f"{path}: test_rel_l2 is {m['test_rel_l2']!r}, not a number")
            yield path.parent, m


def _collected(roots) -> list:
    """Every training run under ``roots`` (see ``rows``); none at all, or an unfinished run, is said on stderr."""
    unfinished: list[Path] = []
    found = list(rows(roots, unfinished))
    if unfinished:
        print(f"note: {len(unfinished)} run director{'y' if len(unfinished) == 1 else 'ies'} without metrics.json "
              f"(unfinished or interrupted) left out: {', '.join(str(u) for u in unfinished)}", file=sys.stderr)
    if not found:
        raise ResultsError(f"no training run (metrics.json with a test error) under {', '.join(map(str, roots))}")
    return found


def spread(roots, by_name: bool = False) -> int:
    """One row per run name (a run NAME-seedS counts as NAME): the test error's mean, sample std and every value.
    ``by_name``: runs of the same directory name under different roots (one root per seed) are one group."""
    groups: dict[str, list[tuple[str, float]]] = {}
    for run, m in _collected(roots):
        name = re.sub(r"-seed\d+$", "", run.name if by_name else str(run))
        groups.setdefault(name, []).append((_seed(run, m), m["test_rel_l2"]))
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
    try:
        return _main(argv)
    except (ResultsError, RecordError) as exc:
        sys.stdout.flush()
        print(f"error: {exc}", file=sys.stderr)
        return 2


def _main(argv=None) -> int:
    roots = (argv if argv is not None else sys.argv[1:]) or ["runs"]
    if any(r in ("-h", "--help") for r in roots):
        print(__doc__)
        return 0
    unknown = [r for r in roots if r.startswith("-") and r not in ("--compare", "--spread", "--by-name")]
    if unknown:
        print(f"error: unknown option {unknown[0]} (--help shows the usage)", file=sys.stderr)
        return 2
    flags = {r for r in roots if r.startswith("-")}  # the options in any order, before or after the directories
    roots = [r for r in roots if not r.startswith("-")]
    if "--compare" in flags:
        if len(roots) != 2 or flags - {"--compare"}:
            print("error: --compare takes two directories: --compare A B", file=sys.stderr)
            return 2
        return compare(roots[0], roots[1])
    if "--by-name" in flags and "--spread" not in flags:
        print("error: --by-name goes with --spread: --spread --by-name DIR...", file=sys.stderr)
        return 2
    if "--spread" in flags:
        return spread(roots or ["runs"], "--by-name" in flags)
    roots = roots or ["runs"]
    lines = []
    for run, m in _collected(roots):
        lines.append(f"| {run} | {m.get('preset', '-')} | {_noise(run)} | {m['test_rel_l2']:.4e} | "
                     f"{_num(m.get('val_rel_l2'), '.4e')} | {m.get('best_epoch')} / {m['epochs']} | "
                     f"{_num(m.get('seconds'), '.0f')} | {_num(m.get('parameters'), ',')} |")
    print("| run | preset | noise | test rel. L2 | val rel. L2 | best epoch / epochs | wall [s] | parameters |")
    print("|---|---|---|---|---|---|---|---|")
    print("\n".join(lines))
    return 0


def _num(value, spec: str) -> str:
    """``value`` formatted with ``spec``, or "-" where the record lacks it (an older or partial metrics.json)."""
    return format(value, spec) if isinstance(value, (int, float)) and not isinstance(value, bool) else "-"


def _config(run: Path) -> dict:
    """The run config ``opformer train`` wrote to the run's config.yaml ({} where there is none)."""
    cfg = run / "config.yaml"
    if not cfg.exists():
        return {}
    import yaml

    try:
        data = yaml.safe_load(cfg.read_text())
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        raise ResultsError(f"{cfg}: not a readable config ({str(exc).splitlines()[0]})") from None
    return data if isinstance(data, dict) else {}


def _noise(run: Path) -> str:
    options = _config(run).get("task_options")
    return str(options.get("noise", "")) if isinstance(options, dict) else ""


def _seed(run: Path, m: dict) -> str:
    """The run's seed: as its metrics.json records it (every training by `opformer train` does), else as its
    config.yaml does (train.seed; a metrics.json written or trimmed by other means), else "unknown"."""
    seed = m.get("seed")
    if not _is_count(seed):
        train = _config(run).get("train")
        seed = train.get("seed") if isinstance(train, dict) else None
    return str(seed) if _is_count(seed) else "unknown"


def _is_count(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


if __name__ == "__main__":
    try:
        code = main()
        sys.stdout.flush()
    except BrokenPipeError:  # the reader went away (`... | head`): stop quietly, as `opformer` does
        from opformer.cli import closed_pipe_status

        code = closed_pipe_status()
    raise SystemExit(code)
