"""Routing: router logits → top-K experts and their weights (stage 1 of every path)."""

from __future__ import annotations

import torch

from .checks import check_route_inputs


def route(router_logits: torch.Tensor, top_k: int, *, renormalize: bool = True):
    """Softmax over the E experts, keep the top-``top_k``; ``renormalize`` (default True) rescales them to sum to 1.
    router_logits: (T, E) any float dtype. Returns ``topk_weights`` (T, K) float32 and ``topk_ids``
    (T, K) int32. Qwen3-MoE and Mixtral renormalise; OLMoE does not."""
    check_route_inputs(router_logits, top_k)
    probs = torch.softmax(router_logits.float(), dim=-1)
    topk_weights, topk_ids = torch.topk(probs, top_k, dim=-1)
    if renormalize:
        topk_weights = topk_weights / topk_weights.sum(dim=-1, keepdim=True)
    return topk_weights.contiguous(), topk_ids.to(torch.int32).contiguous()
