# Shared by the study scripts beside it: source it with  . "$(dirname "$0")/lib.sh"

# train_once OUT ARGS...: `opformer train ARGS --out OUT`, once.  A run that finished (OUT/metrics.json) is left as
# it is, in one line; one that was stopped (OUT/config.yaml, no metrics.json) continues from its last checkpoint
# (--resume: from scratch when it stopped before its first one); --overwrite among ARGS trains afresh whatever OUT
# holds.  So a study stopped half-way is finished by running the same command again.
train_once() {
  local out=$1 a
  shift
  local resume=()
  for a in "$@"; do
    if [ "$a" = --overwrite ]; then
      opformer train "$@" --out "$out"
      return
    fi
  done
  if [ -f "$out/metrics.json" ]; then
    echo "$(basename "$0"): $out has finished (its metrics.json is there): not run again"
    return 0
  fi
  [ -f "$out/config.yaml" ] && resume=(--resume)
  opformer train "$@" --out "$out" "${resume[@]}"
}
