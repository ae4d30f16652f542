"""The expert-centric path with gather and scatter as kernels of their own: the stage-by-stage form.

``warpdecode.expert.moe_expert`` runs vLLM's ``fused_moe`` form: the gate/up GEMM loads each row from
the token rows itself (``GATHER``), the down GEMM stores each row at its pair (``SCATTER``). Here the two
moves are launches of their own, so notebook 2 can show each stage's output and ``bench.sweep.stages``
can time each alone. :func:`moe_expert_unfused` runs every stage; the roundings are the same, in the same
order, so it gives the fused path's bits.

    align    as moe_expert (``warpdecode/kernels/expert.py``)
    gather   ∥(r):     A[r] = x[sorted_token_ids[r] // K], zeros on padding rows   r < num_tokens_post_padded
    quant    as moe_expert, on A's rows (optional)
    gate/up  the shipped GEMM with GATHER off: reads A[r]
    down     the shipped GEMM with SCATTER off: writes o[r], expert-major
    scatter  ∥(r):     O[sorted_token_ids[r]] = o[r], padding rows skipped
    combine  as moe_expert

Byte ledger of the two moves (bf16; P = T·K pairs, R = num_tokens_post_padded rows), each one launch:
  gather   reads P·H·2 B of x (a token's row once per slot, from L2 after the first) and R·4 B of ids;
           writes R·H·2 B of A
  scatter  reads P·H·2 B of o and R·4 B of ids;  writes P·H·2 B of O
  over the fused form: two launches and (3P + R)·H·2 B, the fused GEMMs read x and write O directly.
  Against the weights (U·3·I·H·2 B for U routed experts) the bytes are small; at decode the launches
  are what costs.
"""

from __future__ import annotations

import triton
import triton.language as tl

from warpdecode import _alloc
from warpdecode import expert as ex


@triton.jit(do_not_specialize=["NUM_PAIRS"])
def gather_kernel(
    x_ptr,  # (T, H) compute dtype
    sorted_token_ids_ptr,  # (EM,) int32
    num_tokens_post_padded_ptr,  # (1,) int32
    a_ptr,  # (EM, H) out: row r = x[sorted_token_ids[r] // K], zeros on padding rows
    H,
    NUM_PAIRS,
    stride_xt,
    stride_ar,
    K: tl.constexpr,
    BLOCK_H: tl.constexpr,
):
    r = tl.program_id(0)
    if r >= tl.load(num_tokens_post_padded_ptr):
        return
    pair = tl.load(sorted_token_ids_ptr + r)
    valid = pair < NUM_PAIRS
    t = (tl.where(valid, pair, 0) // K).to(tl.int64)
    for h0 in range(0, H, BLOCK_H):
        offs_h = h0 + tl.arange(0, BLOCK_H)
        mask_h = offs_h < H
        v = tl.load(x_ptr + t * stride_xt + offs_h, mask=mask_h & valid, other=0.0)
        tl.store(a_ptr + r.to(tl.int64) * stride_ar + offs_h, v, mask=mask_h)


@triton.jit(do_not_specialize=["NUM_PAIRS"])
def scatter_kernel(
    src_ptr,  # (EM, H) compute dtype, expert-major
    sorted_token_ids_ptr,  # (EM,) int32
    num_tokens_post_padded_ptr,  # (1,) int32
    dst_ptr,  # (T*K, H) compute dtype out: row p = pair p's weighted expert output
    H,
    NUM_PAIRS,
    stride_sr,
    stride_dr,
    BLOCK_H: tl.constexpr,
):
    r = tl.program_id(0)
    if r >= tl.load(num_tokens_post_padded_ptr):
        return
    pair = tl.load(sorted_token_ids_ptr + r)
    if pair >= NUM_PAIRS:  # padding row
        return
    for h0 in range(0, H, BLOCK_H):
        offs_h = h0 + tl.arange(0, BLOCK_H)
        mask_h = offs_h < H
        v = tl.load(src_ptr + r.to(tl.int64) * stride_sr + offs_h, mask=mask_h)
        tl.store(dst_ptr + pair.to(tl.int64) * stride_dr + offs_h, v, mask=mask_h)


def gather(x, al: ex.Alignment, K: int):
    """Stage 3: the expert-major activation buffer (EM, H); padding rows are zero."""
    H = x.shape[1]
    a = _alloc.empty(al.EM, H, dtype=x.dtype, device=x.device)
    gather_kernel[(al.EM,)](
        x, al.sorted_token_ids, al.num_tokens_post_padded, a, H, al.num_pairs,
        x.stride(0), a.stride(0), K=K, BLOCK_H=min(1024, triton.next_power_of_2(H)), num_warps=4,
    )
    return a


def scatter(o, al: ex.Alignment):
    """Stage 7: expert-major rows back to (T*K, H) token order."""
    H = o.shape[1]
    dst = _alloc.empty(al.num_pairs, H, dtype=o.dtype, device=o.device)
    scatter_kernel[(al.EM,)](
        o, al.sorted_token_ids, al.num_tokens_post_padded, dst, H, al.num_pairs, o.stride(0), dst.stride(0),
        BLOCK_H=min(1024, triton.next_power_of_2(H)), num_warps=4,
    )
    return dst


def moe_expert_unfused(x, w13, w2, topk_weights, topk_ids, *, act_format: str = "native",
                       config: dict | None = None):
    """``warpdecode.expert.moe_expert`` stage by stage, gather and scatter as kernels (six launches, eight
    with FP8 activations, none chained with PDL): the same configuration, the same bits."""
    E, K = w13.shape[0], topk_ids.shape[1]
    cfg = ex.launch_config(x, w13, topk_ids, act_format, config)
    al = ex.align(topk_ids, E, cfg["BLOCK_M"])
    a, a_scales = ex.quantize(gather(x, al, K), al, act_format)
    h, h_scales = ex.quantize(ex.gate_up(a, a_scales, w13, al, cfg["gate_up"]), al, act_format)
    o = ex.down(h, h_scales, w2, al, topk_weights, cfg["down"])
    return ex.combine(scatter(o, al), topk_ids, topk_weights, E)
