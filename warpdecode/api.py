"""The public entry point: one MoE layer, computed by the method you name."""

from __future__ import annotations

import torch

from .checks import check_moe_inputs
from .configs import load_tuned, shape_key
from .expert import moe_expert
from .loop import moe_loop
from .warp import SCHEDULES, moe_warp

METHODS = ("loop", "expert", "warp", "auto")

#: Where no measured crossover exists (another GPU, another shape), ``auto`` takes warp decode up to
#: this many tokens. It is a guess, not a measurement; the tuned table replaces it.
DEFAULT_CROSSOVER = 8


def crossover(H: int, I: int, E: int, K: int) -> int:  # noqa: E741
    """The largest T for which ``auto`` picks ``warp``: measured on this GPU for known shapes
    (``warpdecode/tuned/<GPU>.json``, written by ``python -m warpdecode bench``), else the default."""
    return int(load_tuned().get("crossover", {}).get(shape_key(H, I, E, K), DEFAULT_CROSSOVER))


def pick_method(T: int, H: int, I: int, E: int, K: int) -> str:  # noqa: E741
    return "warp" if T <= crossover(H, I, E, K) else "expert"


def run_auto(x, w13, w2, topk_weights, topk_ids):
    """``method="auto"`` on inputs already validated and contiguous (ids int32): warp decode up
    to the crossover, the expert-centric path above it. No checks, no host sync."""
    E, two_i, H = w13.shape
    m = pick_method(x.shape[0], H, two_i // 2, E, topk_ids.shape[1])
    return (moe_warp if m == "warp" else moe_expert)(x, w13, w2, topk_weights, topk_ids)


def moe(x, w13, w2, topk_weights, topk_ids, *, method: str = "auto", act_dtype=None, act_format: str = "native",
        schedule: str | None = None):
    """y (T, H) = Σ_j topk_weights[:, j] · W2[e] (silu(Wg[e] x) ⊙ Wu[e] x), e = topk_ids[:, j].

    x (T, H) bf16/fp16/fp32; w13 (E, 2I, H) gate rows then up rows; w2 (E, H, I), both in x's
    dtype and contiguous; topk_weights (T, K) float32; topk_ids (T, K) int32 or int64 in [0, E).
    Returns y in x's dtype.

    method: ``"loop"`` (eager expert loop), ``"expert"`` (expert-centric, eight stages),
    ``"warp"`` (two-kernel warp decode), or ``"auto"`` (warp up to the measured crossover T).
    act_dtype: warp only, the intermediate's dtype (default float32; pass x.dtype to round it).
    act_format: expert only, ``"native"`` or ``"fp8"`` (e4m3 activations, 1×128 block scales).
    schedule: warp only, ``"split"`` (two kernels), ``"fused"`` (one persistent kernel with a
    grid barrier) or ``"grouped"`` (two kernels that read each routed expert's rows once for all
    of its tokens); default: what this GPU's tuned table picks for the shape and T.
    """
    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}, got {method!r}")
    if act_format not in ("native", "fp8"):
        raise ValueError(f"act_format must be 'native' or 'fp8', got {act_format!r}")
    if act_dtype is not None and act_dtype not in (torch.float32, torch.bfloat16, torch.float16):
        raise TypeError(f"act_dtype must be torch.float32, bfloat16 or float16, got {act_dtype}")
    if act_format == "fp8" and method != "expert":
        raise ValueError(f"act_format='fp8' applies to method='expert' only, got method={method!r}")
    if schedule is not None and schedule not in SCHEDULES:
        raise ValueError(f"schedule must be None or one of {SCHEDULES}, got {schedule!r}")
    if schedule is not None and method != "warp":
        raise ValueError(f"schedule applies to method='warp' only, got method={method!r}")
    if act_dtype is not None and method != "warp":
        raise ValueError(f"act_dtype applies to method='warp' only, got method={method!r}")
    d = check_moe_inputs(x, w13, w2, topk_weights, topk_ids)
    if d.T == 0:
        return x.new_empty(0, d.H)

    x = x.contiguous()
    topk_weights = topk_weights.contiguous()
    topk_ids = topk_ids.to(torch.int32).contiguous()
    if method == "auto":
        return run_auto(x, w13, w2, topk_weights, topk_ids)
    if method == "loop":
        return moe_loop(x, w13, w2, topk_weights, topk_ids)
    if method == "expert":
        return moe_expert(x, w13, w2, topk_weights, topk_ids, act_format=act_format)
    return moe_warp(x, w13, w2, topk_weights, topk_ids, act_dtype=act_dtype or torch.float32, schedule=schedule)
