"""Primitive measurements: wall time of forward+backward, FLOPs, peak memory, and the machine's matmul rate."""

from __future__ import annotations

import os
import platform
import statistics
import time
from typing import Callable, Optional

import torch

__all__ = [
    "sync",
    "time_fn",
    "interleaved_times",
    "fwd_bwd_step",
    "saved_activation_bytes",
    "peak_live_bytes",
    "count_flops",
    "count_flops_fake",
    "products_replay",
    "matmul_rate",
    "matmul_step",
    "default_matmul_size",
    "cpu_isa",
    "machine_info",
    "loadavg",
    "peak_rss_bytes",
    "reset_peak_rss",
]


def sync(device: torch.device | str) -> None:
    """Wait for queued kernels (CUDA); a no-op on CPU."""
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize()


def time_fn(fn: Callable[[], object], *, repeats: int = 5, warmup: int = 1, device="cpu") -> list[float]:
    """Seconds of ``repeats`` calls of ``fn`` after ``warmup`` untimed calls."""
    for _ in range(warmup):
        fn()
    sync(device)
    out = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        sync(device)
        out.append(time.perf_counter() - t0)
    return out


def interleaved_times(fns: dict[str, Callable[[], object]], *, repeats: int = 5, warmup: int = 1, device="cpu"):
    """Time several functions round-robin (A, B, A, B, ...) so that a change of machine load hits all of them alike.

    Returns ``{name: [seconds, ...]}``.
    """
    for _ in range(warmup):
        for fn in fns.values():
            fn()
    sync(device)
    out: dict[str, list[float]] = {k: [] for k in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            t0 = time.perf_counter()
            fn()
            sync(device)
            out[name].append(time.perf_counter() - t0)
    return out


def fwd_bwd_step(module: torch.nn.Module, *inputs) -> Callable[[], None]:
    """A closure doing forward, loss = mean(y^2), backward; parameter grads are dropped first (set to None).

    The loss is evaluated as a dot product, y.y / numel: the value and gradient of ``y.pow(2).mean()`` without its
    four n-sized temporaries in backward, so that the peak memory is the model's.
    """
    params = [p for p in module.parameters() if p.requires_grad]

    def step():
        for p in params:
            p.grad = None
        y = module(*inputs)
        if isinstance(y, dict):
            y = y.get("preds", next(iter(y.values())))
        if isinstance(y, (tuple, list)):
            y = y[0]
        if y.dtype not in (torch.float32, torch.float64):
            y = y.float()
        _MeanSquare.apply(y).backward()

    return step


class _MeanSquare(torch.autograd.Function):
    """mean(y^2) as a dot product (no n-sized temporary); backward 2 y g / numel (one n-sized gradient)."""

    @staticmethod
    def forward(ctx, y):
        ctx.save_for_backward(y)
        flat = y.reshape(-1)
        return torch.dot(flat, flat) / flat.numel()

    @staticmethod
    def backward(ctx, g):
        (y,) = ctx.saved_tensors
        return y * (g * (2.0 / y.numel()))


def saved_activation_bytes(fn: Callable[[], object], exclude=()) -> int:
    """Bytes of the distinct storages autograd saves for backward during ``fn()`` (saved-tensor hooks), leaving out
    the storages of ``exclude`` (parameters, inputs): the activations a forward+backward must keep."""
    skip = {t.untyped_storage().data_ptr() for t in exclude}
    seen: dict[int, int] = {}

    def pack(t):
        st = t.untyped_storage()
        if st.data_ptr() not in skip and st.nbytes() > 0:
            seen[st.data_ptr()] = st.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        fn()
    return sum(seen.values())


def _mallinfo2():
    """glibc's mallinfo2 (None elsewhere): bytes in use = uordblks (heap) + hblkhd (mmap'ed blocks)."""
    import ctypes

    class _MI2(ctypes.Structure):
        _fields_ = [(f, ctypes.c_size_t) for f in (
            "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost")]

    try:
        libc = ctypes.CDLL("libc.so.6")
        fn = libc.mallinfo2
    except (OSError, AttributeError):
        return None
    fn.restype = _MI2

    def live() -> int:
        m = fn()
        return m.uordblks + m.hblkhd

    return live


def peak_live_bytes(fn: Callable[[], object]) -> Optional[int]:
    """Peak of the heap bytes in use during ``fn()`` above those in use before it (glibc ``mallinfo2``, sampled after
    every aten operator through a dispatch mode): the allocations that were live at once, without what the C
    allocator keeps resident after a free (which the resident-set peak includes).  None where glibc is absent."""
    live = _mallinfo2()
    if live is None:
        return None
    from torch.utils._python_dispatch import TorchDispatchMode

    class _Peak(TorchDispatchMode):
        peak = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            self.peak = max(self.peak, live())
            return out

    with _Peak():  # the first use of a dispatch mode allocates for itself: not part of fn
        torch.zeros(1) + 1
    import gc

    gc.collect()
    mode = _Peak()
    base = mode.peak = live()
    with mode:
        fn()
    return max(mode.peak - base, 0)


def count_flops(fn: Callable[[], object]) -> int:
    """Total FLOPs of one call of ``fn`` (forward and backward if it does both), by ``torch.utils.flop_counter``.

    The counter sees matrix products and convolutions (2 FLOPs per multiply-add), which are what dominate attention;
    elementwise work (layer norm, softmax, activations) is not counted.
    """
    from torch.utils.flop_counter import FlopCounterMode

    with FlopCounterMode(display=False, custom_mapping=_extra_flop_formulas()) as counter:
        fn()
    return int(counter.get_total_flops())


def count_flops_fake(module: torch.nn.Module, *inputs) -> int:
    """FLOPs of one ``fwd_bwd_step(module, *inputs)`` counted on fake tensors: shapes only, no arithmetic, so that
    the asymptotic order can be checked at sizes too large to run.  Same count as :func:`count_flops` of the real
    step (the parameters and inputs are swapped for fake copies through ``torch.func.functional_call``)."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    mode = FakeTensorMode()
    fake = fake_module(module, mode)
    fake_inputs = [mode.from_tensor(t) if isinstance(t, torch.Tensor) else t for t in inputs]
    with mode:
        return count_flops(fwd_bwd_step(fake, *fake_inputs))


def fake_module(module: torch.nn.Module, mode) -> torch.nn.Module:
    """A module that runs ``module`` with fake copies of its parameters and buffers (made by the ``FakeTensorMode``
    ``mode``, needing gradients as the originals do), through ``torch.func.functional_call``: call it in ``mode``."""
    from torch.func import functional_call

    params = {k: mode.from_tensor(v) for k, v in module.named_parameters()}
    buffers = {k: mode.from_tensor(v) for k, v in module.named_buffers()}
    with mode:
        for name, p in module.named_parameters():
            params[name].requires_grad_(p.requires_grad)

    class _Fake(torch.nn.Module):
        def forward(self, *args):
            return functional_call(module, {**params, **buffers}, args)

    return _Fake()


def _product_flops(func, args) -> int:
    """2 x multiply-adds of one matrix product call (``mm``/``addmm``/``bmm``/``baddbmm``, their ``out=`` forms)."""
    name = func.overloadpacket.__name__
    a, b = (args[1], args[2]) if name in ("addmm", "baddbmm") else (args[0], args[1])
    batch = a.shape[0] if a.dim() == 3 else 1
    return 2 * batch * a.shape[-2] * a.shape[-1] * b.shape[-1]


def products_replay(fn: Callable[[], object]) -> tuple[Callable[[], None], int, int]:
    """The matrix products that one call of ``fn`` executes, replayed alone: ``(replay, calls, flops)``.

    ``replay()`` runs the same product ops (mm, addmm, bmm, baddbmm and their ``out=`` forms) in the same order, on
    tensors of the same shapes, strides and dtypes (each call its own buffers, filled with normal values, so that
    operands come from memory about as often as in ``fn``).  Its time against ``fn``'s is the share of ``fn`` that
    is products, and its rate against the machine's matmul rate the ceiling those shapes allow."""
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_map

    aten = torch.ops.aten
    products = {op for name in ("mm", "addmm", "bmm", "baddbmm") for op in
                (getattr(aten, name).default, getattr(aten, name).out)}
    calls: list = []

    def meta(t):
        if isinstance(t, torch.Tensor):
            return ("tensor", tuple(t.shape), tuple(t.stride()), t.dtype, t.device)
        return t

    class _Record(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            if func in products:
                calls.append((func, tree_map(meta, args), tree_map(meta, kwargs), _product_flops(func, args)))
            return func(*args, **kwargs)

    with _Record():
        fn()

    def is_meta(m) -> bool:
        return isinstance(m, tuple) and len(m) == 5 and m[0] == "tensor"

    def build(m):
        if is_meta(m):
            _, shape, stride, dtype, device = m
            need = 1 + sum((n - 1) * st for n, st in zip(shape, stride) if n > 0)
            return torch.randn(need, dtype=dtype, device=device).as_strided(shape, stride)
        return m

    ready = [(func, tree_map(build, args, is_leaf=is_meta), tree_map(build, kwargs, is_leaf=is_meta))
             for func, args, kwargs, _ in calls]

    def replay() -> None:
        for func, args, kwargs in ready:
            func(*args, **kwargs)

    return replay, len(calls), sum(c[3] for c in calls)


def _extra_flop_formulas() -> dict:
    """FLOP formulas the counter lacks: PyTorch's CPU fused softmax attention (same count as its CUDA kernels)."""
    from torch.utils import flop_counter as fc

    extra = {}
    fwd = getattr(torch.ops.aten, "_scaled_dot_product_flash_attention_for_cpu", None)
    bwd = getattr(torch.ops.aten, "_scaled_dot_product_flash_attention_for_cpu_backward", None)
    if fwd is not None and hasattr(fc, "sdpa_flop_count"):

        def fwd_flops(query, key, value, *args, out_shape=None, **kwargs) -> int:
            return fc.sdpa_flop_count(query, key, value)

        extra[fwd] = fwd_flops
    if bwd is not None and hasattr(fc, "sdpa_backward_flop_count"):

        def bwd_flops(grad_out, query, key, value, *args, out_shape=None, **kwargs) -> int:
            return fc.sdpa_backward_flop_count(grad_out, query, key, value)

        extra[bwd] = bwd_flops
    return extra


def default_matmul_size(device="cpu") -> int:
    """Size of the square product that measures the matmul rate: 2048 on CPU, 4096 on GPU."""
    return 4096 if torch.device(device).type == "cuda" else 2048


def matmul_step(device="cpu", dtype=torch.float32, size: Optional[int] = None) -> tuple[Callable[[], object], int]:
    """(a closure computing one ``size``^3 product, its FLOPs): to time the matmul rate interleaved with a case."""
    size = size or default_matmul_size(device)
    a = torch.randn(size, size, device=device, dtype=dtype)
    b = torch.randn(size, size, device=device, dtype=dtype)
    return (lambda: torch.matmul(a, b)), 2 * size**3


def matmul_rate(
    device="cpu", dtype=torch.float32, size: Optional[int] = None, repeats: int = 5, skinny: bool = False
) -> float:
    """Measured matrix-multiply rate in FLOP/s: median over ``repeats`` of a square ``size``^3 product.

    ``skinny=True`` instead times the shape of the Galerkin product K^T V: (128 x 65536) @ (65536 x 128).
    """
    device = torch.device(device)
    if size is None:
        size = default_matmul_size(device)
    if skinny:
        a = torch.randn(128, 65536, device=device, dtype=dtype)
        b = torch.randn(65536, 128, device=device, dtype=dtype)
        flops = 2 * 128 * 65536 * 128
    else:
        a = torch.randn(size, size, device=device, dtype=dtype)
        b = torch.randn(size, size, device=device, dtype=dtype)
        flops = 2 * size**3
    times = time_fn(lambda: torch.matmul(a, b), repeats=repeats, warmup=2, device=device)
    return flops / statistics.median(times)


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


#: instruction-set flags of /proc/cpuinfo that decide CPU matmul speed (vector width, fused multiply-add, bf16/int8)
ISA_FLAGS = ("avx2", "fma", "avx512f", "avx512_vnni", "avx512_bf16", "avx_vnni", "amx_tile", "amx_bf16", "amx_int8")


def cpu_isa() -> dict:
    """The CPU's vector ISA: ``isa`` ("AVX-512", "AVX2", ... from the /proc/cpuinfo flags), the relevant ``isa_flags``
    present, and ``torch_cpu_capability`` (the kernels torch dispatches to, e.g. "AVX2", "AVX512")."""
    flags: set[str] = set()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith(("flags", "Features")):
                    flags = set(line.split(":", 1)[1].split())
                    break
    except OSError:
        pass
    present = [f for f in ISA_FLAGS if f in flags]
    if "avx512f" in flags:
        isa = "AVX-512"
    elif "avx2" in flags:
        isa = "AVX2"
    elif flags:
        isa = "pre-AVX2" if platform.machine() in ("x86_64", "AMD64") else platform.machine()
    else:
        isa = platform.machine() or "unknown"
    try:
        cap = torch.backends.cpu.get_cpu_capability()
    except (AttributeError, RuntimeError):
        cap = None
    return {"isa": isa, "isa_flags": present, "torch_cpu_capability": cap}


def _total_ram() -> Optional[int]:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


def available_ram() -> Optional[int]:
    """MemAvailable from /proc/meminfo in bytes (None where unknown)."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return _total_ram()


def loadavg() -> Optional[list[float]]:
    """The 1, 5 and 15 minute load averages (None where the OS has none)."""
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None


def machine_info(device="cpu") -> dict:
    """What the figures were measured on: CPU model, cores, threads used, RAM, GPU, torch version, load."""
    from ..threads import available_cpus

    device = torch.device(device)
    info = {
        "cpu": _cpu_model(),
        **cpu_isa(),
        "cpu_count": os.cpu_count(),
        "cpus_available": available_cpus()[0],
        "torch_threads": torch.get_num_threads(),
        "ram_bytes": _total_ram(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "device": device.type,
        "loadavg": loadavg(),
    }
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        info.update(gpu=props.name, gpu_memory_bytes=props.total_memory, cuda=torch.version.cuda)
    return info


def _status_kb(key: str) -> Optional[int]:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


def reset_peak_rss() -> bool:
    """Reset the kernel's peak-RSS mark (VmHWM) of this process by writing 5 to /proc/self/clear_refs (Linux).

    Returns whether it worked; where it does not, run each case in a fresh process instead.
    """
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def peak_rss_bytes() -> Optional[int]:
    """Peak resident set size of this process in bytes (VmHWM; falls back to getrusage's ru_maxrss)."""
    kb = _status_kb("VmHWM")
    if kb is None:
        try:
            import resource

            kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        except ImportError:
            return None
    return kb * 1024


def current_rss_bytes() -> Optional[int]:
    kb = _status_kb("VmRSS")
    return None if kb is None else kb * 1024
