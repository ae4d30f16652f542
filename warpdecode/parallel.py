"""Warp decode across GPUs, over ``torch.distributed``: tensor parallel and expert parallel.

    tensor parallel (tp ranks)  rank r holds every expert's neurons [r·I/tp, (r+1)·I/tp): w13's gate
                                rows and up rows of that slice, w2's columns of it. SiLU·up is per
                                neuron, so each rank's FP32 intermediate is exact and stays local:
                                y_r = Σ_j w_j · W2[e_j, :, slice] · a_slice, FP32, unrounded
    expert parallel (ep ranks)  rank r holds the whole experts [r·E/ep, (r+1)·E/ep); a slot routed
                                elsewhere weighs 0 here (its id becomes 0: the contract transformers'
                                expert parallelism uses): y_r = Σ_{j local} w_j · W2[e_j] · a_j, FP32
    both                        y = Σ_r y_r: one all-reduce of (T, H) FP32 per layer, rounded once

x, topk_weights and topk_ids are the same on every rank (the tokens of a decode step are few: an
all-gather of them, where a data-parallel attention holds different tokens per rank, moves T·H
values, next to weights of E·3·I·H). Byte ledger per rank and call, bf16 weights:
  tensor parallel  the U distinct experts' rows of its slice, U·3·(I/tp)·H·2 B: 1/tp of the layer's
  expert parallel  the distinct experts it holds, ≈ U/ep of them on average (routing decides);
                   a rank whose experts no token chose reads nothing but the routing
  all-reduce       2·(tp − 1)/tp · T·H·4 B through the interconnect (ring)

On one rank each call is ``warpdecode.warp.moe_warp`` (or, past the local shape's crossover with
``method="auto"``, the expert path, whose partial sums are rounded to x's dtype before the reduce).
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch import nn

from . import api
from .checks import check_moe_inputs
from .expert import moe_expert
from .warp import moe_warp

LAYOUTS = ("tp", "ep")


def _world(group) -> tuple[int, int]:
    if not dist.is_initialized():
        raise RuntimeError("warpdecode.parallel needs torch.distributed initialized (dist.init_process_group)")
    return dist.get_rank(group), dist.get_world_size(group)


def shard_tp(w13: torch.Tensor, w2: torch.Tensor, rank: int, world: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Rank ``rank``'s tensor-parallel slice of a layer: (E, 2·I/world, H) gate rows then up rows of
    its neurons, and (E, H, I/world). Copies (each rank keeps only its slice)."""
    E, two_i, H = w13.shape
    I = two_i // 2  # noqa: E741
    if world < 1 or I % world:
        raise ValueError(f"tp={world} must divide the intermediate size I={I} (w13 {tuple(w13.shape)})")
    if not 0 <= rank < world:
        raise ValueError(f"rank={rank} must lie in [0, tp={world})")
    n = I // world
    lo, hi = rank * n, (rank + 1) * n
    w13_r = torch.cat([w13[:, lo:hi], w13[:, I + lo:I + hi]], dim=1).contiguous()
    return w13_r, w2[:, :, lo:hi].contiguous()


def shard_ep(w13: torch.Tensor, w2: torch.Tensor, rank: int, world: int) -> tuple[torch.Tensor, torch.Tensor, int]:
    """Rank ``rank``'s expert-parallel share: experts [rank·E/world, (rank+1)·E/world) of w13 and w2
    (views, contiguous), and the first of them."""
    E = w13.shape[0]
    if world < 1 or E % world:
        raise ValueError(f"ep={world} must divide the number of experts E={E}")
    if not 0 <= rank < world:
        raise ValueError(f"rank={rank} must lie in [0, ep={world})")
    n = E // world
    return w13[rank * n:(rank + 1) * n], w2[rank * n:(rank + 1) * n], rank * n


def _partial(x, w13, w2, topk_weights, topk_ids, method: str) -> torch.Tensor:
    """This rank's (T, H) FP32 share of y."""
    E, two_i, H = w13.shape
    T, K = topk_ids.shape
    if method == "warp" or (method == "auto" and api.pick_method(T, H, two_i // 2, E, K, x.element_size()) == "warp"):
        return moe_warp(x, w13, w2, topk_weights, topk_ids, out_dtype=torch.float32)
    return moe_expert(x, w13, w2, topk_weights, topk_ids).float()


def _check(x, w13, w2, topk_weights, topk_ids, method):
    if method not in ("auto", "warp", "expert"):
        raise ValueError(f"method must be 'auto', 'warp' or 'expert', got {method!r}")
    if torch.is_grad_enabled() and any(t.requires_grad for t in (x, w13, w2, topk_weights)):
        raise RuntimeError("warpdecode.parallel computes no gradients: run it under torch.no_grad()")


def moe_tp(x, w13_r, w2_r, topk_weights, topk_ids, *, group=None, method: str = "auto") -> torch.Tensor:
    """y (T, H) of the whole layer from this rank's tensor-parallel slice (:func:`shard_tp`):
    the local FP32 partial, one all-reduce, rounded once to x's dtype. Every rank of ``group``
    calls it with the same x and routing."""
    _check(x, w13_r, w2_r, topk_weights, topk_ids, method)
    _world(group)
    d = check_moe_inputs(x, w13_r, w2_r, topk_weights, topk_ids)
    y = x.new_zeros(d.T, d.H, dtype=torch.float32) if d.T == 0 else _partial(
        x.contiguous(), w13_r, w2_r, topk_weights.contiguous(), topk_ids.to(torch.int32).contiguous(), method)
    dist.all_reduce(y, group=group)
    return y.to(x.dtype)


def moe_ep(x, w13_r, w2_r, topk_weights, topk_ids, *, first_expert: int, num_experts: int, group=None,
           method: str = "auto") -> torch.Tensor:
    """y (T, H) of the whole layer from this rank's experts [first_expert, first_expert + E_r)
    (:func:`shard_ep`); topk_ids are global, in [0, num_experts). Slots routed to other ranks weigh
    0 here; the FP32 partials are summed by one all-reduce and rounded once."""
    _check(x, w13_r, w2_r, topk_weights, topk_ids, method)
    _world(group)
    E_r = w13_r.shape[0]
    if not 0 <= first_expert <= num_experts - E_r:
        raise ValueError(f"first_expert={first_expert} with {E_r} local experts must fit in num_experts={num_experts}")
    ids = topk_ids.long()
    if ids.numel() and not torch.compiler.is_compiling():
        lo, hi = (int(v) for v in torch.aminmax(ids))
        if lo < 0 or hi >= num_experts:
            raise ValueError(f"topk_ids must lie in [0, num_experts={num_experts}), got values in [{lo}, {hi}]")
    local = (ids >= first_expert) & (ids < first_expert + E_r)
    local_ids = torch.where(local, ids - first_expert, 0).to(torch.int32).contiguous()
    local_w = torch.where(local, topk_weights, 0.0).contiguous()
    d = check_moe_inputs(x, w13_r, w2_r, local_w, local_ids, local=True)
    y = x.new_zeros(d.T, d.H, dtype=torch.float32) if d.T == 0 else _partial(
        x.contiguous(), w13_r, w2_r, local_w, local_ids, method)
    dist.all_reduce(y, group=group)
    return y.to(x.dtype)


class ParallelMoE(nn.Module):
    """One MoE layer's experts sharded over a process group: give it the layer's full weights (on
    any rank's device), the layout (``"tp"`` or ``"ep"``); it keeps this rank's share and checks
    at construction, with one all-gather, that every rank of the group agrees on the layer's shape
    and the layout. ``forward(x, topk_weights, topk_ids)`` returns the whole layer's y on every rank."""

    def __init__(self, w13: torch.Tensor, w2: torch.Tensor, layout: str = "tp", *, group=None, method: str = "auto"):
        super().__init__()
        if layout not in LAYOUTS:
            raise ValueError(f"layout must be one of {LAYOUTS}, got {layout!r}")
        rank, world = _world(group)
        E, two_i, H = w13.shape
        if tuple(w2.shape) != (E, H, two_i // 2):
            raise ValueError(f"w2 must be (E, H, I) = {(E, H, two_i // 2)} to match w13 {tuple(w13.shape)}, "
                             f"got {tuple(w2.shape)}")
        mine = torch.tensor([E, two_i // 2, H, LAYOUTS.index(layout), world], dtype=torch.int64)
        every = [torch.empty_like(mine) for _ in range(world)]
        dist.all_gather(every, mine, group=group)
        if any(not torch.equal(t, mine) for t in every):
            raise ValueError("the ranks disagree on the layer or the layout: (E, I, H, layout, world) per rank "
                             f"{[t.tolist() for t in every]}")
        self.layout, self.group, self.method, self.num_experts = layout, group, method, E
        if layout == "tp":
            self.w13, self.w2 = shard_tp(w13, w2, rank, world)
            self.first_expert = 0
        else:
            w13_r, w2_r, self.first_expert = shard_ep(w13, w2, rank, world)
            self.w13, self.w2 = w13_r.clone(), w2_r.clone()

    def forward(self, x, topk_weights, topk_ids):
        if self.layout == "tp":
            return moe_tp(x, self.w13, self.w2, topk_weights, topk_ids, group=self.group, method=self.method)
        return moe_ep(x, self.w13, self.w2, topk_weights, topk_ids, first_expert=self.first_expert,
                      num_experts=self.num_experts, group=self.group, method=self.method)


__all__ = ["ParallelMoE", "moe_ep", "moe_tp", "shard_ep", "shard_tp"]
