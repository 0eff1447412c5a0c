"""Time and page faults of a training step with freed memory kept for reuse (opformer/allocator.py) and without.

Each case runs in fresh processes, alternating ``OPFORMER_MALLOC=system`` (glibc's defaults) and the default
(freed blocks up to 1 GiB kept), ``--rounds`` times each, so that both see the same load; a step is forward +
backward of mean(y^2) and an AdamW step, median over ``--repeats`` after ``--warmup`` steps.  Minor page faults
per step come from ``getrusage`` and do not depend on the load.

Usage:  python benchmarks/malloc_reuse.py [--cases attention:linear:8192 model:darcy-gt:141 ...] [--threads 1]
            [--rounds 3] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

WORKER = r"""
import json, resource, statistics, sys, time
import torch
from opformer.allocator import keep_freed_memory
from opformer.bench.cases import attention_case, build_case, model_case
what, name, n, threads, warmup, repeats = sys.argv[1:7]
torch.set_num_threads(int(threads))
applied = keep_freed_memory() is not None
case = attention_case(name, int(n)) if what == "attention" else model_case(name, int(n))
module, inputs = build_case(case)
if what == "attention":
    inputs[0].requires_grad_(True)
opt = torch.optim.AdamW(module.parameters(), lr=1e-6)
def step():
    y = module(*inputs)
    y = y[0] if isinstance(y, tuple) else y
    (y.float() ** 2).mean().backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
for _ in range(int(warmup)):
    step()
times, faults = [], []
for _ in range(int(repeats)):
    f0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    t0 = time.perf_counter()
    step()
    times.append(time.perf_counter() - t0)
    faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0)
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
print(json.dumps({"applied": applied, "seconds": statistics.median(times), "faults": statistics.median(faults),
                  "peak_rss": peak}))
"""


def _run(spec: str, mode: str, args) -> dict:
    what, name, n = spec.split(":")
    env = dict(os.environ)
    env.pop("OPFORMER_MALLOC", None)
    if mode == "system":
        env["OPFORMER_MALLOC"] = "system"
    out = subprocess.run([sys.executable, "-c", WORKER, what, name, n, str(args.threads), str(args.warmup),
                          str(args.repeats)], capture_output=True, text=True, env=env, timeout=3600)
    if out.returncode:
        raise SystemExit(f"case {spec} ({mode}) failed: {out.stderr.strip().splitlines()[-1:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cases", nargs="+", default=["attention:galerkin:8192", "attention:linear:8192",
                                                   "model:burgers-ft:8192", "model:darcy-gt:141"],
                    help="attention:KIND:N or model:PRESET:N (N: points, or the grid side of a 2D preset)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=3, help="processes per setting, alternating")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    from opformer.bench.measure import machine_info

    info = machine_info()
    print(f"# {info['cpu']} ({info['isa']}; torch kernels {info['torch_cpu_capability']}), torch {info['torch']}, "
          f"{args.threads} threads; load {info['loadavg']}; median of {args.repeats} steps after {args.warmup}, "
          f"{args.rounds} processes per setting, alternating", flush=True)
    print(f"{'case':28s} {'system [s]':>10s} {'reuse [s]':>10s} {'reuse/system':>12s} {'faults/step system':>18s} "
          f"{'reuse':>8s} {'peak RSS system/reuse [MiB]':>28s}", flush=True)
    records = []
    for spec in args.cases:
        runs = {"system": [], "reuse": []}
        for _ in range(args.rounds):
            for mode in ("system", "reuse"):
                runs[mode].append(_run(spec, mode, args))
        s = {m: statistics.median(r["seconds"] for r in runs[m]) for m in runs}
        f = {m: statistics.median(r["faults"] for r in runs[m]) for m in runs}
        p = {m: max(r["peak_rss"] for r in runs[m]) / 2**20 for m in runs}
        rec = {"case": spec, "seconds": s, "faults_per_step": f, "peak_rss_mib": p, "ratio": s["reuse"] / s["system"],
               "runs": runs, "applied": all(r["applied"] for r in runs["reuse"])}
        records.append(rec)
        print(f"{spec:28s} {s['system']:10.3f} {s['reuse']:10.3f} {rec['ratio']:12.2f} {f['system']:18.0f} "
              f"{f['reuse']:8.0f} {p['system']:13.0f} / {p['reuse']:.0f}", flush=True)
    if args.json:
        tmp = args.json + ".tmp"
        with open(tmp, "w") as fh:
            json.dump({"machine": info, "args": vars(args), "records": records, "time": time.time()}, fh, indent=1)
        os.replace(tmp, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
