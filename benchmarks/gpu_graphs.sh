#!/usr/bin/env bash
# CUDA graphs of the training step on one GPU, in one short command (a few minutes): the CUDA tests of
# tests/train/test_cuda_graphs.py, then `opformer bench train` of the paper's Burgers (n = 2048) and Darcy (141 -> 43)
# GT presets with the graphs on, each batch copied from the host and then the training split kept on the GPU (the
# default), data made on the machine; Darcy with 512 training samples
# (128 steps an epoch), since its excess over the bare steps is paid at every step (docs/benchmarks.md).
# Usage: bash benchmarks/gpu_graphs.sh [OUTDIR]   (default $OUT, else /tmp/gpu-graphs)
set -u
OUT=${1:-${OUT:-/tmp/gpu-graphs}}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONWARNINGS=ignore
T0=$(date +%s)
log() { echo "=== +$(( $(date +%s) - T0 ))s load $(cut -d' ' -f1-3 /proc/loadavg): $*"; }
if ! command -v opformer >/dev/null; then
  python3 -m pip install -q --no-deps --no-index --no-build-isolation -e . >/tmp/pip.log 2>&1 \
    || { tail -5 /tmp/pip.log; echo "install failed"; exit 1; }
fi
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
log "the CUDA tests"
timeout 90 python3 -m pytest -v -p no:cacheprovider tests/train/test_cuda_graphs.py 2>&1 | tee "$OUT/cuda_tests.txt" | tail -6
W=${WORKERS:-$(nproc)}  # data processes: all CPUs by default (nothing else runs then)
log "data, $W processes"
opformer data burgers --samples 1144 --out /tmp/b.h5 --workers $W --no-progress >/dev/null 2>&1 || echo "burgers data failed"
opformer data darcy --samples 600 --resolution 141 --out /tmp/d141.h5 --workers $W --dtype float32 --no-progress \
  >/dev/null 2>&1 || echo "darcy data failed"
B="burgers-gt:data=/tmp/b.h5,resolution=2048,n_train=512,n_val=50,n_test=20"
D="darcy-gt:data=/tmp/d141.h5,n_train=512,n_val=64,n_test=6,coarse_size=43"
log "bench train, graphs on: each batch gathered on the host and copied over, then the training split on the GPU"
# last, Darcy with its validation in batches of 16 instead of the preset's 4 (validation is eager: a fifth of the epoch)
timeout 240 opformer bench train "$B,data_on_device=false" "$B" "$D,data_on_device=false" "$D" "$D,eval_batch_size=16" \
  --device cuda \
  --epochs 3 --repeats 10 --json "$OUT/train_overhead_graphs.json" 2>&1 | grep -v -i warn
log "end"
