"""Run one benchmark case and return its record; optionally in a fresh worker process (for clean peak memory).

Peak memory:
  - CUDA: ``torch.cuda.max_memory_allocated`` during the timed passes minus what was allocated before the first
    forward (parameters and inputs excluded), i.e. the activations, gradients and workspace of forward+backward.
  - CPU: the growth of the process's peak resident set size (Linux ``VmHWM`` in /proc/self/status, reset through
    /proc/self/clear_refs before the first forward) over the resident size just before it.  ``tracemalloc`` cannot
    be used: it only sees Python's allocator, not torch's.  Each case runs in a fresh worker process by default, so
    memory freed by an earlier case and kept by the C allocator does not hide a later case's growth.
"""

from __future__ import annotations

import gc
import json
import statistics
import subprocess
import sys
import time
from typing import Optional

import torch

from . import measure
from .cases import DTYPES, build_case, estimate_memory_bytes, set_tf32

__all__ = ["run_case", "run_case_inprocess", "machine_with_rates"]

_MARK = "@@opformer-bench-record@@"


def machine_with_rates(device: str = "cpu", dtype: str = "float32", size: Optional[int] = None) -> dict:
    """:func:`measure.machine_info` plus the measured fp32 matmul rate (and that of ``dtype`` if it is not fp32).

    The rate is the median of 5 square ``size``^3 products (default 2048 on CPU, 4096 on CUDA), in GFLOP/s.
    """
    info = measure.machine_info(device)
    set_tf32("float32")
    info["matmul_gflops_fp32"] = measure.matmul_rate(device, torch.float32, size=size) / 1e9
    info["matmul_size"] = size or measure.default_matmul_size(device)
    if dtype != "float32":
        set_tf32(dtype)
        info[f"matmul_gflops_{dtype}"] = measure.matmul_rate(device, DTYPES[dtype], size=size) / 1e9
        set_tf32("float32")
    return info


def _base_record(case: dict) -> dict:
    rec = {k: v for k, v in case.items() if k not in ("seed",)}
    rec.update(
        status="ok",
        note="",
        seconds_fwd_bwd=None,
        seconds_all=[],
        peak_memory_bytes=None,
        memory_method=None,
        flops_fwd_bwd=None,
        gflops_per_s=None,
        estimated_memory_bytes=estimate_memory_bytes(case),
    )
    return rec


def _is_oom(err: BaseException) -> bool:
    return isinstance(err, (MemoryError, getattr(torch.cuda, "OutOfMemoryError", MemoryError))) or (
        isinstance(err, RuntimeError) and ("out of memory" in str(err).lower() or "can't allocate" in str(err).lower())
    )


def run_case_inprocess(case: dict, machine: Optional[dict] = None) -> dict:
    """Measure one case in this process: FLOPs (one counted pass), then ``warmup`` + ``repeats`` timed passes."""
    from ..allocator import keep_freed_memory

    rec = _base_record(case)
    rec["malloc"] = "reuse" if keep_freed_memory() else "system"  # see opformer/allocator.py
    if case.get("threads"):
        torch.set_num_threads(int(case["threads"]))
    device = torch.device(case["device"])
    cuda = device.type == "cuda"
    set_tf32(case["dtype"])
    try:
        gc.collect()
        if cuda:
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats(device)
        module, inputs = build_case(case)
        rec["parameters"] = sum(p.numel() for p in module.parameters())
        run_module = torch.compile(module) if case["compile"] else module
        step = measure.fwd_bwd_step(run_module, *inputs)
        measure.sync(device)
        if cuda:
            base = torch.cuda.memory_allocated(device)
            torch.cuda.reset_peak_memory_stats(device)
        else:
            gc.collect()
            base = measure.current_rss_bytes()
            hwm_reset = measure.reset_peak_rss()
        t0 = time.perf_counter()
        step()  # first pass: compilation (if any), allocator warm-up, and the peak memory
        measure.sync(device)
        rec["seconds_first"] = time.perf_counter() - t0
        if cuda:
            rec["peak_memory_bytes"] = int(torch.cuda.max_memory_allocated(device) - base)
            rec["memory_method"] = "cuda.max_memory_allocated - allocated before forward"
        else:
            peak = measure.peak_rss_bytes()
            if base is not None and peak is not None:
                rec["peak_memory_bytes"] = int(peak - base)
                rec["memory_method"] = (
                    "VmHWM - VmRSS before forward" + ("" if hwm_reset else " (HWM not resettable: upper bound)")
                )
        if not cuda:  # live allocations (no allocator retention) and what autograd saves, on uncompiled passes
            uncompiled = measure.fwd_bwd_step(module, *inputs)
            rec["peak_live_bytes"] = measure.peak_live_bytes(uncompiled)
            rec["saved_activation_bytes"] = measure.saved_activation_bytes(
                uncompiled, exclude=[*module.parameters(), *inputs]
            )
            if rec["peak_live_bytes"] and rec["saved_activation_bytes"]:
                rec["peak_live_over_saved"] = rec["peak_live_bytes"] / rec["saved_activation_bytes"]
        # FLOPs on the uncompiled module (the counter needs eager dispatch); same math
        rec["flops_fwd_bwd"] = measure.count_flops(measure.fwd_bwd_step(module, *inputs))
        rec["flops_model_fwd_bwd"] = _model_flops(case, rec["flops_fwd_bwd"])
        # the case, the machine's matmul (and the reference), timed round-robin: the same load for all
        # in the case's dtype (tf32: float32 with the TF32 units allowed), so the fraction compares like with like
        mm, mm_flops = measure.matmul_step(device, DTYPES[case["dtype"]], case.get("matmul_size"))
        fns = {"case": step, "matmul": mm}
        if case.get("compare_reference"):
            ref_module, ref_inputs = build_case({**case, "impl": "reference"})
            ref_step = measure.fwd_bwd_step(ref_module, *ref_inputs)
            rec["reference_flops_fwd_bwd"] = measure.count_flops(ref_step)
            fns["reference"] = ref_step
        all_times = measure.interleaved_times(
            fns, repeats=case["repeats"], warmup=max(case["warmup"] - 1, 0), device=device
        )
        times = all_times["case"]
        rec["seconds_all"] = times
        rec["seconds_fwd_bwd"] = statistics.median(times)
        rec["gflops_per_s"] = rec["flops_fwd_bwd"] / rec["seconds_fwd_bwd"] / 1e9
        rec["model_gflops_per_s"] = rec["flops_model_fwd_bwd"] / rec["seconds_fwd_bwd"] / 1e9
        rec["matmul_size_interleaved"] = round((mm_flops / 2) ** (1 / 3))
        rec["matmul_dtype"] = case["dtype"]
        rec["matmul_gflops_interleaved"] = mm_flops / statistics.median(all_times["matmul"]) / 1e9
        if case["dtype"] == "float32":
            rec["matmul_gflops_fp32_interleaved"] = rec["matmul_gflops_interleaved"]
        if "reference" in all_times:
            rec["reference_seconds_all"] = all_times["reference"]
            rec["reference_seconds_fwd_bwd"] = statistics.median(all_times["reference"])
            rec["ratio_to_reference"] = rec["seconds_fwd_bwd"] / rec["reference_seconds_fwd_bwd"]
    except Exception as err:  # noqa: BLE001 - a case that fails is reported, not crashed
        rec["status"] = "skipped" if _is_oom(err) else "failed"
        rec["note"] = f"{type(err).__name__}: {str(err).splitlines()[0][:300] if str(err) else ''}"
    rec["loadavg"] = measure.loadavg()
    if machine is not None:
        _attach_machine(rec, machine)
    return rec


def _model_flops(case: dict, executed: int) -> int:
    """FLOPs of the layer as the paper's algorithm evaluates it (explicit heads, counted on the unfused twin): the
    fused paths reassociate the same function and execute fewer.  Equal to ``executed`` for other cases."""
    if case["what"] != "attention" or case.get("impl") == "reference" or not case.get("fused", True):
        return executed
    from ..nn import KERNELS, galerkin_attention, linear_attention

    if KERNELS.get(case["kind"]) not in (galerkin_attention, linear_attention):
        return executed
    twin, inputs = build_case({**case, "fused": False})
    return measure.count_flops(measure.fwd_bwd_step(twin, *inputs))


def _attach_machine(rec: dict, machine: dict) -> None:
    """Attach the machine; the fractions of the matmul rate use the rate timed interleaved with the case when there
    is one (same load), else the rate measured at the start of the run."""
    rec["machine"] = machine
    rate = machine.get("matmul_gflops_fp32")
    rec["matmul_gflops_fp32"] = rate
    rate = rec.get("matmul_gflops_interleaved") or rate
    if rate and rec.get("gflops_per_s"):
        rec["fraction_of_matmul_rate"] = rec["gflops_per_s"] / rate
    if rate and rec.get("model_gflops_per_s"):
        rec["fraction_of_matmul_rate_model_flops"] = rec["model_gflops_per_s"] / rate


def run_case(case: dict, *, machine: Optional[dict] = None, isolate: bool = True, timeout: Optional[float] = None):
    """Measure one case, in a fresh ``python -m opformer.bench.runner`` process when ``isolate`` (the default).

    A worker that dies (e.g. killed by the kernel for memory) or times out gives a record with status ``skipped``
    and a note, never an exception.
    """
    if not isolate:
        return run_case_inprocess(case, machine)
    cmd = [sys.executable, "-m", "opformer.bench.runner", json.dumps(case)]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        rec = _base_record(case)
        rec.update(status="skipped", note=f"timed out after {timeout} s")
        rec["loadavg"] = measure.loadavg()
        if machine is not None:
            _attach_machine(rec, machine)
        return rec
    for line in proc.stdout.splitlines():
        if line.startswith(_MARK):
            rec = json.loads(line[len(_MARK) :])
            break
    else:
        rec = _base_record(case)
        how = f"killed by signal {-proc.returncode}" if proc.returncode < 0 else f"exit status {proc.returncode}"
        tail = (proc.stderr or "").strip().splitlines()[-1:] if proc.stderr else []
        rec.update(
            status="skipped",
            note=f"worker process {how} (out of memory?)" + (f": {tail[0][:300]}" if tail else ""),
        )
        rec["loadavg"] = measure.loadavg()
    if machine is not None:
        _attach_machine(rec, machine)
    return rec


def _main(argv: list[str]) -> int:
    case = json.loads(argv[0])
    rec = run_case_inprocess(case)
    print(_MARK + json.dumps(rec), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
