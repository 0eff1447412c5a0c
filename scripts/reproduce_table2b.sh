#!/usr/bin/env bash
# Paper Table 2b (Darcy forward, a -> u): GT (Ln on K,V), FT (regular Ln) and FNO2d (one-cycle), fine grids 141 and
# 211, 1024 training samples, 100 epochs, model selection on 100 validation samples, test = the last 100 samples of
# an independent file.  Default data: the r421 recipe (1124 + 100 samples; `opformer data prepare` caches them once).
#
#   bash scripts/reproduce_table2b.sh            # full runs: needs a GPU (--accelerator gpu), about 1-2 h per model
#   MODE=cpu bash scripts/reproduce_table2b.sh   # CPU-reduced: 85 fine / 29 attention grid, 256 samples, 10 epochs
#
# Extra arguments go to every `opformer train` (e.g. --epochs 3, --seed 1).  Run it again after a stop: finished runs
# are kept, a stopped one continues from its last checkpoint (--overwrite among the arguments starts all afresh).
set -euo pipefail
. "$(dirname "$0")/lib.sh"
MODE=${MODE:-gpu}
case $MODE in  # a misspelt MODE (CPU, cpu-reduced) would run the full GPU setting after making its data
  cpu|gpu) ;;
  *) echo "reproduce_table2b.sh: error: MODE=$MODE: expected cpu or gpu" >&2; exit 2 ;;
esac
opformer data prepare darcy-gt
if [ "$MODE" = cpu ]; then
  for p in darcy-gt-cpu darcy-ft-cpu darcy-fno-cpu; do
    train_once "runs/table2b/$p" "$p" --no-progress "$@"
  done
  exit 0
fi
GPU=(--accelerator gpu --no-progress)
for res in 141 211; do
  coarse=$([ "$res" = 141 ] && echo 43 || echo 61)
  train_once "runs/table2b/gt-$res"  darcy-gt         --resolution "$res" --coarse-size "$coarse" "${GPU[@]}" "$@"
  train_once "runs/table2b/ft-$res"  darcy-ft-regular --resolution "$res" --coarse-size "$coarse" "${GPU[@]}" "$@"
  train_once "runs/table2b/fno-$res" darcy-fno        --resolution "$res"                         "${GPU[@]}" "$@"
done
