"""opformer.bench: forward+backward time, peak memory, FLOPs and achieved GFLOP/s of attention kernels and models.

Every record carries the machine it was measured on and that machine's own measured matmul rate, so each figure
can be read as a fraction of what the machine can do.  Command line: ``opformer bench attention|model ...``.
"""

from .cases import GRID_KINDS, GRID_MODELS, attention_case, estimate_memory_bytes, model_case
from .measure import count_flops, count_flops_fake, fwd_bwd_step, interleaved_times, machine_info, matmul_rate
from .plot import fit_slopes, loglog_slope, plot_records
from .runner import machine_with_rates, run_case
from .suite import REQUIRED_FIELDS, bench_attention, bench_model, default_max_memory, write_json
from ..threads import apply_threads, choose_threads, oversubscription_warning

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
