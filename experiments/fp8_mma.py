"""Warp decode with FP8 weights on the tensor cores: the FP8 pair (``kernels/warp_fp8.py``) with each
step's products taken by ``tl.dot`` on fp16 operands instead of FP32 FMAs.

    python experiments/fp8_mma.py --version count [--arch 90 100]       # no GPU: compiled for sm_90a / sm_100a
    python experiments/fp8_mma.py --version mma [--presets …] [--T 1 2 4 8] [--reps 50]   # on the GPU
    TRITON_INTERPRET=1 python experiments/fp8_mma.py --version mma --check

    ∥(t, j, rows of I), one program: a[tK+j, i] = silu(Σ_steps s·s_g · (fp16(Qg) @ [x/s, 0…])[i, 0]) · (… Qu …)
    ∥(t, rows of H),    one program: y[t, h]    = Σ_j Σ_steps s·s_2 · (fp16(Q2) @ [hi, 0…, lo, 0…])[h, 0] + [h, 8]

The shipped pair spends per weight half a ``F2FP`` (e4m3 pair → f16x2), a ``HADD2.F32`` and an FFMA:
about 2.5 lane instructions per weight byte before its overheads, where an H200 SM issues ~7 per byte
of a full-speed read (docs/design.md, "FP8 pair: instructions per weight byte"). Here a step's e4m3
tile [rows, GROUP_K] is widened to fp16 (one ``F2FP`` per two weights, exact) and multiplied on the
tensor cores with the activations as an fp16 operand [GROUP_K, 16] (``tl.dot`` takes no dimension
under 16: the activation is column 0, the other columns zero, and the product's column 0 is the
result), so the FMA and the f16 → f32 conversion become a share of an MMA.

fp16 operands, exactly: the activations of a step (BLOCK_K = 128 columns) are multiplied by 1/s,
s = 2^(ceil(log2 amax) − 15), so their largest magnitude lands in (2^14, 2^15]; a bf16 x (8
significant bits) then converts to fp16 (11) exactly for every value above 2^-29 of the step's
largest, and the FP32 product is multiplied by s and by the weight block scale. The down kernel's
intermediate is FP32 (24 bits): it goes in as two fp16 columns, hi = fp16(a/s) and lo = fp16(a/s − hi)
(22 bits), in columns 0 and 8, whose two product columns are summed at the end. MXFP8's 32-column scale groups take one
dot of [rows, 32] per group, four to a step. Sums in FP32 (the tensor cores' accumulation), the top-K
combine the down kernel's accumulation over slots, y rounded once; ids outside [0, E) as shipped
(``kernels/ids.py``: no weights read, the token's y NaN where such a slot has a nonzero weight).

PDL, as shipped: the gate/up kernel lets the down kernel launch at once; the down kernel loads its first
step's w2 tile, block scales, id and routing weight, none of which kernel 1 writes, before ``gdc_wait``
(their reads overlap kernel 1's tail), and only the intermediate after it. That step is peeled off the
step loop. The shipped slot loop's way, each next tile loaded before the step's math and carried into
the next trip, costs more here: Triton widens a loop-carried e4m3 tile to fp16 before moving it through
shared memory into the dot's layout (byte permutes, twice the shared-memory bytes, about twice the
registers), where a tile used in the trip that loads it is moved as e4m3 and widened in the dot's layout.

Byte ledger: the shipped pair's (``kernels/warp_fp8.py``): gate/up reads T·K·2I·H·1 B of e4m3 rows and
their scales, T·H·2 B of x, writes T·K·I·4 B of FP32 intermediate; down reads T·K·H·I·1 B and scales,
the intermediate (L2) and the routing, writes T·H·2 B of y. The tiles read the same bytes; the
programs have BLOCK_I ≥ 16 (gate/up) or BLOCK_H ≥ 16 (down) rows, the dot's M.

- mma: ``--check`` (Triton's interpreter): the mma pair against float64 on the dequantized weights
  (``warpdecode.reference_moe``), over the bf16 rounding floor, on odd shapes (H = 160, 288; I = 96,
  160; E = 5, 7; K = 2, 3; T = 1, 3), both FP8 formats, several tiles, activations over six decades,
  outputs poisoned, NaN failing: within 1.1× the shipped FP8 pair's error on the same inputs; then a
  slot with an id outside [0, E) (NaN where the shipped pair gives NaN); then both kernels compiled
  for sm_90a (the GPU compiler takes the dot shapes: HMMA in the SASS, no spills). Without
  ``--check`` (GPU): at T = 1, 2, 4, 8 on qwen3-30b-a3b and olmoe-1b-7b (block128), over
  ``fp8_warp.fp8_cases``' layer copies (CUDA graphs, past L2, each checked against float64 first):
  the bf16 pair (tuned), the shipped FP8 pair (default tiles) and the mma pair at ``TIMED``; rows
  ``experiments/results/<GPU>/fp8_mma.csv`` (``bash tools/gpu.sh fp8mma``).
- count: both kernels compiled (``bench.compiled``) for sm_90a and sm_100a at ``TILES`` (16, 32, 64
  rows; 1, 2, 4 warps), block128 and MXFP8, and disassembled: per program the SASS it executes (loop
  bodies once per trip, ``fp8_warp.executed``) over the weight bytes it loads, as lane instructions
  per weight byte, split as ``fp8_expert.OPS`` (convert / tensor / fp32 / int / memory), registers
  and spills; beside the shipped FP8 pair as the H200 tables launch it (block128) at Qwen3-30B-A3B
  and OLMoE, T = 1, 2, 4, 8. The mma kernels' code does not depend on T (one program, one token);
  their rows say ``T = any``. Where sm_100a takes tcgen05 MMAs (64 rows on 4 warps), the barrier
  waits' retry branches, placed after the code and jumping back into it, read as loops to
  ``executed``: those rows overcount. Rows: ``experiments/results/compiled/fp8_mma_instructions.csv``.
"""

from __future__ import annotations

import collections
import dataclasses
import os
import re
from functools import partial

import harness
import torch
import triton
import triton.language as tl
from fp8_expert import OPS
from fp8_warp import QWEN, _run, _sass, executed, fp8_cases
from triton.language.extra.cuda import gdc_launch_dependents, gdc_wait

import warpdecode as wd
from bench import compiled
from bench.poison import poisoned
from warpdecode import _alloc, quant
from warpdecode import warp as wp
from warpdecode.configs import warp_config
from warpdecode.kernels.ids import clamped, dropped
from warpdecode.kernels.warp_fp8 import _scales  # the scale loads are the shipped kernel's

PRESETS = ["qwen3-30b-a3b", "olmoe-1b-7b"]
TS = [1, 2, 4, 8]
OLMOE = wd.MoEShape("olmoe-1b-7b", H=2048, I=1024, E=64, K=8)

#: The dot's N: the activation is column 0 (down: hi and lo in columns 0 and 8), the rest zero.
N_PAD = tl.constexpr(16)
#: Columns per step: the activations' power-of-two scale is one per step.
BLOCK_K = 128
#: Tiles (rows per program, warps) counted, for gate/up (BLOCK_I) and down (BLOCK_H) alike. Where a warp
#: has fewer than 16 rows (16 rows on 2 or 4 warps, 32 on 4) the warps repeat each other's dots.
TILES = [(16, 1), (32, 1), (32, 2), (64, 1), (64, 2), (64, 4), (16, 2), (16, 4), (32, 4)]
#: Tiles timed on the GPU: at least 16 rows a warp, without spills (``count``).
TIMED = [(16, 1), (32, 1), (32, 2), (64, 2)]


def tile_cfg(rows_key: str, tile) -> dict:
    return {rows_key: tile[0], "BLOCK_K": BLOCK_K, "num_warps": tile[1], "num_stages": 1}


def mma_config(tile=(16, 1), down=None) -> dict:
    """The mma pair's config: gate/up and down at ``tile`` (rows, warps), down at ``down`` if given."""
    return {"gate_up": tile_cfg("BLOCK_I", tile), "down": tile_cfg("BLOCK_H", down or tile)}


# ==================================================================================================
# the kernels


@triton.jit
def _pow2_scale(amax):
    """(1/s, s) as FP32 powers of two, s = 2^(ceil(log2 amax) − 15): amax / s lies in (2^14, 2^15].
    From amax's bits (exponent, and 1 more where the mantissa is not zero), the exponent of s kept in
    [−126, 126] (amax 0: s = 2^-126, the operand all zeros)."""
    b = amax.to(tl.int32, bitcast=True)
    e = ((b >> 23) & 0xFF) - 127 + ((b & 0x7FFFFF) != 0).to(tl.int32)
    k = tl.minimum(tl.maximum(e - 15, -126), 126)
    return ((127 - k) << 23).to(tl.float32, bitcast=True), ((k + 127) << 23).to(tl.float32, bitcast=True)


@triton.jit
def _pad(b, n: tl.constexpr, w: tl.constexpr):
    """[n, 2w]: b [n, w] and w columns of zeros after each of its columns (``tl.join``: the new columns
    in the same thread as b's, so no element of the zeros costs an instruction before the dot)."""
    return tl.reshape(tl.join(b, tl.zeros_like(b)), [n, 2 * w])


@triton.jit
def _operand(v, inv, SPLIT: tl.constexpr):
    """[n, N_PAD] fp16 B operand from an FP32 vector v [n] scaled by the power of two ``inv``: column 0
    fp16(v·inv) (exact for a bf16 v above 2^-29 of the step's largest), and where SPLIT column 8 the
    rest, fp16(v·inv − column 0) (an FP32 v to 22 bits); the other columns zero. The scaling and
    conversion run on v's own layout, before the zeros are joined on."""
    n: tl.constexpr = v.shape[0]
    vs = v * inv
    hi = vs.to(tl.float16)
    if SPLIT:
        lo = (vs - hi.to(tl.float32)).to(tl.float16)
    else:
        lo = tl.zeros_like(hi)
    b = tl.join(hi, lo)  # [n, 2]: hi, lo
    b = _pad(b, n, 2)  # [n, 4]: hi, 0, lo, 0
    b = _pad(b, n, 4)  # [n, 8]: hi, 0, 0, 0, lo, 0, 0, 0
    return _pad(b, n, 8)  # [n, 16]: hi in column 0, lo in column 8


@triton.jit(do_not_specialize=["NUM_PAIRS"])
def mma_gate_up_kernel(
    # pointers
    x_ptr,  # (T, H) bf16
    w13_ptr,  # (E, 2I, H) float8_e4m3fn: gate rows [0, I), up rows [I, 2I)
    w13_scale_ptr,  # block128: (E, 2·cdiv(I, 128), cdiv(H, 128)) fp32; mxfp8: (E, 2I, cdiv(H, 32)) uint8 e8m0
    topk_ids_ptr,  # (T, K) int32 or int64; ids outside [0, E): no weights read, a zero row written
    act_ptr,  # (T*K, I) fp32: silu(gate) * up per (token, slot), as warp_gate_up_fp8_kernel writes it
    # sizes (NUM_PAIRS = T * K; S_UP: the scale row of the first up row)
    H, I, E, NUM_PAIRS, K, S_UP,
    # strides (elements)
    stride_xt, stride_we, stride_wr, stride_se, stride_sr, stride_sc, stride_at,
    # meta
    BLOCK_I: tl.constexpr,  # neurons per program (the dot's M, ≥ 16)
    BLOCK_K: tl.constexpr,  # columns of H per step (one activation scale), a multiple of GROUP_K
    GROUP_N: tl.constexpr,  # weight rows per scale: 128 (block128) or 1 (mxfp8)
    GROUP_K: tl.constexpr,  # columns per scale: 128 (block128) or 32 (mxfp8); the dot's K
    E8M0: tl.constexpr,  # scales are e8m0 bits (mxfp8), not FP32
    USE_PDL: tl.constexpr,  # let the down kernel launch early (GPU only)
):
    """a[pair, i] = silu(gate_i) · up_i for one (token, slot) pair and BLOCK_I neurons, gate_i =
    Σ_steps s · Σ_groups s_g[i] · (fp16(Qg) @ fp16(x/s))[i] on the tensor cores (FP32 sums)."""
    if USE_PDL:
        gdc_launch_dependents()
    pid = tl.program_id(0)
    pair, pid_i = pid % NUM_PAIRS, pid // NUM_PAIRS  # the pair fastest, as shipped
    t = pair // K
    e, ok = clamped(tl.load(topk_ids_ptr + pair), E)
    offs_i = pid_i * BLOCK_I + tl.arange(0, BLOCK_I)
    mask_i = offs_i < I
    mask_r = mask_i & ok  # rows whose weights are read
    offs_k = tl.arange(0, BLOCK_K)
    offs_g = tl.arange(0, GROUP_K)
    SUB: tl.constexpr = BLOCK_K // GROUP_K  # scale groups per step: one dot each

    gate_ptrs = w13_ptr + e * stride_we + offs_i[:, None].to(tl.int64) * stride_wr + offs_g[None, :]
    up_ptrs = gate_ptrs + I * stride_wr
    gs_ptrs = w13_scale_ptr + e * stride_se + (offs_i // GROUP_N) * stride_sr
    us_ptrs = gs_ptrs + S_UP * stride_sr
    x_row = x_ptr + t.to(tl.int64) * stride_xt

    acc_g = tl.zeros([BLOCK_I, N_PAD], dtype=tl.float32)  # column 0 the sum, the others zero
    acc_u = tl.zeros([BLOCK_I, N_PAD], dtype=tl.float32)
    for h0 in range(0, H, BLOCK_K):
        xv = tl.load(x_row + h0 + offs_k, mask=(h0 + offs_k) < H, other=0.0).to(tl.float32)
        inv, s = _pow2_scale(tl.max(tl.abs(xv), axis=0))
        for g in tl.static_range(SUB):
            c0 = h0 + g * GROUP_K
            if SUB == 1:
                xg = xv
            else:  # the group's columns again (L1)
                xg = tl.load(x_row + c0 + offs_g, mask=(c0 + offs_g) < H, other=0.0).to(tl.float32)
            b = _operand(xg, inv, False)
            mask = mask_r[:, None] & ((c0 + offs_g) < H)[None, :]
            wg = tl.load(gate_ptrs + c0, mask=mask, other=0.0, eviction_policy="evict_first")
            wu = tl.load(up_ptrs + c0, mask=mask, other=0.0, eviction_policy="evict_first")
            sc = (c0 // GROUP_K) * stride_sc
            mask_s = mask_i & (c0 < H)  # a group past H (MXFP8's last step) has no scale
            fg = _scales(gs_ptrs + sc, mask_s, E8M0) * s
            fu = _scales(us_ptrs + sc, mask_s, E8M0) * s
            acc_g += tl.dot(wg.to(tl.float16), b) * fg[:, None]
            acc_u += tl.dot(wu.to(tl.float16), b) * fu[:, None]

    gate = tl.sum(acc_g, axis=1)
    up = tl.sum(acc_u, axis=1)
    a = gate * tl.sigmoid(gate) * up
    tl.store(act_ptr + pair.to(tl.int64) * stride_at + offs_i, a.to(act_ptr.dtype.element_ty), mask=mask_i)


@triton.jit
def _down_weights(w2_ptr, w2_scale_ptr, topk_ids_ptr, topk_weights_ptr, t, n, I, E, w_offs, s_offs, mask_h,
                  stride_we, stride_se, stride_sc,
                  K: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_K: tl.constexpr, E8M0: tl.constexpr):
    """What step n (chunk n div K, slot n mod K) reads that kernel 1 does not write: the slot's routing
    weight, and per scale group of the chunk the [rows, GROUP_K] e4m3 tile (zeros where the slot's id lies
    outside [0, E)) and its [rows] FP32 scales."""
    i0 = (n // K) * BLOCK_K
    pair = t.to(tl.int64) * K + n % K
    e, ok = clamped(tl.load(topk_ids_ptr + pair), E)
    rw = tl.load(topk_weights_ptr + pair)  # the routing weight, folded into the intermediate
    offs_g = tl.arange(0, GROUP_K)
    ws = ()
    fs = ()
    for g in tl.static_range(BLOCK_K // GROUP_K):
        c0 = i0 + g * GROUP_K
        mask = (mask_h & ok)[:, None] & ((c0 + offs_g) < I)[None, :]
        ws = ws + (tl.load(w2_ptr + e * stride_we + w_offs + c0, mask=mask, other=0.0, eviction_policy="evict_first"),)
        fs = fs + (_scales(w2_scale_ptr + e * stride_se + s_offs + (c0 // GROUP_K) * stride_sc, mask_h & (c0 < I),
                           E8M0),)
    return rw, ws, fs


@triton.jit
def _down_step(act_ptr, t, n, I, stride_at, rw, ws, fs, acc,
               K: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_K: tl.constexpr):
    """acc += step n's products: the slot's intermediate (kernel 1's) times its routing weight ``rw``,
    scaled by a power of two s, as hi + lo fp16 columns against each group's tile of ``ws`` on the tensor
    cores, the FP32 products times s and the group's scales ``fs``."""
    i0 = (n // K) * BLOCK_K
    pair = t.to(tl.int64) * K + n % K
    offs_k = tl.arange(0, BLOCK_K)
    offs_g = tl.arange(0, GROUP_K)
    SUB: tl.constexpr = BLOCK_K // GROUP_K
    a_row = act_ptr + pair * stride_at
    av = tl.load(a_row + i0 + offs_k, mask=(i0 + offs_k) < I, other=0.0).to(tl.float32) * rw
    inv, s = _pow2_scale(tl.max(tl.abs(av), axis=0))
    for g in tl.static_range(SUB):
        c0 = i0 + g * GROUP_K
        if SUB == 1:
            ag = av
        else:  # the group's columns again (L1)
            ag = tl.load(a_row + c0 + offs_g, mask=(c0 + offs_g) < I, other=0.0).to(tl.float32) * rw
        b = _operand(ag, inv, True)
        acc += tl.dot(ws[g].to(tl.float16), b) * (fs[g] * s)[:, None]
    return acc


@triton.jit(do_not_specialize=["T"])
def mma_down_kernel(
    # pointers
    act_ptr,  # (T*K, I) fp32, from mma_gate_up_kernel (or warp_gate_up_fp8_kernel)
    w2_ptr,  # (E, H, I) float8_e4m3fn
    w2_scale_ptr,  # block128: (E, cdiv(H, 128), cdiv(I, 128)) fp32; mxfp8: (E, H, cdiv(I, 32)) uint8 e8m0
    topk_ids_ptr,  # (T, K) int32 or int64; ids outside [0, E) are guarded (kernels/ids.py)
    topk_weights_ptr,  # (T, K) fp32
    y_ptr,  # (T, H) bf16
    # sizes and strides (elements)
    H, I, E, T,
    stride_at, stride_we, stride_wr, stride_se, stride_sr, stride_sc, stride_yt,
    # meta
    K: tl.constexpr,  # slots
    K_PAD: tl.constexpr,  # next power of two ≥ K
    BLOCK_H: tl.constexpr,  # hidden outputs per program (the dot's M, ≥ 16)
    BLOCK_K: tl.constexpr,  # columns of I per step (one intermediate scale per slot), a multiple of GROUP_K
    GROUP_N: tl.constexpr,  # weight rows per scale: 128 (block128) or 1 (mxfp8)
    GROUP_K: tl.constexpr,  # columns per scale: 128 (block128) or 32 (mxfp8); the dot's K
    E8M0: tl.constexpr,  # scales are e8m0 bits (mxfp8), not FP32
    USE_PDL: tl.constexpr,  # start streaming w2 before kernel 1 has finished (GPU only)
):
    """y[t, h] = Σ_j Σ_steps s · Σ_groups s_2[h] · (fp16(Q2_j) @ [hi, lo](w[t, j] · a[tK+j] / s))[h] for
    one token and BLOCK_H outputs: the top-K combine is the FP32 accumulation on the tensor cores."""
    pid = tl.program_id(0)
    t = pid % T  # fastest: tokens side by side share w2 rows of common experts
    pid_h = pid // T
    offs_h = pid_h * BLOCK_H + tl.arange(0, BLOCK_H)
    mask_h = offs_h < H
    offs_g = tl.arange(0, GROUP_K)
    w_offs = offs_h[:, None] * stride_wr + offs_g[None, :]  # within one expert's block: < H·I < 2**31
    s_offs = (offs_h // GROUP_N) * stride_sr
    # (chunk, slot) steps in one run-time loop, the slot fastest (K unrolled would hold K tiles at once).
    # The first step's weights, scales and routing weight do not depend on kernel 1: loaded before the
    # wait, so their reads overlap its tail; that step is peeled. (A tile carried into the next trip, as the
    # shipped slot loop does, is widened to fp16 before the shared-memory layout change: about twice the registers.)
    rw, ws, fs = _down_weights(w2_ptr, w2_scale_ptr, topk_ids_ptr, topk_weights_ptr, t, 0, I, E, w_offs, s_offs,
                               mask_h, stride_we, stride_se, stride_sc, K, BLOCK_K, GROUP_K, E8M0)
    if USE_PDL:
        gdc_wait()  # kernel 1 has finished and its intermediate is visible
    acc = tl.zeros([BLOCK_H, N_PAD], dtype=tl.float32)  # columns 0 and 8: hi and lo parts
    acc = _down_step(act_ptr, t, 0, I, stride_at, rw, ws, fs, acc, K, BLOCK_K, GROUP_K)
    for n in range(1, tl.cdiv(I, BLOCK_K) * K):
        rw_n, ws_n, fs_n = _down_weights(w2_ptr, w2_scale_ptr, topk_ids_ptr, topk_weights_ptr, t, n, I, E, w_offs,
                                         s_offs, mask_h, stride_we, stride_se, stride_sc, K, BLOCK_K, GROUP_K, E8M0)
        acc = _down_step(act_ptr, t, n, I, stride_at, rw_n, ws_n, fs_n, acc, K, BLOCK_K, GROUP_K)

    y = tl.sum(acc, axis=1)  # hi + lo
    y = tl.where(dropped(topk_ids_ptr, topk_weights_ptr, t, E, K, K_PAD), float("nan"), y)
    tl.store(y_ptr + t.to(tl.int64) * stride_yt + offs_h, y.to(y_ptr.dtype.element_ty), mask=mask_h)


# ==================================================================================================
# host side


def _check_tile(w, cfg: dict, rows: str):
    if cfg[rows] < 16 or cfg["BLOCK_K"] % w.GROUP_K or cfg["BLOCK_K"] % 16:
        raise ValueError(f"{rows}={cfg[rows]} must be ≥ 16 and BLOCK_K={cfg['BLOCK_K']} a multiple of "
                         f"{w.FORMAT}'s {w.GROUP_K} columns (tl.dot takes no dimension under 16)")


def launches(x, w13, w2, topk_weights, topk_ids, act, y, config: dict):
    """[(kernel, grid, arguments, meta, num_warps, num_stages)] of the mma pair: what ``moe_mma``
    launches, and what ``count`` compiles (meta tensors)."""
    T, H = x.shape
    E, two_i, _ = w13.shape
    I = two_i // 2  # noqa: E741
    K = topk_ids.shape[1]
    gu, dn = config["gate_up"], config["down"]
    _check_tile(w13, gu, "BLOCK_I")
    _check_tile(w2, dn, "BLOCK_H")
    fmt = {"GROUP_N": w13.GROUP_N, "GROUP_K": w13.GROUP_K, "E8M0": w13.FORMAT == "mxfp8"}
    q, s = w13.weight, w13.scale
    args1 = dict(x_ptr=x, w13_ptr=q, w13_scale_ptr=s, topk_ids_ptr=topk_ids, act_ptr=act, H=H, I=I, E=E,
                 NUM_PAIRS=T * K, K=K, S_UP=w13.up_scale_row, stride_xt=x.stride(0), stride_we=q.stride(0),
                 stride_wr=q.stride(1), stride_se=s.stride(0), stride_sr=s.stride(1), stride_sc=s.stride(2),
                 stride_at=act.stride(0))
    meta1 = dict(BLOCK_I=gu["BLOCK_I"], BLOCK_K=gu["BLOCK_K"], **fmt, USE_PDL=wp.USE_PDL)
    q, s = w2.weight, w2.scale
    args2 = dict(act_ptr=act, w2_ptr=q, w2_scale_ptr=s, topk_ids_ptr=topk_ids, topk_weights_ptr=topk_weights,
                 y_ptr=y, H=H, I=I, E=E, T=T, stride_at=act.stride(0), stride_we=q.stride(0), stride_wr=q.stride(1),
                 stride_se=s.stride(0), stride_sr=s.stride(1), stride_sc=s.stride(2), stride_yt=y.stride(0))
    meta2 = dict(K=K, K_PAD=triton.next_power_of_2(K), BLOCK_H=dn["BLOCK_H"], BLOCK_K=dn["BLOCK_K"], **fmt,
                 USE_PDL=wp.USE_PDL)
    return [(mma_gate_up_kernel, (T * K * triton.cdiv(I, gu["BLOCK_I"]),), args1, meta1, gu["num_warps"],
             gu["num_stages"]),
            (mma_down_kernel, (T * triton.cdiv(H, dn["BLOCK_H"]),), args2, meta2, dn["num_warps"], dn["num_stages"])]


def moe_mma(x, w13, w2, topk_weights, topk_ids, *, config=None):
    """The FP8 pair (``warp.moe_warp`` on FP8 weights) with the mma kernels: y (T, H) in x's dtype."""
    T, H = x.shape
    I, K = w13.shape[1] // 2, topk_ids.shape[1]  # noqa: E741
    act = _alloc.empty(T * K, I, dtype=torch.float32, device=x.device)
    y = _alloc.empty(T, H, dtype=x.dtype, device=x.device)
    for n, (kernel, grid, args, meta, warps, stages) in enumerate(
            launches(x, w13, w2, topk_weights, topk_ids, act, y, config or mma_config())):
        pdl = {"launch_pdl": True} if wp.USE_PDL and n == 1 else {}
        kernel[grid](**args, **meta, num_warps=warps, num_stages=stages, **pdl)
    return y


def jobs(shape, weights: str, config: dict, arch: int) -> list[compiled.Job]:
    """The mma pair's two launches at ``shape`` as ``bench.compiled`` jobs (meta tensors; T = 1: the
    code does not depend on T), for ``arch``, PDL on as on that GPU."""
    w13, w2 = compiled.meta_fp8_weights(shape, weights)
    meta = dict(device="meta")
    x = torch.empty(1, shape.H, dtype=torch.bfloat16, **meta)
    tw = torch.empty(1, shape.K, dtype=torch.float32, **meta)
    ids = torch.empty(1, shape.K, dtype=torch.int32, **meta)
    act = torch.empty(shape.K, shape.I, dtype=torch.float32, **meta)
    y = torch.empty(1, shape.H, dtype=torch.bfloat16, **meta)
    out = []
    for kernel, _, args, meta_, warps, stages in launches(x, w13, w2, tw, ids, act, y, config):
        job = compiled.job(kernel, args, {**meta_, "USE_PDL": arch >= 90}, num_warps=warps, num_stages=stages,
                           arch=arch)
        out.append(dataclasses.replace(job, module="fp8_mma"))  # by file name, also when run as __main__
    return out


# ==================================================================================================
# mma --check: the interpreter


def _inputs(shape, T, seed):
    """x over six decades (each element a normal draw times 10^u, u uniform in [−3, 3]) and a routing."""
    gen = torch.Generator().manual_seed(seed)
    x = (torch.randn(T, shape.H, generator=gen) * 10 ** (6 * torch.rand(T, shape.H, generator=gen) - 3))
    tw, ids = wd.route(torch.randn(T, shape.E, generator=gen), shape.K)
    return x.to(torch.bfloat16), tw, ids.to(torch.int32)


def check_pair(shape, T, fmt, tiles, seed=1):
    """The mma pair at each tile against float64, within 1.1× the shipped FP8 pair's error."""
    w13, w2 = shape.weights(dtype=torch.bfloat16, seed=seed)
    x, tw, ids = _inputs(shape, T, seed + T)
    q13, q2 = quant.quantize_experts(w13, w2, fmt)
    ref = wd.reference_moe(x, q13, q2, tw, ids)
    floor = wd.rounding_floor(ref, torch.bfloat16)
    with poisoned():
        shipped = wp.moe_warp(x, q13, q2, tw, ids)
    e0 = wd.rel_error(shipped, ref) / floor
    for tile in tiles:
        cfg = mma_config(tile)
        with poisoned():
            y = moe_mma(x, q13, q2, tw, ids, config=cfg)
        err = wd.rel_error(y, ref) / floor
        assert not y.isnan().any() and err <= 1.1 * e0, (shape.name, T, fmt, tile, err, e0)
        print(f"{shape.name} H={shape.H} I={shape.I} E={shape.E} K={shape.K} T={T} {fmt} {tile[0]} rows, "
              f"{tile[1]} warps: error {err:.3f} × the floor, shipped {e0:.3f}: mma pair within 1.1x of the "
              "shipped pair")


def check_bad_ids(shape, T, fmt):
    """A slot with id E (nonzero weight) and one with id −1 (weight 0): NaN exactly where the shipped
    pair gives NaN, the other tokens against float64."""
    w13, w2 = shape.weights(dtype=torch.bfloat16, seed=3)
    x, tw, ids = _inputs(shape, T, 7)
    q13, q2 = quant.quantize_experts(w13, w2, fmt)
    ids[0, 1] = shape.E
    ids[T - 1, 0], tw[T - 1, 0] = -1, 0.0
    with poisoned():
        shipped = wp.moe_warp(x, q13, q2, tw, ids)
        y = moe_mma(x, q13, q2, tw, ids, config=mma_config((16, 1)))
    assert torch.equal(y.isnan(), shipped.isnan()) and y[0].isnan().all(), (fmt, y.isnan().any(1))
    ok = ~y.isnan().any(1)
    ref = wd.reference_moe(x[ok], q13, q2, tw[ok], ids[ok])
    err = wd.rel_error(y[ok], ref) / wd.rounding_floor(ref, torch.bfloat16)
    assert err <= 4.0, (fmt, err)
    print(f"{shape.name} T={T} {fmt}, ids E and −1 (weight 0): NaN where the shipped pair has NaN (token 0), "
          f"the rest {err:.3f} × the floor")


def check_compiled():
    """Both kernels compiled for sm_90a at 16 rows on one warp and 64 on two, both formats: the GPU
    compiler takes the dot shapes (tensor-core instructions in the SASS), no spills."""
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(harness.HERE), os.environ.get("PYTHONPATH")]))
    todo = [(fmt, tile, j) for fmt in quant.FORMATS for tile in [(16, 1), (64, 2)]
            for j in jobs(QWEN, fmt, mma_config(tile), 90)]
    for (fmt, tile, j), c in zip(todo, compiled.compile_many([j for *_, j in todo]), strict=True):
        rep = compiled.ptxas_report(c)
        mma = sum(1 for s in _sass(c) if re.match(OPS["tensor"], s))
        assert mma > 0 and rep["spill_stores"] == 0, (fmt, tile, j.name, mma, rep)
        print(f"{fmt} {j.name} {tile[0]} rows {tile[1]} warps: compiled for sm_90a, {mma} tensor-core instructions, "
              f"{rep['registers']} registers, no spills")


def check_mma():
    for shape, T, tiles in [(wd.MoEShape("c1", H=160, I=96, E=5, K=2), 1, [(16, 1), (32, 2)]),
                            (wd.MoEShape("c2", H=288, I=160, E=7, K=3), 3, [(16, 1), (64, 4)])]:
        for fmt in quant.FORMATS:
            check_pair(shape, T, fmt, tiles)
    for fmt in quant.FORMATS:
        check_bad_ids(wd.MoEShape("c3", H=160, I=96, E=5, K=2), 3, fmt)
    check_compiled()


# ==================================================================================================
# mma: on the GPU


def main_mma():
    p = harness.parser(__doc__, ["mma"], presets=PRESETS, Ts=TS)
    p.add_argument("--reps", type=int, default=50)
    args = p.parse_args()
    if args.check:
        check_mma()
        return 0
    ceiling = harness.read_ceiling()
    print(f"read ceiling {ceiling:.3f} TB/s")
    rows, path = [], harness.results_dir() / "fp8_mma.csv"
    for case, fcase in fp8_cases(args.presets or PRESETS, args.T or TS, ceiling):
        s = case.shape
        run = partial(_run, rows, fcase, args.reps)
        run("bf16 pair (tuned)", "shipped", wp.moe_warp, warp_config(s.H, s.I, s.E, s.K, case.T), c=case,
            detail={"bf16_floor_us": round(case.floor_us, 3)})
        default = warp_config(s.H, s.I, s.E, s.K, case.T, weights="block128")
        run("fp8 pair (default)", "shipped", partial(wp.moe_warp, config=default), default)
        for tile in TIMED:
            cfg = mma_config(tile)
            run(f"mma pair {tile[0]} rows, {tile[1]} warps", "mma", partial(moe_mma, config=cfg), cfg)
        for r in rows:
            r["experiment"] = "fp8_mma"
        harness.write("fp8_mma", rows, path)  # after every case: a run cut short keeps what it measured
    print(f"rows: {path}")
    summary(rows)
    return 0


def summary(rows):
    """Per preset and T: the bf16 pair, the shipped FP8 pair and the fastest mma tile."""
    by = collections.defaultdict(dict)
    for r in rows:
        by[(r["preset"], r["T"])][r["variant"]] = r
    print("\npreset          T   bf16 µs  fp8 µs  fastest mma µs (of the ceiling), tile  fp8/mma")
    for (p, T), v in by.items():
        bf = v.get("bf16 pair (tuned)", {}).get("us", float("nan"))
        d = v.get("fp8 pair (default)", {}).get("us", float("nan"))
        mma = [r for k, r in v.items() if k.startswith("mma pair")]
        if mma:
            best = min(mma, key=lambda r: r["us"])
            print(f"{p:14s} {T:2d} {bf:8.2f} {d:7.2f}  {best['us']:8.2f} ({best['frac_ceiling']:.0%}) "
                  f"{best['variant'].removeprefix('mma pair ')}  {d / best['us']:.2f}x")


# ==================================================================================================
# count: compiled, per weight byte


def _row(arch, c, j, variant, shape, T, tile, nbytes, trips) -> dict:
    rep = compiled.ptxas_report(c)
    ops = executed(_sass(c), trips)
    per_byte = 32 * j.num_warps / nbytes  # a program's lane instructions over the bytes its lanes load
    r = {"triton": triton.__version__, "arch": compiled.arch_name(arch), "preset": shape.name, "T": T,
         "kernel": j.name, "variant": variant, "tile": tile, "num_warps": j.num_warps, "registers": rep["registers"],
         "spill_bytes": rep["spill_stores"] + rep["spill_loads"],
         "instr_per_byte": round(sum(ops.values()) * per_byte, 3)}
    for k, pat in OPS.items():
        r[k + "_per_byte"] = round(sum(v for op, v in ops.items() if re.match(pat, op)) * per_byte, 3)
    r["other_per_byte"] = round(r["instr_per_byte"] - sum(r[k + "_per_byte"] for k in OPS), 3)
    return r


def _count_jobs(arch: int, Ts):
    """(variant, shape, T, Job, tile, weight bytes per program, loop trips): the shipped FP8 pair as the
    H200 tables launch it (block128) per shape and T, and the mma pair at every tile, both formats."""
    out = []
    for shape in (QWEN, OLMOE):
        for T in Ts:
            for ln in compiled.record_launches("warp", shape, T, gpu_name="NVIDIA H200", arch=arch,
                                               weights="block128"):
                j, c = ln.job, ln.job.constexprs
                if "gate_up" in j.name:
                    tile, nbytes, trips = f"{c['BLOCK_I']}x{c['BLOCK_H']}", 2 * c["BLOCK_I"] * shape.H, \
                        triton.cdiv(shape.H, c["BLOCK_H"])
                else:  # the first chunk is peeled: the loop runs the rest
                    tile, nbytes, trips = f"{c['BLOCK_H']}x{c['BLOCK_I']}", shape.K * c["BLOCK_H"] * shape.I, \
                        triton.cdiv(shape.I, c["BLOCK_I"]) - 1
                out.append(("shipped block128", shape, T, j, tile, nbytes, trips))
        for fmt in quant.FORMATS:
            for tile in TILES:
                gu, dn = jobs(shape, fmt, mma_config(tile), arch)
                out.append((f"mma {fmt}", shape, "any", gu, f"{tile[0]}x{BLOCK_K}", 2 * tile[0] * shape.H,
                            triton.cdiv(shape.H, BLOCK_K)))
                out.append((f"mma {fmt}", shape, "any", dn, f"{tile[0]}x{BLOCK_K}", shape.K * tile[0] * shape.I,
                            triton.cdiv(shape.I, BLOCK_K) * shape.K - 1))  # the first step is peeled
    return out


def main_count():
    p = harness.parser(__doc__, ["count"], Ts=TS)
    p.add_argument("--arch", type=int, nargs="+", default=[90, 100])
    args = p.parse_args()
    # the compiling child process imports this file by name
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(harness.HERE), os.environ.get("PYTHONPATH")]))
    rows = []
    for arch in args.arch:
        todo = _count_jobs(arch, args.T or TS)
        for (variant, shape, T, j, tile, nbytes, trips), c in zip(
                todo, compiled.compile_many([r[3] for r in todo], errors="keep"), strict=True):
            if isinstance(c, compiled.CompileError):
                print(f"{compiled.arch_name(arch)} {j.name} {variant} {tile} w{j.num_warps}: rejected: "
                      f"{c.message.splitlines()[0][:200]}")
                continue
            r = _row(arch, c, j, variant, shape, T, tile, nbytes, trips)
            rows.append(r)
            print(f"{r['arch']} {shape.name:13s} T={T!s:3s} {j.name:24s} {variant:16s} {tile:>8s} w{j.num_warps}: "
                  f"{r['registers']:3d} regs, spills {r['spill_bytes']:4d} B, {r['instr_per_byte']:5.2f} instr/B "
                  f"(convert {r['convert_per_byte']}, tensor {r['tensor_per_byte']}, fp32 {r['fp32_per_byte']}, "
                  f"int {r['int_per_byte']}, memory {r['memory_per_byte']}, other {r['other_per_byte']})", flush=True)
    harness.write_compiled("fp8_mma_instructions", rows, {compiled.arch_name(a) for a in args.arch})
    return 0


VERSIONS = {"mma": (main_mma, []), "count": (main_count, [])}

if __name__ == "__main__":
    harness.dispatch(__doc__, VERSIONS)
