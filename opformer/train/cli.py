"""``opformer train`` and ``opformer eval`` (argument parsing only; the work is in :mod:`opformer.train.run`)."""

from __future__ import annotations

import argparse
import sys


def register(sub) -> None:
    p = sub.add_parser(
        "train",
        help="train an operator learner from a preset",
        description=(
            "Train PRESET (a name from `opformer train --list` or a YAML file). Any config field can be set with "
            "--FIELD VALUE, by its name (--lr 5e-4, --norm-scheme regular) or dotted path (--train.lr 5e-4)."
        ),
    )
    p.add_argument("preset", nargs="?", help="preset name or YAML file")
    p.add_argument("--list", action="store_true", help="list the presets and exit")
    p.add_argument("--data", help="training data file (.h5/.mat/.npz/.pt); default: generate and cache")
    p.add_argument("--test-data", help="test data file (default: the preset's)")
    p.add_argument("--epochs", type=int)
    p.add_argument("--seed", type=int)
    p.add_argument("--out", help="output directory (default runs/PRESET)")
    p.add_argument("--resume", action="store_true", help="continue the run in --out from its last checkpoint")
    p.add_argument("--overwrite", action="store_true", help="replace the run in --out")
    p.add_argument("--devices", help="number of devices (processes) per node, e.g. 2")
    p.add_argument("--accelerator", help="cpu, gpu or auto")
    p.add_argument("--strategy", help="auto or ddp")
    p.add_argument("--precision", help="32-true (default) or bf16-mixed")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--print-config", action="store_true", help="print the resolved config and exit")
    p.set_defaults(func=_train, accepts_extra=True)

    e = sub.add_parser("eval", help="evaluate a checkpoint on a test set, at any resolution")
    e.add_argument("checkpoint")
    e.add_argument("--data", help="data file holding the test samples (default: the run's data)")
    e.add_argument("--resolution", type=int, help="evaluation grid (e.g. 2048 or 8192 for Burgers)")
    e.add_argument("--batch-size", type=int)
    e.add_argument("--out", help="output directory (default: RUN/eval-RESOLUTION)")
    e.set_defaults(func=_eval)


def register_prepare(data_sub) -> None:
    p = data_sub.add_parser("prepare", help="generate and cache the default data files of training presets",
                            description="Generate (once) the default data files that `opformer train PRESET` uses and "
                                        "print their paths; presets with the same recipe share the cached files "
                                        "($OPFORMER_DATA or ~/.cache/opformer/data).  Interrupted generation resumes.")
    p.add_argument("presets", nargs="+", help="preset names (opformer train --list) or YAML files")
    p.add_argument("--workers", type=int, default=None, help="worker processes (default: all local cores)")
    p.set_defaults(func=_run_prepare)


def _run_prepare(args) -> int:
    from ..pde import DataError
    from .config import ConfigError, load_preset, resolve
    from .data_setup import resolve_paths

    for name in args.presets:
        try:
            cfg = resolve(load_preset(name))
            if cfg["data"]["path"] is not None:
                print(f"{name}: uses the given file {cfg['data']['path']}, nothing to generate")
                continue
            cfg["data"]["workers"] = args.workers
            train, test = resolve_paths(cfg)
        except (ConfigError, DataError, ValueError) as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        except KeyboardInterrupt:
            print("interrupted: the finished samples are kept; run the same command to resume", file=sys.stderr)
            return 130
        print(f"{name}: train {train}" + (f"\n{' ' * len(name)}  test  {test}" if test else ""))
    return 0


def _parse_extra(extra: list[str]) -> dict:
    from .config import ConfigError, parse_value

    out, i = {}, 0
    while i < len(extra):
        tok = extra[i]
        if not tok.startswith("--") or tok == "--":
            raise ConfigError(f"unexpected argument {tok!r}; fields are set as --FIELD VALUE")
        key = tok[2:]
        if "=" in key:
            key, val = key.split("=", 1)
            i += 1
        else:
            if i + 1 >= len(extra) or extra[i + 1].startswith("--"):
                raise ConfigError(f"field --{key} needs a value")
            val = extra[i + 1]
            i += 2
        out[key] = parse_value(val)
    return out


def _fail(msg: str) -> int:
    print(f"opformer: error: {msg}", file=sys.stderr)
    return 2


def _train(args: argparse.Namespace) -> int:
    from .config import ConfigError, apply_overrides, list_presets, load_preset, resolve

    if args.list or not args.preset:
        print("presets:\n  " + "\n  ".join(list_presets()))
        return 0 if args.list else 2
    try:
        cfg = resolve(load_preset(args.preset))
        overrides = _parse_extra(args.extra)
        named = {
            "data.path": args.data,
            "data.test_path": args.test_data,
            "train.epochs": args.epochs,
            "train.seed": args.seed,
            "train.devices": None if args.devices is None else _int_or_str(args.devices),
            "train.accelerator": args.accelerator,
            "train.strategy": args.strategy,
            "train.precision": args.precision,
        }
        overrides.update({k: v for k, v in named.items() if v is not None})
        cfg = resolve(apply_overrides(cfg, overrides))
    except (ConfigError, ValueError) as exc:
        return _fail(str(exc))
    if args.print_config:
        import yaml

        print(yaml.safe_dump(cfg, sort_keys=False))
        return 0
    _quiet_lightning()
    from ..data import DataError
    from .module import DivergenceError
    from .run import RunDirError, train

    out = args.out or f"runs/{cfg['name']}"
    try:
        metrics = train(cfg, out, resume=args.resume, overwrite=args.overwrite, progress=not args.no_progress)
    except (RunDirError, DivergenceError, DataError, ConfigError) as exc:
        return _fail(str(exc))
    if metrics.get("plots") is not None:
        print(
            f"\n{cfg['name']}: test relative L2 = {metrics['test_rel_l2']:.4e} "
            f"(validation {metrics['val_rel_l2']:.4e}, {metrics['epochs']} epochs, {metrics['seconds']:.0f} s, "
            f"{metrics['parameters']:,} parameters)\n"
            f"metrics: {out}/metrics.json\nplots:   " + "\n         ".join(f"{out}/{p}" for p in metrics["plots"])
        )
    return 0


def _quiet_lightning() -> None:
    """Keep Lightning's banner lines (accelerator tips, advertisements) and a known deprecation notice off the
    terminal; warnings and errors still show."""
    import logging
    import warnings

    import lightning.pytorch  # noqa: F401  (it sets its loggers to INFO when imported)

    for name in ("lightning.pytorch", "lightning.fabric"):
        logging.getLogger(name).setLevel(logging.WARNING)
    warnings.filterwarnings("ignore", message=r".*isinstance\(treespec, LeafSpec\).*")


def _int_or_str(v: str):
    try:
        return int(v)
    except ValueError:
        return v


def _eval(args: argparse.Namespace) -> int:
    _quiet_lightning()
    from ..data import DataError
    from .config import ConfigError
    from .run import evaluate

    try:
        m = evaluate(args.checkpoint, data=args.data, resolution=args.resolution, out=args.out,
                     batch_size=args.batch_size)
    except (FileNotFoundError, DataError, ConfigError) as exc:
        return _fail(str(exc))
    print(f"test relative L2 at resolution {m['resolution']}: {m['test_rel_l2']:.4e} ({m['n_test']} samples)")
    print("plots: " + ", ".join(m["plots"]))
    return 0
