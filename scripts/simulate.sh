#!/usr/bin/env bash
# Runs `appliance simulate` for several seeds, as many at a time as there are cores (at
# least 1, at most 4), and fails if any seed fails.
# usage: scripts/simulate.sh BINARY STEPS SEED...
# Each seed's output goes to target/simulate/seed-S.txt; a failing seed's is printed whole.
set -uo pipefail
bin=$1; steps=$2; shift 2
out=target/simulate
mkdir -p "$out"
status=0
par=$(nproc 2>/dev/null || echo 2)
(( par > 4 )) && par=4
(( par < 1 )) && par=1
run() {
  local s=$1
  if "$bin" simulate --seed "$s" --steps "$steps" >"$out/seed-$s.txt" 2>&1; then
    echo "simulate: $(grep -E "^seed [0-9]+ steps [0-9]+ digest" "$out/seed-$s.txt")"
    grep -E '^[0-9]+ steps in' "$out/seed-$s.txt" | cut -c1-60 | sed 's/^/simulate:   /'
  else
    echo "simulate: seed $s FAILED:"
    cat "$out/seed-$s.txt"
    return 1
  fi
}
pids=()
for s in "$@"; do
  run "$s" &
  pids+=($!)
  if (( ${#pids[@]} == par )); then
    for p in "${pids[@]}"; do wait "$p" || status=1; done
    pids=()
  fi
done
for p in "${pids[@]}"; do wait "$p" || status=1; done
exit $status
