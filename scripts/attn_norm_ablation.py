#!/usr/bin/env python
"""`opformer train` with the Fourier-type attention's per-head layer norms changed, for ablations that have no flag.

The eq. 4 scheme (`--norm-scheme galerkin`) gives the fourier kind a layer norm on each head's Q and K.  This wrapper
keeps only some of them, or starts the attention's output projection smaller, then runs the ordinary command line:

    python scripts/attn_norm_ablation.py --norms k -- train darcy-ft-cpu --norm-scheme galerkin --out runs/eq4/konly
    python scripts/attn_norm_ablation.py --norms q -- train darcy-ft-cpu --norm-scheme galerkin --out runs/eq4/qonly
    python scripts/attn_norm_ablation.py --out-proj-gain 0.01 -- train darcy-ft-cpu --norm-scheme galerkin \\
        --out runs/eq4/op0.01

A model trained this way loads only through this wrapper's change (its checkpoint lacks the removed norms), so it is
for measurement, not for shipping.  docs/results.md ("Thirty-two changes to the FT's default of then", the eq. 4 rows)
gives what these runs measured.
"""

from __future__ import annotations

import argparse
import functools
import sys

import torch


def patch(norms: set[str] | None, out_proj_gain: float) -> None:
    from opformer.nn import attention

    cls = attention.SimpleAttention
    init = cls.__init__

    @functools.wraps(init)  # keep the signature: the model builder checks keyword names against it
    def patched_init(self, *args, **kwargs):
        init(self, *args, **kwargs)
        if self.kind != "fourier":
            return
        if norms is not None:
            for name in [n for n in self.norms.keys() if n not in norms]:
                del self.norms[name]
        if out_proj_gain != 1.0 and self.out_proj is not None and "q" in self.norms:
            with torch.no_grad():
                self.out_proj.weight.mul_(out_proj_gain)

    cls.__init__ = patched_init


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if "--" not in argv and any(a in ("-h", "--help") for a in argv):
        argv = [*argv, "--"]  # the help below, not the usage error
    if "--" not in argv:
        print("usage: attn_norm_ablation.py [--norms q|k|q,k] [--out-proj-gain G] -- train PRESET [flags]",
              file=sys.stderr)
        return 2
    cut = argv.index("--")
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
                                usage="%(prog)s [--norms q|k|q,k] [--out-proj-gain G] -- train PRESET [flags]")
    p.add_argument("--norms", default=None, help="the per-head norms the fourier kind keeps: q, k or q,k")
    p.add_argument("--out-proj-gain", type=float, default=1.0,
                   help="multiply the output projection's initial weights by this where Q is layer-normed")
    args = p.parse_args(argv[:cut])
    norms = None
    if args.norms is not None:
        norms = {n.strip() for n in args.norms.split(",") if n.strip()}
        if not norms <= {"q", "k"}:
            p.error("--norms: the fourier kind's norms are q and k")
    patch(norms, args.out_proj_gain)
    from opformer.cli import main as cli_main

    return cli_main(argv[cut + 1:])


if __name__ == "__main__":
    sys.exit(main())
