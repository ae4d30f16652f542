#!/usr/bin/env bash
# A newer triton for the GPU machine, whose image has an older one, in pieces small enough to carry
# (a call carries at most 64 MiB with the tree):
#   bash tools/triton_pieces.sh [VERSION] [PIECES]       # default 3.9.0 in 1: .whl0/ (ignored); 3.9.0 is 58 MB
# one piece: WHEELS=.whl0 bash tools/gpu.sh piece triton39 pytest  (carry .whl0); several, one call per piece to
# the same warm machine: WHEELS=.whl0 bash tools/gpu.sh piece …  (carry .whl0) · … · WHEELS=.whl<last> … triton39 …
# The package keeps the nvidia backend with bin/ptxas-blackwell (triton 3.9 compiles sm_90 and later with it;
# bin/ptxas, for older targets, a link to it), libtriton.so stripped of its static symbols (477 -> 192 MB for 3.9.0), and
# leaves out the amd backend, the profiler libraries (cupti) and the instrumentation plugins.
set -euo pipefail
cd "$(dirname "$0")/.."
version=${1:-3.9.0}
pieces=${2:-1}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 -d "$work" "triton==$version"
mkdir "$work/pkg" && (cd "$work/pkg" && python3 -m zipfile -e "$work"/triton-*.whl .)
rm -rf "$work/pkg/triton/backends/amd" "$work/pkg/triton/backends/nvidia/lib/cupti"*
rm -f "$work/pkg/triton/_C/libproton.so"
find "$work/pkg/triton/plugins" "$work/pkg/triton/instrumentation" -name '*.so' -delete
strip --strip-unneeded "$work/pkg/triton/_C/libtriton.so"
nv="$work/pkg/triton/backends/nvidia/bin"
[ -e "$nv/ptxas-blackwell" ] && rm -f "$nv/ptxas" && ln -s ptxas-blackwell "$nv/ptxas"
tar c -C "$work/pkg" . | xz -T0 -6 > "$work/triton.tar.xz"
size=$(stat -c %s "$work/triton.tar.xz")
for i in $(seq 0 $((pieces - 1))); do rm -rf ".whl$i" && mkdir ".whl$i"; done
split -n "$pieces" -d -a 1 "$work/triton.tar.xz" "$work/p3_"
for i in $(seq 0 $((pieces - 1))); do mv "$work/p3_$i" ".whl$i/"; done
grep -qx '/.whl\*/' .gitignore || echo "note: add /.whl*/ to .gitignore" >&2
echo "triton $version: $size bytes in $pieces pieces (.whl0 … .whl$((pieces - 1)))"
