"""Warp decode across GPUs, over ``torch.distributed``: tensor parallel and expert parallel.

    tensor parallel (tp ranks)  rank r holds every expert's neurons [r·I/tp, (r+1)·I/tp): gate and up rows
                                of w13, columns of w2; y_r = Σ_j w_j · W2[e_j, :, slice] · a_slice in FP32
    expert parallel (ep ranks)  rank r holds experts [r·E/ep, (r+1)·E/ep); a slot routed elsewhere weighs 0
                                here (id 0, transformers' contract): y_r = Σ_{j local} …
    both                        y = Σ_r y_r: one all-reduce of (T, H) FP32 per layer, rounded once

x and the routing are the same on every rank. Bytes per rank and call, bf16: tensor parallel U·3·(I/tp)·H·2 B
(U distinct experts routed); expert parallel the distinct experts it holds (≈ U/ep); the all-reduce
2·(tp − 1)/tp · T·H·4 B (ring). FP8 weights shard both ways (tensor parallel in whole scale groups).
Before any data collective the ranks agree (:func:`agree`, one small all-gather, skipped in graph capture and
``torch.compile``): a rank whose inputs fail raises its own error, every other one names it, none hangs.
``check_routing=True`` also compares the routing bit for bit. Past the crossover ``"auto"`` runs the expert
path, whose partial sums are rounded to x's dtype before the reduce.
"""
from __future__ import annotations

import torch
import torch.distributed as dist
from torch import nn

from . import api
from .checks import check_fp8_pair, check_id_range, check_moe_inputs
from .expert import moe_expert
from .quant import COMPUTE_DTYPES, FORMATS, is_fp8
from .warp import moe_warp

LAYOUTS = ("tp", "ep")

#: The words a rank's facts hold (:func:`agree`), each sent as its index here.
WORDS = ("16-bit", *FORMATS, *LAYOUTS, *map(str, COMPUTE_DTYPES))


def _world(group) -> tuple[int, int]:
    if not dist.is_initialized():
        raise RuntimeError("warpdecode.parallel needs torch.distributed initialized (dist.init_process_group)")
    return dist.get_rank(group), dist.get_world_size(group)


def _unchecked(x) -> bool:
    """Inside torch.compile or graph capture nothing can be read back: the ranks are not compared."""
    return torch.compiler.is_compiling() or (getattr(x, "is_cuda", False) and torch.cuda.is_current_stream_capturing())


def _gather(group, mine: torch.Tensor) -> list[torch.Tensor]:
    """Every rank's ``mine`` (int64, one shape on every rank), by one all-gather on the group's device."""
    # on the device the group's collectives take: the current GPU for NCCL, else the CPU
    mine = mine.to(torch.device("cuda", torch.cuda.current_device()) if dist.get_backend(group) == "nccl" else "cpu")
    every = [torch.empty_like(mine) for _ in range(_world(group)[1])]
    dist.all_gather(every, mine, group=group)
    return every


def agree(group, error: Exception | None, facts: dict, what: str) -> None:
    """One all-gather of [no error, *facts] per rank: all raise where one had an ``error`` (it its own, the
    others naming it) or the ``facts`` (ints, :data:`WORDS`) differ. ``what``: what the facts describe."""
    names = list(facts)
    sent = [-1] * len(names) if error else [WORDS.index(v) if isinstance(v, str) else int(v) for v in facts.values()]
    rows = [t.tolist() for t in _gather(group, torch.tensor([int(error is None), *sent], dtype=torch.int64))]
    if error is not None:
        raise error
    failed = [r for r, row in enumerate(rows) if not row[0]]
    if failed:
        who = f"ranks {', '.join(map(str, failed))} of the group refused their" if len(failed) > 1 else \
            f"rank {failed[0]} of the group refused its"
        raise ValueError(f"warpdecode.parallel: {who} inputs (the error is raised there); no rank computes the layer")
    if any(row != rows[0] for row in rows):
        words = [isinstance(v, str) for v in facts.values()]

        def show(row):
            return ", ".join(f"{n}={WORDS[v] if w else v}" for n, v, w in zip(names, row[1:], words, strict=True))

        differ = [n for i, n in enumerate(names) if len({row[i + 1] for row in rows}) > 1]
        raise ValueError(f"the ranks disagree on {what} ({', '.join(differ)}): "
                         + "; ".join(f"rank {r}: {show(row)}" for r, row in enumerate(rows)))


def _same_routing(group, topk_weights, topk_ids) -> None:
    """``check_routing``: every rank holds rank 0's topk_ids and topk_weights, bit for bit (one all-gather)."""
    every = _gather(group, torch.cat([topk_ids.long().flatten(),
                                      topk_weights.contiguous().view(torch.int32).long().flatten()]))
    differ = [r for r, t in enumerate(every) if not torch.equal(t, every[0])]
    if differ:
        who = f"ranks {', '.join(map(str, differ))} hold" if len(differ) > 1 else f"rank {differ[0]} holds"
        raise ValueError(f"the ranks disagree on the routing: {who} other topk_ids or topk_weights than rank 0; "
                         "every rank must be given the same routing")


# --- sharding
def _wrap(w, weight: torch.Tensor, scale: torch.Tensor, validate: bool = True):
    """FP8 weights of ``w``'s format and dtype around ``weight`` and ``scale``."""
    cls = type(w)
    if validate:
        return cls(weight, scale, dtype=w.dtype, gate_up=w.gate_up, name=w.name)
    return cls.wrap(weight, scale, dtype=w.dtype, gate_up=w.gate_up, name=w.name)


def shard_tp(w13, w2, rank: int, world: int) -> tuple:
    """Rank ``rank``'s copied slice: (E, 2·I/world, H) gate then up rows, (E, H, I/world); FP8 with scales
    (I/world whole scale groups)."""
    check_fp8_pair(w13, w2)
    E, two_i, H = w13.shape
    I = two_i // 2  # noqa: E741
    if world < 1 or I % world:
        raise ValueError(f"tp={world} must divide the intermediate size I={I} (w13 {tuple(w13.shape)})")
    if not 0 <= rank < world:
        raise ValueError(f"rank={rank} must lie in [0, tp={world})")
    n = I // world
    lo, hi = rank * n, (rank + 1) * n
    if not is_fp8(w13):
        w13_r = torch.cat([w13[:, lo:hi], w13[:, I + lo:I + hi]], dim=1).contiguous()
        return w13_r, w2[:, :, lo:hi].contiguous()
    rows, cols = w13.GROUP_N, w2.GROUP_K  # w13's scale rows along I; w2's scale columns along I
    if n % rows or n % cols:
        raise ValueError(f"tp={world} must cut I={I} into whole {w13.FORMAT} scale groups: I/tp={n} must be a "
                         f"multiple of {max(rows, cols)}")
    q13, s13, up, a, b = w13.weight, w13.scale, w13.up_scale_row, lo // rows, hi // rows
    w13_r = _wrap(w13, torch.cat([q13[:, lo:hi], q13[:, I + lo:I + hi]], dim=1).contiguous(),
                  torch.cat([s13[:, a:b], s13[:, up + a:up + b]], dim=1).contiguous())
    w2_r = _wrap(w2, w2.weight[:, :, lo:hi].contiguous(), w2.scale[:, :, lo // cols:hi // cols].contiguous())
    return w13_r, w2_r


def shard_ep(w13, w2, rank: int, world: int) -> tuple:
    """Rank ``rank``'s experts [rank·E/world, (rank+1)·E/world) of w13 and w2 (views, FP8 with scales) and the first."""
    check_fp8_pair(w13, w2)
    E = w13.shape[0]
    if world < 1 or E % world:
        raise ValueError(f"ep={world} must divide the number of experts E={E}")
    if not 0 <= rank < world:
        raise ValueError(f"rank={rank} must lie in [0, ep={world})")
    n = E // world
    lo, hi = rank * n, (rank + 1) * n
    if is_fp8(w13):  # whole experts: their scales go with them, already checked
        return (_wrap(w13, w13.weight[lo:hi], w13.scale[lo:hi], validate=False),
                _wrap(w2, w2.weight[lo:hi], w2.scale[lo:hi], validate=False), lo)
    return w13[lo:hi], w2[lo:hi], lo


def _own(w):
    """A copy of a rank's share, so that the full layer it came from can be freed."""
    return _wrap(w, w.weight.clone(), w.scale.clone(), validate=False) if is_fp8(w) else w.clone()


# --- one layer call
def _begin(x, w13, w2, topk_weights, topk_ids, *, group, method, layout, num_experts, local, check_routing,
           first_expert: int = 0):
    """Every rank's checks (options, tensors, the ids' range: read here, so that the ranks can agree on it),
    then :func:`agree` (and with ``check_routing``, the routing compared)."""
    _world(group)
    error, facts = None, dict.fromkeys(("layout", "T", "H", "I", "E", "num_experts", "K", "x.dtype", "weights"), 0)
    try:
        E_r = w13.shape[0] if hasattr(w13, "shape") else 0
        if local and not 0 <= first_expert <= num_experts - E_r:
            raise ValueError(f"first_expert={first_expert} with {E_r} local experts must fit in "
                             f"num_experts={num_experts}")
        if method not in ("auto", "warp", "expert"):
            raise ValueError(f"method must be 'auto', 'warp' or 'expert', got {method!r}")
        if torch.is_grad_enabled() and any(getattr(t, "requires_grad", False) for t in (x, w13, w2, topk_weights)):
            raise RuntimeError("warpdecode.parallel computes no gradients: run it under torch.no_grad()")
        d = check_moe_inputs(x, w13, w2, topk_weights, topk_ids, local=local)
        if is_fp8(w13):
            api.check_fp8_device(x.device, "FP8 weights", "dequantize them (.dequantize())")
        if not _unchecked(x):
            check_id_range(topk_ids, num_experts, "num_experts" if local else "E")
        facts = {"layout": layout, "T": d.T, "H": d.H, "I": d.I, "E": d.E, "num_experts": num_experts, "K": d.K,
                 "x.dtype": str(x.dtype), "weights": api.weight_format(w13) or "16-bit"}
    except Exception as e:  # every rank must hear of it before anyone waits in a data collective
        error = e
    if _unchecked(x):
        if error is not None:
            raise error
        return
    agree(group, error, facts, "the call's inputs")
    if check_routing:
        _same_routing(group, topk_weights, topk_ids)


def _reduced(x, w13, w2, topk_weights, topk_ids, method: str, group) -> torch.Tensor:
    """This rank's (T, H) FP32 share of y, summed over ``group`` in one all-reduce, rounded once to x's dtype."""
    E, two_i, H = w13.shape
    T, K = topk_ids.shape
    if T == 0:
        y = x.new_zeros(T, H, dtype=torch.float32)
    elif method == "warp" or (method == "auto" and api.pick_method(T, H, two_i // 2, E, K, x.element_size(),
                                                                   api.weight_format(w13)) == "warp"):
        y = moe_warp(x.contiguous(), w13, w2, topk_weights, topk_ids, out_dtype=torch.float32)
    else:
        y = moe_expert(x.contiguous(), w13, w2, topk_weights, topk_ids).float()
    dist.all_reduce(y, group=group)
    return y.to(x.dtype)


def moe_tp(x, w13_r, w2_r, topk_weights, topk_ids, *, group=None, method: str = "auto",
           check_routing: bool = False) -> torch.Tensor:
    """y (T, H) of the whole layer from this rank's slice (:func:`shard_tp`): the FP32 partial,
    one all-reduce, rounded once. Every rank of ``group`` calls it with the same x and routing; inputs
    are agreed first, and with ``check_routing`` the routing too (``method``: as :func:`warpdecode.moe`)."""
    E = w13_r.shape[0] if hasattr(w13_r, "shape") else 0
    _begin(x, w13_r, w2_r, topk_weights, topk_ids, group=group, method=method, layout="tp", num_experts=E,
           local=False, check_routing=check_routing)
    return _reduced(x, w13_r, w2_r, topk_weights.contiguous(), topk_ids.to(torch.int32).contiguous(), method, group)


def moe_ep(x, w13_r, w2_r, topk_weights, topk_ids, *, first_expert: int, num_experts: int, group=None,
           method: str = "auto", check_routing: bool = False) -> torch.Tensor:
    """y (T, H) of the whole layer from this rank's experts [first_expert, first_expert + E_r)
    (:func:`shard_ep`); topk_ids global in [0, num_experts), slots of other ranks weigh 0 here. One
    all-reduce, rounded once; inputs agreed first, and with ``check_routing`` the routing too."""
    _begin(x, w13_r, w2_r, topk_weights, topk_ids, group=group, method=method, layout="ep", num_experts=num_experts,
           local=True, check_routing=check_routing, first_expert=first_expert)
    ids, E_r = topk_ids.long(), w13_r.shape[0]
    local = (ids >= first_expert) & (ids < first_expert + E_r)
    # an id outside [0, num_experts) (unchecked only inside capture or torch.compile) stays out of range
    # here with its weight, so the kernels' guard makes its token NaN on every rank rather than drop the slot
    valid = (ids >= 0) & (ids < num_experts)
    local_ids = torch.where(local, ids - first_expert, torch.where(valid, 0, E_r)).to(torch.int32).contiguous()
    local_w = torch.where(local | ~valid, topk_weights, 0.0).contiguous()
    return _reduced(x, w13_r, w2_r, local_w, local_ids, method, group)


class ParallelMoE(nn.Module):
    """One MoE layer's experts sharded over ``group``: keeps this rank's share of the full w13, w2 (plain
    or FP8) by ``layout`` (``"tp"`` or ``"ep"``), checked with one all-gather; ``forward(x, topk_weights,
    topk_ids)`` returns the whole y on every rank. ``method``, ``check_routing``: as :func:`moe_tp`."""

    def __init__(self, w13, w2, layout: str = "tp", *, group=None, method: str = "auto", check_routing: bool = False):
        super().__init__()
        rank, world = _world(group)
        error, facts = None, dict.fromkeys(("E", "I", "H", "layout", "world", "dtype", "weights"), 0)
        try:
            if layout not in LAYOUTS:
                raise ValueError(f"layout must be one of {LAYOUTS}, got {layout!r}")
            check_fp8_pair(w13, w2)
            E, two_i, H = w13.shape
            if tuple(w2.shape) != (E, H, two_i // 2):
                raise ValueError(f"w2 must be (E, H, I) = {(E, H, two_i // 2)} to match w13 {tuple(w13.shape)}, "
                                 f"got {tuple(w2.shape)}")
            if layout == "tp":
                (w13_r, w2_r), first = shard_tp(w13, w2, rank, world), 0
            else:
                w13_r, w2_r, first = shard_ep(w13, w2, rank, world)
                w13_r, w2_r = _own(w13_r), _own(w2_r)
            facts = {"E": E, "I": two_i // 2, "H": H, "layout": layout, "world": world,
                     "dtype": str(w13.dtype), "weights": api.weight_format(w13) or "16-bit"}
        except Exception as e:
            error = e
        agree(group, error, facts, "the layer or the layout")
        self.layout, self.group, self.method, self.num_experts = layout, group, method, E
        self.check_routing = check_routing
        self.w13, self.w2, self.first_expert = w13_r, w2_r, first

    def forward(self, x, topk_weights, topk_ids):
        if self.layout == "tp":
            return moe_tp(x, self.w13, self.w2, topk_weights, topk_ids, group=self.group, method=self.method,
                          check_routing=self.check_routing)
        return moe_ep(x, self.w13, self.w2, topk_weights, topk_ids, first_expert=self.first_expert,
                      num_experts=self.num_experts, group=self.group, method=self.method,
                      check_routing=self.check_routing)


__all__ = ["ParallelMoE", "agree", "moe_ep", "moe_tp", "shard_ep", "shard_tp"]
