"""Warp decode: the whole MoE layer in two kernels, parallel over outputs instead of experts.

Kernel 1, gate/up: one warp owns one intermediate neuron i of one (token t, slot j) pair,
e = topk_ids[t, j]. It streams that neuron's gate row w13[e, i, :] and up row w13[e, I + i, :]
across H, reads the activation x[t, :] once for both, accumulates both dot products in FP32,
reduces across the warp, and writes silu(g)·u. No sort, no padding, no gather.

Kernel 2, down: one warp owns one hidden output h of one token t. It loops over the token's K
routed experts, streams w2[e, h, :] across I, multiplies by the FP32 intermediate, folds the
routing weight into one FP32 accumulator and stores y[t, h] once. The top-K combine is gone: it
is the loop over j.

How "one warp per output" is written in Triton
----------------------------------------------
Triton programs are CTAs, not warps. A program here owns a [BLOCK_R, BLOCK_C] tile: BLOCK_R
output rows (neurons, or hidden outputs) by BLOCK_C columns of the reduction axis, and runs
with ``num_warps`` warps. With BLOCK_C ≥ 32 lanes × 8 bf16 = 256, Triton lays the tile out as
sizePerThread [1, 8] × threadsPerWarp [1, 32] × warpsPerCTA [num_warps, 1]: each lane holds
8 consecutive elements (one 16-byte load) of a row, the 32 lanes of a warp cover one row, and
the warps stack over rows. ``tl.sum(acc, axis=1)`` is then a pure warp-shuffle reduction, no
shared memory. BLOCK_R = num_warps is literally one warp per output; BLOCK_R = 2·num_warps
gives each warp two outputs (two independent load streams, more bytes in flight). The layout
the compiler chose can be read from ``kernel.asm["ttgir"]`` (notebook 4 prints it).

Token-dependent sizes (T, T*K) are not specialized, so one compiled kernel serves every T.

Grid order: the pair (or token) index varies fastest, so the programs that run side by side
work on the same rows of different tokens; tokens that share an expert then read its rows from
L2 instead of HBM.
"""

import triton
import triton.language as tl


@triton.jit(do_not_specialize=["NUM_PAIRS"])
def warp_gate_up_kernel(
    # pointers
    x_ptr,  # (T, H) compute dtype
    w13_ptr,  # (E, 2I, H) compute dtype: gate rows [0, I), up rows [I, 2I)
    topk_ids_ptr,  # (T, K) int32, in [0, E)
    act_ptr,  # (T*K, I) fp32 or compute dtype: silu(gate) * up per (token, slot)
    # sizes
    H,
    I,
    NUM_PAIRS,  # T * K
    K,
    # strides (elements)
    stride_xt,
    stride_we,
    stride_wr,
    stride_at,
    # meta
    BLOCK_I: tl.constexpr,  # neurons per program (rows of the tile)
    BLOCK_H: tl.constexpr,  # columns of H per step
):
    pid = tl.program_id(0)
    pair = pid % NUM_PAIRS  # fastest: programs side by side share neuron rows
    pid_i = pid // NUM_PAIRS
    t = pair // K

    e = tl.load(topk_ids_ptr + pair).to(tl.int64)
    offs_i = pid_i * BLOCK_I + tl.arange(0, BLOCK_I)
    mask_i = offs_i < I
    offs_h = tl.arange(0, BLOCK_H)

    gate_ptrs = w13_ptr + e * stride_we + offs_i[:, None].to(tl.int64) * stride_wr + offs_h[None, :]
    up_ptrs = gate_ptrs + I * stride_wr
    x_ptrs = x_ptr + t.to(tl.int64) * stride_xt + offs_h

    acc_g = tl.zeros([BLOCK_I, BLOCK_H], dtype=tl.float32)
    acc_u = tl.zeros([BLOCK_I, BLOCK_H], dtype=tl.float32)
    for h0 in range(0, H, BLOCK_H):
        mask_h = (h0 + offs_h) < H
        xv = tl.load(x_ptrs + h0, mask=mask_h, other=0.0).to(tl.float32)
        mask = mask_i[:, None] & mask_h[None, :]
        g = tl.load(gate_ptrs + h0, mask=mask, other=0.0, eviction_policy="evict_first")
        u = tl.load(up_ptrs + h0, mask=mask, other=0.0, eviction_policy="evict_first")
        acc_g += g.to(tl.float32) * xv[None, :]
        acc_u += u.to(tl.float32) * xv[None, :]

    g = tl.sum(acc_g, axis=1)  # warp-shuffle reduction: one warp holds one row
    u = tl.sum(acc_u, axis=1)
    a = g * tl.sigmoid(g) * u  # SiLU(g)·u in registers
    tl.store(act_ptr + pair.to(tl.int64) * stride_at + offs_i, a.to(act_ptr.dtype.element_ty), mask=mask_i)


@triton.jit(do_not_specialize=["T"])
def warp_down_kernel(
    # pointers
    act_ptr,  # (T*K, I) fp32 or compute dtype, from warp_gate_up_kernel
    w2_ptr,  # (E, H, I) compute dtype
    topk_ids_ptr,  # (T, K) int32, in [0, E)
    topk_weights_ptr,  # (T, K) fp32
    y_ptr,  # (T, H) compute dtype
    # sizes
    H,
    I,
    T,
    # strides (elements)
    stride_at,
    stride_we,
    stride_wr,
    stride_yt,
    # meta
    K: tl.constexpr,
    BLOCK_H: tl.constexpr,  # hidden outputs per program (rows of the tile)
    BLOCK_I: tl.constexpr,  # columns of I per step
):
    pid = tl.program_id(0)
    t = pid % T  # fastest: tokens side by side share w2 rows of common experts
    pid_h = pid // T

    offs_h = pid_h * BLOCK_H + tl.arange(0, BLOCK_H)
    mask_h = offs_h < H
    offs_i = tl.arange(0, BLOCK_I)
    row_off = offs_h[:, None].to(tl.int64) * stride_wr

    acc = tl.zeros([BLOCK_H, BLOCK_I], dtype=tl.float32)
    for j in tl.static_range(K):  # the top-K combine, folded into the accumulator
        pair = t.to(tl.int64) * K + j
        e = tl.load(topk_ids_ptr + pair).to(tl.int64)
        w = tl.load(topk_weights_ptr + pair)
        w_ptrs = w2_ptr + e * stride_we + row_off + offs_i[None, :]
        a_ptrs = act_ptr + pair * stride_at + offs_i
        for i0 in range(0, I, BLOCK_I):
            mask_i = (i0 + offs_i) < I
            a = tl.load(a_ptrs + i0, mask=mask_i, other=0.0).to(tl.float32) * w
            wv = tl.load(w_ptrs + i0, mask=mask_h[:, None] & mask_i[None, :], other=0.0,
                         eviction_policy="evict_first")
            acc += wv.to(tl.float32) * a[None, :]

    y = tl.sum(acc, axis=1)
    tl.store(y_ptr + t.to(tl.int64) * stride_yt + offs_h, y.to(y_ptr.dtype.element_ty), mask=mask_h)
