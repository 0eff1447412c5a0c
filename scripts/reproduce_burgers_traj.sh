#!/usr/bin/env bash
# Burgers trajectories: GT with all2all vs one-at-a-time pairs, direct vs autoregressive rollouts, error vs time.
# CPU-reduced by default (300 trajectories at 256 points, 10 snapshots on [0, 1], 15 epochs of equal step counts);
# FULL=1 uses the preset's data (1200 trajectories, 20 snapshots) and 50 epochs.
set -euo pipefail
case ${FULL:-0} in  # anything else (FULL=yes) would quietly run the reduced setting
  0|1) ;;
  *) echo "reproduce_burgers_traj.sh: error: FULL=$FULL: expected 1 (the full setting) or 0" >&2; exit 2 ;;
esac
OUT=${OUT:-runs/burgers-traj}
mkdir -p "$OUT"
if [ "${FULL:-0}" = 1 ]; then
  [ -f "$OUT/data.h5" ] || opformer data burgers --samples 1200 --resolution 1024 --snapshots 20 --out "$OUT/data.h5"
  ARGS=(--data "$OUT/data.h5" --resolution 256 --n-test 100 --n-val 100 --epochs 50); CAP=()
else
  ARGS=(--data "$OUT/data.h5" --resolution 256 --n-test 30 --n-val 30 --epochs 15)
  [ -f "$OUT/data.h5" ] || opformer data burgers --samples 300 --resolution 1024 --snapshots 10 --out "$OUT/data.h5" \
      --no-progress
  CAP=(--limit-train-batches 150)  # one-at-a-time: 240 trajectories x 10 pairs / 16 = 150 steps; all2all alike
fi
for pairs in one-at-a-time all2all; do
  opformer train burgers-traj-gt "${ARGS[@]}" --pairs "$pairs" "${CAP[@]}" --no-progress --overwrite --out "$OUT/gt-$pairs"
  for mode in direct autoregressive; do
    opformer rollout "$OUT/gt-$pairs/checkpoints/best.ckpt" --data "$OUT/data.h5" --mode "$mode" \
        --out "$OUT/gt-$pairs/rollout-$mode"
  done
done
python "$(dirname "$0")/collect_rollouts.py" "$OUT"  # the script beside this one, from any directory
