"""The shipped gate/up tile and kernel (``warpdecode/kernels/warp_pair.py``) with the knobs the
experiments vary and the package does not: the weight loads' cache policy (``EVICT``), a
``gdc_wait`` before the store (``WAIT``, for a launch whose predecessor writes there too) and the
grid order (``PAIR_FASTEST``). With ``EVICT="evict_first"``, ``WAIT=False``, ``PAIR_FASTEST=True``
they are the shipped code."""

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

