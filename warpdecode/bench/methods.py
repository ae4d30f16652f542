"""The callables the benchmark times, by name, all on validated inputs and free of host syncs
(except ``loop``, which needs one per call by design, and so is timed eagerly)."""

from __future__ import annotations

import torch

from ..api import run_auto
from ..expert import moe_expert
from ..loop import moe_loop
from ..warp import moe_warp

#: Methods timed inside a CUDA graph.
GRAPHABLE = ("expert", "warp", "auto", "grouped_mm")


def _expert_fp8(x, w13, w2, tw, ti):
    return moe_expert(x, w13, w2, tw, ti, act_format="fp8")


def _warp_bf16_act(x, w13, w2, tw, ti):
    return moe_warp(x, w13, w2, tw, ti, act_dtype=x.dtype)


def hf_grouped_mm():
    """Hugging Face transformers' ``grouped_mm`` experts forward on our weights, or None."""
    try:
        from transformers.integrations.moe import grouped_mm_experts_forward
    except ImportError:
        return None

    class _Experts(torch.nn.Module):  # the attributes grouped_mm_experts_forward reads
        has_gate, has_bias, is_transposed = True, False, False

        def __init__(self, w13, w2):
            super().__init__()
            self.num_experts = w13.shape[0]
            self.gate_up_proj, self.down_proj = w13, w2
            self.act_fn = torch.nn.functional.silu

        def _apply_gate(self, gate_up_out):
            gate, up = gate_up_out.chunk(2, dim=-1)
            return self.act_fn(gate) * up

    def run(x, w13, w2, tw, ti):
        return grouped_mm_experts_forward(_Experts(w13, w2), x, ti.long(), tw)

    return run


def registry(include_hf: bool = True) -> dict:
    fns = {
        "loop": moe_loop,
        "expert": moe_expert,
        "warp": moe_warp,
        "auto": run_auto,
        "expert_fp8": _expert_fp8,
        "warp_bf16_act": _warp_bf16_act,
    }
    hf = hf_grouped_mm() if include_hf else None
    if hf is not None:
        fns["grouped_mm"] = hf
    return fns
