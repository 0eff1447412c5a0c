#!/usr/bin/env bash
# The CPU measurements quoted in docs/benchmarks.md, in the order they were run (one at a time: the CPU is shared).
# Steps after "galerkin: large n" (bf16, compile, models) were not all run for docs/benchmarks.md; see its section 6.
# Usage: bash benchmarks/run_cpu.sh [OUTDIR]   (default benchmarks/results)
set -u
OUT=${1:-benchmarks/results}
mkdir -p "$OUT"
export PYTHONWARNINGS=ignore
B="python -m opformer.bench.cli bench"
log() { echo "=== $(date +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg): $*"; }

log "ours vs the reference layer (before/after: add --baseline-src DIR of an older tree), interleaved, one thread"
python benchmarks/compare_reference.py --threads 1 --repeats 5 --warmup 1 --json "$OUT/compare_reference_fused.json"
$B attention --kinds galerkin linear --n 8192 --reference --repeats 5 --threads 1 \
    --json "$OUT/attention_fused_8192_cpu.json"

log "attention sweep, 4 kinds, n = 512 2048 8192, ours and reference"
$B attention --kinds galerkin fourier softmax linear --n 512 2048 8192 --repeats 3 --threads 2 \
    --json "$OUT/attention_cpu.json" --plot "$OUT/attention_cpu.png"

log "chunked fourier (chunk 512): memory O(n * chunk)"
$B attention --kinds fourier --n 2048 8192 --chunk-size 512 --repeats 1 --threads 2 --json "$OUT/fourier_chunked_cpu.json"

log "galerkin: large n, batch 1, fp32 and bf16"
$B attention --kinds galerkin --n 65536 262144 1048576 --batch 1 --repeats 2 --threads 2 --max-memory 22 \
    --json "$OUT/galerkin_large_cpu.json"
$B attention --kinds galerkin --n 8192 --batch 1 --dtype bfloat16 --repeats 2 --threads 2 --max-memory 22 \
    --json "$OUT/galerkin_large_bf16_cpu.json"

log "torch.compile, galerkin n = 8192"
$B attention --kinds galerkin --n 8192 --compile --repeats 3 --threads 2 --json "$OUT/galerkin_compile_cpu.json"

log "models: paper Table 1 example 1 (Burgers presets), n = 8192 (gt, lt) and 2048 (all four), batch 4"
$B model burgers-gt burgers-lt --n 8192 --repeats 3 --threads 2 --json "$OUT/model_ex1_8192_cpu.json"
$B model burgers-gt burgers-lt burgers-ft burgers-st --n 2048 --repeats 2 --threads 2 --json "$OUT/model_ex1_2048_cpu.json"
log done

# bf16 (float32 accumulation of the Galerkin sums) and torch.compile, against fp32 eager in the same process
opformer bench attention --kinds galerkin fourier --n 2048 --repeats 3 --threads 1 --json benchmarks/results/eager_fp32_cpu.json
opformer bench attention --kinds galerkin fourier --n 2048 --repeats 3 --threads 1 --dtype bfloat16 --json benchmarks/results/bf16_cpu.json
opformer bench attention --kinds galerkin fourier --n 2048 --repeats 3 --threads 1 --compile --json benchmarks/results/compile_cpu.json
