#!/usr/bin/env bash
# Navier-Stokes (nu = 1e-3): GT, FT and FNO2d (lead-time conditioned) x {all2all, one-at-a-time} x {direct,
# autoregressive}, with out-of-distribution times (trained on t <= 2/3 T, evaluated to T).
#   MODE=gpu (default): the full setting, 64^2, T = 50, 1000 train / 100 val / 200 test trajectories.
#   MODE=cpu: the CPU-reduced setting of docs/results.md: 32^2, T = 10, 200 / 16 / 24 trajectories, 15 epochs,
#             the all2all epochs capped at the one-at-a-time epoch's number of steps (same optimizer budget).
set -euo pipefail
MODE=${MODE:-gpu}
case $MODE in  # a misspelt MODE (CPU, cpu-reduced) would run the full GPU setting after making its data
  cpu|gpu) ;;
  *) echo "reproduce_ns.sh: error: MODE=$MODE: expected cpu or gpu" >&2; exit 2 ;;
esac
OUT=${OUT:-runs/ns}
mkdir -p "$OUT"
if [ "$MODE" = cpu ]; then
  DATA="$OUT/ns32.h5"
  [ -f "$DATA" ] || opformer data navier-stokes --samples 240 --resolution 32 --nu 1e-3 --t-final 10 --snapshots 10 \
      --out "$DATA" --no-progress
  COMMON=(--data "$DATA" --n-test 24 --n-val 16 --epochs 15 --batch-size 16 --max-time 6 --no-progress --overwrite)
  CAP=(--limit-train-batches 75)   # one-at-a-time: 200 trajectories x 6 pairs / 16 = 75 steps per epoch
  EXTRA=(--width 16)
  GTX=(--d-model 32 --num-layers 3 --dim-feedforward 64)
else
  DATA="$OUT/ns64.h5"
  [ -f "$DATA" ] || opformer data navier-stokes --samples 1300 --resolution 64 --nu 1e-3 --t-final 50 --snapshots 50 \
      --out "$DATA" --device cuda
  COMMON=(--data "$DATA" --n-test 200 --n-val 100 --epochs 100 --max-time 30 --accelerator gpu --no-progress --overwrite)
  CAP=(--limit-train-batches 1875)  # one-at-a-time: 1000 x 30 / 16
  EXTRA=(); GTX=()
fi
for model in fno gt ft; do
  X=("${EXTRA[@]}"); [ "$model" = fno ] || X=("${GTX[@]}")
  opformer train "ns-$model" "${COMMON[@]}" "${X[@]}" --pairs one-at-a-time --out "$OUT/$model-one"
  opformer train "ns-$model" "${COMMON[@]}" "${X[@]}" "${CAP[@]}" --pairs all2all --out "$OUT/$model-all2all"
  for pairs in one all2all; do
    for mode in direct autoregressive; do
      opformer rollout "$OUT/$model-$pairs/checkpoints/best.ckpt" --data "$DATA" --mode "$mode" \
          --out "$OUT/$model-$pairs/rollout-$mode"
    done
  done
done
# the FNO paper's protocol: the last H snapshots in, the next one out, recurrent (H = 10 on the full data)
H=$([ "$MODE" = cpu ] && echo 4 || echo 10)
opformer train ns-fno "${COMMON[@]}" "${EXTRA[@]}" --history "$H" --out "$OUT/fno-history$H"
opformer rollout "$OUT/fno-history$H/checkpoints/best.ckpt" --data "$DATA" --mode autoregressive \
    --out "$OUT/fno-history$H/rollout-autoregressive"
python "$(dirname "$0")/collect_rollouts.py" "$OUT"  # the script beside this one, from any directory
