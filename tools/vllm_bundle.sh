#!/usr/bin/env bash
# vLLM's Triton fused_moe path for the GPU machine, whose image has no vLLM: the modules its import
# needs, its tuned configs and its two compiled op libraries (their fatbins cut to the H200's sm_90
# code, xz-compressed) from a vLLM wheel, in .vllm/ (ignored by git; what goes in and why:
# tools/vllm_bundle.py). experiments/vllm_path.py imports the path from it; experiments/vllm_baseline.py
# times it against warpdecode.moe:
#   bash tools/vllm_bundle.sh [WHEEL] [OUT]    # default: vllm==0.34.0 downloaded (no deps), .vllm
# then one call to the GPU machine, carrying .vllm:
#   WARPDECODE_COMMIT=<hash> VLLM_ARGS="--version bf16" bash tools/gpu.sh env vllm pack
set -euo pipefail
cd "$(dirname "$0")/.."
wheel=${1:-}
out=${2:-.vllm}
if [ -z "$wheel" ]; then
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
  python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 -d "$work" "vllm==0.34.0"
  wheel=$(ls "$work"/vllm-*.whl)
fi
python3 tools/vllm_bundle.py "$wheel" "$out" --arch 90
grep -qx '/.vllm/' .gitignore || echo "note: add /.vllm/ to .gitignore" >&2
du -sh "$out"
