"""The id guard: how every kernel that loads ``topk_ids`` treats an id outside [0, E).

    e  = topk_ids[t, j]                      int32 or int64, read as it is (no narrowing first)
    ok = 0 ≤ e < E
    weight loads of slot (t, j):  masked by ok (an id outside [0, E) reads nothing, never out of bounds)
    y[t, :] = NaN  if some slot j has ¬ok and topk_weights[t, j] ≠ 0

A slot whose routing weight is 0 adds nothing to its token whatever its id (expert parallelism
names the experts of other ranks so: transformers passes id E with weight 0); a slot with a nonzero
weight and an id outside [0, E) would drop that weight's share of the token, so the token's output
is NaN instead, where no later step can hide it. The guard rides on loads the kernels make anyway:
no launch and no host sync. ``warpdecode.moe(..., strict=True)`` reads the range back instead and
raises.

Bytes: the token's K ids and K routing weights once more per program that writes y (from L1/L2).
"""

import triton
import triton.language as tl


@triton.jit
def guarded(ids, E):
    """(e, ok): ``ids`` as int64 expert indices in [0, E), with ok False (and e 0) where an id lies outside."""
    e = ids.to(tl.int64)
    ok = (e >= 0) & (e < E)
    return tl.where(ok, e, 0), ok


@triton.jit
def dropped(topk_ids_ptr, topk_weights_ptr, t, E, K: tl.constexpr, K_PAD: tl.constexpr):
    """Whether token t has a slot with an id outside [0, E) and a nonzero routing weight (scalar)."""
    offs_k = tl.arange(0, K_PAD)
    mask_k = offs_k < K
    pairs = t.to(tl.int64) * K + offs_k
    e = tl.load(topk_ids_ptr + pairs, mask=mask_k, other=0).to(tl.int64)
    rw = tl.load(topk_weights_ptr + pairs, mask=mask_k, other=0.0)
    bad = ((e < 0) | (e >= E)) & (rw != 0.0) & mask_k
    return tl.max(bad.to(tl.int32), axis=0) > 0


@triton.jit
def dropped_rows(topk_ids_ptr, topk_weights_ptr, offs_t, T, E, K: tl.constexpr, K_PAD: tl.constexpr):
    """:func:`dropped` for a vector of tokens ``offs_t`` (tokens past T: False)."""
    offs_k = tl.arange(0, K_PAD)
    mask = (offs_t < T)[:, None] & (offs_k < K)[None, :]
    pairs = offs_t[:, None].to(tl.int64) * K + offs_k[None, :]
    e = tl.load(topk_ids_ptr + pairs, mask=mask, other=0).to(tl.int64)
    rw = tl.load(topk_weights_ptr + pairs, mask=mask, other=0.0)
    bad = ((e < 0) | (e >= E)) & (rw != 0.0) & mask
    return tl.max(bad.to(tl.int32), axis=1) > 0
