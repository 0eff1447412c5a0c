#!/usr/bin/env bash
# The GPU measurements quoted in docs/benchmarks.md (section "GPU"): a smoke test of training on the GPU, then the
# attention layers against the paper's reference layer in fp32, TF32 and bf16, and the paper's presets, with the
# GPU to itself.  The reference package must be importable (pip install --no-deps galerkin-transformer==0.2.1).
# Usage: bash benchmarks/run_gpu.sh [OUTDIR]   (default benchmarks/results)
set -u
OUT=${1:-benchmarks/results}
mkdir -p "$OUT"
export PYTHONWARNINGS=ignore
B="python3 -m opformer.bench.cli bench"
log() { echo "=== $(date +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg): $*"; }

nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm,clocks.max.sm --format=csv
python3 -c "import torch, lightning; print('torch', torch.__version__, 'lightning', lightning.__version__, \
torch.cuda.get_device_name(0))"

for dtype in float32 tf32 bfloat16; do
  log "attention, 4 kinds, n = 2048 8192, $dtype, ours and the reference interleaved"
  $B attention --kinds galerkin fourier softmax linear --n 2048 8192 --device cuda --dtype $dtype --reference \
      --repeats 20 --warmup 5 --in-process --json "$OUT/attention_gpu_$dtype.json"
done
log "galerkin, large n (batch 1): time and memory up to 2^20 points, fp32 and bf16"
for dtype in float32 bfloat16; do
  $B attention --kinds galerkin --n 65536 262144 1048576 --batch 1 --device cuda --dtype $dtype --repeats 10 \
      --warmup 3 --in-process --json "$OUT/galerkin_large_gpu_$dtype.json"
done
log "the paper's presets, one forward+backward step (batch 4)"
$B model burgers-gt burgers-ft burgers-fno --n 2048 8192 --device cuda --repeats 20 --warmup 5 --in-process \
    --json "$OUT/model_burgers_gpu.json"
$B model darcy-gt darcy-ft-regular darcy-fno --n 141 211 --device cuda --repeats 20 --warmup 5 --in-process \
    --json "$OUT/model_darcy_gpu.json"
log "done"
