#!/usr/bin/env bash
# Reproduce the paper's Table 2a (Burgers, n = 512) on a CPU: GT and FT with the paper's norm scheme, FNO1d with the
# same one-cycle trainer. 100 epochs, 1024 training samples, model selection on 100 validation samples, test = the
# last 100 of the generated R10 file. The first command generates and caches the data (~1-2 min).
# Larger grids (n = 2048, 8192): add  --resolution 2048  (GPU recommended: --accelerator gpu).
set -euo pipefail
RES=${RES:-512}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}   # two runs side by side on a 2-core machine
opformer train burgers-gt  --resolution "$RES" --out "runs/table2a/gt-$RES"  --no-progress "$@" &
opformer train burgers-ft  --resolution "$RES" --out "runs/table2a/ft-$RES"  --no-progress "$@" &
wait
opformer train burgers-fno --resolution "$RES" --out "runs/table2a/fno-$RES" --no-progress "$@"
for m in gt ft fno; do opformer eval "runs/table2a/$m-$RES/checkpoints/best.ckpt" --resolution 2048; done
