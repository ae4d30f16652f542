"""Warp decode with FP8 weights: the pair of ``warp_pair.py``, each weight dequantized in registers.

    ∥(t, j, i), one warp: a[tK+j, i] = silu(Σ_g s_g · Σ_c∈g Qg[e, i, c]·x[t, c]) · (… Qu …)   reads 2·T·K·I·H·1 B
    ∥(t, h),    one warp: y[t, h]    = Σ_j w[t, j] · Σ_g s_g · Σ_c∈g Q2[e_j, h, c]·a[tK+j, c]     reads T·K·H·I·1 B

Q are e4m3 weights, s their block scales (``warpdecode.quant``): ``block128`` GROUP_N = GROUP_K = 128,
FP32; ``mxfp8`` GROUP_N = 1, GROUP_K = 32, e8m0. x and a stay in their own dtype (nothing about the
activations is quantized); each e4m3 converts to FP32 exactly and a scale group's partial sum is
scaled once: the layer computes with exactly q · s, every sum in FP32, y rounded once.

Byte ledger of one call with T tokens (e4m3 weights, bf16 x, FP32 intermediate):
  gate/up  reads  T·K·2I·H·1 B of weight rows, their scales (block128: 4 B per 16 384 weights;
                  mxfp8: 1 B per 32, +3.1 %), T·H·2 B of x;  writes T·K·I·4 B of a
  down     reads  T·K·H·I·1 B of weight rows and their scales, T·K·I·4 B of a (L2), T·K·8 B of
                  routing;  writes T·H·2 B of y
  minimum  the U distinct routed experts' rows and scales once: U·3·I·H·(1 + scale share) B, half
           the bf16 pair's bytes (``warp_pair.py``); at T = 1, U = K and the pair reads exactly that.

The tile is warp_pair's at 16 e4m3 a lane (512 columns a warp); a step's products are summed per
[rows, groups, GROUP_K] group, scaled by the [rows, groups] scales and accumulated, the groups summed
at the end. The down tile is one 2-D tile per routed expert (own scales): up to
``warp.STATIC_SLOTS_MAX`` unrolled, past it (``SLOT_LOOP``) a run-time loop that does not grow with K:

    unrolled (K ≤ STATIC_SLOTS_MAX)           slot loop (K > STATIC_SLOTS_MAX)
    for c in chunks of I:                     w = tile(slot 0, chunk 0)
        w_0 … w_{K-1} = tiles(all K, c)       for n in 0 … K·chunks − 1:        slot j = n mod K, chunk c = n div K
        for j < K:  acc += step(j, c, w_j)        w' = tile(step n + 1);  acc += step(j, c, w);  w = w'

Both read the same bytes in the same tiles. Instructions per weight byte, not HBM, bound this pair
(docs/design.md, "FP8 pair: instructions per weight byte"). Loads ``evict_first``, PDL and unspecialized
T as in ``warp_pair.py``; ``warp_grouped.py`` reads FP8 weights as well, the persistent schedule does not.
"""

import triton
import triton.language as tl
from triton.language.extra.cuda import gdc_launch_dependents, gdc_wait

from .ids import clamped, dropped


@triton.jit
def _scales(scale_ptrs, mask, E8M0: tl.constexpr):
    """A tile of block scales as FP32 factors: FP32 as stored (block128), or e8m0 bits b → 2^(b − 127),
    the bits placed in an FP32 exponent (mxfp8; the bits 1…254 that ``warpdecode.quant`` admits)."""
    if E8M0:
        bits = tl.load(scale_ptrs, mask=mask, other=127).to(tl.int32)
        return (bits << 23).to(tl.float32, bitcast=True)
    else:
        return tl.load(scale_ptrs, mask=mask, other=0.0)


@triton.jit
def _group_sums(w, v, ROWS: tl.constexpr, COLS: tl.constexpr, GROUP_K: tl.constexpr):
    """[ROWS, COLS // GROUP_K]: Σ over each scale group of w · v, w a [ROWS, COLS] e4m3 tile, v a
    [COLS] row of activations; the products in FP32."""
    p = w.to(tl.float32) * v.to(tl.float32)[None, :]
    return tl.sum(tl.reshape(p, [ROWS, COLS // GROUP_K, GROUP_K]), axis=2)


@triton.jit(do_not_specialize=["NUM_PAIRS"])
def warp_gate_up_fp8_kernel(
    # pointers
    x_ptr,  # (T, H) compute dtype
    w13_ptr,  # (E, 2I, H) float8_e4m3fn: gate rows [0, I), up rows [I, 2I)
    w13_scale_ptr,  # block128: (E, 2·cdiv(I, 128), cdiv(H, 128)) fp32; mxfp8: (E, 2I, cdiv(H, 32)) uint8 e8m0
    topk_ids_ptr,  # (T, K) int32 or int64; ids outside [0, E) are guarded (kernels/ids.py)
    act_ptr,  # (T*K, I) fp32 or compute dtype: silu(gate) * up per (token, slot)
    # sizes (NUM_PAIRS = T * K; S_UP: the scale row of the first up row, gate and up blocked separately)
    H, I, E, NUM_PAIRS, K, S_UP,
    # strides (elements)
    stride_xt, stride_we, stride_wr, stride_se, stride_sr, stride_sc, stride_at,
    # meta
    BLOCK_I: tl.constexpr,  # neurons per program (rows of the tile)
    BLOCK_H: tl.constexpr,  # columns of H per step, a multiple of GROUP_K
    GROUP_N: tl.constexpr,  # weight rows per scale: 128 (block128) or 1 (mxfp8)
    GROUP_K: tl.constexpr,  # columns per scale: 128 (block128) or 32 (mxfp8)
    E8M0: tl.constexpr,  # scales are e8m0 bits (mxfp8), not FP32
    USE_PDL: tl.constexpr,  # let the down kernel launch early (GPU only)
):
    if USE_PDL:
        gdc_launch_dependents()
    pid = tl.program_id(0)
    # the pair fastest: programs side by side read the same neuron rows of every pair (shared experts: L2)
    pair, pid_i = pid % NUM_PAIRS, pid // NUM_PAIRS
    t = pair // K
    e, ok = clamped(tl.load(topk_ids_ptr + pair), E)  # outside [0, E): no weights read, a zero row written
    offs_i = pid_i * BLOCK_I + tl.arange(0, BLOCK_I)
    mask_i = offs_i < I
    mask_r = mask_i & ok  # rows whose weights are read
    offs_h = tl.arange(0, BLOCK_H)
    G: tl.constexpr = BLOCK_H // GROUP_K
    offs_g = tl.arange(0, G)
    groups = tl.cdiv(H, GROUP_K)

    gate_ptrs = w13_ptr + e * stride_we + offs_i[:, None].to(tl.int64) * stride_wr + offs_h[None, :]
    up_ptrs = gate_ptrs + I * stride_wr
    gs_ptrs = w13_scale_ptr + e * stride_se + (offs_i // GROUP_N)[:, None] * stride_sr + offs_g[None, :] * stride_sc
    us_ptrs = gs_ptrs + S_UP * stride_sr
    x_ptrs = x_ptr + t.to(tl.int64) * stride_xt + offs_h

    acc_g = tl.zeros([BLOCK_I, G], dtype=tl.float32)  # one partial sum per (neuron, scale group of the step)
    acc_u = tl.zeros([BLOCK_I, G], dtype=tl.float32)
    for h0 in range(0, H, BLOCK_H):
        mask_h = (h0 + offs_h) < H
        xv = tl.load(x_ptrs + h0, mask=mask_h, other=0.0)
        mask = mask_r[:, None] & mask_h[None, :]
        g = tl.load(gate_ptrs + h0, mask=mask, other=0.0, eviction_policy="evict_first")
        u = tl.load(up_ptrs + h0, mask=mask, other=0.0, eviction_policy="evict_first")
        g0 = h0 // GROUP_K
        mask_s = mask_i[:, None] & (g0 + offs_g < groups)[None, :]
        acc_g += _group_sums(g, xv, BLOCK_I, BLOCK_H, GROUP_K) * _scales(gs_ptrs + g0 * stride_sc, mask_s, E8M0)
        acc_u += _group_sums(u, xv, BLOCK_I, BLOCK_H, GROUP_K) * _scales(us_ptrs + g0 * stride_sc, mask_s, E8M0)

    gate = tl.sum(acc_g, axis=1)
    up = tl.sum(acc_u, axis=1)
    a = gate * tl.sigmoid(gate) * up  # SiLU(g)·u in registers
    tl.store(act_ptr + pair.to(tl.int64) * stride_at + offs_i, a.to(act_ptr.dtype.element_ty), mask=mask_i)


@triton.jit
def _down_fp8_tile(w2_ptr, topk_ids_ptr, H, I, E, stride_we, stride_wr, t, pid_h, j, i0,
                   K: tl.constexpr, BLOCK_H: tl.constexpr, BLOCK_I: tl.constexpr):
    """Columns [i0, i0 + BLOCK_I) of the w2 rows of token t's slot j: one [BLOCK_H, BLOCK_I] e4m3 tile
    (zeros where the slot's id lies outside [0, E))."""
    offs_h = pid_h * BLOCK_H + tl.arange(0, BLOCK_H)
    offs_i = i0 + tl.arange(0, BLOCK_I)
    mask = (offs_h < H)[:, None] & (offs_i < I)[None, :]
    offs = offs_h[:, None] * stride_wr + offs_i[None, :]  # within one expert's block: < H·I < 2**31
    e, ok = clamped(tl.load(topk_ids_ptr + t.to(tl.int64) * K + j), E)
    return tl.load(w2_ptr + e * stride_we + offs, mask=mask & ok, other=0.0, eviction_policy="evict_first")


@triton.jit
def _down_fp8_chunk(w2_ptr, topk_ids_ptr, H, I, E, stride_we, stride_wr, t, pid_h, i0,
                    K: tl.constexpr, BLOCK_H: tl.constexpr, BLOCK_I: tl.constexpr):
    """Columns [i0, i0 + BLOCK_I) of the w2 rows token t needs: K [BLOCK_H, BLOCK_I] e4m3 tiles."""
    tiles = ()
    for j in tl.static_range(K):
        tiles = tiles + (_down_fp8_tile(w2_ptr, topk_ids_ptr, H, I, E, stride_we, stride_wr, t, pid_h, j, i0,
                                        K, BLOCK_H, BLOCK_I),)
    return tiles


@triton.jit
def _down_fp8_slot(act_ptr, w2_scale_ptr, topk_ids_ptr, topk_weights_ptr, H, I, E, stride_at, stride_se, stride_sr,
                   stride_sc, t, pid_h, j, i0, w, acc,
                   K: tl.constexpr, BLOCK_H: tl.constexpr, BLOCK_I: tl.constexpr, GROUP_N: tl.constexpr,
                   GROUP_K: tl.constexpr, E8M0: tl.constexpr):
    """acc[rows, groups] += s_j · Σ_c∈group w · (w[t, j] · act[tK+j, c]): slot j's step, w its tile
    (``_down_fp8_tile``), j a constant or a run-time value."""
    G: tl.constexpr = BLOCK_I // GROUP_K
    offs_h = pid_h * BLOCK_H + tl.arange(0, BLOCK_H)
    offs_i = i0 + tl.arange(0, BLOCK_I)
    offs_g = i0 // GROUP_K + tl.arange(0, G)
    mask_s = (offs_h < H)[:, None] & (offs_g < tl.cdiv(I, GROUP_K))[None, :]
    s_offs = (offs_h // GROUP_N)[:, None] * stride_sr + offs_g[None, :] * stride_sc
    pair = t.to(tl.int64) * K + j
    e, _ = clamped(tl.load(topk_ids_ptr + pair), E)
    rw = tl.load(topk_weights_ptr + pair)  # the routing weight, folded into the intermediate
    a = tl.load(act_ptr + pair * stride_at + offs_i, mask=offs_i < I, other=0.0).to(tl.float32) * rw
    s = _scales(w2_scale_ptr + e * stride_se + s_offs, mask_s, E8M0)
    return acc + _group_sums(w, a, BLOCK_H, BLOCK_I, GROUP_K) * s


@triton.jit
def _down_fp8_step(act_ptr, w2_scale_ptr, topk_ids_ptr, topk_weights_ptr, H, I, E, stride_at, stride_se, stride_sr,
                   stride_sc, t, pid_h, i0, wv, acc,
                   K: tl.constexpr, BLOCK_H: tl.constexpr, BLOCK_I: tl.constexpr, GROUP_N: tl.constexpr,
                   GROUP_K: tl.constexpr, E8M0: tl.constexpr):
    """acc[rows, groups] += Σ_j s_j · Σ_c∈group wv[j] · (w[t, j] · act[tK+j, c]), slot by slot:
    the top-K combine is the accumulation."""
    for j in tl.static_range(K):
        acc = _down_fp8_slot(act_ptr, w2_scale_ptr, topk_ids_ptr, topk_weights_ptr, H, I, E, stride_at, stride_se,
                             stride_sr, stride_sc, t, pid_h, j, i0, wv[j], acc, K, BLOCK_H, BLOCK_I, GROUP_N,
                             GROUP_K, E8M0)
    return acc


@triton.jit(do_not_specialize=["T"])
def warp_down_fp8_kernel(
    # pointers
    act_ptr,  # (T*K, I) fp32 or compute dtype, from warp_gate_up_fp8_kernel
    w2_ptr,  # (E, H, I) float8_e4m3fn
    w2_scale_ptr,  # block128: (E, cdiv(H, 128), cdiv(I, 128)) fp32; mxfp8: (E, H, cdiv(I, 32)) uint8 e8m0
    topk_ids_ptr,  # (T, K) int32 or int64; ids outside [0, E) are guarded (kernels/ids.py)
    topk_weights_ptr,  # (T, K) fp32
    y_ptr,  # (T, H) compute dtype
    # sizes and strides (elements)
    H, I, E, T,
    stride_at, stride_we, stride_wr, stride_se, stride_sr, stride_sc, stride_yt,
    # meta
    K: tl.constexpr,
    K_PAD: tl.constexpr,  # next power of two ≥ K
    BLOCK_H: tl.constexpr,  # hidden outputs per program (rows of the tile)
    BLOCK_I: tl.constexpr,  # columns of I per step, a multiple of GROUP_K
    GROUP_N: tl.constexpr,  # weight rows per scale: 128 (block128) or 1 (mxfp8)
    GROUP_K: tl.constexpr,  # columns per scale: 128 (block128) or 32 (mxfp8)
    E8M0: tl.constexpr,  # scales are e8m0 bits (mxfp8), not FP32
    USE_PDL: tl.constexpr,  # start streaming w2 before kernel 1 has finished (GPU only)
    SLOT_LOOP: tl.constexpr,  # the slots in a run-time loop, one tile at a time (large K: warp.fp8_slot_loop)
):
    pid = tl.program_id(0)
    t = pid % T  # fastest: tokens side by side share w2 rows of common experts
    pid_h = pid // T
    if SLOT_LOOP:
        # (chunk, slot) steps, the slot fastest; each step's tile is loaded before the previous step's
        # math, the first before the wait. The load after the last step is of columns past I: masked off.
        steps = tl.cdiv(I, BLOCK_I) * K
        w = _down_fp8_tile(w2_ptr, topk_ids_ptr, H, I, E, stride_we, stride_wr, t, pid_h, 0, 0, K, BLOCK_H, BLOCK_I)
        if USE_PDL:
            gdc_wait()
        acc = tl.zeros([BLOCK_H, BLOCK_I // GROUP_K], dtype=tl.float32)
        for n in range(steps):
            w_next = _down_fp8_tile(w2_ptr, topk_ids_ptr, H, I, E, stride_we, stride_wr, t, pid_h, (n + 1) % K,
                                    (n + 1) // K * BLOCK_I, K, BLOCK_H, BLOCK_I)
            acc = _down_fp8_slot(act_ptr, w2_scale_ptr, topk_ids_ptr, topk_weights_ptr, H, I, E, stride_at, stride_se,
                                 stride_sr, stride_sc, t, pid_h, n % K, n // K * BLOCK_I, w, acc,
                                 K, BLOCK_H, BLOCK_I, GROUP_N, GROUP_K, E8M0)
            w = w_next
    else:
        # the first BLOCK_I columns of every routed expert's rows: they do not depend on kernel 1
        wv = _down_fp8_chunk(w2_ptr, topk_ids_ptr, H, I, E, stride_we, stride_wr, t, pid_h, 0, K, BLOCK_H, BLOCK_I)
        if USE_PDL:
            gdc_wait()  # kernel 1 has finished and its intermediate is visible
        acc = _down_fp8_step(act_ptr, w2_scale_ptr, topk_ids_ptr, topk_weights_ptr, H, I, E, stride_at, stride_se,
                             stride_sr, stride_sc, t, pid_h, 0, wv,
                             tl.zeros([BLOCK_H, BLOCK_I // GROUP_K], dtype=tl.float32),
                             K, BLOCK_H, BLOCK_I, GROUP_N, GROUP_K, E8M0)
        for i0 in range(BLOCK_I, I, BLOCK_I):
            wv = _down_fp8_chunk(w2_ptr, topk_ids_ptr, H, I, E, stride_we, stride_wr, t, pid_h, i0, K, BLOCK_H, BLOCK_I)
            acc = _down_fp8_step(act_ptr, w2_scale_ptr, topk_ids_ptr, topk_weights_ptr, H, I, E, stride_at, stride_se,
                                 stride_sr, stride_sc, t, pid_h, i0, wv, acc,
                                 K, BLOCK_H, BLOCK_I, GROUP_N, GROUP_K, E8M0)

    offs_h = pid_h * BLOCK_H + tl.arange(0, BLOCK_H)
    y = tl.sum(acc, axis=1)  # the dot product, across the warp
    y = tl.where(dropped(topk_ids_ptr, topk_weights_ptr, t, E, K, K_PAD), float("nan"), y)
    tl.store(y_ptr + t.to(tl.int64) * stride_yt + offs_h, y.to(y_ptr.dtype.element_ty), mask=offs_h < H)
