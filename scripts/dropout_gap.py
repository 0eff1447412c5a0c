"""How far a trained model's error with dropout off (evaluation) is from its error with dropout on (training), and
which dropout makes the difference.

A network trained with dropout is evaluated without it.  Inverted dropout keeps each activation's mean but not its
spread, so a network can come to depend on the noise: its deterministic output is then worse than its output with
dropout on, on the training data as on the validation data.  That is not overfitting (which would make the
training error low in both modes), and a longer or differently scheduled training does not aim at it.  This
script measures it for a finished run, on the run's own data split: the relative L2 error with every dropout off,
with all on (the mean over ``--masks`` random masks, and the error of the mean prediction), and with only one
group of dropout modules on at a time: each role (the same module in every layer) and each layer.

    python scripts/dropout_gap.py runs/burgers-gt                      # validation split, every sample
    python scripts/dropout_gap.py runs/burgers-gt --split train --samples 200 --masks 8
    python scripts/dropout_gap.py runs/ref-burgers/gt-s5 --reference   # a run of scripts/reference_burgers.py

``--reference`` reads a checkpoint of the paper's own Burgers network (trained by scripts/reference_burgers.py) into
our Transformer1d, which is the same function with its dropouts in the same places and order
(tests/bench/test_reference_burgers.py), so the two networks are measured alike.  docs/results.md (Table 2a) has
what it found.
"""

from __future__ import annotations

import argparse
import re
import sys
import tempfile
from pathlib import Path

import torch

#: names for the dropout roles of opformer's encoder layer (the module's name with the layer index left out)
ROLES = {"drop1": "attention branch (residual)", "drop2": "FFN branch (residual)", "ffn.net.2": "FFN hidden layer"}


class GapError(Exception):
    """A one-line error for the command line."""


def _checkpoint(run: Path) -> Path:
    if run.is_dir():
        for name in ("best.ckpt", "last.ckpt"):
            if (run / "checkpoints" / name).is_file():
                return run / "checkpoints" / name
        raise GapError(f"{run}: no checkpoints/best.ckpt or last.ckpt (a training's run directory is expected)")
    if not run.is_file():
        raise GapError(f"{run}: no such file or directory")
    return run


def _reference_as_ours(ckpt: Path, tmp: Path) -> Path:
    """The reference network's checkpoint ``ckpt`` with its weights renamed into our Transformer1d's, in ``tmp``."""
    from opformer.data.readers import safe_torch_load

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from reference_burgers import ours_from_reference

    ck = safe_torch_load(ckpt, GapError, refused="refused: the file holds pickled Python objects (never run here)",
                         unreadable="not a readable checkpoint")
    state = ck.get("state_dict", {}) if isinstance(ck, dict) else {}
    prefix = "operator.model.net."
    ref = {k[len(prefix):]: v for k, v in state.items() if k.startswith(prefix)}
    if not ref:
        raise GapError(f"{ckpt}: not a checkpoint of scripts/reference_burgers.py (no reference network in it)")
    try:
        ours = ours_from_reference(ref, ck["opformer"]["model"])
    except KeyError as exc:
        raise GapError(f"{ckpt}: the reference network's weights lack {exc}") from None
    except RuntimeError as exc:  # a configuration the weight map does not cover (several heads)
        raise GapError(f"{ckpt}: the reference network's weights do not map onto ours ({str(exc).splitlines()[0]})"
                       ) from None
    ck["state_dict"] = {**{k: v for k, v in state.items() if not k.startswith(prefix)},
                        **{"operator.model." + k: v for k, v in ours.items()}}
    out = tmp / "as-ours.ckpt"
    torch.save(ck, out)
    return out


def _data(predictor, split: str, samples: int):
    """Inputs, coordinates and targets of the first ``samples`` items of the run's ``split``."""
    from opformer.config import DataConfig, check_section
    from opformer.train.run import ensure_files

    run_cfg = predictor.run_config
    if run_cfg is None:
        raise GapError("this model does not name its run's data (a saved model, not a training's run)")
    op = predictor.operator
    norms = {k: v for k, v in (("input", op.input_normalizer), ("target", op.target_normalizer)) if v is not None}
    dcfg = check_section(DataConfig, dict(run_cfg["data"]), "data")
    files = ensure_files(predictor.task, dcfg, predictor.options)
    ds = predictor.task.load(dcfg, predictor.options, files, splits=(split,), normalizers=norms).datasets[split]
    n = len(ds) if samples <= 0 else min(samples, len(ds))
    items = [ds[i] for i in range(n)]
    if any(it.get("lead_time") is not None for it in items):
        raise GapError("time-dependent models are not covered (their inputs need a lead time)")
    return (torch.stack([it["input"] for it in items]), items[0]["coords"][None],
            torch.stack([it["target"] for it in items]))


def groups(model: torch.nn.Module) -> dict[str, list[torch.nn.Module]]:
    """Every active dropout module (``nn.Dropout`` with p > 0) of ``model``, grouped: all, each role, each layer."""
    drops = {n: m for n, m in model.named_modules() if isinstance(m, torch.nn.Dropout) and m.p > 0}
    out: dict[str, list] = {"all": list(drops.values())} if drops else {}
    roles: dict[str, list] = {}
    layers: dict[str, list] = {}
    for name, m in drops.items():
        found = re.search(r"^(.*?\.(\d+))\.(.+)$", name)
        if found is None:
            roles.setdefault(name, []).append(m)
            continue
        role = found.group(3)
        roles.setdefault(f"{ROLES.get(role, role)}, every layer", []).append(m)
        layers.setdefault(f"layer {found.group(2)}, all its dropouts", []).append(m)
    return {**out, **roles, **layers}


def measure(model, x, coords, y, modules, masks: int, seed: int, batch: int = 32) -> tuple[float, float]:
    """(mean error over ``masks`` draws, error of the mean prediction) with only ``modules`` active."""
    from opformer.tasks.losses import rel_l2

    model.eval()
    for m in modules:
        m.train()
    torch.manual_seed(seed)
    draws = masks if modules else 1
    with torch.no_grad():
        preds = torch.stack([torch.cat([model(x[s:s + batch], coords, None) for s in range(0, len(x), batch)])
                             for _ in range(draws)])
    model.eval()
    errs = torch.stack([rel_l2(p, y).double() for p in preds])  # (draws, samples)
    return errs.mean().item(), rel_l2(preds.mean(0), y).double().mean().item()


def branch_sizes(model, x, coords, batch: int = 32) -> list[tuple[float, float, float]]:
    """Per encoder layer of opformer (``EncoderLayer``): the mean over points of the Euclidean norm of the layer's
    input (the residual stream), of its attention branch and of its FFN branch, dropout off."""
    from opformer.nn.encoder import EncoderLayer

    layers = [m for m in model.modules() if isinstance(m, EncoderLayer)]
    sums = [[0.0, 0.0, 0.0] for _ in layers]

    def size(t):
        return t.norm(dim=-1).mean().item() * t.shape[0]

    def branches(i, layer, args):  # the two branches of the layer's forward, each on its own
        x, pos, weights = (list(args) + [None, None])[:3]
        lead = args[3] if len(args) > 3 and layer.conditioned else None
        pre = layer.norm_scheme == "pre"
        a = layer.attn(layer._norm(layer.ln1, x, lead) if pre else x, pos, weights, lead_time=lead)
        y = x + a
        if layer.norm_scheme == "regular":
            y = layer._norm(layer.ln1, y, lead)
        f = layer.ffn(layer._norm(layer.ln2, y, lead) if pre else y)
        for j, t in enumerate((x, a, f)):
            sums[i][j] += size(t)

    hooks = [layer.register_forward_pre_hook(lambda mod, args, i=i: branches(i, mod, args))
             for i, layer in enumerate(layers)]
    model.eval()
    try:
        with torch.no_grad():
            for s in range(0, len(x), batch):
                model(x[s:s + batch], coords, None)
    finally:
        for h in hooks:
            h.remove()
    return [tuple(v / len(x) for v in row) for row in sums]


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="dropout_gap.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("run", help="a training's run directory (its best checkpoint) or a checkpoint file")
    parser.add_argument("--split", default="val", choices=("val", "train", "test"), help="data split (default val)")
    parser.add_argument("--samples", type=int, default=0, help="first N samples of the split (default: all)")
    parser.add_argument("--masks", type=int, default=4, help="random masks averaged per setting (default 4)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the masks (default 0)")
    parser.add_argument("--reference", action="store_true",
                        help="the checkpoint holds the paper's network (scripts/reference_burgers.py)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    args = parser.parse_args(argv)
    if args.masks < 1:
        parser.error("--masks must be at least 1")
    torch.set_num_threads(max(1, args.threads))
    import opformer
    from opformer.pde.errors import DataError
    from opformer.tasks.artifact import LoadError

    try:
        with tempfile.TemporaryDirectory() as tmp:
            ckpt = _checkpoint(Path(args.run))
            if args.reference:
                ckpt = _reference_as_ours(ckpt, Path(tmp))
            try:
                predictor = opformer.load(ckpt)
            except LoadError as exc:
                hint = " (a run of scripts/reference_burgers.py needs --reference)" if "reference" in str(
                    exc).lower() or (Path(args.run) / "REFERENCE_NETWORK.txt").exists() else ""
                raise GapError(f"{exc}{hint}") from None
            except RuntimeError as exc:  # weights that do not fit the model the checkpoint describes
                hint = " (a run of scripts/reference_burgers.py needs --reference)" if (
                    Path(args.run) / "REFERENCE_NETWORK.txt").exists() else ""
                raise GapError(f"{ckpt}: the weights do not fit its model ({str(exc).splitlines()[0]}){hint}") from None
            model = predictor.operator
            found = groups(model)
            if not found:
                raise GapError("this model has no active dropout (every nn.Dropout has p = 0): nothing to compare")
            try:
                x, coords, y = _data(predictor, args.split, args.samples)
            except DataError as exc:  # the run's data file moved or deleted, or not the file the run was trained on
                raise GapError(f"the run's data: {str(exc).splitlines()[0]}") from None
    except GapError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    base, _ = measure(model, x, coords, y, [], 1, args.seed)
    print(f"{ckpt if not args.reference else args.run}: {args.split} split, {len(x)} samples, "
          f"{args.masks} masks per setting (seed {args.seed})")
    print(f"{'dropout on in':44s} {'rel. L2':>10s} {'/ off':>7s}  {'mean prediction':>15s}")
    print(f"{'none (evaluation mode)':44s} {base:10.4e} {1.0:7.2f}")
    for label, modules in found.items():
        err, mean_pred = measure(model, x, coords, y, modules, args.masks, args.seed)
        print(f"{label:44s} {err:10.4e} {err / base:7.2f}  {mean_pred:15.4e}")
    sizes = branch_sizes(model, x, coords)
    if sizes:  # a dropout's noise grows with the branch it acts on
        print("mean norm per point, dropout off:  layer: residual stream in / attention branch / FFN branch")
        for i, (stream, attn, ffn) in enumerate(sizes):
            print(f"  layer {i}: {stream:.3g} / {attn:.3g} / {ffn:.3g}   (attention / stream {attn / stream:.3f})")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except BrokenPipeError:
        from opformer.cli import closed_pipe_status

        sys.exit(closed_pipe_status())
