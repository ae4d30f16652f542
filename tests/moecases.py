"""Shared by the tests: the edge cases, the method variants, and seeded random inputs.

Inputs are fresh random tensors per test (never zeros), drawn from a generator seeded by the
test's own id, so a failure reproduces with the same numbers every time it is run.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass

import torch

import warpdecode
from bench import persistent
from bench.poison import poisoned
from warpdecode.presets import MoEShape


@dataclass(frozen=True)
class Case:
    """One layer shape plus how its tokens are routed; ``id`` names the edge it exercises."""

    id: str
    T: int
    H: int
    I: int  # noqa: E741
    E: int
    K: int
    # "router": softmax top-K of random logits (warpdecode.route)
    # "same":   every token routed to the same K experts (slot order shuffled per token)
    # "idle":   tokens choose among K+1 experts only, the other E-K-1 receive nothing
    routing: str = "router"


#: The CPU-sized edges (BLOCK_M is 16 in the interpreter; 2880/16 = 180, 1408/16 = 88).
EDGE_CASES = [
    Case("T=1", T=1, H=160, I=88, E=7, K=3),
    Case("odd-H=180-I=88", T=3, H=180, I=88, E=8, K=2),
    Case("odd-H=45-I=23", T=2, H=45, I=23, E=5, K=2),
    Case("prime-E=7", T=4, H=64, I=48, E=7, K=2),
    Case("prime-E=13", T=3, H=64, I=40, E=13, K=4),
    Case("K=1", T=5, H=96, I=40, E=8, K=1),
    Case("K=E=4", T=3, H=64, I=40, E=4, K=4),
    Case("all-tokens-same-experts", T=6, H=64, I=40, E=8, K=2, routing="same"),
    Case("all-tokens-one-expert-K=1-T*K>BLOCK_M", T=20, H=48, I=24, E=5, K=1, routing="same"),
    Case("idle-experts-T*K<E", T=2, H=64, I=40, E=13, K=2),
    Case("idle-experts-subset", T=5, H=64, I=40, E=11, K=2, routing="idle"),
    Case("T*K>BLOCK_M", T=12, H=48, I=24, E=3, K=2),
]

#: The method variants every edge runs through: name → keyword arguments of warpdecode.moe.
#: ``act_dtype=None`` in "warp-act" is replaced by x's dtype (the rounded intermediate).
VARIANTS = {
    "loop": dict(method="loop"),
    "expert": dict(method="expert"),
    "warp": dict(method="warp"),
    "warp-split": dict(method="warp", schedule="split"),  # two kernels, whatever the tuned table picks
    # the persistent kernel (two phases on a CPU), beside the package: run() calls bench.persistent.moe_fused
    "warp-fused": dict(method="warp", schedule="fused"),
    "warp-grouped": dict(method="warp", schedule="grouped"),  # each routed expert's rows read once
    "auto": dict(method="auto"),
    "expert-fp8": dict(method="expert", act_format="fp8"),
    "warp-act": dict(method="warp", act_dtype=None),
}


def seed_for(text: str) -> int:
    """A stable seed from a string (a test's node id): same test, same numbers."""
    return zlib.crc32(text.encode())


#: Where the tests run kernels: the GPU when kernels compile for one, else the CPU interpreter.
DEVICE = warpdecode.DEFAULT_DEVICE


def make_inputs(case: Case, dtype=torch.bfloat16, seed: int = 0, device=None):
    """Random (x, w13, w2, topk_weights, topk_ids) for ``case`` on ``device`` (default DEVICE),
    weights scaled like a trained layer. x and the routing are drawn on the CPU, the weights on the
    device itself (GPU-sized layers are slow to draw on a CPU); a seed gives the same numbers on
    the same kind of device."""
    device = device or DEVICE
    g = torch.Generator(device="cpu").manual_seed(seed)
    shape = MoEShape(case.id, H=case.H, I=case.I, E=case.E, K=case.K)
    w13, w2 = shape.weights(dtype=dtype, seed=seed + 1, device=device)
    x = torch.randn(case.T, case.H, generator=g).to(dtype)
    if case.routing == "router":
        logits = torch.randn(case.T, case.E, generator=g)
        topk_weights, topk_ids = warpdecode.route(logits, case.K)
    else:
        pool = torch.randperm(case.E, generator=g)[: case.K if case.routing == "same" else min(case.E, case.K + 1)]
        rows = [pool[torch.randperm(len(pool), generator=g)[: case.K]] for _ in range(case.T)]
        topk_ids = torch.stack(rows).to(torch.int32) if rows else torch.empty(0, case.K, dtype=torch.int32)
        topk_weights = torch.softmax(torch.randn(case.T, case.K, generator=g), dim=-1)
    return tuple(t.to(device) for t in (x, w13, w2, topk_weights.float().contiguous(), topk_ids.contiguous()))


def variant_kwargs(variant: str, dtype) -> dict:
    kw = dict(VARIANTS[variant])
    if "act_dtype" in kw:
        kw["act_dtype"] = dtype
    return kw


def resolved(variant: str, T: int, H: int, I: int, E: int, K: int) -> str:  # noqa: E741
    """The tolerance key of a variant: ``auto`` is whichever method it picks for this shape; both
    warp-decode schedules keep every sum in FP32 and round once, so they share warp's."""
    if variant in ("warp-split", "warp-fused", "warp-grouped"):
        return "warp"
    return warpdecode.pick_method(T, H, I, E, K) if variant == "auto" else variant


def run(inputs, **kwargs):
    """warpdecode.moe; with ``schedule="fused"`` the persistent schedule beside the package (bench/persistent.py)."""
    if kwargs.get("schedule") == "fused":
        return persistent.moe_fused(*inputs, **{k: v for k, v in kwargs.items() if k not in ("method", "schedule")})
    return warpdecode.moe(*inputs, **kwargs)


def run_poisoned(inputs, **kwargs):
    """:func:`run` with every buffer it allocates filled with NaN / 2**30 first."""
    with poisoned():
        return run(inputs, **kwargs)


def error_ratio(y, ref, dtype) -> float:
    """error / floor: 1.0 is the best any output in ``dtype`` can do. NaN in y gives NaN."""
    return warpdecode.rel_error(y, ref) / warpdecode.rounding_floor(ref, dtype)
