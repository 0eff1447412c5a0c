#!/usr/bin/env bash
# One 10-minute command on a GPU machine: full-size runs of scripts/gpu_tables.py (data on the host's first 12 CPUs,
# then training on the GPU, the epochs fitted to the budget), and meanwhile the CPU attention layers against the
# paper's reference layer on the host's last 4 CPUs (one and two threads), then collect.
#   RUNS="darcy211-gt" BUDGET=8.6 LIMIT=560 bash benchmarks/gpu_runs_and_cpu_bench.sh      (BENCH=0: no CPU bench)
# The reference layer comes from the galerkin-transformer package, carried as a wheel in .whl/ (the machine has no
# network): `pip download --no-deps galerkin-transformer==0.2.1 -d .whl`. Results go to $OUT (runs as the tarballs of
# `gpu_tables.py collect`, the CPU records as cpu/xeon_t{1,2}.json).
set -u; export PYTHONUNBUFFERED=1 PYTHONWARNINGS=ignore
OUT=${OUT:-runs/gpu-out}; mkdir -p "$OUT"
T0=$(date +%s); el() { echo $(( $(date +%s) - T0 )); }
log() { echo "=== +$(el)s load $(cut -d' ' -f1-3 /proc/loadavg): $*"; }
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    && export PYTHONPATH=/tmp/site
fi
if ! command -v opformer >/dev/null; then
  python3 -m pip install -q --no-deps --no-index --no-build-isolation -e . >/tmp/pip.log 2>&1 \
    || { tail -5 /tmp/pip.log; echo "install failed"; exit 1; }
fi
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
lscpu | grep -E "Model name|^CPU\(s\)|^Model:|CPU family" | tr -s ' '
grep -o -w -E "avx2|fma|avx512f|avx512_vnni|avx512_bf16|avx512_fp16|amx_tile" /proc/cpuinfo | sort -u | tr '\n' ' '; echo
python3 -c "import torch; print(torch.__version__, torch.backends.cpu.get_cpu_capability())"
mkdir -p runs/gpu
python3 scripts/gpu_tables.py start --budget-min "${BUDGET:-8.6}" --workers 12 --threads 2 --accelerator gpu \
  --runs ${RUNS:-darcy211-gt} || exit 1
if [ "${BENCH:-1}" != 0 ]; then
  log "CPU layers on CPUs 12-15 while the data are made on 0-11"
  mkdir -p "$OUT/cpu"
  for t in 2 1; do
    taskset -c 12-15 opformer bench attention --kinds galerkin linear --n 8192 --reference --repeats 5 --threads $t \
      --json "$OUT/cpu/xeon_t$t.json" 2>&1 | grep -v -i "warn" | tail -12
  done
  log "CPU bench done"
fi
while [ "$(el)" -lt "${LIMIT:-560}" ]; do
  python3 -c "import json, sys; sys.exit(0 if json.load(open('runs/gpu/state.json')).get('finished') else 1)" && break
  sleep 10
done
python3 scripts/gpu_tables.py status | tee "$OUT/status.txt"
log "collect"
python3 scripts/gpu_tables.py collect "$OUT" --max-files 4 --max-mb 15
log "end"
