#!/usr/bin/env python
"""How much each attention layer of a trained 2D attention model contributes, on its run's own test samples.

    python scripts/attention_share.py runs/d85/gt-enclr0.1 runs/d85/ft-d64-drop0-lr1e-3 --samples 4

For every encoder layer, with a = the layer's attention output (before it is added to the residual stream x):
``share`` = |a| / |x| (Frobenius norms over the samples, tokens and features), and ``varying`` = |a - mean_tokens(a)|
/ |a|, the part of a that differs between tokens (the rest is the same shift at every token).  An attention that
the training never brought into use has a small share, most of it a constant shift (docs/results.md, "The
Fourier-type model at 85²").
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch


def shares(run: Path, samples: int) -> list[tuple[float, float]]:
    import opformer
    from opformer.data.datasets import stack_samples
    from opformer.train.run import _test_set

    ckpt = run / "checkpoints" / "best.ckpt"
    predictor = opformer.load(ckpt if ckpt.exists() else run)
    bundle, _ = _test_set(predictor, None, None, None)
    test = bundle.datasets["test"]
    batch = stack_samples(test, range(min(samples, len(test))))
    layers = [m for name, m in predictor.operator.model.named_modules() if name.endswith("encoder")]
    if not layers or not hasattr(layers[0], "layers"):
        raise SystemExit(f"attention_share: {run} is not an attention model with an encoder")
    out: list[tuple[float, float]] = []

    def hook(module, args, kwargs, result):
        x = args[0]
        a = result - x if kwargs.get("residual", False) else result  # eval fuses x + Attn(x) into one call
        size = a.norm()
        varying = (a - a.mean(dim=1, keepdim=True)).norm() / size if size > 0 else size
        out.append(((size / x.norm()).item(), float(varying)))

    handles = [layer.attn.register_forward_hook(hook, with_kwargs=True) for layer in layers[0].layers]
    try:
        with torch.no_grad():
            predictor.operator.eval()
            predictor(batch["input"], batch["coords"])
    finally:
        for h in handles:
            h.remove()
    return out[: len(layers[0].layers)]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("runs", nargs="+", type=Path, help="run directories (opformer train --out)")
    p.add_argument("--samples", type=int, default=4, help="test samples to average over")
    a = p.parse_args(argv)
    if a.samples < 1:
        p.error("--samples must be at least 1")
    torch.set_num_threads(1)
    from opformer.pde.errors import DataError
    from opformer.tasks.artifact import LoadError

    for run in a.runs:
        try:
            rows = shares(run, a.samples)
        except (LoadError, DataError) as exc:  # not a training's run directory or checkpoint; its data gone
            print(f"error: {str(exc).splitlines()[0]}", file=sys.stderr)
            return 2
        print(f"{run}: share / varying per layer  " + "  ".join(f"{s:.2f}/{v:.2f}" for s, v in rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
