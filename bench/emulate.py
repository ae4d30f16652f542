"""Float64 emulation of the roundings each path makes, one switch per rounding step.

:func:`warpdecode.reference_moe` computes the layer in float64 and rounds nothing. The kernels
accumulate in FP32 and round at a few fixed places; this module computes the layer in float64
and rounds at exactly those places, each behind its own switch, so the error of each rounding
step can be measured on its own against the reference (notebook 3):

    rounding step                                   where the expert-centric path makes it
    act_fp8       activations → FP8 e4m3, 1×128     quant_fp8_kernel, on x and on the intermediate
                  power-of-two block scales
    gate_up       gate and up → compute dtype,      not made here (SiLU·up is fused into the GEMM); vLLM's
                  before SiLU·up                    fused_moe + silu_and_mul and HF's grouped_mm make it
    intermediate  silu(gate)·up → compute dtype     grouped_gate_up_kernel's store
    slot_outputs  weight × expert output → dtype    grouped_down_kernel's store (one per slot)
    combine       Σ over the K slots in the          combine_kernel (vLLM's moe_sum): one rounding
                  compute dtype                      per add, slot 0 first
    output        y → compute dtype                 always: every path stores y in x's dtype

Warp decode makes only the last one (its intermediate is FP32 and its combine is a sum in FP32
registers); with ``act_dtype=x.dtype`` it also makes ``intermediate``. What the emulation leaves
out is the kernels' FP32 accumulation, which costs far less than one bf16 rounding: the
emulated expert path's error matches the real kernels' to a few percent
(``tests/test_emulate.py``).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

FP8 = torch.float8_e4m3fn
FP8_MAX = 448.0  # largest finite e4m3fn value
FP8_GROUP = 128  # columns per scale, as quant_fp8_kernel


@dataclass(frozen=True)
class Rounding:
    """Which rounding steps to make; the output is always rounded to the compute dtype."""

    act_fp8: bool = False
    gate_up: bool = False
    intermediate: bool = False
    slot_outputs: bool = False
    combine: bool = False


#: The roundings of each path, by the names ``bench`` uses.
PATHS = {
    "warp": Rounding(),
    "warp_bf16_act": Rounding(intermediate=True),
    "expert": Rounding(intermediate=True, slot_outputs=True, combine=True),
    "expert_fp8": Rounding(act_fp8=True, intermediate=True, slot_outputs=True, combine=True),
    # what vLLM's fused_moe rounds: the GEMM stores gate and up, silu_and_mul stores the intermediate
    "expert_unfused": Rounding(gate_up=True, intermediate=True, slot_outputs=True, combine=True),
}

#: The expert-centric path built up one rounding at a time, as (label, roundings so far).
CUMULATIVE = [
    ("float64, output rounded once (= warp decode)", PATHS["warp"]),
    ("+ intermediate rounded", Rounding(intermediate=True)),
    ("+ per-slot outputs rounded", Rounding(intermediate=True, slot_outputs=True)),
    ("+ combine summed in the compute dtype (= expert path)", PATHS["expert"]),
    ("+ FP8 e4m3 activations (= expert path, fp8)", PATHS["expert_fp8"]),
]

#: Each rounding step alone, on top of the output rounding every path makes.
ALONE = [
    ("intermediate rounded", Rounding(intermediate=True)),
    ("per-slot outputs rounded", Rounding(slot_outputs=True)),
    ("combine summed in the compute dtype", Rounding(combine=True)),
    ("FP8 e4m3 activations", Rounding(act_fp8=True)),
]


def _round(t: torch.Tensor, dtype) -> torch.Tensor:
    """Round float64 values to ``dtype`` (to nearest even, as the GPU's stores) and widen them back."""
    return t.to(dtype).double()


def quantize_fp8(a: torch.Tensor) -> torch.Tensor:
    """a (n, N) → the values quant_fp8_kernel hands the GEMM, dequantized, in float64: per row and
    per 128 columns, s = 2^ceil(log2(amax / 448)) (computed in FP32, as the kernel does), and
    q = e4m3(a / s) · s. Power-of-two scales make a / s and q · s exact."""
    n, N = a.shape
    groups = -(-N // FP8_GROUP)
    pad = groups * FP8_GROUP - N
    blocks = F.pad(a.double(), (0, pad)).view(n, groups, FP8_GROUP)
    amax = blocks.abs().amax(dim=-1, keepdim=True).float().clamp_min(1e-30)
    s = torch.exp2(torch.ceil(torch.log2(amax / FP8_MAX))).double()
    q = (blocks / s).clamp(-FP8_MAX, FP8_MAX).to(FP8).double() * s
    return q.view(n, groups * FP8_GROUP)[:, :N]


def emulate(x, w13, w2, topk_weights, topk_ids, rounding: Rounding, dtype=None) -> torch.Tensor:
    """The layer in float64 with the roundings in ``rounding`` made; returns y (T, H) in ``dtype``
    (default x's dtype), which the output rounding always applies.

    Same arguments as :func:`warpdecode.reference_moe`; runs on x's device, one expert at a time.
    """
    dtype = dtype or x.dtype
    T, H = x.shape
    K = topk_ids.shape[1]
    I = w13.shape[1] // 2  # noqa: E741
    x64 = x.double()
    if rounding.act_fp8:
        x64 = quantize_fp8(x64)  # each token's row quantizes the same way wherever it is gathered
    ids = topk_ids.long()
    slot_out = torch.zeros(T, K, H, dtype=torch.float64, device=x.device)  # weight × expert output
    for e in torch.unique(ids).tolist():
        tok, slot = torch.nonzero(ids == e, as_tuple=True)
        gu = x64[tok] @ w13[e].double().T  # (n, 2I)
        if rounding.gate_up:
            gu = _round(gu, dtype)
        h = F.silu(gu[:, :I]) * gu[:, I:]  # (n, I)
        if rounding.intermediate:
            h = _round(h, dtype)
        if rounding.act_fp8:
            h = quantize_fp8(h)
        o = (h @ w2[e].double().T) * topk_weights[tok, slot].double()[:, None]  # (n, H)
        if rounding.slot_outputs:
            o = _round(o, dtype)
        slot_out[tok, slot] = o
    if rounding.combine:
        y = torch.zeros(T, H, dtype=torch.float64, device=x.device)
        for j in range(K):  # combine_kernel: slot 0 first, one rounding per add
            y = _round(y + slot_out[:, j], dtype)
    else:
        y = slot_out.sum(dim=1)
    return y.to(dtype)


def attribution(x, w13, w2, topk_weights, topk_ids, steps=CUMULATIVE, ref=None) -> list[dict]:
    """Error of each emulated step against the float64 reference, in multiples of the rounding floor."""
    from warpdecode.reference import reference_moe, rel_error, rounding_floor

    ref = reference_moe(x, w13, w2, topk_weights, topk_ids) if ref is None else ref
    floor = rounding_floor(ref, x.dtype)
    rows = []
    for label, r in steps:
        err = rel_error(emulate(x, w13, w2, topk_weights, topk_ids, r), ref)
        rows.append({"step": label, "error": err, "error_over_floor": err / floor})
    return rows
