#!/usr/bin/env bash
# Every 2D model on the Navier-Stokes task at an equal budget (CPU-reduced): the 32^2, T = 10 data of
# `MODE=cpu scripts/reproduce_ns.sh` (240 trajectories: 200 train, 16 validation, 24 test), all2all pairs on t <= 6,
# 15 epochs of 75 steps (batch 16, the preset's one-cycle Adam, lr 1e-3), lead-time conditioned norms, one torch
# thread; each model then rolls out directly and autoregressively to t = 10 (t > 6 is out of distribution).
# Models at their CPU sizes (FNO width 16, GT/FT d_model 32 x 3 layers, the others their defaults).
#   bash scripts/ns_models.sh            # then: python scripts/collect_rollouts.py runs/ns-models
set -euo pipefail
OUT=${OUT:-runs/ns-models}
DATA=${DATA:-runs/ns/ns32.h5}
MODELS=${MODELS:-"fno gt ft scot scot-galerkin vit vit-gt unet cno deeponet"}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
mkdir -p "$OUT" "$(dirname "$DATA")"
[ -f "$DATA" ] || opformer data navier-stokes --samples 240 --resolution 32 --nu 1e-3 --t-final 10 --snapshots 10 \
    --out "$DATA" --no-progress
COMMON=(--data "$DATA" --n-test 24 --n-val 16 --epochs 15 --batch-size 16 --max-time 6 --pairs all2all
        --limit-train-batches 75 --no-progress --threads "$OMP_NUM_THREADS")
for model in $MODELS; do
  case $model in
    fno) X=(--width 16) ;;
    gt|ft) X=(--d-model 32 --num-layers 3 --dim-feedforward 64) ;;
    *) X=() ;;
  esac
  if [ ! -f "$OUT/$model/metrics.json" ]; then
    opformer train "ns-$model" "${COMMON[@]}" "${X[@]}" --out "$OUT/$model" --overwrite
  fi
  for mode in direct autoregressive; do
    [ -f "$OUT/$model/rollout-$mode/rollout.json" ] || \
      opformer rollout "$OUT/$model/checkpoints/best.ckpt" --data "$DATA" --mode "$mode" --out "$OUT/$model/rollout-$mode"
  done
done
