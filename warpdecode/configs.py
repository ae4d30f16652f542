"""Launch configurations: tuned tables measured on a GPU, and the defaults used elsewhere.

Tuned tables live in ``warpdecode/tuned/<GPU name>.json`` and are written by
``python -m warpdecode tune`` (the same search vLLM's ``benchmark_moe.py --tune`` does for its
``fused_moe`` configs). An entry is keyed by kernel family and layer shape, and holds a list of
``[T_max, config]`` buckets: a call with T tokens takes the first bucket with T ≤ T_max, else the
last. Shapes or GPUs with no table use the defaults below, which follow vLLM's
``get_default_config``. The CPU interpreter uses its own small set: there the number of programs,
not the memory system, sets the time.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path

import triton

from . import _runtime

TUNED_DIR = Path(__file__).parent / "tuned"


def shape_key(H: int, I: int, E: int, K: int) -> str:  # noqa: E741
    return f"H={H},I={I},E={E},K={K}"


def tuned_file(gpu: str | None = None) -> Path:
    return TUNED_DIR / f"{(gpu or _runtime.gpu_name()).replace(' ', '_')}.json"


@functools.cache
def load_tuned(gpu: str | None = None) -> dict:
    """The tuned table for this GPU, or an empty one."""
    if _runtime.INTERPRET:
        return {}
    path = tuned_file(gpu)
    return json.loads(path.read_text()) if path.exists() else {}


def bucket(table: dict, family: str, H, I, E, K, T) -> dict | None:  # noqa: E741
    """The config a call with T tokens takes from ``table`` (a tuned table), or None."""
    buckets = table.get(family, {}).get(shape_key(H, I, E, K))
    if not buckets:
        return None
    return next((dict(c) for t_max, c in buckets if T <= t_max), dict(buckets[-1][1]))


def _lookup(family: str, H, I, E, K, T):  # noqa: E741
    return bucket(load_tuned(), family, H, I, E, K, T)


def warp_config(H: int, I: int, E: int, K: int, T: int) -> dict:  # noqa: E741
    """Launch configuration of both warp-decode kernels: ``{"gate_up": {...}, "down": {...}}``."""
    tuned = _lookup("warp", H, I, E, K, T)
    if tuned:
        return tuned
    if _runtime.INTERPRET:
        return {
            "gate_up": {"BLOCK_I": 16, "BLOCK_H": min(256, triton.next_power_of_2(H)), "num_warps": 4, "num_stages": 1},
            "down": {"BLOCK_H": 16, "BLOCK_I": min(256, triton.next_power_of_2(I)), "num_warps": 4, "num_stages": 1},
        }
    h_pad = triton.next_power_of_2(H)
    return {
        # one warp, one neuron: the H200 tuner's most frequent tile. The whole row in one step up to
        # H = 2048 (eight 16-byte loads per lane per row), 1024 columns per step above that
        "gate_up": {"BLOCK_I": 1, "BLOCK_H": h_pad if h_pad <= 2048 else 1024, "num_warps": 1, "num_stages": 1},
        # four warps, one hidden output each, all K experts' rows in flight
        "down": {"BLOCK_H": 4, "BLOCK_I": 256, "num_warps": 4, "num_stages": 1},
    }


def default_fused(H: int, I: int, K: int) -> dict:  # noqa: E741
    """Launch configuration of the persistent one-kernel warp decode where no tuned one exists:
    eight warps, one gate/up row per warp; the down tile kept to ≤ 64 elements per thread."""
    if _runtime.INTERPRET:
        return {"gate_up": {"BLOCK_I": 4, "BLOCK_H": min(128, triton.next_power_of_2(H))},
                "down": {"BLOCK_H": 4, "BLOCK_I": min(64, triton.next_power_of_2(I))},
                "num_warps": 4, "programs_per_sm": 1}
    k_pad = triton.next_power_of_2(K)
    block_i = min(256, triton.next_power_of_2(I))
    rows = max(1, min(8, 64 * 32 * 8 // (k_pad * block_i)))
    return {"gate_up": {"BLOCK_I": 8, "BLOCK_H": min(1024, triton.next_power_of_2(H))},
            "down": {"BLOCK_H": rows, "BLOCK_I": block_i}, "num_warps": 8, "programs_per_sm": 2}


def default_grouped(wide: bool = False) -> dict:
    """The grouped gate/up kernel's launch configuration where no tuned one exists: 64 neurons ×
    128 columns, four warps, three stages of loads in flight (the H200 tuner's most frequent pick
    with the grouped down kernel, ``results/NVIDIA_H200/logs/tune_grouped_v12.log``). ``wide``
    (FP32 weights, multiplied on FMAs, not tensor cores): 32 neurons × 32 columns, two stages.
    Smaller tiles in the interpreter, so that the edges span several blocks."""
    if _runtime.INTERPRET:
        return {"BLOCK_I": 16, "BLOCK_H": 32, "num_warps": 4, "num_stages": 1}
    if wide:
        return {"BLOCK_I": 32, "BLOCK_H": 32, "num_warps": 4, "num_stages": 2}
    return {"BLOCK_I": 64, "BLOCK_H": 128, "num_warps": 4, "num_stages": 3}


def default_grouped_down(wide: bool = False) -> dict:
    """The grouped down kernel's launch configuration where no tuned one exists: 128 hidden
    outputs × 64 columns, four warps, four stages (its best tile at Mixtral T=8 and OLMoE T=4 on
    the H200, ``results/NVIDIA_H200/grouped_down.csv``, and close to the tuner's picks,
    ``logs/tune_grouped_v12.log``). ``wide``: 32 × 32, two stages."""
    if _runtime.INTERPRET:
        return {"BLOCK_H": 16, "BLOCK_I": 16, "num_warps": 4, "num_stages": 1}
    if wide:
        return {"BLOCK_H": 32, "BLOCK_I": 32, "num_warps": 4, "num_stages": 2}
    return {"BLOCK_H": 128, "BLOCK_I": 64, "num_warps": 4, "num_stages": 4}


def expert_config(H: int, I: int, E: int, K: int, T: int, *, fp8: bool = False) -> dict:  # noqa: E741
    """Launch configuration of the expert-centric path: the shared BLOCK_M and each GEMM's tiles
    (BLOCK_N, BLOCK_K, GROUP_M, warps, stages, and in tuned tables sometimes ``HALF_M``: see
    ``warpdecode.expert._gemm_meta``)."""
    tuned = _lookup("expert_fp8" if fp8 else "expert", H, I, E, K, T)
    if tuned:
        return tuned
    if _runtime.INTERPRET:
        tile = {"BLOCK_N": 32, "BLOCK_K": 32, "GROUP_M": 1, "num_warps": 4, "num_stages": 1}
        return {"BLOCK_M": 16, "gate_up": dict(tile), "down": dict(tile)}
    # vLLM's get_default_config for unquantized bf16
    if T * K <= E:  # decode: each expert sees a token or two
        tile = {"BLOCK_N": 32, "BLOCK_K": 64, "GROUP_M": 1, "num_warps": 4, "num_stages": 4}
        return {"BLOCK_M": 16, "gate_up": dict(tile), "down": dict(tile)}
    tile = {"BLOCK_N": 64, "BLOCK_K": 64 if fp8 else 32, "GROUP_M": 8, "num_warps": 4, "num_stages": 4}
    return {"BLOCK_M": 64, "gate_up": dict(tile), "down": dict(tile)}
