#!/usr/bin/env bash
# Where the host's time goes in a training epoch: `cProfile` over `opformer bench train` of the paper's Darcy GT preset
# (141 -> 43, batch 4, CUDA graphs on a GPU), then the functions by own time and by cumulative time
# (docs/benchmarks.md, CUDA graphs). One short command on a GPU machine (about a minute with the data):
#   bash benchmarks/gpu_profile_darcy.sh                       # writes $OUT/prof.out and $OUT/prof.txt
# DEV=cpu N=40 NT=16 NV=8 EP=2 tries it on the CPU; N: samples made, NT / NV: training / validation samples, EP: epochs.
# Extra train settings go after the preset as key=value, e.g. EXTRA=",data_on_device=false".
set -u
OUT=${OUT:-/tmp/prof}; mkdir -p $OUT
DEV=${DEV:-cuda}; N=${N:-600}; NT=${NT:-512}
export PYTHONUNBUFFERED=1 PYTHONWARNINGS=ignore
command -v opformer >/dev/null || python3 -m pip install -q --no-deps --no-index --no-build-isolation -e . >/tmp/pip.log 2>&1
[ -f /tmp/d141.h5 ] || opformer data darcy --samples $N --resolution 141 --out /tmp/d141.h5 --workers $(nproc) --dtype float32 --no-progress >/dev/null 2>&1
D="darcy-gt:data=/tmp/d141.h5,n_train=$NT,n_val=${NV:-64},n_test=6,coarse_size=43${EXTRA:-}"
timeout 240 python3 -m cProfile -o $OUT/prof.out -m opformer bench train "$D" --device $DEV --epochs ${EP:-3} --repeats 3 2>&1 | grep -v -i warn | grep -v "^epoch"
python3 - "$OUT/prof.out" <<'PY' | tee $OUT/prof.txt
import pstats, sys
s = pstats.Stats(sys.argv[1]); s.sort_stats("tottime").print_stats(40)
s.sort_stats("cumtime").print_stats(90)
PY
