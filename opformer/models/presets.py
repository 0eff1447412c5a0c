"""Named model presets: every model the paper's tables compare (Cao 2021, Tables 2 and 3).

Names: ``{experiment}-{kind}[-regular]`` and ``{experiment}-fno``, with experiment ``burgers`` (ex1), ``darcy``
(ex2, forward) or ``darcy-inverse`` (ex3); kind ``gt`` (Galerkin), ``ft`` (Fourier), ``st`` (softmax), ``lt``
(linear); ``-regular`` selects the regular post-LN scheme (eq. 7) instead of the Ln inside the attention (eq. 4).
Each value is a :func:`~opformer.models.build_model` dict.

Reference choices kept (they produced the paper's numbers and are sensible): W = eta*U + delta*I with
eta = delta = 1e-2; a 1/sqrt(d_head + pos_dim) factor in Fourier attention (``scale="sqrt"``; softmax has it
built in); layer-norm eps 1e-5 (ex1) and 1e-7 (ex2, ex3); ReLU in the FFN and the CiNN downscaler, SiLU in the
upscaler and decoders; dropout 0.05 on the encoder's residual branches and FFN (for every kind: the reference's
forced 0.1 for softmax/linear is not kept) and in the CiNN downscaler (and upscaler in ex3).  Not kept: the
reference's always-on p=0.5 attention dropout (a bug; ``reference_attn_dropout=True`` reproduces it).

Grids (set per run, they do not change the parameters): ex2 attention grid 43 (the 141 -> 43 column; use
``coarse_size=61`` for 211 -> 61); ex3 attention and target grid 36 (141 -> 36; use 71 for 211 -> 71).
"""

from __future__ import annotations

import difflib
from typing import Any

__all__ = ["MODEL_PRESETS", "model_preset", "PAPER_PARAMETERS", "EXPERIMENTS", "ATTENTION_KINDS"]

#: preset suffix -> attention kind
ATTENTION_KINDS = {"gt": "galerkin", "ft": "fourier", "st": "softmax", "lt": "linear"}

#: experiment -> attention-model preset body (without kind and norm scheme) and FNO preset
_BURGERS = dict(
    name="transformer1d",
    d_model=96,
    num_layers=4,
    n_heads=1,
    dim_feedforward=192,
    activation="relu",
    dropout=0.05,
    norm_eps=1e-5,
    eta=1e-2,
    delta=1e-2,
    decoder_width=48,
    decoder_layers=2,
    modes=16,
    decoder_ffn=48,
    decoder_activation="silu",
)
_DARCY = dict(
    name="transformer2d",
    d_model=128,
    num_layers=6,
    n_heads=4,
    dim_feedforward=256,
    activation="relu",
    dropout=0.05,
    norm_eps=1e-7,
    eta=1e-2,
    delta=1e-2,
    coarse_size=43,
    downscaler_activation="relu",
    downscaler_dropout=0.05,
    upscaler_activation="silu",
    upscaler_dropout=0.0,
    decoder="spectral",
    decoder_width=32,
    decoder_layers=2,
    modes=12,
    decoder_ffn=128,
    decoder_activation="silu",
    spatial_fc=True,
    boundary="dirichlet",
)
_DARCY_INVERSE = dict(
    name="transformer2d",
    d_model=192,
    num_layers=6,
    n_heads=4,
    dim_feedforward=384,
    activation="relu",
    dropout=0.05,
    norm_eps=1e-7,
    eta=1e-2,
    delta=1e-2,
    coarse_size=36,
    out_size=36,
    downscaler_activation="relu",
    downscaler_dropout=0.05,
    upscaler_activation="silu",
    upscaler_dropout=0.05,
    decoder="pointwise",
    decoder_width=192,
    decoder_layers=1,
    decoder_activation="silu",
    decoder_dropout=0.0,
    spatial_fc=True,
    boundary=None,
)
_FNO = {
    "burgers": dict(name="fno1d", width=64, modes=16, num_layers=4, head_width=128, activation="relu"),
    "darcy": dict(name="fno2d", width=32, modes=12, num_layers=4, head_width=128, activation="relu"),
    "darcy-inverse": dict(name="fno2d", width=32, modes=12, num_layers=4, head_width=128, activation="relu", out_size=36),
}
EXPERIMENTS = {"burgers": _BURGERS, "darcy": _DARCY, "darcy-inverse": _DARCY_INVERSE}

#: the paper's parameter budgets (reference implementation, counted): experiment -> (attention models, FNO)
PAPER_PARAMETERS = {
    "burgers": (530_305, 549_569),
    "darcy": (2_220_829, 2_368_001),
    "darcy-inverse": (2_383_873, 2_368_001),
}


def _make_presets() -> dict[str, dict[str, Any]]:
    presets: dict[str, dict[str, Any]] = {}
    for exp, body in EXPERIMENTS.items():
        for suffix, kind in ATTENTION_KINDS.items():
            for scheme in ("galerkin", "regular"):
                name = f"{exp}-{suffix}" + ("-regular" if scheme == "regular" else "")
                cfg = dict(body, kind=kind, norm_scheme=scheme)
                if kind == "fourier":
                    cfg["scale"] = "sqrt"
                presets[name] = cfg
        presets[f"{exp}-fno"] = dict(_FNO[exp])
    return presets


#: preset name -> build_model dict (treat as read-only; model_preset returns a fresh copy)
MODEL_PRESETS: dict[str, dict[str, Any]] = _make_presets()


def model_preset(name: str) -> dict[str, Any]:
    """A copy of the ``build_model`` dict of a named preset; an unknown name raises listing the known ones."""
    if name not in MODEL_PRESETS:
        folded = {n.lower(): n for n in MODEL_PRESETS}  # case first: "BURGERS-GT" is burgers-gt
        near = ([folded[str(name).lower()]] if str(name).lower() in folded
                else difflib.get_close_matches(str(name), list(MODEL_PRESETS), n=3))
        hint = f"did you mean {', '.join(repr(n) for n in near)}? " if near else ""
        raise ValueError(f"unknown model preset {name!r}; {hint}known presets: {', '.join(MODEL_PRESETS)}")
    return dict(MODEL_PRESETS[name])
