"""Rung 1: the eager expert loop, as a PyTorch user (and Hugging Face's eager experts) writes it: per
hit expert gather, two matmuls, SiLU·up, × weight, ``index_add_``, rounded to the compute dtype at
each step; one device→host sync and about eight launches per expert. FP8 weights are dequantized
first; bad ids follow ``kernels/ids.py``.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .quant import dense


def moe_loop(
    x: torch.Tensor,  # (T, H)
    w13: torch.Tensor,  # (E, 2I, H)
    w2: torch.Tensor,  # (E, H, I)
    topk_weights: torch.Tensor,  # (T, K) float32
    topk_ids: torch.Tensor,  # (T, K) int
) -> torch.Tensor:  # (T, H) x.dtype
    w13, w2 = dense(w13, x.dtype), dense(w2, x.dtype)
    I = w2.shape[2]  # noqa: E741
    y = torch.zeros_like(x)
    ids = topk_ids.long()
    ok = (ids >= 0) & (ids < w13.shape[0])
    hit = torch.unique(ids[ok]).tolist()  # the host sync
    for e in hit:
        tok, slot = torch.where(ids == e)
        gate_up = F.linear(x[tok], w13[e])  # (n, 2I)
        h = F.silu(gate_up[:, :I]) * gate_up[:, I:]  # (n, I), compute dtype
        out = F.linear(h, w2[e]) * topk_weights[tok, slot, None].to(x.dtype)  # (n, H)
        y.index_add_(0, tok, out)
    return y.masked_fill_((~ok & (topk_weights != 0)).any(dim=1, keepdim=True), float("nan"))
