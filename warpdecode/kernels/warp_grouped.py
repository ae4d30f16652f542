"""Warp decode's grouped schedule: tokens that share an expert read its rows once (schedule ``"grouped"``).

    ∥(e, i-block), one program: for every token t routed to e (hit[t]: e ∈ topk_ids[t]),
        a[t, i] = w_te · silu(Wg[e, i]·x[t]) · (Wu[e, i]·x[t])      a [BLOCK_I, H] × [H, T_PAD] tensor-core product
    ∥(e, h-block), one program: s[t, h] += W2[e, h]·a[t]             FP32 atomic adds into a scratch
        the last of the block's E programs: y[t, h] = s[t, h]         rounded once

w_te is t's routing weight for e (both slots' summed, should its top-K name e twice), a the row of
t's first slot routed to e, as three bf16 terms whose sum is the FP32 value exactly. FP8 weights
(``W_FP8``, W = q · s, ``warpdecode.quant``): W[r]·v = Σ_g s[r, g]·(q[r, g]·v), a product per scale group g
of q widened to v's dtype (exactly: e4m3 ⊂ bf16, fp16), scaled per row (a step: several groups, or part of one).

Byte ledger of one launch of ≤ T_PAD tokens (U distinct experts routed; W_B B a weight: bf16 2, FP8 1 + scales):
  gate/up  reads  U·2I·H·W_B of weight rows, once; x (T·H·2 B) by every program, from L2; topk_ids and
                  weights by every program (T·K·8 B, L2); writes ≤ T·K·I·6 B of a (three bf16 terms)
  down     reads  U·H·I·W_B of weight rows, once; ≤ T·K·I·6 B of a; adds T_PAD·H·4 B per routed expert
                  into the FP32 scratch (L2 atomics), reads it back once (T·H·4 B); writes T·H·2 B of y
  minimum  U·3·I·H·W_B: what this schedule reads of the weights. Past T_PAD tokens each launch reads
           its experts' rows again.

One program takes one expert's rows for every token (the N of a tensor-core product, padded to 16,
tokens not routed masked): rows read once, no sort, gather or scatter. The three bf16 terms make each
product exact; FP32 atomics make y's last bit vary at K > 2. For small T that shares experts.
"""

import triton
import triton.language as tl
from triton.language.extra.cuda import gdc_launch_dependents

from .ids import dropped_rows
from .warp_fp8 import _scales


@triton.jit
def _mma(a, b, acc, WIDEN: tl.constexpr):
    """acc + a @ b with FP32 sums. 16-bit operands go to the tensor cores as they are (their products
    are exact in FP32); FP32 operands, operands of two dtypes, and every operand where ``WIDEN``
    (the CPU interpreter, whose 16-bit dot multiplies raw bits), are multiplied in FP32, not tf32."""
    if WIDEN or a.dtype == tl.float32 or a.dtype != b.dtype:
        out = tl.dot(a.to(tl.float32), b.to(tl.float32), acc, input_precision="ieee")
    else:  # (Triton compiles the statements after a constexpr-true branch's return too)
        out = tl.dot(a, b, acc)
    return out


@triton.jit
def _routed(topk_ids_ptr, T, e, K: tl.constexpr, K_PAD: tl.constexpr, T_PAD: tl.constexpr):
    """[T_PAD, K_PAD] mask of the (token, slot) pairs routed to expert e (slots past K, tokens past T: never)."""
    offs_t = tl.arange(0, T_PAD)
    offs_k = tl.arange(0, K_PAD)
    mask = (offs_t < T)[:, None] & (offs_k < K)[None, :]
    ids = tl.load(topk_ids_ptr + offs_t[:, None] * K + offs_k[None, :], mask=mask, other=-1)
    return ids == e


@triton.jit
def _first_rows(hit, K: tl.constexpr, K_PAD: tl.constexpr, T_PAD: tl.constexpr):
    """For each token, the intermediate's row the grouped kernels use for this program's expert:
    that of its first slot routed there (a second slot naming the expert again shares it), and
    whether the token is routed there at all."""
    slot = tl.min(tl.where(hit, tl.arange(0, K_PAD)[None, :], K_PAD), axis=1)
    routed = slot < K
    return tl.arange(0, T_PAD) * K + tl.where(routed, slot, 0), routed


@triton.jit(do_not_specialize=["T", "E"])
def warp_gate_up_grouped_kernel(
    x_ptr,  # (T, H) compute dtype
    w13_ptr,  # (E, 2I, H) compute dtype, or float8_e4m3fn (W_FP8)
    topk_ids_ptr,  # (T, K) int32 or int64; an id outside [0, E) matches no program's expert
    topk_weights_ptr,  # (T, K) fp32
    act_ptr,  # (TERMS, T*K, I): the weighted silu(gate)·up, in the row of each token's first slot of e
    H, I, T, E,
    stride_xt, stride_we, stride_wr, stride_at, stride_term,
    K: tl.constexpr, K_PAD: tl.constexpr,
    T_PAD: tl.constexpr,  # ≥ T, a power of two ≥ 16 (the smallest N of a tensor-core product)
    TERMS: tl.constexpr,  # 3: FP32 values as three exact bf16 terms; 1: values in act's dtype
    BLOCK_I: tl.constexpr,  # neurons per program (≥ 16)
    BLOCK_H: tl.constexpr,  # columns of H per step
    USE_PDL: tl.constexpr,
    WIDEN: tl.constexpr,  # multiply in FP32 (the CPU interpreter, see _mma)
    w_scale_ptr=None,  # W_FP8: block128 (E, 2·cdiv(I, 128), cdiv(H, 128)) fp32, mxfp8 (E, 2I, cdiv(H, 32)) u8 e8m0
    S_UP=None, stride_se=None, stride_sr=None, stride_sc=None,  # None for 16-bit weights; S_UP: row I's scale row
    W_FP8: tl.constexpr = False, GROUP_N: tl.constexpr = 1, GROUP_K: tl.constexpr = 1, E8M0: tl.constexpr = False,
):
    """Neurons [pid_i·BLOCK_I, +BLOCK_I) of expert e for every token routed to e; the expert varies
    fastest, so a program whose expert no token chose exits at once. A token whose top-K names e
    twice gets the sum of both weights in its first slot's row (the down kernel reads that one)."""
    if USE_PDL:
        gdc_launch_dependents()
    pid = tl.program_id(0)
    e = pid % E
    pid_i = pid // E
    hit = _routed(topk_ids_ptr, T, e, K, K_PAD, T_PAD)
    if tl.sum(hit.to(tl.int32)) > 0:
        offs_t = tl.arange(0, T_PAD)
        offs_i = pid_i * BLOCK_I + tl.arange(0, BLOCK_I)
        mask_i = offs_i < I
        STEP: tl.constexpr = min(BLOCK_H, GROUP_K) if W_FP8 else BLOCK_H  # columns of a product
        offs_h = tl.arange(0, STEP)
        gate_ptrs = w13_ptr + e.to(tl.int64) * stride_we + offs_i[:, None].to(tl.int64) * stride_wr + offs_h[None, :]
        up_ptrs = gate_ptrs + I * stride_wr
        x_ptrs = x_ptr + offs_t[None, :].to(tl.int64) * stride_xt + offs_h[:, None]  # [STEP, T_PAD]: x transposed
        acc_g = tl.zeros([BLOCK_I, T_PAD], dtype=tl.float32)
        acc_u = tl.zeros([BLOCK_I, T_PAD], dtype=tl.float32)
        gs_ptrs = w_scale_ptr + e * stride_se + offs_i // GROUP_N * stride_sr if W_FP8 else None
        us_ptrs = gs_ptrs + S_UP * stride_sr if W_FP8 else None
        for h0 in range(0, H, BLOCK_H):
            for h1 in tl.static_range(0, BLOCK_H, STEP):  # one product per step, FP8 one per scale group
                h = h0 + h1
                mask_h = (h + offs_h) < H
                xv = tl.load(x_ptrs + h, mask=mask_h[:, None] & (offs_t < T)[None, :], other=0.0)
                mask_w = mask_i[:, None] & mask_h[None, :]
                g = tl.load(gate_ptrs + h, mask=mask_w, other=0.0, eviction_policy="evict_first")
                u = tl.load(up_ptrs + h, mask=mask_w, other=0.0, eviction_policy="evict_first")
                # one read of the rows, every token's dot product (16-bit products are exact in FP32)
                if W_FP8:  # e4m3 widened to x's dtype, each group's products scaled per row as they are added
                    col, mask_s, zero = h // GROUP_K * stride_sc, mask_i & (h < H), tl.zeros_like(acc_g)
                    acc_g += _mma(g.to(xv.dtype), xv, zero, WIDEN) * _scales(gs_ptrs + col, mask_s, E8M0)[:, None]
                    acc_u += _mma(u.to(xv.dtype), xv, zero, WIDEN) * _scales(us_ptrs + col, mask_s, E8M0)[:, None]
                else:
                    acc_g = _mma(g, xv, acc_g, WIDEN)
                    acc_u = _mma(u, xv, acc_u, WIDEN)
        # each token's routing weights for e, summed should its top-K name e twice
        mask_tk = (offs_t < T)[:, None] & (tl.arange(0, K_PAD) < K)[None, :]
        rw = tl.load(topk_weights_ptr + offs_t[:, None] * K + tl.arange(0, K_PAD)[None, :], mask=mask_tk, other=0.0)
        a = acc_g * tl.sigmoid(acc_g) * acc_u * tl.sum(tl.where(hit, rw, 0.0), axis=1)[None, :]  # weighted SiLU(g)·u
        rows, routed = _first_rows(hit, K, K_PAD, T_PAD)
        ptrs = act_ptr + rows[None, :].to(tl.int64) * stride_at + offs_i[:, None]
        mask = mask_i[:, None] & routed[None, :]
        if TERMS == 3:  # hi + mid + lo == a exactly: 8 + 8 + 8 significand bits of FP32's 24
            hi = a.to(tl.bfloat16)
            rest = a - hi.to(tl.float32)
            mid = rest.to(tl.bfloat16)
            tl.store(ptrs, hi, mask=mask)
            tl.store(ptrs + stride_term, mid, mask=mask)
            tl.store(ptrs + 2 * stride_term, (rest - mid.to(tl.float32)).to(tl.bfloat16), mask=mask)
        else:
            tl.store(ptrs, a.to(act_ptr.dtype.element_ty), mask=mask)


@triton.jit(do_not_specialize=["T", "E"])
def warp_down_grouped_kernel(
    act_ptr,  # (TERMS, T*K, I) from warp_gate_up_grouped_kernel, the routing weight in it
    w2_ptr,  # (E, H, I) compute dtype, or float8_e4m3fn (W_FP8: widened to act's dtype)
    topk_ids_ptr,  # (T, K) int32 or int64; ids outside [0, E) are guarded (kernels/ids.py)
    topk_weights_ptr,  # (T, K) fp32: read only by the guard
    y_ptr,  # (T, H) compute dtype
    sums_ptr,  # (T_PAD, H) fp32, zero on entry: every expert's share of y
    arrived_ptr,  # (cdiv(H, BLOCK_H),) int32, zero on entry: programs done per block of outputs
    H, I, T, E,
    stride_at, stride_term, stride_we, stride_wr, stride_yt,
    K: tl.constexpr, K_PAD: tl.constexpr, T_PAD: tl.constexpr,
    TERMS: tl.constexpr,
    BLOCK_H: tl.constexpr,  # hidden outputs per program (the M of the product)
    BLOCK_I: tl.constexpr,  # columns of I per step
    WIDEN: tl.constexpr,
    w_scale_ptr=None,  # W_FP8: block128 (E, cdiv(H, 128), cdiv(I, 128)) fp32, mxfp8 (E, H, cdiv(I, 32)) u8 e8m0
    stride_se=None, stride_sr=None, stride_sc=None,  # None for 16-bit weights (then no parameters)
    W_FP8: tl.constexpr = False, GROUP_N: tl.constexpr = 1, GROUP_K: tl.constexpr = 1, E8M0: tl.constexpr = False,
):
    """Hidden outputs [pid_h·BLOCK_H, +BLOCK_H) of expert e's share of y for every token routed to
    e, added into ``sums``; the E-th program of the block to finish rounds the block to y. The
    expert varies fastest, so the programs of one block of outputs run side by side. A slot whose id
    lies outside [0, E) is no program's: its token is NaN if its weight is not 0 (``kernels/ids.py``)."""
    pid = tl.program_id(0)
    e = pid % E
    pid_h = pid // E
    offs_t = tl.arange(0, T_PAD)
    offs_h = pid_h * BLOCK_H + tl.arange(0, BLOCK_H)
    mask_h = offs_h < H
    s_ptrs = sums_ptr + offs_t[None, :] * H + offs_h[:, None]  # [BLOCK_H, T_PAD]
    hit = _routed(topk_ids_ptr, T, e, K, K_PAD, T_PAD)
    if tl.sum(hit.to(tl.int32)) > 0:
        rows, routed = _first_rows(hit, K, K_PAD, T_PAD)
        STEP: tl.constexpr = min(BLOCK_I, GROUP_K) if W_FP8 else BLOCK_I  # columns of a product
        offs_i = tl.arange(0, STEP)
        w_ptrs = w2_ptr + e.to(tl.int64) * stride_we + offs_h[:, None].to(tl.int64) * stride_wr + offs_i[None, :]
        a_ptrs = act_ptr + rows[None, :].to(tl.int64) * stride_at + offs_i[:, None]  # [STEP, T_PAD]
        acc = tl.zeros([BLOCK_H, T_PAD], dtype=tl.float32)
        ws_ptrs = w_scale_ptr + e * stride_se + offs_h // GROUP_N * stride_sr if W_FP8 else None
        for i0 in range(0, I, BLOCK_I):
            for i1 in tl.static_range(0, BLOCK_I, STEP):  # one product per step, FP8 one per scale group
                i = i0 + i1
                mask_i = (i + offs_i) < I
                mask_a, mask_w = mask_i[:, None] & routed[None, :], mask_h[:, None] & mask_i[None, :]
                w = tl.load(w_ptrs + i, mask=mask_w, other=0.0, eviction_policy="evict_first")
                if W_FP8:  # e4m3 widened to act's dtype (the terms' bf16); the terms' products, summed, scaled once
                    scale = _scales(ws_ptrs + i // GROUP_K * stride_sc, mask_h & (i < I), E8M0)[:, None]
                    wv, part = w.to(act_ptr.dtype.element_ty), tl.zeros_like(acc)
                    for term in tl.static_range(TERMS):
                        part = _mma(wv, tl.load(a_ptrs + term * stride_term + i, mask=mask_a, other=0.0), part, WIDEN)
                    acc += part * scale
                else:
                    for term in tl.static_range(TERMS):
                        acc = _mma(w, tl.load(a_ptrs + term * stride_term + i, mask=mask_a, other=0.0), acc, WIDEN)
        tl.atomic_add(s_ptrs, acc, mask=mask_h[:, None] & routed[None, :], sem="relaxed", scope="gpu")
    tl.debug_barrier()  # every warp of this program has issued its adds
    if tl.atomic_add(arrived_ptr + pid_h, 1, sem="acq_rel", scope="gpu") == E - 1:
        # the last program of this block of outputs: every expert's adds are visible. Read them
        # where the atomics made them (L2: an atomic add of zero; L1 is not coherent)
        mask = mask_h[:, None] & (offs_t < T)[None, :]
        sums = tl.atomic_add(s_ptrs, tl.zeros([BLOCK_H, T_PAD], dtype=tl.float32), mask=mask, sem="relaxed",
                             scope="gpu")
        sums = tl.where(dropped_rows(topk_ids_ptr, topk_weights_ptr, offs_t, T, E, K, K_PAD)[None, :], float("nan"),
                        sums)
        y_ptrs = y_ptr + offs_t[None, :].to(tl.int64) * stride_yt + offs_h[:, None]
        tl.store(y_ptrs, sums.to(y_ptr.dtype.element_ty), mask=mask)
