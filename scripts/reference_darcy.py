"""Train the paper's own Darcy network in opformer's pipeline, for a side-by-side comparison with our Transformer2d.

The network is ``FourierTransformer2D`` of the paper's reference package (``galerkin-transformer`` 0.2.1 from PyPI,
not a dependency of opformer), configured as its Darcy example ran (d 128, 4 heads, 6 Galerkin layers with Ln on K
and V, CiNN down/up-scalers, a 2-layer spectral decoder with 12 modes and width 32; residual dropout 0.05, FFN
dropout 0.1, no dropout before the decoder, downscaler dropout 0.05).  Everything else is `opformer train PRESET`:
the data, splits, per-pixel normalisation (decoded before the loss, as the reference does inside its model), the
loss with its H1 term, the one-cycle schedule, the divergence guard, model selection and the test evaluation.  Only
the network is swapped, so a difference between this run and `opformer train PRESET` is a difference between the
two networks (docs/results.md, "CPU-reduced runs").

    pip install --no-deps galerkin-transformer==0.2.1
    python scripts/reference_darcy.py darcy-gt-cpu --out runs/d85/ref-gt --no-progress --threads 1
    python scripts/reference_darcy.py darcy-gt-cpu --out runs/d85/ref-gt-bugoff --attn-dropout-bug off

``--attn-dropout-bug`` sets the reference's hard-wired p = 0.5 dropout on the d x d attention matrix: ``train``
(default: in training only, so the validation and test figures are deterministic), ``always`` (as the paper's runs,
in evaluation too) or ``off``.  ``--reference KEY=VALUE`` (repeatable) changes one key of the reference network's
config, e.g. ``--reference ffn_dropout=0.05`` (with ``--attn-dropout-bug off``: our preset's dropouts) or
``--reference num_encoder_layers=0``.  Other arguments go to `opformer train` (--seed, --epochs, --lr, ...).  The
checkpoints in --out hold the reference network: `opformer.load` cannot rebuild it (a note file says so).
"""

from __future__ import annotations

import argparse
import sys

import yaml

from opformer.bench.reference import (ReferenceNetwork, reference_available, pipeline_parser, reference_model_module,
                                      train_in_pipeline)
from opformer.models.registry import default_coords
from opformer.tasks.base import Operator

# (fine grid, attention grid) -> the scale factor the reference's Darcy data set computes for its CiNN scalers
# (`DarcyDataset.get_scaler_sizes`, values checked by running it); the upscaler's middle grid is round(n_f * f) - 1
SCALE_FACTORS = {(85, 29): 0.59, (141, 43): 0.555, (211, 61): 0.54, (141, 71): 0.71}


def reference_config(n_fine: int, n_coarse: int) -> dict:
    """The reference ``FourierTransformer2D`` config of its Darcy example for the fine grid ``n_fine`` and the attention
    grid ``n_coarse`` (one of SCALE_FACTORS)."""
    f = SCALE_FACTORS[(n_fine, n_coarse)]
    mid = round(n_fine * f) - 1
    return dict(
        node_feats=1, pos_dim=2, n_targets=1, n_hidden=128, num_feat_layers=0, num_encoder_layers=6, n_head=4,
        dim_feedforward=256, attention_type="galerkin", feat_extract_type=None, xavier_init=1e-2,
        diagonal_weight=1e-2, symmetric_init=False, layer_norm=False, attn_norm=True, batch_norm=False,
        return_attn_weight=False, return_latent=False, decoder_type="ifft2", freq_dim=32,
        num_regressor_layers=2, fourier_modes=12, spacial_dim=2, spacial_fc=True, last_activation=True,
        dropout=0.0, encoder_dropout=0.05, ffn_dropout=0.1, decoder_dropout=0.0, downscaler_dropout=0.05,
        upscaler_dropout=0.0, downsample_mode="interp", upsample_mode="interp", downscaler_activation="relu",
        upscaler_activation="silu", regressor_activation="silu", norm_eps=1e-7, normalizer=None,
        boundary_condition=None, downscaler_size=(f, f), upscaler_size=((mid, mid), (n_fine, n_fine)),
        residual_type="add", norm_type="layer", debug=False,
    )


#: the keys ``--reference KEY=VALUE`` may change (checked before the data are made or loaded)
CONFIG_KEYS = frozenset(reference_config(*next(iter(SCALE_FACTORS))))


class ReferenceDarcy(ReferenceNetwork):
    """The reference ``FourierTransformer2D`` behind opformer's model interface: ``(x, coords) -> y`` with x the
    standardized coefficient (batch, n, n, 1) and coords the fine grid (batch or 1, n, n, 2); y is standardized
    (the Operator decodes it and zeroes the boundary ring)."""

    def __init__(self, n_fine: int, n_coarse: int, bug: str = "train", **overrides):
        super().__init__(bug)
        if (n_fine, n_coarse) not in SCALE_FACTORS:
            raise ValueError(f"fine/attention grid {n_fine}/{n_coarse} not one of {sorted(SCALE_FACTORS)}")
        cfg = reference_config(n_fine, n_coarse)
        unknown = sorted(set(overrides) - set(cfg))
        if unknown:
            raise ValueError(f"--reference: unknown key(s) {', '.join(unknown)}; known: {', '.join(sorted(cfg))}")
        cfg.update(overrides)
        self.register_buffer("pos", default_coords(n_coarse, 2).reshape(1, -1, 2), persistent=False)
        self._attach(reference_model_module().FourierTransformer2D(**cfg))

    def forward(self, x, coords):
        b = x.shape[0]
        grid = coords.expand(b, *coords.shape[1:])
        return self.net(x, None, self.pos.expand(b, -1, -1), grid)["preds"]


#: the reference package is not a dependency of opformer: how to install it, as --help says it and as the one line
#: of a run without it says it
INSTALL = "pip install --no-deps galerkin-transformer==0.2.1"
NEEDS = f"Needs the paper's reference package galerkin-transformer (not a dependency of opformer):\n  {INSTALL}"
NOT_INSTALLED = f"the paper's reference package galerkin-transformer is not installed; install it with: {INSTALL}"


def main(argv: list[str]) -> int:
    parser = pipeline_parser("reference_darcy.py")
    parser.epilog, parser.formatter_class = NEEDS, argparse.RawDescriptionHelpFormatter  # the command on one line
    parser.add_argument("--reference", action="append", default=[], metavar="KEY=VALUE",
                        help="a field of the reference network's config to change (repeat)")
    args, rest = parser.parse_known_args(argv)  # --help needs no reference package
    if not reference_available():
        print(f"{parser.prog}: error: {NOT_INSTALLED}", file=sys.stderr)
        return 2
    overrides = {}
    for item in args.reference:
        if "=" not in item:
            parser.error(f"--reference takes KEY=VALUE, got {item!r}")
        key, text = item.split("=", 1)
        overrides[key] = yaml.safe_load(text)
    unknown = sorted(set(overrides) - CONFIG_KEYS)  # said now, not after the data set has been generated
    if unknown:
        parser.error(f"--reference: unknown key(s) {', '.join(unknown)}; known: {', '.join(sorted(CONFIG_KEYS))}")
    bug = args.attn_dropout_bug

    def build_operator(model_cfg, normalizers, options):
        n_fine = int(normalizers["input"].mean.shape[0])
        net = ReferenceDarcy(n_fine, int(model_cfg["coarse_size"]), bug, **overrides)
        return Operator(net, normalizers.get("input"), normalizers.get("target"), zero_boundary=True)

    return train_in_pipeline("darcy", build_operator, rest, args.out,
                             "The checkpoints here hold the reference package's FourierTransformer2D, trained by "
                             f"scripts/reference_darcy.py (attention-dropout bug: {bug}, changes: "
                             f"{overrides or 'none'}); opformer.load cannot rebuild it.")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
