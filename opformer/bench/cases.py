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
    "model_memory_estimate_bytes",
    "check_model_size",
    "default_model_n",
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
    from opformer.models import MODEL_PRESETS, model_preset

    try:
        return model_preset(preset)
    except ValueError:
        pass
    import difflib

    # the nearest names among both sets: "scot-smal" is near a 2D model, not a paper preset
    names = [*MODEL_PRESETS, *GRID_MODELS]
    folded = {n.lower(): n for n in names}
    near = ([folded[str(preset).lower()]] if str(preset).lower() in folded
            else difflib.get_close_matches(str(preset), names, n=3))
    hint = f"did you mean {', '.join(repr(n) for n in near)}? " if near else ""
    raise ValueError(f"unknown model preset {preset!r}; {hint}paper presets: {', '.join(MODEL_PRESETS)}; "
                     f"2D models by name: {', '.join(GRID_MODELS)}") from None


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


def _saved_bytes_fake(case: dict, size: int) -> int:
    """Bytes of the tensors autograd saves in one forward+backward of the case's model at resolution ``size``
    (points per dimension; the side of the grid for :data:`GRID_MODELS`), counted on fake tensors: shapes only,
    nothing allocated, no arithmetic."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    from opformer import models

    from .measure import fake_module, fwd_bwd_step

    cfg = _model_cfg(case["preset"])
    with torch.random.fork_rng(devices=[]):  # the caller's random stream stays as it was
        torch.manual_seed(case.get("seed", 0))
        module = models.build_model(cfg).to(dtype=DTYPES[case["dtype"]]).train()
    mode = FakeTensorMode(allow_non_fake_inputs=True)
    fake = fake_module(module, mode)
    total = 0

    def pack(t):
        nonlocal total
        total += t.numel() * t.element_size()
        return t

    with mode:
        inputs = [t.to(DTYPES[case["dtype"]]) if t.is_floating_point() else t
                  for t in models.example_inputs(cfg, case["batch"], size)]
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            fwd_bwd_step(fake, *inputs)()
    return total


def default_model_n(preset: str) -> int:
    """The resolution ``bench model`` measures a preset at unless told: 16384 points (128^2) for the 2D models of
    :data:`GRID_MODELS`; for the paper presets the paper's, points per dimension: 8192 in 1D (Burgers, Table 1),
    141 in 2D (Darcy's fine grid, 141^2 points; 8192 per dimension would be 8192^2)."""
    if preset in GRID_MODELS:
        return 16384
    # an unknown name (no dimension): refused with its own message when its case is made
    return 141 if _model_dim({"preset": preset}) == 2 else 8192


def _model_dim(case: dict) -> Optional[int]:
    """The number of space dimensions of a model case's grid (None for a model that cannot be resolved)."""
    if case["preset"] in GRID_MODELS:
        return 2
    from opformer.models.registry import _resolve

    try:
        return _resolve(_model_cfg(case["preset"]))[0].spatial_dim
    except (ValueError, KeyError, TypeError, AttributeError):
        return None


def check_model_size(case: dict) -> None:
    """A ValueError (one line) when the case's model refuses its resolution: too few points (every model needs 2
    per dimension), or fewer than its patches need (scot, vit).  Checked with a forward+backward on fake tensors
    (shapes only) at small resolutions, where the models set their limits; larger ones are not checked."""
    size = case.get("grid_side") or case["n"]
    if size > (64 if _model_dim(case) == 2 else 1024):
        return
    try:
        _saved_bytes_fake(case, size)
    except ValueError as err:
        text = str(err).splitlines()[0] if str(err) else type(err).__name__
        if text.startswith("resolution must be"):  # the command's flag, not the library's argument name
            text = text.replace("resolution must be an int", "--n must be", 1)
        raise ValueError(f"model {case['preset']!r} at n={case['n']}: {text}") from None
    except Exception:  # noqa: BLE001 - not a refusal of the size: the run reports it
        pass


def model_memory_estimate_bytes(case: dict) -> Optional[int]:
    """An estimate of the memory a whole-model case (``what`` "model") needs, to skip sizes that cannot fit: the
    activations autograd saves for backward, counted on fake tensors (:func:`_saved_bytes_fake`: shapes only) at
    two small resolutions and extrapolated linearly in the number of grid points to the case's, plus the input.
    Exact for the models whose saved activations grow linearly in the points (burgers-gt, darcy-fno, scot: the
    count at the case's own size is the same), and the peak then exceeds it by the transient work space of backward
    (a third more for burgers-gt at n = 1024).  A model whose memory grows faster than its points (the n^2 score
    matrices of the softmax and Fourier kinds where they are formed) needs more; one whose saved activations grow
    slower than its points (darcy-gt: fixed-size work on its coarse grid) is overestimated: 6% at 141^2, 16% at
    256^2 (``--max-memory`` then lets a case run).  None for a case no larger than the sizes counted, and where the
    fake tensors cannot run the model (the case is then run as it is).  Counting at the case's own size is no
    option: fake tensors still take time in proportion to the sizes."""
    if case.get("what") != "model":
        return None
    grid, dim = case["preset"] in GRID_MODELS, _model_dim(case)
    if dim is None:
        return None
    flat = dim == 2
    points = case["n"] if grid else case["n"] ** dim  # grid models: n is already the number of points
    small = (32, 64) if flat else (512, 1024)  # sides / resolutions the models all take
    pa, pb = (s**2 if flat else s for s in small)
    if points <= pb:
        return None  # small enough to run: nothing to skip
    try:
        a, b = (_saved_bytes_fake(case, s) for s in small)
    except Exception:  # noqa: BLE001 - a model the fake tensors cannot run: not estimated
        return None
    per_point = max(b - a, 0) / (pb - pa)
    element = torch.tensor([], dtype=DTYPES[case["dtype"]]).element_size()
    return int(b + per_point * (points - pb) + case["batch"] * points * element)
