"""What one benchmark case builds: an encoder stack of one attention kind, or a whole model from a preset.

A case is a plain dict (so that it can be sent to a worker process as JSON); :func:`build_case` turns it into a
module and its inputs, and :func:`estimate_memory_bytes` predicts its peak memory before anything is allocated.
"""

from __future__ import annotations

from typing import Optional

import torch

from ..nn.attention import FOURIER_ORDERS, fourier_linear_order

__all__ = ["attention_case", "model_case", "build_case", "estimate_memory_bytes", "DTYPES"]

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float64": torch.float64}


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
) -> dict:
    """An encoder stack of ``layers`` layers of attention ``kind`` on ``n`` points (eq. 4 scheme, FFN 2*d_model).

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
        "chunk_size": None if chunk_size is None else int(chunk_size),
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
    }


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
    """A whole model from ``opformer.models.model_preset(preset)`` at resolution ``n`` (points per dimension)."""
    from opformer.models import model_preset

    cfg = model_preset(preset)
    return {
        "what": "model",
        "preset": preset,
        "model": cfg.get("name"),
        "kind": cfg.get("kind", cfg.get("name")),
        "d_model": cfg.get("d_model", cfg.get("width")),
        "n_heads": cfg.get("n_heads"),
        "layers": cfg.get("num_layers"),
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
    elif case["what"] == "attention":
        from opformer.nn import Encoder

        module = Encoder(
            case["layers"],
            case["d_model"],
            case["n_heads"],
            case["kind"],
            dim_feedforward=case["dim_feedforward"],
            pos_dim=case["pos_dim"],
            chunk_size=case["chunk_size"],
            fourier_order=case.get("fourier_order") or "quadratic",
            fused=case.get("fused", True),
        )
        b, n = case["batch"], case["n"]
        x = torch.randn(b, n, case["d_model"])
        pos = torch.linspace(0, 1, n).view(1, n, 1).expand(b, n, case["pos_dim"]).contiguous()
        inputs = (x, pos)
    elif case["what"] == "model":
        from opformer import models

        cfg = models.model_preset(case["preset"])
        module = models.build_model(cfg)
        inputs = tuple(models.example_inputs(cfg, case["batch"], case["n"]))
    else:
        raise ValueError(f"unknown case type {case['what']!r}")
    module = module.to(device=device, dtype=dtype).train()
    inputs = tuple(t.to(device=device, dtype=dtype) if t.is_floating_point() else t.to(device) for t in inputs)
    return module, inputs


def estimate_memory_bytes(case: dict) -> int:
    """A deliberately generous estimate of the peak memory of one forward+backward of an attention case.

    Linear part: about (26 d_model + 4 d_ff) numbers per point and layer are kept for backward, plus a quarter
    layer's worth of transients (calibrated on one galerkin layer, d_model 128, where it overestimates by ~1.3x).  Quadratic part (fourier, and softmax when its n x n matrix is built): the batch*heads*n*n
    score matrix is saved per layer and two more such matrices live during backward; with ``chunk_size`` c only
    batch*heads*c*n numbers live at a time (each chunk is recomputed in backward).  Models: not estimated (0).
    """
    if case["what"] != "attention":
        return 0
    e = torch.tensor([], dtype=DTYPES[case["dtype"]]).element_size()
    b, n, d, h, L = case["batch"], case["n"], case["d_model"], case["n_heads"], case["layers"]
    linear = b * n * (26 * d + 4 * case["dim_feedforward"]) * e * (L + 0.25)
    quad = 0
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
