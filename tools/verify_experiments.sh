#!/usr/bin/env bash
# Each experiment version on its smallest run (one preset, one T), so a change to the loop they
# share (experiments/harness.py) is run on the GPU without repeating the experiments:
#   bash tools/verify_experiments.sh [FILE ...]   (on a GPU; logs to $OUT/verify_<file>_<version>.log)
# What they measure here is not kept: results/ is restored afterwards, exactly as it was.
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
OUT=${OUT:-/tmp/warpdecode-out}
mkdir -p "$OUT"
P="--presets olmoe-1b-7b"
runs=(
  "warp_schedule 5 $P --T 1 --out /tmp/verify_warp_variants.csv"
  "expert_path pdl $P --T 1"
  "expert_path half_m $P --T 256"
  "warp_down 13 $P --T 1"
  "warp_down 15 $P --T 1 --kinds tma"
  "warp_down 14 $P --T 1"
  "one_launch 8 $P --T 1"
  "warp_schedule draws $P --T 8 --seeds 1000 3000"
  "expert_path swap_ab $P --T 1"
  "expert_path bound $P --T 256"
  "one_launch 16 $P --T 1"
  "reads bound $P --rows 16 24 --warps 8"
)
ONLY="$*"
KEEP=$(mktemp -d) && cp -a experiments/results "$KEEP/"  # restored as it was, uncommitted files included
fail=0
for r in "${runs[@]}"; do
  set -- $r
  file=$1 version=$2; shift 2
  if [ -n "${ONLY:-}" ] && [[ " $ONLY " != *" $file "* ]]; then continue; fi
  echo "=== $file --version $version $*"
  t0=$SECONDS
  log="$OUT/verify_${file}_${version}.log"
  timeout "${TIMEOUT_VERIFY:-120}" python3 "experiments/$file.py" --version "$version" "$@" > "$log" 2>&1
  rc=$?
  tail -n 4 "$log"
  echo "=== $file $version rc=$rc in $((SECONDS - t0))s"
  [ $rc -eq 0 ] || fail=1
done
rm -rf experiments/results && mv "$KEEP/results" experiments/results && rmdir "$KEEP"  # the runs' rows are not results
exit $fail
