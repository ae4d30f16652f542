"""The id guard: how every kernel that loads ``topk_ids`` treats an id outside [0, E).

    e  = topk_ids[t, j]                      int32 or int64, read as it is (no narrowing first)
    ok = 0 ≤ e < E
    weight loads of slot (t, j):  masked by ok (an id outside [0, E) reads nothing, never out of bounds)
    y[t, :] = NaN  if some slot j has ¬ok and topk_weights[t, j] ≠ 0

A slot of weight 0 adds nothing whatever its id (transformers' expert parallelism passes id E);
a nonzero weight on a bad id makes the token NaN rather than silently drop its share. No launch, no
sync: the pair's gate/up writes the slot's row NaN (:func:`poisoned`), which the masked down tile
multiplies in; other kernels that write y re-read the token's K ids and weights (:func:`dropped`).
Bytes: one routing weight per gate/up program, or the token's K ids and weights once more (L1/L2).
"""

import triton
import triton.language as tl


@triton.jit
def guarded(ids, E):
    """(e, ok): ``ids`` as int64, with ok False where an id lies outside [0, E). There e is the id as
    it is: address memory with e only under a mask that holds ok (a masked lane reads nothing)."""
    e = ids.to(tl.int64)
    return e, (e >= 0) & (e < E)


@triton.jit
def clamped(ids, E):
    """:func:`guarded` with e = 0 where ok is False: for an index used without that mask (a scale's
    load, a histogram, a gather)."""
    e, ok = guarded(ids, E)
    return tl.where(ok, e, 0), ok


@triton.jit
def poisoned(ok, topk_weights_ptr, pair):
    """Whether slot ``pair`` (= t·K + j), whose id's ``ok`` is given, has an id outside [0, E) and a
    nonzero routing weight (scalar): the weight is read here, after the caller's sums."""
    return (~ok) & (tl.load(topk_weights_ptr + pair) != 0.0)


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
