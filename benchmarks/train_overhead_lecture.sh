#!/usr/bin/env bash
# Training overhead (an `opformer train` epoch against steps x the bare optimizer step) of the lecture's models:
# scOT, CNO, UNet, DeepONet, ViT and the time-dependent attention models, on the small CPU data sets
# (Darcy 17^2, Navier-Stokes 32^2 all2all pairs).  docs/benchmarks.md section 8 quotes its output.
# Usage: bash benchmarks/train_overhead_lecture.sh [DATADIR] [JSON]
#   (defaults runs/bench and benchmarks/results/train_overhead_lecture_cpu.json; run it on an idle machine:
#   the ratios compare figures taken in the same process, but a loaded machine makes them noisy)
set -eu
DIR=${1:-runs/bench}
JSON=${2:-benchmarks/results/train_overhead_lecture_cpu.json}
EPOCHS=${EPOCHS:-3}
mkdir -p "$DIR"
log() { echo "=== $(date +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg): $*"; }

[ -f "$DIR/d17.h5" ] || { log "data: Darcy 17^2, 1000 samples"; opformer data darcy --samples 1000 --resolution 17 \
    --out "$DIR/d17.h5" --workers 1 --no-progress; }
[ -f "$DIR/ns32.h5" ] || { log "data: Navier-Stokes 32^2, 120 trajectories of 11 snapshots"; opformer data navier-stokes \
    --samples 120 --resolution 32 --snapshots 10 --t-final 10 --out "$DIR/ns32.h5" --workers 1 --no-progress; }

D="data=$DIR/d17.h5,n_train=400,n_val=20,n_test=20"
N="data=$DIR/ns32.h5,n_train=80,n_test=24,n_val=16,max_time=6,limit_train_batches=40,batch_size=16,eval_batch_size=16"
log "bench train, $EPOCHS epochs, one thread"
opformer bench train "darcy-scot:$D" "darcy-vit-gt:$D" "darcy-unet:$D" "darcy-cno:$D" "darcy-deeponet:$D" \
    "darcy-fno-cpu:$D" "ns-scot:$N" "ns-gt:$N" "ns-vit:$N" "ns-unet:$N" "ns-cno:$N" "ns-deeponet:$N" "ns-fno:$N" \
    --epochs "$EPOCHS" --repeats 7 --warmup 2 --threads 1 --json "$JSON"
log done
