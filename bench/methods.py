"""The callables the benchmark times, by name.

The public methods (``loop``, ``expert``, ``warp``, ``auto``, ``expert_fp8``, ``warp_bf16_act``)
call ``warpdecode.moe`` as a user does: its checks, its dispatch, the ids as
:func:`warpdecode.route` returns them. Each has a bare twin (:data:`KERNELS`, ``loop`` excepted):
the kernels ``moe`` runs, called below it on inputs already validated, a diagnostic beside the
public time (the speed sweep's ``overhead`` column), never the headline. Every method but
``loop`` (a host sync per call, by design; timed eagerly) is free of host syncs once captured.
"""

from __future__ import annotations

import torch

from warpdecode import api
from warpdecode.expert import moe_expert
from warpdecode.warp import moe_warp

#: Each public method's bare twin: the same kernels without ``warpdecode.moe`` around them.
KERNELS = {"warp": "warp_kernels", "expert": "expert_kernels", "auto": "auto_kernels",
           "expert_fp8": "expert_fp8_kernels", "warp_bf16_act": "warp_bf16_act_kernels"}

#: Methods timed eagerly (every other one inside a CUDA graph).
EAGER = ("loop",)


def public(method: str, **options):
    """``warpdecode.moe(..., method=method, **options)`` as a benchmark callable (``api.moe`` looked
    up at each call, so a test can stand in for it)."""
    def run(x, w13, w2, topk_weights, topk_ids):
        return api.moe(x, w13, w2, topk_weights, topk_ids, method=method, **options)

    run.__name__ = f"moe_{method}"
    return run


def _moe_warp_rounded(x, w13, w2, tw, ti):
    return api.moe(x, w13, w2, tw, ti, method="warp", act_dtype=x.dtype)


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
        "loop": public("loop"),
        "expert": public("expert"),
        "warp": public("warp"),
        "auto": public("auto"),
        "expert_fp8": public("expert", act_format="fp8"),
        "warp_bf16_act": _moe_warp_rounded,
        "expert_kernels": moe_expert,
        "warp_kernels": moe_warp,
        "auto_kernels": api.run_auto,
        "expert_fp8_kernels": _expert_fp8,
        "warp_bf16_act_kernels": _warp_bf16_act,
    }
    hf = hf_grouped_mm() if include_hf else None
    if hf is not None:
        fns["grouped_mm"] = hf
    return fns
