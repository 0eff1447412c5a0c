"""Our EncoderLayer vs the paper's reference SimpleTransformerEncoderLayer (galerkin-transformer 0.2.1), interleaved.

One layer (d_model 128, 4 heads, FFN 256, pos_dim 1, batch 4, train mode, all configurable dropouts 0), forward +
backward of mean(y^2).  In one process and round-robin on the same input: our layer, the reference with its
hard-wired p=0.5 attention dropout ("ref", what its users pay), the reference with that dropout patched out
("ref-nodrop"), optionally our layer from an older source tree (``--baseline-src``: before/after in one run), and a
2048^3 fp32 matmul (the machine's rate under the same load).  Each figure is the median of ``--repeats`` after
``--warmup`` untimed passes; the 1-minute load average is printed before and after each case.

"of matmul" = FLOPs of the layer as the paper's algorithm evaluates it (our explicit-heads path,
``SimpleAttention(fused=False)``, counted by torch.utils.flop_counter; the same products as the reference) / our
time / the interleaved matmul rate.  "exec" uses the FLOPs our layer actually executes instead (the fused galerkin
and linear paths reassociate the same function and execute fewer).

Targets: galerkin and linear at n=8192: ours/ref <= 0.8 and >= 0.7 of the matmul rate; fourier and softmax at
n=2048: ours/ref <= 0.6.

"prod" (``--products``): our layer's matrix products replayed alone (same ops, shapes, strides, order; their own
buffers), their time as a share of our layer's and their rate as a fraction of the matmul rate: the ceiling that
those product shapes allow, and what the rest of the layer (norms, exponentials, sums) costs on top.

Usage:  python benchmarks/compare_reference.py [--cases galerkin:8192 linear:8192 ...] [--threads 1]
            [--baseline-src DIR] [--products] [--json FILE]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import sys
import time

import torch

from opformer.bench.measure import (
    count_flops,
    fwd_bwd_step,
    products_replay,
    interleaved_times,
    loadavg,
    machine_info,
    matmul_step,
)
from opformer.bench.reference import make_reference_layer
from opformer.allocator import keep_freed_memory
from opformer.threads import choose_threads, oversubscription_warning
from opformer.nn import EncoderLayer

TARGETS = {  # (kind, n): (max ours/ref, min fraction of the matmul rate)
    ("galerkin", 8192): (0.8, 0.7),
    ("linear", 8192): (0.8, 0.7),
    ("fourier", 2048): (0.6, None),
    ("softmax", 2048): (0.6, None),
}
DEFAULT_CASES = ["galerkin:8192", "linear:8192", "fourier:2048", "softmax:2048"]


def load_baseline(src: str):
    """The ``nn`` subpackage of the ``opformer`` package under ``src``, imported as ``opformer_baseline``."""
    root = os.path.join(src, "opformer")
    spec = importlib.util.spec_from_file_location(
        "opformer_baseline", os.path.join(root, "__init__.py"), submodule_search_locations=[root]
    )
    pkg = importlib.util.module_from_spec(spec)
    sys.modules["opformer_baseline"] = pkg
    spec.loader.exec_module(pkg)
    return importlib.import_module("opformer_baseline.nn")


def ours_layer(kind: str, args, nn_module=None, **kw) -> torch.nn.Module:
    # same configuration as the reference: eq. (4) scheme, eta = delta = 0.01, the reference's 1/sqrt(d) for fourier
    layer_cls = EncoderLayer if nn_module is None else nn_module.EncoderLayer
    scale = "sqrt" if kind == "fourier" else None
    return layer_cls(args.d_model, args.heads, kind, dim_feedforward=args.d_ff, pos_dim=args.pos_dim, scale=scale,
                     **kw)


def run_case(kind, n, args, baseline=None) -> dict:
    torch.manual_seed(0)
    x = torch.randn(args.batch, n, args.d_model)
    pos = torch.rand(args.batch, n, args.pos_dim)
    layers = {"ours": ours_layer(kind, args)}
    if baseline is not None:
        layers["baseline"] = ours_layer(kind, args, baseline)
    layers["ref"] = make_reference_layer(kind, args.d_model, args.heads, args.d_ff, args.pos_dim, attn_dropout_bug=True)
    layers["ref_nodrop"] = make_reference_layer(
        kind, args.d_model, args.heads, args.d_ff, args.pos_dim, attn_dropout_bug=False
    )
    for m in layers.values():
        m.train()
    steps = {name: fwd_bwd_step(m, x, pos) for name, m in layers.items()}
    explicit = ours_layer(kind, args, fused=False).train() if kind in ("galerkin", "linear") else layers["ours"]
    flops_model = count_flops(fwd_bwd_step(explicit, x, pos))
    flops_exec = count_flops(steps["ours"])
    mm, mm_flops = matmul_step("cpu", torch.float32, args.matmul_size)
    steps["matmul"] = mm
    if args.products:  # our layer's matrix products alone, same shapes and order: the ceiling they allow
        steps["products"], n_products, products_flops = products_replay(steps["ours"])
    load0 = loadavg()
    times = interleaved_times(steps, repeats=args.repeats, warmup=args.warmup)
    med = {k: statistics.median(v) for k, v in times.items()}
    rate = mm_flops / med["matmul"]
    rec = {
        "kind": kind, "n": n, "d_model": args.d_model, "n_heads": args.heads, "dim_feedforward": args.d_ff,
        "pos_dim": args.pos_dim, "batch": args.batch,
        "seconds": med, "all_seconds": times,
        "matmul_size": args.matmul_size, "matmul_gflops_fp32_interleaved": rate / 1e9,
        "flops_model_fwd_bwd": flops_model, "flops_executed_fwd_bwd": flops_exec,
        "fraction_of_matmul_rate": flops_model / med["ours"] / rate,
        "fraction_of_matmul_rate_executed": flops_exec / med["ours"] / rate,
        "ratio_ours_over_ref": med["ours"] / med["ref"],
        "ratio_ours_over_ref_nodrop": med["ours"] / med["ref_nodrop"],
        "loadavg_before": load0, "loadavg_after": loadavg(),
    }
    if args.products:
        rec["products_calls"], rec["products_flops"] = n_products, products_flops
        rec["products_share_of_ours"] = med["products"] / med["ours"]
        rec["products_fraction_of_matmul_rate"] = products_flops / med["products"] / rate
    if baseline is not None:
        rec["ratio_baseline_over_ref"] = med["baseline"] / med["ref"]
        rec["fraction_of_matmul_rate_baseline"] = flops_model / med["baseline"] / rate
    target = TARGETS.get((kind, n))
    if target is not None:
        max_ratio, min_frac = target
        rec["target_ratio"], rec["target_fraction_of_matmul"] = max_ratio, min_frac
        rec["target_met"] = rec["ratio_ours_over_ref"] <= max_ratio and (
            min_frac is None or rec["fraction_of_matmul_rate"] >= min_frac
        )
    return rec


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cases", nargs="+", default=DEFAULT_CASES, help="kind:n pairs")
    ap.add_argument("--d-model", type=int, default=128)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--d-ff", type=int, default=256)
    ap.add_argument("--pos-dim", type=int, default=1)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--threads", type=int, default=None,
                    help="torch threads (default: the CPUs this process may use: affinity and cgroup quota)")
    ap.add_argument("--matmul-size", type=int, default=2048)
    ap.add_argument("--baseline-src", default=None,
                    help="a directory holding an older opformer package: its layer is timed in the same round-robin")
    ap.add_argument("--products", action="store_true",
                    help="also time our layer's matrix products alone (same shapes, strides and order): their share "
                         "of our time and their fraction of the matmul rate")
    ap.add_argument("--json", default=None, help="write the records here")
    args = ap.parse_args(argv)
    args.threads, note = choose_threads(args.threads)
    torch.set_num_threads(args.threads)
    memory = keep_freed_memory()  # as opformer train/bench do; OPFORMER_MALLOC=system leaves glibc's defaults
    baseline = load_baseline(args.baseline_src) if args.baseline_src else None
    info = machine_info()
    print(f"# {info['cpu']} ({info['isa']}: {' '.join(info['isa_flags'])}; torch kernels {info['torch_cpu_capability']})"
          f", {info['cpu_count']} cores, torch {info['torch']}; torch threads: {note}; load {info['loadavg']}")
    print(f"# {memory or 'memory: the allocator as the system set it'}")
    warn = oversubscription_warning(args.threads)
    if warn:
        print(f"# {warn}")
    print(f"# d_model={args.d_model} heads={args.heads} d_ff={args.d_ff} pos_dim={args.pos_dim} batch={args.batch}; "
          f"fwd+bwd seconds, median of {args.repeats}; matmul {args.matmul_size}^3 fp32 interleaved")
    hdr = (f"{'kind':9s} {'n':>6s} {'ours':>7s} " + (f"{'before':>7s} " if baseline else "")
           + f"{'ref':>7s} {'ref-nd':>7s} {'ours/ref':>8s} " + (f"{'bef/ref':>7s} " if baseline else "")
           + f"{'of mm':>6s} {'exec':>5s} " + (f"{'bef mm':>6s} " if baseline else "")
           + (f"{'prod':>5s} {'prod mm':>7s} " if args.products else "")
           + f"{'mm GF/s':>7s} {'met':>4s} load")
    print(hdr, flush=True)
    records = []
    for case in args.cases:
        kind, n = case.split(":")
        rec = run_case(kind, int(n), args, baseline)
        records.append(rec)
        s = rec["seconds"]
        met = rec.get("target_met")
        line = f"{kind:9s} {int(n):6d} {s['ours']:7.4f} " + (f"{s['baseline']:7.4f} " if baseline else "")
        line += f"{s['ref']:7.4f} {s['ref_nodrop']:7.4f} {rec['ratio_ours_over_ref']:8.3f} "
        if baseline:
            line += f"{rec['ratio_baseline_over_ref']:7.3f} "
        line += f"{rec['fraction_of_matmul_rate']:6.2f} {rec['fraction_of_matmul_rate_executed']:5.2f} "
        if baseline:
            line += f"{rec['fraction_of_matmul_rate_baseline']:6.2f} "
        if args.products:
            line += f"{rec['products_share_of_ours']:5.2f} {rec['products_fraction_of_matmul_rate']:7.2f} "
        line += (f"{rec['matmul_gflops_fp32_interleaved']:7.1f} {'' if met is None else ('yes' if met else 'NO'):>4s} "
                 f"{rec['loadavg_before'][0]}->{rec['loadavg_after'][0]}")
        print(line, flush=True)
    if args.json:
        with open(args.json + ".tmp", "w") as f:
            json.dump({"machine": info, "threads_note": note, "malloc": "reuse" if memory else "system", "args": vars(args), "records": records,
                       "time": time.time()}, f, indent=1)
        os.replace(args.json + ".tmp", args.json)
    return 0 if all(r.get("target_met", True) for r in records) else 1


if __name__ == "__main__":
    sys.exit(main())
