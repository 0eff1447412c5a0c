#!/usr/bin/env bash
# Paper Table 3 (inverse Darcy, noisy u -> a): FT (regular Ln), GT (Ln on K,V) and FNO2d, fine grid 141 pooled to
# the 36 x 36 target grid, noise eps = 0, 0.01, 0.1 (in standardized units), 1024 training samples, 100 epochs.
# The 211 -> 71 column: add  --resolution 211 --coarse-factor 3  (the model's grids follow the data's target grid).
#
#   bash scripts/reproduce_table3.sh            # full runs: needs a GPU
#   MODE=cpu bash scripts/reproduce_table3.sh   # CPU-reduced: 85 fine -> 29 target, 256 samples, 10 epochs
#       (the CPU presets train FT and GT with Adam beta2 0.98 and the GT with post-LN: docs/results.md, Table 3)
#
# Extra arguments go to every `opformer train`.  Run it again after a stop: finished runs are kept, a stopped one
# continues from its last checkpoint (--overwrite among the arguments starts all afresh).
set -euo pipefail
. "$(dirname "$0")/lib.sh"
MODE=${MODE:-gpu}
case $MODE in  # a misspelt MODE (CPU, cpu-reduced) would run the full GPU setting after making its data
  cpu|gpu) ;;
  *) echo "reproduce_table3.sh: error: MODE=$MODE: expected cpu or gpu" >&2; exit 2 ;;
esac
opformer data prepare darcy-inverse-gt
if [ "$MODE" = cpu ]; then
  for eps in 0 0.01 0.1; do
    for p in darcy-inverse-ft-cpu darcy-inverse-gt-cpu darcy-inverse-fno-cpu; do
      train_once "runs/table3/$p-eps$eps" "$p" --noise "$eps" --no-progress "$@"
    done
  done
  exit 0
fi
for eps in 0 0.01 0.1; do
  for p in darcy-inverse-ft-regular darcy-inverse-gt darcy-inverse-fno; do
    train_once "runs/table3/$p-eps$eps" "$p" --noise "$eps" --accelerator gpu --no-progress "$@"
  done
done
