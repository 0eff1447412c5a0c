#!/usr/bin/env python
"""Turn a finished training run into a bundled model under ``opformer/pretrained/NAME`` (docs/pretrained.md).

    python scripts/make_pretrained.py RUN_DIR NAME --description TEXT \
        --data-cmd "opformer data ..." [--data-cmd ...] --train-cmd "opformer train ..." \
        --check-file FILE.h5 --start I --stop J [--stride S] [--keys IN,OUT]

RUN_DIR is an ``opformer train --out`` directory (``checkpoints/best.ckpt``, ``metrics.json``).  The check samples are
the samples ``[I, J)`` of the data set whose recipe is stored in ``FILE.h5`` (any shard or the whole file: only its
recipe is read), strided by S: the script regenerates them from the recipe, measures the shipped weights on them and
records the error in ``card.json``.  When they are the run's own test samples (the usual case), the regenerated error
must agree with the run's recorded ``test_rel_l2`` to 1e-4 relative, or nothing is written.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import sys
import tempfile
from pathlib import Path

import h5py

from opformer import load
from opformer.tasks.artifact import LoadError
from opformer.tasks.pretrained import PRETRAINED_DIR, check_samples, mean_rel_l2
from opformer.train.records import RecordError, read_json_object


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


class InputError(Exception):
    """A one-line error about the command line's inputs."""


def _inputs(a) -> tuple[Path, dict, dict]:
    """The run's best checkpoint, its metrics and the check file's recipe, each checked before anything is made."""
    if a.stride < 1 or a.start < 0 or a.stop <= a.start:
        raise InputError(f"--start {a.start} --stop {a.stop} --stride {a.stride}: need 0 <= start < stop, stride >= 1")
    if not a.run_dir.is_dir():
        raise InputError(f"RUN_DIR {a.run_dir}: no such directory")
    ckpt = a.run_dir / "checkpoints" / "best.ckpt"
    metrics_path = a.run_dir / "metrics.json"
    if not ckpt.is_file() or not metrics_path.is_file():
        raise InputError(f"RUN_DIR {a.run_dir}: no checkpoints/best.ckpt and metrics.json (an `opformer train --out` "
                         "directory of a finished run is expected; an interrupted run has no metrics.json)")
    try:
        metrics = read_json_object(metrics_path)
    except RecordError as exc:
        raise InputError(str(exc)) from None
    if not a.check_file.is_file():
        raise InputError(f"--check-file {a.check_file}: no such file")
    try:
        with h5py.File(a.check_file, "r") as f:
            recipe = json.loads(f.attrs["recipe"])
    except KeyError:
        raise InputError(f"--check-file {a.check_file}: no recipe in it (not a file made by `opformer data`)") from None
    except (OSError, ValueError, TypeError) as exc:
        raise InputError(f"--check-file {a.check_file}: not a readable HDF5 file with a recipe "
                         f"({str(exc).splitlines()[0]})") from None
    return ckpt, metrics, recipe


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("run_dir", type=Path)
    p.add_argument("name")
    p.add_argument("--description", required=True)
    p.add_argument("--data-cmd", action="append", default=[], help="a command that generates the data (repeat)")
    p.add_argument("--train-cmd", required=True, help="the command that trained the run")
    p.add_argument("--check-file", type=Path, required=True, help="an HDF5 file made by `opformer data` (its recipe)")
    p.add_argument("--start", type=int, required=True)
    p.add_argument("--stop", type=int, required=True)
    p.add_argument("--stride", type=int, default=1)
    p.add_argument("--keys", default=None, help="input,target keys (default: the model's)")
    p.add_argument("--not-the-test-set", action="store_true",
                   help="the check samples are not the run's test samples: skip the agreement check")
    p.add_argument("--workers", type=int, default=1)
    p.add_argument("--replace", action="store_true",
                   help="replace a bundled model of that name (opformer/pretrained/NAME), else refused")
    a = p.parse_args(argv)
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", a.name):  # a folder of its own under opformer/pretrained
        print(f"make_pretrained: error: NAME {a.name!r}: letters, digits, '.', '_' and '-' only, starting with a "
              "letter or digit (it names a folder under opformer/pretrained)", file=sys.stderr)
        return 2
    if (PRETRAINED_DIR / a.name).exists() and not a.replace:
        print(f"make_pretrained: error: {PRETRAINED_DIR / a.name} exists (a bundled model of that name); pass "
              "--replace to replace it, or choose another name", file=sys.stderr)
        return 2

    try:
        ckpt, metrics, recipe = _inputs(a)
    except InputError as exc:
        print(f"make_pretrained: error: {exc}", file=sys.stderr)
        return 2
    try:
        model = load(ckpt)
    except (LoadError, RuntimeError) as exc:  # not an opformer checkpoint, or weights that do not fit its model
        print(f"make_pretrained: error: {ckpt}: {str(exc).splitlines()[0]}", file=sys.stderr)
        return 2
    keys = a.keys.split(",") if a.keys else list(model.artifact["keys"])
    check = {"recipe": recipe, "start": a.start, "stop": a.stop, "stride": a.stride, "keys": keys}
    with tempfile.TemporaryDirectory(prefix="opformer-bundle-") as tmp:
        x, y = check_samples(check, Path(tmp), a.workers)
        staged = Path(tmp) / a.name
        model.save_pretrained(staged)
        err = mean_rel_l2(load(staged).predict(x), y)  # the shipped weights, as a user loads them
        check["test_rel_l2"] = err
        ref = metrics.get("test_rel_l2")
        print(f"{a.name}: check error {err:.6e} on samples [{a.start}, {a.stop}) of the recipe; the run's test "
              f"error {ref}")
        if not a.not_the_test_set and ref is not None and abs(err - ref) > 1e-4 * abs(ref):
            print(f"error: the regenerated samples give {err:.6e}, the run recorded {ref:.6e}: not its test set?",
                  file=sys.stderr)
            return 1
        keep = ("val_rel_l2", "test_rel_l2", "epochs", "best_epoch", "seconds", "parameters", "seed", "resolution",
                "n_train", "n_val", "n_test", "torch", "version", "lr_halvings", "selection")
        card = {
            "name": a.name,
            "description": a.description,
            "task": model.artifact["task"],
            "model": model.artifact["model"].get("name"),
            "parameters": metrics.get("parameters"),
            "data": a.data_cmd,
            "train": a.train_cmd,
            "metrics": {**{k: metrics[k] for k in keep if k in metrics}, "machine": cpu_model()},
            "check": check,
        }
        (staged / "card.json").write_text(json.dumps(card, indent=2) + "\n")
        dest = PRETRAINED_DIR / a.name
        # copied beside the destination first, then swapped in: a failed copy leaves the bundled model that was there
        partial, old = dest.with_name(f".{a.name}.partial"), dest.with_name(f".{a.name}.old")
        for leftover in (partial, old):
            if leftover.exists():
                shutil.rmtree(leftover)
        shutil.copytree(staged, partial)
        if dest.exists():
            os.replace(dest, old)
        os.replace(partial, dest)
        if old.exists():
            shutil.rmtree(old)
    size = sum(f.stat().st_size for f in dest.iterdir()) / 2**20
    print(f"wrote {dest} ({size:.1f} MiB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
