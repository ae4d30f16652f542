#!/usr/bin/env bash
# Each experiment script on its smallest run (one preset, one T), so a change to the loop they
# share (warpdecode/bench/experiment.py) is run on the GPU without repeating the experiments:
#   bash scripts/verify_experiments.sh [SCRIPT ...]   (on a GPU; logs to $OUT/verify_<script>.log)
# What they measure here is not kept: results/ is restored afterwards, exactly as it was.
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
OUT=${OUT:-/tmp/warpdecode-out}
mkdir -p "$OUT"
P="--presets olmoe-1b-7b"
runs=(
  "warp_variants $P --T 1 --out /tmp/verify_warp_variants.csv"
  "expert_pdl $P --T 1"
  "half_m $P --T 256"
  "down_preload $P --T 1"
  "down_tma $P --T 1 --kinds tma"
  "chunk_flags $P --T 1"
  "ordered_launch $P --T 1"
  "schedule_draws $P --T 8 --seeds 1000 3000"
  "swap_ab $P --T 1"
  "expert_order $P --T 1"
  "one_launch_bound $P --rows 16 24 --warps 8"
)
ONLY="$*"
KEEP=$(mktemp -d) && cp -a results "$KEEP/"  # restored as it was, uncommitted files included
fail=0
for r in "${runs[@]}"; do
  set -- $r
  script=$1; shift
  if [ -n "${ONLY:-}" ] && [[ " $ONLY " != *" $script "* ]]; then continue; fi
  echo "=== $script $*"
  t0=$SECONDS
  timeout "${TIMEOUT_VERIFY:-120}" python3 "scripts/$script.py" "$@" > "$OUT/verify_$script.log" 2>&1
  rc=$?
  tail -n 4 "$OUT/verify_$script.log"
  echo "=== $script rc=$rc in $((SECONDS - t0))s"
  [ $rc -eq 0 ] || fail=1
done
rm -rf results && mv "$KEEP/results" results && rmdir "$KEEP"  # the runs' rows are not results
exit $fail
