"""What one benchmark case builds: an encoder stack of one attention kind, or a whole model from a preset.

A case is a plain dict (so that it can be sent to a worker process as JSON); :func:`build_case` turns it into a
module and its inputs, and :func:`estimate_memory_bytes` predicts its peak memory before anything is allocated.

Attention kinds on a sequence of n points: the kernels of :data:`opformer.nn.KERNELS` (galerkin, fourier, softmax,
linear).  Kinds on a 2D grid of n = side^2 points (:data:`GRID_KINDS`):

* ``window``: ``layers`` Swin V2 / scOT blocks (:class:`~opformer.nn.window.WindowBlock2d`: attention inside
  M x M windows, MLP) on a side x side token grid, one token per point; with one layer the block is the shifted
  one (cyclic shift by M/2 and its mask), with several they alternate unshifted / shifted.  Cost O(N M^2 d).
* ``patched``: the softmax encoder stack on the N / p^2 tokens of non-overlapping p x p patches (patch embedding
  p^2 d -> d before, patch recovery d -> p^2 d after, both linear in N).  Cost O(N^2 d / p^4) + O(N d^2).

Whole models: the paper's presets (:data:`opformer.models.MODEL_PRESETS`, n = points per dimension) and the 2D
models of :data:`GRID_MODELS` with their default configs (n = number of grid points, a perfect square).
"""

from __future__ import annotations

import math
from typing import Optional

import torch

from ..nn.attention import FOURIER_ORDERS, fourier_linear_order

__all__ = [
    "attention_case",
    "model_case",
    "build_case",
    "estimate_memory_bytes",
    "grid_side",
    "DTYPES",
    "set_tf32",
    "GRID_KINDS",
    "GRID_MODELS",
]

#: "tf32" is float32 storage with the TF32 matrix units allowed (CUDA; on a CPU it is plain float32)
DTYPES = {"float32": torch.float32, "tf32": torch.float32, "bfloat16": torch.bfloat16, "float64": torch.float64}


def set_tf32(dtype: str) -> None:
    """Allow TF32 matrix products (cuBLAS and cuDNN) exactly when ``dtype`` is "tf32"."""
    on = dtype == "tf32"
    torch.backends.cuda.matmul.allow_tf32 = on
    torch.backends.cudnn.allow_tf32 = on


#: attention kinds on a 2D grid of n = side^2 points
GRID_KINDS = ("window", "patched")

#: whole 2D models benchmarked by name, with their default configs: ``build_model`` dicts
GRID_MODELS = {
    "scot": {"name": "scot"},
    "scot-tiny": {"name": "scot", "size": "tiny"},
    "scot-small": {"name": "scot", "size": "small"},
    "scot-base": {"name": "scot", "size": "base"},
    "vit": {"name": "vit"},
    "vit-galerkin": {"name": "vit", "kind": "galerkin"},
    "vit-gt": {"name": "vit", "kind": "galerkin"},  # the names `opformer train --model` uses
    "vit-ft": {"name": "vit", "kind": "fourier"},
    "scot-galerkin": {"name": "scot", "galerkin": True},
    "unet": {"name": "unet"},
    "deeponet": {"name": "deeponet"},
    "cno": {"name": "cno"},
}


def grid_side(n: int, what: str = "the 2D kinds") -> int:
    """The side of a square grid of ``n`` points; a ValueError (one line) when ``n`` is not a perfect square."""
    side = math.isqrt(int(n)) if int(n) >= 0 else 0
    if side < 1 or side * side != int(n):
        lo, hi = max(side, 1) ** 2, (side + 1) ** 2
        raise ValueError(f"n={n} is not a perfect square, which {what} needs (a side x side grid of n = side^2 "
                         f"points; nearest: {lo}, {hi})")
    return side


def attention_case(
    kind: str,
    n: int,
    *,
    d_model: int = 128,
    n_heads: int = 4,
    batch: int = 4,
    layers: int = 1,
    dim_feedforward: Optional[int] = None,
    pos_dim: int = 1,
    chunk_size: Optional[int] = None,
    fourier_order: str = "quadratic",
    device: str = "cpu",
    dtype: str = "float32",
    compile: bool = False,
    repeats: int = 5,
    warmup: int = 1,
    threads: Optional[int] = None,
    seed: int = 0,
    impl: str = "opformer",
    fused: bool = True,
    compare_reference: bool = False,
    matmul_size: Optional[int] = None,
    window: int = 8,
    patch: int = 4,
) -> dict:
    """An encoder stack of ``layers`` layers of attention ``kind`` on ``n`` points (eq. 4 scheme, FFN 2*d_model).

    ``kind`` "window" / "patched" (:data:`GRID_KINDS`) run on a 2D grid of n = side^2 points (else ValueError):
    windowed attention blocks with ``window`` x ``window`` windows, or softmax attention on ``patch`` x ``patch``
    patch tokens (side must be a multiple of ``patch``); see the module docstring.

    ``impl="reference"`` builds the same stack from the paper's reference layer instead (``galerkin-transformer``
    0.2.1, configurable dropouts 0, its hard-wired p=0.5 attention dropout left on, as its users run it).
    ``fused=False`` evaluates galerkin/linear by the explicit heads (``SimpleAttention(fused=False)``).
    ``compare_reference=True`` also times the reference stack on the same input, interleaved with ours in the same
    process.  The machine's matmul rate (a ``matmul_size``^3 product, default 2048 on CPU) is always timed
    interleaved with the case, so both see the same load.
    """
    if repeats < 1 or warmup < 1:
        raise ValueError(f"repeats and warmup must be >= 1, got {repeats}, {warmup}")
    if impl not in ("opformer", "reference"):
        raise ValueError(f"impl must be 'opformer' or 'reference', got {impl!r}")
    if fourier_order not in FOURIER_ORDERS:
        raise ValueError(f"fourier_order must be one of {FOURIER_ORDERS}, got {fourier_order!r}")
    grid = {}
    if kind in GRID_KINDS:
        if impl != "opformer" or compare_reference:
            raise ValueError(f"kind {kind!r} has no reference implementation (the paper's layer has "
                             "galerkin, fourier, softmax and linear); run it without --reference")
        side = grid_side(n, f"kind {kind!r}")
        grid = {"grid_side": side, "tokens": int(n)}
        if kind == "window":
            if not isinstance(window, int) or window < 1:
                raise ValueError(f"window must be a positive int, got {window!r}")
            grid["window_size"] = window
        else:
            if not isinstance(patch, int) or patch < 1:
                raise ValueError(f"patch must be a positive int, got {patch!r}")
            if side % patch:
                raise ValueError(f"kind 'patched': the grid side {side} (n={n}) is not a multiple of the patch {patch}")
            grid.update(patch_size=patch, tokens=(side // patch) ** 2)
    return {
        "what": "attention",
        "impl": impl,
        "kind": kind,
        "n": int(n),
        "d_model": int(d_model),
        "n_heads": int(n_heads),
        "batch": int(batch),
        "layers": int(layers),
        "dim_feedforward": int(2 * d_model if dim_feedforward is None else dim_feedforward),
        "pos_dim": int(pos_dim),
        # only fourier and softmax evaluate over query chunks: another kind's record must not claim a chunk
        "chunk_size": int(chunk_size) if chunk_size is not None and kind in ("fourier", "softmax") else None,
        "fourier_order": fourier_order if kind == "fourier" and impl == "opformer" else None,
        "device": device,
        "dtype": dtype,
        "compile": bool(compile),
        "repeats": int(repeats),
        "warmup": int(warmup),
        "threads": threads,
        "seed": int(seed),
        "fused": bool(fused),
        "compare_reference": bool(compare_reference),
        "matmul_size": matmul_size,
        **grid,
    }


def _model_cfg(preset: str) -> dict:
    """The ``build_model`` dict of a grid model name (:data:`GRID_MODELS`) or of a paper preset."""
    if preset in GRID_MODELS:
        return dict(GRID_MODELS[preset])
    from opformer.models import model_preset

    try:
        return model_preset(preset)
    except ValueError as err:
        raise ValueError(f"{str(err).splitlines()[0]}; 2D models by name: {', '.join(GRID_MODELS)}") from None


def model_case(
    preset: str,
    n: int,
    *,
    batch: int = 4,
    device: str = "cpu",
    dtype: str = "float32",
    compile: bool = False,
    repeats: int = 5,
    warmup: int = 1,
    threads: Optional[int] = None,
    seed: int = 0,
    matmul_size: Optional[int] = None,
) -> dict:
    """A whole model: a paper preset (``opformer.models.model_preset``) at resolution ``n`` (points per dimension),
    or a 2D model of :data:`GRID_MODELS` with its default config on a grid of ``n`` points (side sqrt(n); a
    ValueError when n is not a perfect square)."""
    from opformer.models import model_config

    cfg = _model_cfg(preset)
    extra = {}
    if preset in GRID_MODELS:
        c = model_config(cfg)
        extra = {"grid_side": grid_side(n, f"model {preset!r}")}
        for field, names in (("d_model", ("d_model", "dim", "width")), ("n_heads", ("n_heads", "stage_heads")),
                             ("layers", ("num_layers", "stage_depths", "levels", "trunk_layers"))):
            value = next((getattr(c, a) for a in names if getattr(c, a, None) is not None), None)
            extra[field] = list(value) if isinstance(value, tuple) else value
        for name in ("kind", "window", "patch", "patch_size", "basis", "sensors"):
            if getattr(c, name, None) is not None:
                extra["attention" if name == "kind" else name.replace("patch_size", "patch")] = getattr(c, name)
    return {
        "what": "model",
        "preset": preset,
        "model": cfg.get("name"),
        "kind": cfg.get("kind", cfg.get("name")) if preset not in GRID_MODELS else preset,
        "d_model": cfg.get("d_model", cfg.get("width")),
        "n_heads": cfg.get("n_heads"),
        "layers": cfg.get("num_layers"),
        **extra,
        "n": int(n),
        "batch": int(batch),
        "device": device,
        "dtype": dtype,
        "compile": bool(compile),
        "repeats": int(repeats),
        "warmup": int(warmup),
        "threads": threads,
        "seed": int(seed),
        "matmul_size": matmul_size,
    }


class _ReferenceStack(torch.nn.Module):
    """``layers`` reference encoder layers applied in turn to (x, pos)."""

    def __init__(self, case: dict):
        super().__init__()
        from .reference import make_reference_layer

        self.layers = torch.nn.ModuleList(
            make_reference_layer(case["kind"], case["d_model"], case["n_heads"], case["dim_feedforward"],
                                 case["pos_dim"], attn_dropout_bug=True)
            for _ in range(case["layers"])
        )

    def forward(self, x, pos):
        for layer in self.layers:
            x = layer(x, pos)
        return x


class _WindowStack(torch.nn.Module):
    """``layers`` windowed-attention blocks on a (batch, side, side, d_model) token grid (see the module docstring)."""

    def __init__(self, case: dict):
        super().__init__()
        from opformer.nn.window import WindowBlock2d

        d, m, L = case["d_model"], case["window_size"], case["layers"]
        shifts = [m // 2] if L == 1 else [0 if i % 2 == 0 else m // 2 for i in range(L)]
        self.blocks = torch.nn.ModuleList(
            WindowBlock2d(d, case["n_heads"], m, shift, mlp_ratio=case["dim_feedforward"] / d) for shift in shifts
        )

    def forward(self, x):
        for block in self.blocks:
            x = block(x)
        return x


class _PatchedSoftmax(torch.nn.Module):
    """Patch embedding (p^2 d_model -> d_model), the softmax encoder stack on the patch tokens, patch recovery.

    Input (batch, side, side, d_model) and token positions (batch, tokens, pos_dim); the encoder is the one of the
    "softmax" kind (same layers, width, heads, FFN), so at equal n its n^2 term is that of "softmax" over p^4."""

    def __init__(self, case: dict):
        super().__init__()
        from opformer.nn import Encoder
        from opformer.nn.patch import PatchEmbed2d, PatchRecover2d

        d, p = case["d_model"], case["patch_size"]
        self.embed = PatchEmbed2d(d, d, p)
        self.encoder = Encoder(case["layers"], d, case["n_heads"], "softmax", dim_feedforward=case["dim_feedforward"],
                               pos_dim=case["pos_dim"])
        self.recover = PatchRecover2d(d, d, p)

    def forward(self, x, pos):
        t = self.embed(x)
        b, hp, wp, d = t.shape
        t = self.encoder(t.reshape(b, hp * wp, d), pos)
        return self.recover(t.reshape(b, hp, wp, d))


def build_case(case: dict):
    """``(module, inputs)`` for a case, on its device and in its dtype; the module is in train mode."""
    device, dtype = torch.device(case["device"]), DTYPES[case["dtype"]]
    torch.manual_seed(case["seed"])
    if case["what"] == "attention" and case.get("impl") == "reference":
        module = _ReferenceStack(case)
        b, n = case["batch"], case["n"]
        x = torch.randn(b, n, case["d_model"])
        pos = torch.linspace(0, 1, n).view(1, n, 1).expand(b, n, case["pos_dim"]).contiguous()
        inputs = (x, pos)
    elif case["what"] == "attention" and case["kind"] == "window":
        module = _WindowStack(case)
        b, side = case["batch"], case["grid_side"]
        inputs = (torch.randn(b, side, side, case["d_model"]),)
    elif case["what"] == "attention" and case["kind"] == "patched":
        module = _PatchedSoftmax(case)
        b, side, t = case["batch"], case["grid_side"], case["tokens"]
        x = torch.randn(b, side, side, case["d_model"])
        pos = torch.linspace(0, 1, t).view(1, t, 1).expand(b, t, case["pos_dim"]).contiguous()
        inputs = (x, pos)
    elif case["what"] == "attention":
        from opformer.nn import Encoder
        from opformer.nn.attention import QUADRATIC

        kind_options = {}  # the layers refuse options their kind never uses
        if case["kind"] in QUADRATIC:
            kind_options["chunk_size"] = case["chunk_size"]
        if case["kind"] == "fourier":
            kind_options["fourier_order"] = case.get("fourier_order") or "quadratic"
        module = Encoder(
            case["layers"],
            case["d_model"],
            case["n_heads"],
            case["kind"],
            dim_feedforward=case["dim_feedforward"],
            pos_dim=case["pos_dim"],
            fused=case.get("fused", True),
            **kind_options,
        )
        b, n = case["batch"], case["n"]
        x = torch.randn(b, n, case["d_model"])
        pos = torch.linspace(0, 1, n).view(1, n, 1).expand(b, n, case["pos_dim"]).contiguous()
        inputs = (x, pos)
    elif case["what"] == "model":
        from opformer import models

        cfg = _model_cfg(case["preset"])
        module = models.build_model(cfg)
        inputs = tuple(models.example_inputs(cfg, case["batch"], case.get("grid_side") or case["n"]))
    else:
        raise ValueError(f"unknown case type {case['what']!r}")
    module = module.to(device=device, dtype=dtype).train()
    inputs = tuple(t.to(device=device, dtype=dtype) if t.is_floating_point() else t.to(device) for t in inputs)
    return module, inputs


def estimate_memory_bytes(case: dict) -> int:
    """A deliberately generous estimate of the peak memory of one forward+backward of an attention case.

    Linear part: about (26 d_model + 4 d_ff) numbers per point and layer are kept for backward, plus a quarter
    layer's worth of transients (calibrated on one galerkin layer, d_model 128, where it overestimates by ~1.3x);
    the fused galerkin/linear paths keep far less: (8 d_model + 2 d_ff), about 1.5x their measured peak.
    Quadratic part (fourier, and softmax when its n x n matrix is built): the batch*heads*n*n
    score matrix is saved per layer and two more such matrices live during backward; with ``chunk_size`` c only
    batch*heads*c*n numbers live at a time (each chunk is recomputed in backward).  Window: the linear part plus
    about 4 batch*heads*n*M^2 score-sized tensors per layer.  Patched: the softmax estimate on the tokens plus six
    grid-sized (batch*n*d_model) tensors.  Models: not estimated (0).
    """
    if case["what"] != "attention":
        return 0
    e = torch.tensor([], dtype=DTYPES[case["dtype"]]).element_size()
    if case["kind"] == "patched":  # the softmax stack on the tokens, plus the grid-sized input, patches and output
        tokens = {**case, "kind": "softmax", "n": case["tokens"], "compare_reference": False}
        return int(estimate_memory_bytes(tokens) + 6 * case["batch"] * case["n"] * case["d_model"] * e)
    b, n, d, h, L = case["batch"], case["n"], case["d_model"], case["n_heads"], case["layers"]
    per_point = 26 * d + 4 * case["dim_feedforward"]
    if case["kind"] in ("galerkin", "linear") and case.get("fused", True) and case.get("impl") != "reference":
        per_point = 8 * d + 2 * case["dim_feedforward"]  # the fused paths: measured 6 d + d_ff (4.0 KiB at d 128)
    linear = b * n * per_point * e * (L + 0.25)
    quad = 0
    if case["kind"] == "window":  # per layer: scores, biased, masked and softmaxed M^2 per token and head
        quad = (4 * L + 2) * b * h * n * case["window_size"] ** 2 * e
        return int(linear + quad)
    dh = d // h + case["pos_dim"]
    if case["kind"] == "softmax" or (
        case["kind"] == "fourier" and not fourier_linear_order(n, n, dh, dh, 0.0, case.get("fourier_order") or "quadratic")
    ):
        c = case["chunk_size"]
        if c is not None and c < n:
            quad = 3 * b * h * c * n * e
        elif case["kind"] == "softmax" and case.get("impl") != "reference" and case["dtype"] == "float32":
            quad = 2 * b * h * n * 1024 * e  # PyTorch's fused kernel works in blocks: no n x n matrix
        else:
            quad = (L + 2) * b * h * n * n * e
            if case.get("impl") == "reference":
                quad *= 2  # the reference also keeps the n x n dropout mask and a scaled copy of the scores
    total = int(linear + quad)
    if case.get("compare_reference") and case.get("impl") != "reference":  # the reference runs in the same process
        total += estimate_memory_bytes({**case, "impl": "reference", "compare_reference": False})
    return total
