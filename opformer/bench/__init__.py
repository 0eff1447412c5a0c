"""opformer.bench: forward+backward time, peak memory, FLOPs and achieved GFLOP/s of attention kernels and models.

Every record carries the machine it was measured on and that machine's own measured matmul rate, so each figure
can be read as a fraction of what the machine can do.  Command line: ``opformer bench attention|model ...``.
"""

import importlib

#: where each public name lives; imported on first use, so that the command line can build its parser without torch
_HOMES = {
    "cases": ("GRID_KINDS", "GRID_MODELS", "attention_case", "estimate_memory_bytes", "model_case"),
    "measure": ("count_flops", "count_flops_fake", "fwd_bwd_step", "interleaved_times", "machine_info", "matmul_rate"),
    "plot": ("fit_slopes", "loglog_slope", "plot_records"),
    "runner": ("machine_with_rates", "run_case"),
    "suite": ("REQUIRED_FIELDS", "bench_attention", "bench_model", "default_max_memory", "write_json"),
}
_WHERE = {name: module for module, names in _HOMES.items() for name in names}
_THREADS = ("apply_threads", "choose_threads", "oversubscription_warning")


def __getattr__(name: str):
    if name in _WHERE:
        value = getattr(importlib.import_module(f".{_WHERE[name]}", __name__), name)
    elif name in _THREADS:
        value = getattr(importlib.import_module("..threads", __name__), name)
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__():
    return sorted(list(globals()) + list(_WHERE) + list(_THREADS))


__all__ = [
    "attention_case",
    "model_case",
    "estimate_memory_bytes",
    "count_flops",
    "count_flops_fake",
    "fwd_bwd_step",
    "interleaved_times",
    "machine_info",
    "matmul_rate",
    "machine_with_rates",
    "run_case",
    "bench_attention",
    "bench_model",
    "default_max_memory",
    "write_json",
    "plot_records",
    "loglog_slope",
    "fit_slopes",
    "GRID_KINDS",
    "GRID_MODELS",
    "REQUIRED_FIELDS",
    "choose_threads",
    "apply_threads",
    "oversubscription_warning",
]
