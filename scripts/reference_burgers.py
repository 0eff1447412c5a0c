"""Train the paper's own Burgers network in opformer's pipeline, for a side-by-side comparison with our Transformer1d.

The network is ``SimpleTransformer`` of the paper's reference package (``galerkin-transformer`` 0.2.1 from PyPI, not
a dependency of opformer), configured as its Burgers example (ex1) ran: d 96, one head, 4 layers with Ln on K and V
(GT) or on Q and K (FT), FFN 192, the linear lift 1 -> 96, a 2-layer spectral decoder with 16 modes and width 48;
residual and FFN dropout 0.05.  Everything else is `opformer train PRESET`: the data, splits, the loss with its H1
term, the one-cycle schedule, the divergence guard, model selection and the test evaluation.  Only the network is
swapped, so a difference between this run and `opformer train PRESET` with the same flags is a difference between
the two networks.  With the same weights the two networks are the same function with the same gradients (to
1e-11 and 1e-10 in float64: tests/bench/test_reference_burgers.py); what differs is their initialisation (the
reference copies one initialised encoder layer four times and draws its spectral weights from a much narrower
Xavier-normal law) and, unless ``--attn-dropout-bug off``, the reference's hard-wired dropout.  (From the same start
the two still train differently: docs/results.md, Table 2a.)

    pip install --no-deps galerkin-transformer==0.2.1
    python scripts/reference_burgers.py burgers-gt --resolution 512 --out runs/ref-burgers/gt --attn-dropout-bug off
    python scripts/reference_burgers.py burgers-gt --resolution 512 --out runs/ref-burgers/gt-init \\
        --init-only --attn-dropout-bug off      # our network, started from the reference's initial weights

``--attn-dropout-bug`` sets the reference's p = 0.5 dropout on the d x d attention matrix: ``train`` (default: in
training only, so validation and test are deterministic), ``always`` (as the paper's runs, in evaluation too) or
``off``.  ``--init-only`` trains *our* Transformer1d, with the reference network's initial weights copied in (its
dropout bug does not apply then), which separates the initialisation from the rest.  Other arguments go to
`opformer train` (--seed, --epochs, --resolution, ...).  The checkpoints of a run without ``--init-only`` hold the
reference network: `opformer.load` cannot rebuild it (a note file in --out says so).
"""

from __future__ import annotations

import argparse
import sys

import torch

from opformer.bench.reference import (ReferenceNetwork, reference_available, pipeline_parser, reference_model_module,
                                      train_in_pipeline)
from opformer.tasks.base import Operator

#: the attention kinds the reference has, under the same names as ours
KINDS = ("galerkin", "fourier", "linear", "softmax")


def reference_config(model_cfg: dict) -> dict:
    """The reference ``SimpleTransformer`` config equal to our Transformer1d config ``model_cfg`` (ex1's fields)."""
    if model_cfg.get("name") != "transformer1d":
        raise ValueError(f"only Transformer1d presets have a reference network here, not {model_cfg.get('name')!r}")
    if model_cfg.get("norm_scheme", "galerkin") != "galerkin":
        raise ValueError("only the eq. (4) scheme (Ln inside the attention) is compared here")
    kind = model_cfg.get("kind", "galerkin")
    if kind not in KINDS:
        raise ValueError(f"attention kind {kind!r} has no reference counterpart")
    d = int(model_cfg["d_model"])
    width = int(model_cfg["decoder_width"])
    return dict(
        node_feats=1, pos_dim=1, n_targets=1, n_hidden=d, num_feat_layers=0,
        num_encoder_layers=int(model_cfg["num_layers"]), n_head=int(model_cfg["n_heads"]),
        dim_feedforward=int(model_cfg["dim_feedforward"]), attention_type=kind, feat_extract_type=None,
        xavier_init=float(model_cfg.get("eta", 1e-2)), diagonal_weight=float(model_cfg.get("delta", 1e-2)),
        symmetric_init=False, layer_norm=False, attn_norm=True, batch_norm=False, return_attn_weight=False,
        return_latent=False, decoder_type="ifft", freq_dim=width, num_regressor_layers=int(model_cfg["decoder_layers"]),
        fourier_modes=int(model_cfg["modes"]), spacial_dim=1, spacial_fc=False, dropout=0.0,
        encoder_dropout=float(model_cfg.get("dropout", 0.0)), ffn_dropout=float(model_cfg.get("dropout", 0.0)),
        decoder_dropout=0.0, regressor_activation=model_cfg.get("decoder_activation", "silu"), n_freq_targets=0,
        residual_type="add", norm_type="layer", debug=False, spacial_residual=False, seq_len=None, pred_len=0,
    )


class ReferenceBurgers(ReferenceNetwork):
    """The reference ``SimpleTransformer`` behind opformer's model interface: ``(x, coords) -> y`` with x (batch, n,
    1) and coords (batch or 1, n, 1)."""

    def __init__(self, model_cfg: dict, bug: str = "train"):
        super().__init__(bug)
        self._attach(reference_model_module().SimpleTransformer(**reference_config(model_cfg)))

    def forward(self, x, coords):
        pos = coords.expand(x.shape[0], *coords.shape[1:])
        return self.net(x, None, pos, pos)["preds"]


def ours_from_reference(ref_state: dict, model_cfg: dict) -> dict:
    """Our Transformer1d's state dict (for ``model_cfg``) holding the weights of a reference ``SimpleTransformer``
    state dict."""
    num_layers, decoder_layers = int(model_cfg["num_layers"]), int(model_cfg["decoder_layers"])
    d_model = int(model_cfg["d_model"])
    out = {"lift.weight": ref_state["feat_extract.id.weight"], "lift.bias": ref_state["feat_extract.id.bias"]}
    for i in range(num_layers):
        r, o = f"encoder_layers.{i}.", f"encoder.layers.{i}."
        out[o + "attn.qkv.weight"] = torch.cat([ref_state[r + f"attn.linears.{j}.weight"] for j in range(3)])
        out[o + "attn.qkv.bias"] = torch.cat([ref_state[r + f"attn.linears.{j}.bias"] for j in range(3)])
        for ours_name, ref_name in (("k", "norm_K"), ("v", "norm_V"), ("q", "norm_Q")):
            key = r + f"attn.{ref_name}.0.weight"
            if key in ref_state:  # one head: one layer norm over the d features
                out[o + f"attn.norms.{ours_name}.weight"] = ref_state[key].reshape(1, 1, d_model)
                out[o + f"attn.norms.{ours_name}.bias"] = ref_state[r + f"attn.{ref_name}.0.bias"].reshape(1, 1, d_model)
        out[o + "attn.out_proj.weight"] = ref_state[r + "attn.fc.weight"]
        out[o + "attn.out_proj.bias"] = ref_state[r + "attn.fc.bias"]
        out[o + "ffn.net.0.weight"], out[o + "ffn.net.0.bias"] = ref_state[r + "ff.lr1.weight"], ref_state[r + "ff.lr1.bias"]
        out[o + "ffn.net.3.weight"], out[o + "ffn.net.3.bias"] = ref_state[r + "ff.lr2.weight"], ref_state[r + "ff.lr2.bias"]
    for j in range(decoder_layers):
        r = f"regressor.spectral_conv.{j}."
        out[f"decoder.layers.{j}.weight"] = ref_state[r + "fourier_weight"]
        out[f"decoder.layers.{j}.linear.weight"] = ref_state[r + "linear.weight"]
        out[f"decoder.layers.{j}.linear.bias"] = ref_state[r + "linear.bias"]
    for j in (0, 2):
        out[f"decoder.head.{j}.weight"] = ref_state[f"regressor.regressor.{j}.weight"]
        out[f"decoder.head.{j}.bias"] = ref_state[f"regressor.regressor.{j}.bias"]
    return out


#: the reference package is not a dependency of opformer: how to install it, as --help says it and as the one line
#: of a run without it says it
INSTALL = "pip install --no-deps galerkin-transformer==0.2.1"
NEEDS = f"Needs the paper's reference package galerkin-transformer (not a dependency of opformer):\n  {INSTALL}"
NOT_INSTALLED = f"the paper's reference package galerkin-transformer is not installed; install it with: {INSTALL}"


def main(argv: list[str]) -> int:
    parser = pipeline_parser("reference_burgers.py")
    parser.epilog, parser.formatter_class = NEEDS, argparse.RawDescriptionHelpFormatter  # the command on one line
    parser.add_argument("--init-only", action="store_true",
                        help="train our network from the reference network's initial weights")
    args, rest = parser.parse_known_args(argv)  # --help needs no reference package
    if not reference_available():
        print(f"{parser.prog}: error: {NOT_INSTALLED}", file=sys.stderr)
        return 2
    bug = args.attn_dropout_bug

    def build_operator(model_cfg, normalizers, options):
        ref = ReferenceBurgers(model_cfg, bug)
        if not args.init_only:
            net = ref
        else:
            from opformer.models import build_model

            net = build_model(model_cfg)
            net.load_state_dict(ours_from_reference(ref.net.state_dict(), model_cfg))
        return Operator(net, normalizers.get("input"), normalizers.get("target"))

    note = "" if args.init_only else (
        "The checkpoints here hold the reference package's SimpleTransformer, trained by "
        f"scripts/reference_burgers.py (attention-dropout bug: {bug}); opformer.load cannot rebuild it.")
    return train_in_pipeline("burgers", build_operator, rest, args.out, note)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
