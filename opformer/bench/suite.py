"""Sweeps: every (kind, n) of an attention benchmark, or one model preset; skip what would not fit in memory."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Callable, Iterable, Optional

from . import measure
from .cases import attention_case, estimate_memory_bytes, model_case, model_memory_estimate_bytes
from .runner import machine_with_rates, run_case

__all__ = ["bench_attention", "bench_model", "default_max_memory", "write_json", "REQUIRED_FIELDS", "Interrupted"]


class Interrupted(KeyboardInterrupt):
    """Ctrl-C (or SIGINT) during a sweep: ``records`` holds the records of the cases measured before it."""

    def __init__(self, records: list[dict]):
        super().__init__()
        self.records = records


#: fields every record has (the JSON schema the tests check)
REQUIRED_FIELDS = (
    "kind", "n", "d_model", "n_heads", "batch", "seconds_fwd_bwd", "peak_memory_bytes", "flops_fwd_bwd",
    "gflops_per_s", "status", "note", "machine", "matmul_gflops_fp32",
)


def default_max_memory(device: str = "cpu") -> int:
    """80% of the available RAM (CPU) or of the GPU's memory (CUDA)."""
    if device.startswith("cuda"):
        import torch

        return int(0.8 * torch.cuda.get_device_properties(torch.device(device)).total_memory)
    avail = measure.available_ram()
    return int(0.8 * avail) if avail else 8 << 30


def _size(nbytes: int) -> str:
    """A memory size for a note: GiB with one decimal from 1 GiB up, else MiB (so 15 MiB against a 10 MiB budget
    does not read "0.0 GiB exceeds 0.0 GiB")."""
    return f"{nbytes / 2**30:.1f} GiB" if nbytes >= 2**30 else f"{nbytes / 2**20:.1f} MiB"


def _skipped(case: dict, note: str, machine: dict) -> dict:
    rec = dict(case)
    rec.pop("seed", None)
    rec.update(
        status="skipped", note=note, seconds_fwd_bwd=None, seconds_all=[], peak_memory_bytes=None,
        memory_method=None, flops_fwd_bwd=None, gflops_per_s=None, estimated_memory_bytes=estimate_memory_bytes(case),
        loadavg=measure.loadavg(), machine=machine, matmul_gflops_fp32=machine.get("matmul_gflops_fp32"),
    )
    return rec


def bench_attention(
    kinds: Iterable[str],
    ns: Iterable[int],
    *,
    max_memory: Optional[int] = None,
    isolate: bool = True,
    timeout: Optional[float] = None,
    machine: Optional[dict] = None,
    log: Optional[Callable[[dict], None]] = None,
    **case_kwargs,
) -> list[dict]:
    """Forward+backward time, peak memory, FLOPs and GFLOP/s of an encoder stack for every kind and n.

    ``case_kwargs`` go to :func:`~opformer.bench.cases.attention_case` (d_model, n_heads, batch, layers, chunk_size,
    device, dtype, compile, repeats, warmup, threads).  A case whose estimated memory exceeds ``max_memory``
    (default: :func:`default_max_memory`) is not run and is reported with status ``skipped`` and a note; so is a
    case whose worker process dies or runs out of memory.  Ctrl-C raises :class:`Interrupted` with the records
    measured so far.
    """
    device = case_kwargs.get("device", "cpu")
    if max_memory is None:
        max_memory = default_max_memory(device)
    if machine is None:
        machine = machine_with_rates(device, case_kwargs.get("dtype", "float32"))

    def skip(case: dict) -> Optional[dict]:
        est = estimate_memory_bytes(case)
        if est > max_memory:
            return _skipped(case, f"estimated memory {_size(est)} exceeds the budget {_size(max_memory)}", machine)
        return None

    cases = (attention_case(kind, n, **case_kwargs) for kind in kinds for n in ns)
    return _run_all(cases, skip, machine=machine, isolate=isolate, timeout=timeout, log=log)


def bench_model(
    preset: str,
    ns: Iterable[int],
    *,
    max_memory: Optional[int] = None,
    isolate: bool = True,
    timeout: Optional[float] = None,
    machine: Optional[dict] = None,
    log: Optional[Callable[[dict], None]] = None,
    **case_kwargs,
) -> list[dict]:
    """The same figures for a whole model built by ``opformer.models`` from a named preset, at each resolution n
    (Ctrl-C: :class:`Interrupted`, as :func:`bench_attention`).  A resolution whose estimated memory
    (:func:`~opformer.bench.cases.model_memory_estimate_bytes`) exceeds ``max_memory`` (default
    :func:`default_max_memory`) is not run and is reported with status ``skipped`` and a note."""
    device = case_kwargs.get("device", "cpu")
    if max_memory is None:
        max_memory = default_max_memory(device)
    if machine is None:
        machine = machine_with_rates(device, case_kwargs.get("dtype", "float32"))

    def skip(case: dict) -> Optional[dict]:
        est = model_memory_estimate_bytes(case)
        if est is None or est <= max_memory:
            return None
        rec = _skipped(case, f"estimated memory {_size(est)} (the activations saved for backward) "
                       f"exceeds the budget {_size(max_memory)}", machine)
        rec["estimated_memory_bytes"] = est
        return rec

    cases = (model_case(preset, n, **case_kwargs) for n in ns)
    return _run_all(cases, skip, machine=machine, isolate=isolate, timeout=timeout, log=log)


def _run_all(cases: Iterable[dict], skip: Callable[[dict], Optional[dict]], *, machine: dict, isolate: bool,
             timeout: Optional[float], log: Optional[Callable[[dict], None]]) -> list[dict]:
    """The record of each case: ``skip(case)`` where that gives one (a case not to run), else the case run; each
    passed to ``log`` as it comes.  Ctrl-C raises :class:`Interrupted` with the records so far."""
    records = []
    try:
        for case in cases:
            rec = skip(case)
            if rec is None:
                rec = run_case(case, machine=machine, isolate=isolate, timeout=timeout)
            records.append(rec)
            if log is not None:
                log(rec)
    except KeyboardInterrupt:
        raise Interrupted(records) from None
    return records


def write_json(records: list[dict], path: str) -> None:
    """Write the records as a JSON list (atomically: a temporary file renamed), its folder made if missing."""
    from ..atomic import atomic_write_text

    Path(path).parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(Path(path), json.dumps(records, indent=1, default=str))
