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
import math
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
    # one warp, one neuron, each step's products summed across the warp at once: the H200 tuner's
    # tile in every bucket. Columns per step: 1024 or 2048 (four or eight 16-byte loads per lane per
    # row), whichever leaves fewer masked columns in the last step, the larger on a tie (the tuner's
    # pick at T = 1 on all six presets)
    block_h = min((2048, 1024), key=lambda b: triton.cdiv(H, b) * b)
    cfg = {
        "gate_up": {"BLOCK_I": 1, "BLOCK_H": min(block_h, triton.next_power_of_2(H)), "num_warps": 1,
                    "num_stages": 1},
        # four warps, one hidden output each, all K experts' rows in flight
        "down": {"BLOCK_H": 4, "BLOCK_I": 256, "num_warps": 4, "num_stages": 1},
    }
    if shares_experts(E, K, T):
        cfg["grouped"] = {}  # the grouped schedule, with its default tiles (default_grouped)
    return cfg


#: The sharing past which the grouped schedule reads fewer bytes than the pair by enough to win:
#: between the largest (T·K) / distinct-experts ratio where the pair won (1.21: gpt-oss-20b and
#: OLMoE at T = 4) and the smallest where the grouped schedule won (1.24: Qwen3-235B at T = 8), in
#: the H200 tuner's schedule choices over the six presets (tuned/NVIDIA_H200.json).
GROUPED_SHARING = 1.23


def expected_distinct(E: int, K: int, T: int) -> float:
    """The distinct experts T tokens routed uniformly at random to K of E each touch, on average."""
    return E * (1 - (1 - K / E) ** T)


def shares_experts(E: int, K: int, T: int) -> bool:
    """Whether warp decode's default is the grouped schedule: the (token, slot) pairs outnumber the
    distinct experts they name by ``GROUPED_SHARING`` or more, so the pair's one read of an expert's
    rows per pair costs more than the grouped schedule's one read per expert and its tensor-core
    products. A host-side estimate from T, K and E: no look at the routing, no sync."""
    return T > 1 and T * K >= GROUPED_SHARING * expected_distinct(E, K, T)


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
    with the grouped down kernel, ``experiments/results/NVIDIA_H200/logs/tune_grouped_v12.log``). ``wide``
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
    the H200, ``experiments/results/NVIDIA_H200/grouped_down.csv``, and close to the tuner's picks,
    ``logs/tune_grouped_v12.log``). ``wide``: 32 × 32, two stages."""
    if _runtime.INTERPRET:
        return {"BLOCK_H": 16, "BLOCK_I": 16, "num_warps": 4, "num_stages": 1}
    if wide:
        return {"BLOCK_H": 32, "BLOCK_I": 32, "num_warps": 4, "num_stages": 2}
    return {"BLOCK_H": 128, "BLOCK_I": 64, "num_warps": 4, "num_stages": 4}


def expert_config(H: int, I: int, E: int, K: int, T: int, *, fp8: bool = False, elem: int = 2) -> dict:  # noqa: E741
    """Launch configuration of the expert-centric path: the shared BLOCK_M and each GEMM's tiles
    (BLOCK_N, BLOCK_K, GROUP_M, warps, stages, and in tuned tables sometimes ``HALF_M``: see
    ``warpdecode.expert._gemm_meta``). ``elem``: bytes per weight element (the default's stages
    are fitted to shared memory)."""
    tuned = _lookup("expert_fp8" if fp8 else "expert", H, I, E, K, T)
    if tuned:
        return tuned
    if _runtime.INTERPRET:
        tile = {"BLOCK_N": 32, "BLOCK_K": 32, "GROUP_M": 1, "num_warps": 4, "num_stages": 1}
        return {"BLOCK_M": 16, "gate_up": dict(tile), "down": dict(tile)}
    return default_expert(H, I, E, K, T, fp8=fp8, elem=elem)


#: What one thread may hold of a GEMM's FP32 accumulators before the tile spills (of Hopper's 255
#: registers: room for the loads in flight and the addresses).
ACC_REGS_PER_THREAD = 128


def default_expert(H: int, I: int, E: int, K: int, T: int, *, fp8: bool = False, elem: int = 2,  # noqa: E741
                   shared_per_block: int | None = None) -> dict:
    """The expert path's launch configuration where no tuned one exists, from the layer shape, T
    and the device. The tiles follow vLLM's batch-aware ``get_default_config`` for unquantized MoE
    (BLOCK_N 64, or 128 past T = 64, and for N ≥ 4096 128, or 256 past T = 128; BLOCK_K 128 at
    decode T ≤ 64 or K ≥ 4096, else 64; GROUP_M by pairs per expert; 3 stages), with each GEMM's
    own N and K. BLOCK_M follows the pairs each expert sees rather than T, as the H200 tuner's
    picks do (``tuned/NVIDIA_H200.json``). Two guards that vLLM's one-GEMM rule does not need: the
    gate/up GEMM holds two accumulators (gate and up, for SiLU·up in its epilogue), so a tile's
    FP32 accumulators are kept within ``ACC_REGS_PER_THREAD``; and the stages, then BLOCK_K, are
    fitted to this device's shared memory per program (``shared_per_block``, default the current
    GPU's; ``elem`` bytes per element), not to an H100's."""
    budget = int(0.86 * (shared_per_block or _runtime.device_limits()["shared_per_block"]))
    pairs_per_expert = T * K / max(E, 1)
    # the M tile by the rows an expert's GEMM sees, not by T: twice the mean, so that the experts
    # routed more than the mean still fit one tile (a second tile reads the expert's weights again),
    # and half-height tiles (HALF_M) where a block's upper half is padding
    block_m = min(128, max(16, triton.next_power_of_2(math.ceil(2 * pairs_per_expert))))
    group_m = 16 if pairs_per_expert > 128 else 8 if pairs_per_expert > 32 else 1
    acc_regs = ACC_REGS_PER_THREAD if elem <= 2 else ACC_REGS_PER_THREAD // 2

    def tile(n: int, k: int, accumulators: int) -> dict:
        block_n = (128 if T <= 128 else 256) if n >= 4096 else (64 if T <= 64 else 128)
        block_k = 128 if (fp8 or k >= 4096 or T <= 64) else 64
        if elem == 4:  # FP32 operands multiply on FMAs, their K slices held in registers beside the sums
            block_k = min(block_k, 32)
        warps = 4 if accumulators * block_m * block_n < 8192 else 8
        while accumulators * block_m * block_n > acc_regs * 32 * warps and block_n > 32:
            block_n //= 2
        block_n = min(block_n, max(32, triton.next_power_of_2(n)))
        stages = 3
        while (block_m * block_k + accumulators * block_k * block_n) * elem * stages > budget:
            if stages > 2:
                stages -= 1
            elif block_k > 32:
                block_k //= 2
            else:
                break
        return {"BLOCK_N": block_n, "BLOCK_K": block_k, "GROUP_M": group_m, "num_warps": warps, "num_stages": stages,
                "HALF_M": block_m >= 32}

    return {"BLOCK_M": block_m, "gate_up": tile(I, H, 2), "down": tile(H, I, 1)}
