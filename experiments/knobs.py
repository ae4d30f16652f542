"""The shipped gate/up tile and kernel (``warpdecode/kernels/warp_pair.py``) with the knobs the
experiments vary and the package does not: the weight loads' cache policy (``EVICT``), a
``gdc_wait`` before the store (``WAIT``, for a launch whose predecessor writes there too) and the
grid order (``PAIR_FASTEST``). With ``EVICT="evict_first"``, ``WAIT=False``, ``PAIR_FASTEST=True``
they are the shipped code.

It also keeps the 3-D down tile ``[BLOCK_H, K_PAD, BLOCK_I]`` (rows × the token's routed experts ×
columns, the combine a sum over axis 1) that the down and one-launch experiments were measured with.
The package's down tile is K 2-D tiles instead: on Triton 3.6 the 3-D tile's warps go over rows, but
later releases break the tie between its two non-contiguous axes the other way (warps over K)."""

import triton
import triton.language as tl
from triton.language.extra.cuda import gdc_launch_dependents, gdc_wait


@triton.jit
def gate_up_tile(
    x_ptr, w13_ptr, topk_ids_ptr, act_ptr,
    H, I, K, stride_xt, stride_we, stride_wr, stride_at,
    pair,  # which (token, slot): t = pair // K
    pid_i,  # which block of BLOCK_I neurons
    BLOCK_I: tl.constexpr, BLOCK_H: tl.constexpr,
    EVICT: tl.constexpr,  # the weight loads' cache policy ("evict_first": shipped)
    WAIT: tl.constexpr,  # gdc_wait before the store
):
    t = pair // K
    e = tl.load(topk_ids_ptr + pair).to(tl.int64)
    offs_i = pid_i * BLOCK_I + tl.arange(0, BLOCK_I)
    mask_i = offs_i < I
    offs_h = tl.arange(0, BLOCK_H)
    gate_ptrs = w13_ptr + e * stride_we + offs_i[:, None].to(tl.int64) * stride_wr + offs_h[None, :]
    up_ptrs = gate_ptrs + I * stride_wr
    x_ptrs = x_ptr + t.to(tl.int64) * stride_xt + offs_h
    acc_g = tl.zeros([BLOCK_I], dtype=tl.float32)
    acc_u = tl.zeros([BLOCK_I], dtype=tl.float32)
    for h0 in range(0, H, BLOCK_H):
        mask_h = (h0 + offs_h) < H
        xv = tl.load(x_ptrs + h0, mask=mask_h, other=0.0)
        mask = mask_i[:, None] & mask_h[None, :]
        g = tl.load(gate_ptrs + h0, mask=mask, other=0.0, eviction_policy=EVICT)
        u = tl.load(up_ptrs + h0, mask=mask, other=0.0, eviction_policy=EVICT)
        acc_g += tl.sum(g.to(tl.float32) * xv.to(tl.float32)[None, :], axis=1)
        acc_u += tl.sum(u.to(tl.float32) * xv.to(tl.float32)[None, :], axis=1)
    a = acc_g * tl.sigmoid(acc_g) * acc_u
    if WAIT:
        gdc_wait()
    tl.store(act_ptr + pair.to(tl.int64) * stride_at + offs_i, a.to(act_ptr.dtype.element_ty), mask=mask_i)


@triton.jit(do_not_specialize=["NUM_PAIRS"])
def gate_up_kernel(
    x_ptr, w13_ptr, topk_ids_ptr, act_ptr, H, I, NUM_PAIRS, K, stride_xt, stride_we, stride_wr, stride_at,
    BLOCK_I: tl.constexpr, BLOCK_H: tl.constexpr, USE_PDL: tl.constexpr,
    PAIR_FASTEST: tl.constexpr,  # the shipped grid order; False: neuron blocks fastest, one pair after another
    EVICT: tl.constexpr,
):
    if USE_PDL:
        gdc_launch_dependents()
    pid = tl.program_id(0)
    if PAIR_FASTEST:  # programs side by side read the same neuron rows of every pair (shared experts: L2)
        pair, pid_i = pid % NUM_PAIRS, pid // NUM_PAIRS
    else:  # programs side by side read consecutive rows of one expert, which streams expert by expert
        blocks_i = tl.cdiv(I, BLOCK_I)
        pair, pid_i = pid // blocks_i, pid % blocks_i
    gate_up_tile(x_ptr, w13_ptr, topk_ids_ptr, act_ptr, H, I, K, stride_xt, stride_we, stride_wr, stride_at,
                 pair, pid_i, BLOCK_I, BLOCK_H, EVICT, False)


@triton.jit
def down_chunk_3d(
    w2_ptr, topk_ids_ptr, H, I, stride_we, stride_wr,
    t, pid_h, i0,  # token, block of BLOCK_H hidden outputs, first column
    K: tl.constexpr, K_PAD: tl.constexpr, BLOCK_H: tl.constexpr, BLOCK_I: tl.constexpr,
):
    """Columns [i0, i0 + BLOCK_I) of the w2 rows token t needs, as one [BLOCK_H, K_PAD, BLOCK_I] tile."""
    offs_h = pid_h * BLOCK_H + tl.arange(0, BLOCK_H)
    offs_k = tl.arange(0, K_PAD)
    mask_k = offs_k < K
    offs_i = i0 + tl.arange(0, BLOCK_I)
    e = tl.load(topk_ids_ptr + t.to(tl.int64) * K + offs_k, mask=mask_k, other=0).to(tl.int64)
    w_ptrs = (w2_ptr + offs_h[:, None, None].to(tl.int64) * stride_wr + e[None, :, None] * stride_we
              + offs_i[None, None, :])
    mask = (offs_h < H)[:, None, None] & mask_k[None, :, None] & (offs_i < I)[None, None, :]
    return tl.load(w_ptrs, mask=mask, other=0.0, eviction_policy="evict_first")


@triton.jit
def down_tile_3d(
    act_ptr, w2_ptr, topk_ids_ptr, topk_weights_ptr, y_ptr,
    H, I, stride_at, stride_we, stride_wr, stride_yt,
    t, pid_h,
    wv,  # the first chunk, down_chunk_3d(..., i0=0), loaded by the caller
    K: tl.constexpr, K_PAD: tl.constexpr, BLOCK_H: tl.constexpr, BLOCK_I: tl.constexpr,
    ACT_CACHE: tl.constexpr,
):
    """y[t, rows] = Σ_j topk_weights[t, j] · w2[e_j, rows, :] · act[t·K + j, :] over 3-D tiles."""
    offs_h = pid_h * BLOCK_H + tl.arange(0, BLOCK_H)
    offs_k = tl.arange(0, K_PAD)
    mask_k = offs_k < K
    pairs = t.to(tl.int64) * K + offs_k
    offs_i = tl.arange(0, BLOCK_I)
    rw = tl.load(topk_weights_ptr + pairs, mask=mask_k, other=0.0)
    a_ptrs = act_ptr + pairs[:, None] * stride_at + offs_i[None, :]
    acc = tl.zeros([BLOCK_H, BLOCK_I], dtype=tl.float32)
    for i0 in range(0, I, BLOCK_I):
        if i0 > 0:
            wv = down_chunk_3d(w2_ptr, topk_ids_ptr, H, I, stride_we, stride_wr, t, pid_h, i0,
                               K, K_PAD, BLOCK_H, BLOCK_I)
        mask_i = (i0 + offs_i) < I
        a = tl.load(a_ptrs + i0, mask=mask_k[:, None] & mask_i[None, :], other=0.0,
                    cache_modifier=ACT_CACHE).to(tl.float32) * rw[:, None]
        acc += tl.sum(wv.to(tl.float32) * a[None, :, :], axis=1)
    y = tl.sum(acc, axis=1)
    tl.store(y_ptr + t.to(tl.int64) * stride_yt + offs_h, y.to(y_ptr.dtype.element_ty), mask=offs_h < H)
