#!/usr/bin/env bash
# One GPU lease in three commands, for a machine that is lent by the half hour and starts bare:
#   bash benchmarks/gpu_session.sh start BUDGET_MIN   install, smoke test, start the full-size runs
#                                                     (scripts/gpu_tables.py) in the background, then the GPU
#                                                     benchmarks (benchmarks/run_gpu.sh) with the GPU to themselves
#                                                     while the data are generated (the data on the first 12 CPUs,
#                                                     the benchmarks on the others)
#   bash benchmarks/gpu_session.sh wait SECONDS       follow the runs; collect once they have all ended
# Environment: ACCEL=cpu tries it all without a GPU; EXTRA="--flag value" adds opformer train arguments to every
# run; SMOKE=0 skips the smoke tests (a short quick job and the CUDA tests); RUNS="name ..." picks the runs
# (scripts/gpu_tables.py list; default: its default list); KEEP="name ..." runs that keep the paper's epochs (the
# others are fitted to the budget) and stop at its end, resumable; RESUME=FOLDER continues the runs whose resume
# pieces (resume-NAME.tar.partNN, from an earlier lease's collect) are in FOLDER (carry it to the machine);
# BENCH=0 skips the benchmarks (the runs then start as soon as their data are there); WORKERS=N data processes
# (default 12); COLLECT=1 makes `wait`
# collect what there is even if runs go on.
# Results go to $OUT (or OUTDIR): the benchmark records as one tarball, the runs as scripts/gpu_tables.py collect packs.
set -u
export PYTHONUNBUFFERED=1 PYTHONWARNINGS=ignore
OUT=${OUT:-${OUTDIR:-runs/gpu-out}}  # git-ignored by default: records are copied into benchmarks/results/ by hand
mkdir -p "$OUT"
T0=$(date +%s)
el() { echo $(( $(date +%s) - T0 )); }
log() { echo "=== +$(el)s load $(cut -d' ' -f1-3 /proc/loadavg): $*"; }

if [ -d .whl ] && ls .whl/*.whl >/dev/null 2>&1; then  # the reference package, carried as a wheel
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    && export PYTHONPATH=/tmp/site
fi
if ! command -v opformer >/dev/null; then
  python3 -m pip install -q --no-deps --no-index --no-build-isolation -e . >/tmp/pip.log 2>&1 \
    || { tail -5 /tmp/pip.log; echo "install failed"; exit 1; }
fi

case "${1:-}" in
start)
  budget=${2:-24}
  # data processes, on the first $workers CPUs (scripts/gpu_tables.py); the benchmarks get the rest (WORKERS=N: all
  # of a 16-CPU machine when BENCH=0)
  workers=${WORKERS:-12}
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
  lscpu | grep -E "Model name|^CPU\(s\)" | tr -s ' '
  mkdir -p runs/gpu
  rm -f runs/gpu/bench.done
  python3 scripts/gpu_tables.py start --budget-min "$budget" --workers "$workers" --threads 2 \
    --wait-for runs/gpu/bench.done --accelerator "${ACCEL:-gpu}" --extra="${EXTRA:-}" ${RUNS:+--runs $RUNS} \
    ${KEEP:+--keep $KEEP} ${RESUME:+--resume-dir "$RESUME"}
  if [ "${SMOKE:-1}" != 0 ]; then
    log "smoke: one epoch of the README quick job on the GPU"
    timeout 150 opformer train burgers-quick --accelerator gpu --epochs 2 --out /tmp/smoke --no-progress --overwrite \
      2>&1 | grep -v Warning | tail -8
    log "smoke: the CUDA tests"
    # the CUDA-graph tests train every kind of model on the GPU (40 s on an H100; they found scOT's host copy)
    timeout 180 python3 -m pytest -q -p no:cacheprovider tests/pde/test_navier_stokes.py tests/nn/test_attention.py \
      -k gpu 2>&1 | tail -3
    timeout 120 python3 -m pytest -q -p no:cacheprovider tests/train/test_cuda_graphs.py 2>&1 | tail -4
  fi
  if [ "${BENCH:-1}" != 0 ]; then
    log "benchmarks"
    mkdir -p /tmp/bench
    cpus=$(python3 -c "import os; c = sorted(os.sched_getaffinity(0)); print(','.join(map(str, c[$workers:])))")
    ${cpus:+taskset -c "$cpus"} bash benchmarks/run_gpu.sh /tmp/bench > /tmp/bench/bench.log 2>&1
    grep -v "^\s*$" /tmp/bench/bench.log | tail -60
    tar czf "$OUT/bench.tar.gz" -C /tmp bench
  fi
  touch runs/gpu/bench.done
  log "training runs"
  while [ "$(el)" -lt "${3:-540}" ]; do sleep 20; done
  python3 scripts/gpu_tables.py status | tee "$OUT/status.txt"
  ;;
wait)
  limit=${2:-540}
  [ -f runs/gpu/state.json ] || { echo "no runs here: a fresh machine"; exit 2; }
  while [ "$(el)" -lt "$limit" ]; do
    grep -q '"finished"' runs/gpu/state.json && break
    sleep 10
  done
  python3 scripts/gpu_tables.py status | tee "$OUT/status.txt"
  if grep -q '"finished"' runs/gpu/state.json || [ "${COLLECT:-0}" = 1 ]; then
    log "collect"
    python3 scripts/gpu_tables.py collect "$OUT" --max-files 7 --max-mb 15
  fi
  ;;
*)
  echo "usage: bash benchmarks/gpu_session.sh start BUDGET_MIN [SECONDS] | wait SECONDS"; exit 2 ;;
esac
log "end"
