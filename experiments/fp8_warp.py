"""Warp decode with FP8 weights (``kernels/warp_fp8.py``): what its instructions cost per weight byte,
and what an integer dequantization and tiles of several rows buy.

    python experiments/fp8_warp.py --version count [--arch 90 100]     # no GPU: compiled for sm_90a / sm_100a
    python experiments/fp8_warp.py --version tiles [--presets …] [--T 1 2 4 8] [--reps 50]
    TRITON_INTERPRET=1 python experiments/fp8_warp.py --version tiles --check
    python experiments/fp8_warp.py --version bound [--presets …] [--T …] [--reps 50]
    TRITON_INTERPRET=1 python experiments/fp8_warp.py --version bound --check

A warp streams 16 bytes per lane per load, 16 e4m3 against bf16's 8, so at the same bandwidth each
lane has twice the weights to turn into FP32 products per cycle. The kernels are issue-bound where
their instructions per weight byte approach what the SMs can issue while the HBM delivers a byte:
an H200 SM issues 4 warp instructions a cycle (128 lane instructions) and receives about 17 bytes of
a 4.5 TB/s read a cycle at 1.98 GHz, so above ~7 lane instructions per byte and lane the SMs, not the
memory, set the pace.

- count: each kernel compiled as the launchers would launch it (``bench.compiled``) and
  disassembled (Triton's nvdisasm): registers, spills, and the SASS one program executes per byte
  of weights each lane loads at Qwen3-30B-A3B (H = 2048, I = 768; loop bodies counted once per
  trip), with the instructions that do the arithmetic: the e4m3 pair → f16x2 conversion
  (``F2FP.F16.E4M3.UNPACK_B``, one per two weights), f16 → f32 (``HADD2.F32``, one per weight) and
  the FMA (one per weight), then what moves the activations between layouts (``SEL``, ``SHFL.IDX``,
  ``BAR.SYNC``) and the warp sums (``SHFL.BFLY``). Rows: ``experiments/results/compiled/fp8_instructions.csv``
  (one per Triton release, architecture, kernel and tile). Rows ``grouped <format>``: the grouped schedule's
  kernels (``kernels/warp_grouped.py``) as ``moe(method="warp", schedule="grouped")`` launches them at T = 8,
  with FP8 weights and with bf16 ones (weight bytes per program: rows × columns × bytes a weight), and ``mma``
  (the tensor-core instructions) and ``cvt_bf16`` (``F2FP.BF16`` packs) per byte beside the rest.
- tiles: at T = 1, 2, 4, 8 on qwen3-30b-a3b, olmoe-1b-7b and mixtral-8x7b (block128 weights), each
  checked against float64 on the dequantized weights (poisoned outputs) and then timed as
  ``harness.checked_us`` times (CUDA graph over rotated layer copies, as many as FP8 weights need to
  touch ≥ 3× the L2 at T = 1, median): the shipped FP8 pair
  at its default tiles; the pair with the integer dequantization (``bits``, below) at the same tiles;
  the pair with each gate/up tile of ``GATE_UP`` (the default down tile) and each down tile of
  ``DOWN`` (the default gate/up tile), then the fastest gate/up and down tiles together (the
  defaults included); and the bf16 pair (tuned, as ``moe`` runs it). ``detail.same_bits``: whether
  the bits pair's output has the shipped pair's bits.
  ``floor_us`` is the FP8 bytes (every routed expert's e4m3 rows and scales once, x, y, routing) at
  the read ceiling measured in the same run, for every row, the bf16 pair's too (its own floor is
  in ``detail``). Rows: ``experiments/results/<GPU>/fp8_tiles.csv``.

- bound: what the FP8 pair's own launches cost with no math, the bound the bar (≤ 12 µs at
  Qwen3-30B-A3B T = 1) is reported against. At Qwen3-30B-A3B T = 1, 2, 4, 8 and T = 1 on the other
  presets with FP8 weights (block128), over ``tiles``' layer copies, in one process: (a) the shipped
  pair at its default tiles, checked against float64 first; (b) the same two launches with the
  math removed (``nomath_*`` below: the same grids, tiles, warps, PDL chaining, evict_first weight
  loads of the same bytes, the same loads of scales, x, the intermediate and the routing), each
  loaded word summed as a wrapping int32 and one value per output written (an int32 per
  intermediate element, 16 bits per element of y), copy 0's outputs checked against the sums
  PyTorch computes before and after timing; (c) one streaming read of exactly the call's FP8 bytes
  (``timing.small_read``, each copy its own buffer), with the read ceiling measured in the same
  run; (d) the shipped pair and (e) its no-math launches with the weights in L2: every slot routed to
  expert 0 of copy 0 in every step (one expert's rows, a few MB), the same instructions with the
  bytes from L2, so (d) is what the pair's instructions take where HBM does not hold them back
  ((d) checked against float64 on that routing, (e) bit for bit). ``floor_us`` is the FP8 bytes at
  that ceiling (as in ``tiles``) on every row. Rows: ``experiments/results/<GPU>/fp8_bound.csv``
  (``bash tools/gpu.sh fp8bound``).

The integer dequantization (``bits``): the e4m3 bits b placed in an FP32 word, sign << 31 |
(b & 0x7F) << 20, are q · 2^-120 exactly, subnormals included (as FP32 denormals; the kernels' FMAs
keep denormals). The 2^120 goes half into the activation (x · 2^64, once per element and step) and
half into the scale multiply (s · 2^56, once per scale group), so every product and partial sum is
2^-56 times the shipped kernel's and the result is the same bits wherever those stay normal FP32
numbers: |x| < 2^64, s < 2^72 (an e8m0 scale up to 2^71), and no product of magnitude below 2^-70.
It costs integer instructions (a byte permute or shift, a shift, a mask: about three per weight)
where the hardware path takes one and a half (``F2FP`` for two, ``HADD2.F32`` for one), so ``count``
is expected to show it behind; ``tiles`` times it all the same.
"""

from __future__ import annotations

import collections
import dataclasses
import os
import re
import subprocess
import tempfile
from functools import partial
from pathlib import Path

import harness
import torch
import triton
import triton.language as tl
from triton.language.extra.cuda import gdc_launch_dependents, gdc_wait

import warpdecode as wd
from bench import compiled
from bench import fp8 as bench_fp8
from bench.ladder import bytes_needed
from bench.poison import poisoned
from bench.timing import capture, small_read, time_replays
from warpdecode import _alloc, quant
from warpdecode import warp as wp
from warpdecode.configs import warp_config
from warpdecode.kernels.warp_fp8 import _down_fp8_chunk, _scales  # the loads are the shipped kernel's
from warpdecode.workload import make_inputs, make_layers

PRESETS = ["qwen3-30b-a3b", "olmoe-1b-7b", "mixtral-8x7b"]
TS = [1, 2, 4, 8]

#: Gate/up tiles timed by ``tiles`` (rows, columns, warps), with the default down tile: one to eight
#: rows per program on one to four warps (the default, one row on one warp, first). Each compiles
#: without spills on Triton 3.6 and 3.8 for sm_90a and sm_100a (``count``).
GATE_UP = [(1, 2048, 1), (2, 1024, 1), (2, 2048, 2), (4, 512, 1), (4, 1024, 1), (4, 1024, 2), (8, 512, 1),
           (8, 512, 2), (8, 1024, 4)]
#: Down tiles timed by ``tiles`` (rows, columns, warps), with the default gate/up tile; those narrower
#: than a warp's 512 columns put several rows on a warp. (8, 256, 1) is left out: it spills on Triton
#: 3.8 for sm_90a (``fp8_instructions.csv``).
DOWN = [(4, 512, 4), (8, 512, 4), (8, 128, 1), (16, 128, 2), (8, 256, 2), (16, 256, 4)]

#: x · 2^X_SHIFT and s · 2^(120 − X_SHIFT): where the integer dequantization's 2^120 goes.
X_SHIFT = 64
#: 0x87F00000 as an int32: the sign bit and the seven bits below the FP32 exponent's top four.
SIGN_EXP_MANT = tl.constexpr(0x87F00000 - (1 << 32))


def gate_up_cfg(t):
    return {"BLOCK_I": t[0], "BLOCK_H": t[1], "num_warps": t[2], "num_stages": 1}


def down_cfg(t):
    return {"BLOCK_H": t[0], "BLOCK_I": t[1], "num_warps": t[2], "num_stages": 1}


# ==================================================================================================
# bits: the shipped pair with e4m3 → FP32 by integer operations (q · 2^-120), the 2^120 folded into
# the activations and the scales; otherwise the kernels of kernels/warp_fp8.py line for line


@triton.jit
def _e4m3_bits(w):
    """q · 2^-120 exactly, as FP32, from a tile of e4m3: the byte moved to the top of a word, shifted
    right by four with its sign (bits 31…27 the sign, 26…20 the exponent and mantissa), the four
    copies of the sign below bit 31 masked off."""
    b = w.to(tl.uint8, bitcast=True).to(tl.int32)
    bits = ((b << 24) >> 4) & SIGN_EXP_MANT
    return bits.to(tl.float32, bitcast=True)


@triton.jit
def _group_sums_bits(w, v, ROWS: tl.constexpr, COLS: tl.constexpr, GROUP_K: tl.constexpr):
    """warp_fp8._group_sums with w as q · 2^-120 (``_e4m3_bits``); v already carries its 2^X_SHIFT."""
    p = _e4m3_bits(w) * v[None, :]
    return tl.sum(tl.reshape(p, [ROWS, COLS // GROUP_K, GROUP_K]), axis=2)


@triton.jit(do_not_specialize=["NUM_PAIRS"])
def bits_gate_up_kernel(x_ptr, w13_ptr, w13_scale_ptr, topk_ids_ptr, act_ptr, H, I, E, NUM_PAIRS, K, S_UP,
                        stride_xt, stride_we, stride_wr, stride_se, stride_sr, stride_sc, stride_at,
                        BLOCK_I: tl.constexpr, BLOCK_H: tl.constexpr, GROUP_N: tl.constexpr,
                        GROUP_K: tl.constexpr, E8M0: tl.constexpr, USE_PDL: tl.constexpr,
                        X_UP: tl.constexpr, S_UP_F: tl.constexpr):
    if USE_PDL:
        gdc_launch_dependents()
    pid = tl.program_id(0)
    pair, pid_i = pid % NUM_PAIRS, pid // NUM_PAIRS
    t = pair // K
    e = tl.load(topk_ids_ptr + pair).to(tl.int64)
    offs_i = pid_i * BLOCK_I + tl.arange(0, BLOCK_I)
    mask_i = offs_i < I
    offs_h = tl.arange(0, BLOCK_H)
    G: tl.constexpr = BLOCK_H // GROUP_K
    offs_g = tl.arange(0, G)
    groups = tl.cdiv(H, GROUP_K)
    gate_ptrs = w13_ptr + e * stride_we + offs_i[:, None].to(tl.int64) * stride_wr + offs_h[None, :]
    up_ptrs = gate_ptrs + I * stride_wr
    gs_ptrs = w13_scale_ptr + e * stride_se + (offs_i // GROUP_N)[:, None] * stride_sr + offs_g[None, :] * stride_sc
    us_ptrs = gs_ptrs + S_UP * stride_sr
    x_ptrs = x_ptr + t.to(tl.int64) * stride_xt + offs_h
    acc_g = tl.zeros([BLOCK_I, G], dtype=tl.float32)
    acc_u = tl.zeros([BLOCK_I, G], dtype=tl.float32)
    for h0 in range(0, H, BLOCK_H):
        mask_h = (h0 + offs_h) < H
        xv = tl.load(x_ptrs + h0, mask=mask_h, other=0.0).to(tl.float32) * X_UP
        mask = mask_i[:, None] & mask_h[None, :]
        g = tl.load(gate_ptrs + h0, mask=mask, other=0.0, eviction_policy="evict_first")
        u = tl.load(up_ptrs + h0, mask=mask, other=0.0, eviction_policy="evict_first")
        g0 = h0 // GROUP_K
        mask_s = mask_i[:, None] & (g0 + offs_g < groups)[None, :]
        acc_g += _group_sums_bits(g, xv, BLOCK_I, BLOCK_H, GROUP_K) * (
            _scales(gs_ptrs + g0 * stride_sc, mask_s, E8M0) * S_UP_F)
        acc_u += _group_sums_bits(u, xv, BLOCK_I, BLOCK_H, GROUP_K) * (
            _scales(us_ptrs + g0 * stride_sc, mask_s, E8M0) * S_UP_F)
    gate = tl.sum(acc_g, axis=1)
    up = tl.sum(acc_u, axis=1)
    a = gate * tl.sigmoid(gate) * up
    tl.store(act_ptr + pair.to(tl.int64) * stride_at + offs_i, a.to(act_ptr.dtype.element_ty), mask=mask_i)


@triton.jit
def _bits_step(act_ptr, w2_scale_ptr, topk_ids_ptr, topk_weights_ptr, H, I, stride_at, stride_se, stride_sr,
               stride_sc, t, pid_h, i0, wv, acc, K: tl.constexpr, BLOCK_H: tl.constexpr, BLOCK_I: tl.constexpr,
               GROUP_N: tl.constexpr, GROUP_K: tl.constexpr, E8M0: tl.constexpr, X_UP: tl.constexpr,
               S_UP_F: tl.constexpr):
    G: tl.constexpr = BLOCK_I // GROUP_K
    offs_h = pid_h * BLOCK_H + tl.arange(0, BLOCK_H)
    offs_i = i0 + tl.arange(0, BLOCK_I)
    offs_g = i0 // GROUP_K + tl.arange(0, G)
    mask_s = (offs_h < H)[:, None] & (offs_g < tl.cdiv(I, GROUP_K))[None, :]
    s_offs = (offs_h // GROUP_N)[:, None] * stride_sr + offs_g[None, :] * stride_sc
    for j in tl.static_range(K):
        pair = t.to(tl.int64) * K + j
        e = tl.load(topk_ids_ptr + pair).to(tl.int64)
        rw = tl.load(topk_weights_ptr + pair)
        a = tl.load(act_ptr + pair * stride_at + offs_i, mask=offs_i < I, other=0.0).to(tl.float32) * rw * X_UP
        s = _scales(w2_scale_ptr + e * stride_se + s_offs, mask_s, E8M0) * S_UP_F
        acc += _group_sums_bits(wv[j], a, BLOCK_H, BLOCK_I, GROUP_K) * s
    return acc


@triton.jit(do_not_specialize=["T"])
def bits_down_kernel(act_ptr, w2_ptr, w2_scale_ptr, topk_ids_ptr, topk_weights_ptr, y_ptr, H, I, E, T,
                     stride_at, stride_we, stride_wr, stride_se, stride_sr, stride_sc, stride_yt,
                     K: tl.constexpr, K_PAD: tl.constexpr, BLOCK_H: tl.constexpr, BLOCK_I: tl.constexpr,
                     GROUP_N: tl.constexpr, GROUP_K: tl.constexpr, E8M0: tl.constexpr, USE_PDL: tl.constexpr,
                     X_UP: tl.constexpr, S_UP_F: tl.constexpr):
    pid = tl.program_id(0)
    t = pid % T
    pid_h = pid // T
    wv = _down_fp8_chunk(w2_ptr, topk_ids_ptr, H, I, E, stride_we, stride_wr, t, pid_h, 0, K, BLOCK_H,
                         BLOCK_I)
    if USE_PDL:
        gdc_wait()
    acc = _bits_step(act_ptr, w2_scale_ptr, topk_ids_ptr, topk_weights_ptr, H, I, stride_at, stride_se, stride_sr,
                     stride_sc, t, pid_h, 0, wv, tl.zeros([BLOCK_H, BLOCK_I // GROUP_K], dtype=tl.float32),
                     K, BLOCK_H, BLOCK_I, GROUP_N, GROUP_K, E8M0, X_UP, S_UP_F)
    for i0 in range(BLOCK_I, I, BLOCK_I):
        wv = _down_fp8_chunk(w2_ptr, topk_ids_ptr, H, I, E, stride_we, stride_wr, t, pid_h, i0, K,
                             BLOCK_H, BLOCK_I)
        acc = _bits_step(act_ptr, w2_scale_ptr, topk_ids_ptr, topk_weights_ptr, H, I, stride_at, stride_se,
                         stride_sr, stride_sc, t, pid_h, i0, wv, acc, K, BLOCK_H, BLOCK_I, GROUP_N, GROUP_K, E8M0,
                         X_UP, S_UP_F)
    offs_h = pid_h * BLOCK_H + tl.arange(0, BLOCK_H)
    y = tl.sum(acc, axis=1)
    tl.store(y_ptr + t.to(tl.int64) * stride_yt + offs_h, y.to(y_ptr.dtype.element_ty), mask=offs_h < H)


BITS_META = {"X_UP": 2.0 ** X_SHIFT, "S_UP_F": 2.0 ** (120 - X_SHIFT)}


def moe_bits(x, w13, w2, topk_weights, topk_ids, *, config=None, act_dtype=torch.float32):
    """The FP8 pair (``warp.warp_gate_up_fp8`` / ``warp_down_fp8``) with the bits kernels."""
    T, H = x.shape
    E, two_i, _ = w13.shape
    I = two_i // 2  # noqa: E741
    K = topk_ids.shape[1]
    cfg = config or warp_config(H, I, E, K, T, weights=w13.FORMAT)
    gu, dn = cfg["gate_up"], cfg["down"]
    act = _alloc.empty(T * K, I, dtype=act_dtype, device=x.device)
    q, s = w13.weight, w13.scale
    bits_gate_up_kernel[(T * K * triton.cdiv(I, gu["BLOCK_I"]),)](
        x, q, s, topk_ids, act, H, I, E, T * K, K, w13.up_scale_row, x.stride(0), q.stride(0), q.stride(1),
        s.stride(0), s.stride(1), s.stride(2), act.stride(0),
        BLOCK_I=gu["BLOCK_I"], BLOCK_H=gu["BLOCK_H"], **wp._fp8_meta(w13, gu["BLOCK_H"], "gate_up BLOCK_H"),
        USE_PDL=wp.USE_PDL, **BITS_META, num_warps=gu["num_warps"], num_stages=gu["num_stages"])
    y = _alloc.empty(T, H, dtype=x.dtype, device=x.device)
    q, s = w2.weight, w2.scale
    bits_down_kernel[(T * triton.cdiv(H, dn["BLOCK_H"]),)](
        act, q, s, topk_ids, topk_weights, y, H, I, E, T, act.stride(0), q.stride(0), q.stride(1),
        s.stride(0), s.stride(1), s.stride(2), y.stride(0),
        K=K, K_PAD=triton.next_power_of_2(K), BLOCK_H=dn["BLOCK_H"], BLOCK_I=dn["BLOCK_I"],
        **wp._fp8_meta(w2, dn["BLOCK_I"], "down BLOCK_I"),
        USE_PDL=wp.USE_PDL, **BITS_META, num_warps=dn["num_warps"], num_stages=dn["num_stages"],
        **({"launch_pdl": True} if wp.USE_PDL else {}))
    return y


@triton.jit
def _bits_probe_kernel(w_ptr, out_ptr, N, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, _e4m3_bits(tl.load(w_ptr + offs, mask=offs < N)), mask=offs < N)


def check_bits_patterns():
    """Every e4m3 bit pattern but the two NaNs (0x7F, 0xFF): _e4m3_bits · 2^120 is the e4m3 value."""
    codes = torch.tensor([c for c in range(256) if c & 0x7F != 0x7F], dtype=torch.uint8)
    w = codes.view(quant.FP8)
    out = torch.empty(len(codes), dtype=torch.float32)
    _bits_probe_kernel[(1,)](w, out, len(codes), BLOCK=256)
    want = w.to(torch.float64)
    got = out.to(torch.float64) * 2.0**120
    bad = (got != want) | (torch.signbit(got) != torch.signbit(want))
    assert not bool(bad.any()), list(zip(codes[bad].tolist(), got[bad].tolist(), want[bad].tolist(), strict=True))
    print(f"{len(codes)} e4m3 patterns: bits · 2^120 equal the e4m3 values, signed zeros included")


def check_tiles():
    """In the interpreter: the e4m3 patterns; then on two odd shapes (both formats on one) the bits pair
    bit for bit against the shipped pair at the same tiles, at the interpreter's default tiles and at a
    gate/up and a down tile of several rows, each against float64 on the dequantized weights, outputs
    poisoned."""
    check_bits_patterns()
    for shape, T, formats in [(wd.MoEShape("c1", H=272, I=136, E=5, K=2), 2, ["block128"]),
                              (wd.MoEShape("c2", H=160, I=96, E=7, K=3), 2, quant.FORMATS)]:
        w13, w2 = shape.weights(dtype=torch.bfloat16, seed=1)
        gen = torch.Generator().manual_seed(T)
        x = torch.randn(T, shape.H, generator=gen).to(torch.bfloat16)
        tw, ids = wd.route(torch.randn(T, shape.E, generator=gen), shape.K)
        ids = ids.to(torch.int32)
        for fmt in formats:
            q13, q2 = quant.quantize_experts(w13, w2, fmt)
            ref = wd.reference_moe(x, q13, q2, tw, ids)
            floor = wd.rounding_floor(ref, torch.bfloat16)
            cfg = warp_config(shape.H, shape.I, shape.E, shape.K, T, weights=fmt)
            runs = [("bits", cfg)]
            if shape.name == "c2" and fmt == "block128":  # several rows per program, on one and two warps
                runs += [("tiles", {"gate_up": gate_up_cfg((4, 128, 1)), "down": down_cfg((8, 128, 2))})]
            for kind, c in runs:
                with poisoned():
                    shipped = wp.moe_warp(x, q13, q2, tw, ids, config=c)
                    bits = moe_bits(x, q13, q2, tw, ids, config=c)
                assert torch.equal(shipped.view(torch.int16), bits.view(torch.int16)), (shape.name, fmt, c)
                err = wd.rel_error(shipped, ref) / floor
                assert err < 4, (shape.name, fmt, c, err)
                print(f"{shape.name} T={T} {fmt} {kind}: the bits pair has the shipped pair's bits; error "
                      f"{err:.2f} × the floor")


# ==================================================================================================
# count: the compiled kernels, per weight byte


OPS = {  # what counts, by SASS mnemonic (sm_90a and sm_100a spell these alike)
    "fma": r"^FFMA2?\b", "cvt_e4m3x2": r"^F2FP\.F16\.E4M3", "cvt_f16_f32": r"^HADD2\.F32\b",
    "int_ops": r"^(LOP3|PRMT|SHF|IMAD\.U32|IMAD\.SHL)", "relayout": r"^(SEL|SHFL\.IDX|BAR\.SYNC|STS|LDS|STSM)",
    "warp_sums": r"^SHFL\.BFLY", "mma": r"^(UTC)?H[G]?MMA\b", "cvt_bf16": r"^F2FP\.BF16",
}
QWEN = wd.MoEShape("qwen3-30b-a3b", H=2048, I=768, E=128, K=8)


def _sass(c) -> list[str]:
    """The instructions of a compiled kernel in program order, label lines as ``LABEL name``."""
    nvdisasm = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "nvdisasm"
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(c.asm["cubin"])
        f.flush()
        text = subprocess.run([str(nvdisasm), "-c", f.name], capture_output=True, text=True, check=True).stdout
    out = []
    for line in text.splitlines():
        if lab := re.match(r"^\s*(\.L_x_\d+):", line):
            out.append("LABEL " + lab.group(1))
        elif m := re.match(r"^\s*/\*[0-9a-f]+\*/\s+(?:@!?U?P\w+\s+)?(.*?)\s*;", line):
            out.append(m.group(1))
    return out


def executed(ins: list[str], trips: int) -> collections.Counter:
    """Mnemonics one program executes: every instruction once, each loop body (from a label to a
    branch back to it) ``trips`` times in all."""
    labels, flat = {}, []
    for s in ins:
        if s.startswith("LABEL "):
            labels[s[6:]] = len(flat)
        else:
            flat.append(s.split()[0])
    weight = [1] * len(flat)
    k = 0
    for s in ins:
        if s.startswith("LABEL "):
            continue
        b = re.search(r"\bBRA\b.*?\((\.L_x_\d+)\)", s)
        if b and labels.get(b.group(1), len(flat)) <= k:
            for i in range(labels[b.group(1)], k + 1):
                weight[i] = trips
        k += 1
    out = collections.Counter()
    for op, w in zip(flat, weight, strict=True):
        out[op] += w
    return out


def _jobs(arch: int):
    """(variant, Job, tile, weight bytes per program, loop trips) at Qwen3-30B-A3B, T = 1."""

    def launches(cfg):
        return compiled.record_launches("warp", QWEN, 1, gpu_name="no tuned table", arch=arch,
                                        weights="block128", config=cfg)

    # the defaults a GPU of this architecture takes (configs' GPU branch, as recorded)
    gu, dn = (ln.job for ln in launches(None))
    default = {"gate_up": gate_up_cfg((gu.constexprs["BLOCK_I"], gu.constexprs["BLOCK_H"], gu.num_warps)),
               "down": down_cfg((dn.constexprs["BLOCK_H"], dn.constexprs["BLOCK_I"], dn.num_warps))}

    out = []
    for name, cfg in ([("default", default)]
                      + [("gate_up tile", {"gate_up": gate_up_cfg(g), "down": default["down"]}) for g in GATE_UP[1:]]
                      + [("down tile", {"gate_up": default["gate_up"], "down": down_cfg(d)}) for d in DOWN[1:]]):
        for ln in launches(cfg):
            if name == "gate_up tile" and "down" in ln.kernel or name == "down tile" and "gate" in ln.kernel:
                continue
            out.append((name, ln.job))
    for ln in launches(default):  # the bits kernels at the default tiles
        j = ln.job
        const = {k: v for k, v in j.constexprs.items() if k != "SLOT_LOOP"}  # the bits kernels unroll the slots
        bits = compiled.Job("fp8_warp", "bits_" + j.name.removeprefix("warp_").replace("_fp8", ""), j.args,
                            {**const, **BITS_META}, j.num_warps, j.num_stages, j.arch)
        out.append(("bits", bits))
    # the grouped schedule (kernels/warp_grouped.py) at T = 8, default tiles: FP8 weights widened to bf16 on the
    # tensor cores, beside the same launches on bf16 weights (twice the bytes a weight)
    for weights in ("block128", "mxfp8", None):
        for ln in compiled.record_launches("warp", QWEN, 8, gpu_name="no tuned table", arch=arch, weights=weights,
                                           schedule="grouped"):
            out.append((f"grouped {weights or 'bf16'}", ln.job))
    rows = []
    for name, j in out:
        c, grouped = j.constexprs, name.startswith("grouped")
        wb = 2 if name == "grouped bf16" else 1  # bytes a weight
        if "gate_up" in j.name:
            tile, nbytes = (c["BLOCK_I"], c["BLOCK_H"]), 2 * c["BLOCK_I"] * QWEN.H * wb
            trips = triton.cdiv(QWEN.H, c["BLOCK_H"])
        else:  # the pair: its K slots' rows, the first chunk peeled (the loop runs the rest); grouped: one expert's
            tile, nbytes = (c["BLOCK_H"], c["BLOCK_I"]), (1 if grouped else QWEN.K) * c["BLOCK_H"] * QWEN.I * wb
            trips = triton.cdiv(QWEN.I, c["BLOCK_I"]) - (0 if grouped else 1)
        rows.append((name, j, tile, nbytes, trips))
    return rows


def main_count():
    p = harness.parser(__doc__, ["count"])
    p.add_argument("--arch", type=int, nargs="+", default=[90, 100])
    args = p.parse_args()
    # the compiling child process imports this file by name (the bits kernels' module)
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(harness.HERE), os.environ.get("PYTHONPATH")]))
    rows = []
    for arch in args.arch:
        jobs = _jobs(arch)
        for (name, j, tile, nbytes, trips), c in zip(jobs, compiled.compile_many([r[1] for r in jobs]), strict=True):
            rep = compiled.ptxas_report(c)
            ops = executed(_sass(c), trips)
            per_byte = 32 * j.num_warps / nbytes  # a program's lane instructions over the bytes its lanes load
            r = {"triton": triton.__version__, "arch": compiled.arch_name(arch), "kernel": j.name, "variant": name,
                 "tile": f"{tile[0]}x{tile[1]}", "num_warps": j.num_warps, "registers": rep["registers"],
                 "spill_bytes": rep["spill_stores"] + rep["spill_loads"],
                 "instr_per_byte": round(sum(ops.values()) * per_byte, 3)}
            for k, pat in OPS.items():
                r[k + "_per_byte"] = round(sum(v for op, v in ops.items() if re.match(pat, op)) * per_byte, 3)
            rows.append(r)
            print(f"{r['arch']} {j.name:24s} {name:13s} {r['tile']:>8s} w{j.num_warps}: {rep['registers']:3d} regs, "
                  f"spills {r['spill_bytes']:4d} B, {r['instr_per_byte']:5.2f} instr/B/lane (FMA {r['fma_per_byte']}, "
                  f"cvt {r['cvt_e4m3x2_per_byte']}+{r['cvt_f16_f32_per_byte']}, int {r['int_ops_per_byte']}, "
                  f"relayout {r['relayout_per_byte']}, sums {r['warp_sums_per_byte']}, mma {r['mma_per_byte']}, "
                  f"bf16 pack {r['cvt_bf16_per_byte']})")
    harness.write_compiled("fp8_instructions", rows, {compiled.arch_name(a) for a in args.arch})
    return 0


# ==================================================================================================
# tiles: on the GPU


def fp8_floor_us(shape, q13, q2, inp, ceiling) -> float:
    distinct = torch.unique(inp.topk_ids).numel()
    nbytes = distinct * (q13.nbytes + q2.nbytes) / shape.E + 2 * inp.x.shape[0] * shape.H * 2 + inp.topk_ids.numel() * 8
    return nbytes / (ceiling * 1e12) * 1e6


def fp8_cases(presets, Ts, ceiling, fmt: str = "block128"):
    """(bf16 case, FP8 case) per preset and T, as ``harness.cases`` makes them but with as many layer
    copies as FP8 weights need for a T = 1 step to touch ≥ 3× the L2 (``bench.fp8.copies``; twice
    the bf16 copies' count), each copy quantized (``fmt``) from its bf16 draw; the same routing in
    both. The FP8 case's floor is the FP8 bytes, its reference float64 on the dequantized weights."""
    for name in presets:
        shape = wd.get_preset(name)
        n = bench_fp8.copies(shape, 3 * shape.I * shape.H * (1 + 4 / 16384))
        layers = make_layers(shape, n)
        fp8_layers = [quant.quantize_experts(w13, w2, fmt) for w13, w2 in layers]
        for T in Ts:
            inputs = make_inputs(shape, T, n, seed=1000 + T)
            i0 = inputs[0]
            bf16_floor = sum(bytes_needed(shape, i) for i in inputs) / n / (ceiling * 1e12) * 1e6
            fp8_floor = sum(fp8_floor_us(shape, *lay, i, ceiling)
                            for lay, i in zip(fp8_layers, inputs, strict=True)) / n
            yield (harness.Case(shape, T, 1000 + T, layers, inputs, bf16_floor, ceiling,
                                wd.reference_moe(i0.x, *layers[0], i0.topk_weights, i0.topk_ids)),
                   harness.Case(shape, T, 1000 + T, fp8_layers, inputs, fp8_floor, ceiling,
                                wd.reference_moe(i0.x, *fp8_layers[0], i0.topk_weights, i0.topk_ids)))
        layers = fp8_layers = None
        torch.cuda.empty_cache()


def _run(rows, fcase, reps, label, version, fn, cfg, *, c=None, detail=None, same_as=None):
    """Check and time ``fn`` on ``c`` (default ``fcase``, the FP8 layers), append its row against the
    FP8 bytes' floor; (µs, copy 0's output), or (None, None) where the launch fails."""
    r = harness.checked_us_or_none(c or fcase, fn, label, reps=reps)
    if r is None:
        return None, None
    us, err, y0 = r
    if same_as is not None:  # the same bits as the shipped pair unless a product left FP32's normal range
        detail = {**(detail or {}), "same_bits": torch.equal(y0, same_as)}
    rows.append(harness.row(fcase, us=us, err=err, experiment="fp8_warp", version=version, variant=label,
                            config=harness.literal(cfg), detail=harness.literal(detail)))
    same = f"  same bits: {detail['same_bits']}" if same_as is not None else ""
    print(f"{fcase.shape.name:14s} T={fcase.T} {label:42s} {us:9.2f} µs  {fcase.floor_us / us:6.1%} of the ceiling "
          f"(FP8 bytes)  error/floor {err:.2f}{same}", flush=True)
    return us, y0


def main_tiles():
    p = harness.parser(__doc__, ["tiles"], presets=PRESETS, Ts=TS)
    p.add_argument("--reps", type=int, default=50)
    args = p.parse_args()
    if args.check:
        check_tiles()
        return 0
    presets, Ts = args.presets or PRESETS, args.T or TS
    ceiling = harness.read_ceiling()
    print(f"read ceiling {ceiling:.3f} TB/s")
    rows, path = [], harness.results_dir() / "fp8_tiles.csv"
    for case, fcase in fp8_cases(presets, Ts, ceiling):
        s = case.shape
        default = warp_config(s.H, s.I, s.E, s.K, case.T, weights="block128")
        run = partial(_run, rows, fcase, args.reps)
        tuned16 = warp_config(s.H, s.I, s.E, s.K, case.T)
        run("bf16 pair (tuned)", "shipped", wp.moe_warp, tuned16, c=case,
            detail={"bf16_floor_us": round(case.floor_us, 3)})
        us_default, y_shipped = run("fp8 pair (default)", "shipped", wp.moe_warp, default)
        run("fp8 pair, bits dequant (default)", "bits", partial(moe_bits, config=default), default, same_as=y_shipped)
        best = {}
        for kind, tiles, cfg_of in (("gate_up", GATE_UP, gate_up_cfg), ("down", DOWN, down_cfg)):
            times = [(us_default, default[kind])] if us_default is not None else []
            for t in tiles:
                if cfg_of(t) != default[kind]:
                    cfg = {**default, kind: cfg_of(t)}
                    us, _ = run(f"fp8 pair, {kind} {t}", "tiles", partial(wp.moe_warp, config=cfg), cfg)
                    times += [(us, cfg_of(t))] if us is not None else []
            best[kind] = min(times, key=lambda ut: ut[0])[1] if times else None
        if best["gate_up"] and best["down"] and best != {k: default[k] for k in best}:
            run("fp8 pair, the fastest gate_up and down tiles", "tiles", partial(wp.moe_warp, config=best), best)
        harness.write("fp8_tiles", rows, path)
    print(f"rows: {path}")
    summary(rows)
    return 0


def summary(rows):
    """Per preset and T: the default FP8 pair, bits, the fastest tile and the bf16 pair, with the
    speed-up of the fastest FP8 row over the bf16 pair."""
    by = collections.defaultdict(dict)
    for r in rows:
        by[(r["preset"], r["T"])][r["variant"]] = r
    print("\npreset          T   bf16 µs  fp8 µs  bits µs  fastest FP8 µs (of the ceiling), which  bf16/fastest")
    for (p, T), v in by.items():
        bf = v.get("bf16 pair (tuned)", {}).get("us", float("nan"))
        d = v.get("fp8 pair (default)", {}).get("us", float("nan"))
        b = v.get("fp8 pair, bits dequant (default)", {}).get("us", float("nan"))
        tiles = [r for k, r in v.items() if k.startswith("fp8 pair")]
        best = min(tiles, key=lambda r: r["us"]) if tiles else None
        if best:
            what = best["variant"].removeprefix("fp8 pair, ")
            what += f" {best['config']}" if "fastest" in what else ""
            print(f"{p:14s} {T:2d} {bf:8.2f} {d:7.2f} {b:8.2f}  {best['us']:8.2f} ({best['frac_ceiling']:.0%}) "
                  f"{what}  {bf / best['us']:.2f}x")


# ==================================================================================================
# bound: the pair's launches with no math (on the GPU)
#
# The weights, x and the intermediate are read as int32 words (the e4m3 bytes four to a word, bf16
# two): the same bytes in the same 16-byte loads per lane, the tiles [rows, columns / 4] words.
# Every loaded word, scale (FP32 bits, or e8m0 as an integer) and routing weight (FP32 bits) is added
# into a wrapping int32 sum: one integer add per word where the shipped step spends 2.5 instructions
# per weight byte. Only the unrolled down form (K ≤ warp.STATIC_SLOTS_MAX, every preset's K).


@triton.jit
def _wsum(v, axis: tl.constexpr):
    """The int32 sum along ``axis``, wrapped (summed in int64: the interpreter's int32 sum widens, and a
    wide scalar fails to convert back)."""
    return tl.sum(v.to(tl.int64), axis=axis).to(tl.int32)


@triton.jit
def _scale_words(ptrs, mask, E8M0: tl.constexpr):
    """warp_fp8._scales' loads as integers: FP32 bits, or the e8m0 bits."""
    if E8M0:
        return tl.load(ptrs, mask=mask, other=0).to(tl.int32)
    else:
        return tl.load(ptrs, mask=mask, other=0.0).to(tl.int32, bitcast=True)


@triton.jit(do_not_specialize=["NUM_PAIRS"])
def nomath_gate_up_kernel(
    x_ptr,  # (T, H / 2) int32: bf16 x, two to a word
    w13_ptr,  # (E, 2I, H / 4) int32: the e4m3 weights, four to a word
    w13_scale_ptr,  # as warp_gate_up_fp8_kernel's
    topk_ids_ptr,  # (T, K) int32
    act_ptr,  # (T*K, I) int32: one sum per (pair, neuron)
    H, I, E, NUM_PAIRS, K, S_UP,
    stride_xt, stride_we, stride_wr, stride_se, stride_sr, stride_sc, stride_at,  # elements (words for x, w13)
    BLOCK_I: tl.constexpr, BLOCK_H: tl.constexpr, GROUP_N: tl.constexpr, GROUP_K: tl.constexpr,
    E8M0: tl.constexpr, USE_PDL: tl.constexpr,
):
    """warp_gate_up_fp8_kernel's grid, tiles, loads and store; its math replaced by sums of the words."""
    if USE_PDL:
        gdc_launch_dependents()
    pid = tl.program_id(0)
    pair, pid_i = pid % NUM_PAIRS, pid // NUM_PAIRS
    t = pair // K
    e = tl.load(topk_ids_ptr + pair).to(tl.int64)
    offs_i = pid_i * BLOCK_I + tl.arange(0, BLOCK_I)
    mask_i = offs_i < I
    W: tl.constexpr = BLOCK_H // 4  # weight words of a row per step
    offs_w = tl.arange(0, W)
    offs_x = tl.arange(0, BLOCK_H // 2)
    G: tl.constexpr = BLOCK_H // GROUP_K
    offs_g = tl.arange(0, G)
    groups = tl.cdiv(H, GROUP_K)
    gate_ptrs = w13_ptr + e * stride_we + offs_i[:, None].to(tl.int64) * stride_wr + offs_w[None, :]
    up_ptrs = gate_ptrs + I * stride_wr
    gs_ptrs = w13_scale_ptr + e * stride_se + (offs_i // GROUP_N)[:, None] * stride_sr + offs_g[None, :] * stride_sc
    us_ptrs = gs_ptrs + S_UP * stride_sr
    x_ptrs = x_ptr + t.to(tl.int64) * stride_xt + offs_x
    acc_w = tl.zeros([BLOCK_I, W], dtype=tl.int32)
    acc_s = tl.zeros([BLOCK_I, G], dtype=tl.int32)
    acc_x = tl.zeros([BLOCK_H // 2], dtype=tl.int32)
    for h0 in range(0, H, BLOCK_H):
        acc_x += tl.load(x_ptrs + h0 // 2, mask=(h0 // 2 + offs_x) < H // 2, other=0)
        mask = mask_i[:, None] & ((h0 // 4 + offs_w) < H // 4)[None, :]
        acc_w += tl.load(gate_ptrs + h0 // 4, mask=mask, other=0, eviction_policy="evict_first")
        acc_w += tl.load(up_ptrs + h0 // 4, mask=mask, other=0, eviction_policy="evict_first")
        g0 = h0 // GROUP_K
        mask_s = mask_i[:, None] & (g0 + offs_g < groups)[None, :]
        acc_s += _scale_words(gs_ptrs + g0 * stride_sc, mask_s, E8M0)
        acc_s += _scale_words(us_ptrs + g0 * stride_sc, mask_s, E8M0)
    r = _wsum(acc_w, 1) + _wsum(acc_s, 1) + _wsum(acc_x, 0)
    tl.store(act_ptr + pair.to(tl.int64) * stride_at + offs_i, r, mask=mask_i)


@triton.jit
def _nomath_chunk(w2_ptr, topk_ids_ptr, H, I, stride_we, stride_wr, t, pid_h, i0,
                  K: tl.constexpr, BLOCK_H: tl.constexpr, BLOCK_I: tl.constexpr):
    """warp_fp8._down_fp8_chunk on w2 as words: K [BLOCK_H, BLOCK_I / 4] int32 tiles."""
    offs_h = pid_h * BLOCK_H + tl.arange(0, BLOCK_H)
    offs_w = i0 // 4 + tl.arange(0, BLOCK_I // 4)
    mask = (offs_h < H)[:, None] & (offs_w < I // 4)[None, :]
    offs = offs_h[:, None] * stride_wr + offs_w[None, :]
    tiles = ()
    for j in tl.static_range(K):
        e = tl.load(topk_ids_ptr + t.to(tl.int64) * K + j).to(tl.int64)
        tiles = tiles + (tl.load(w2_ptr + e * stride_we + offs, mask=mask, other=0, eviction_policy="evict_first"),)
    return tiles


@triton.jit
def _nomath_step(act_ptr, w2_scale_ptr, topk_ids_ptr, topk_weights_ptr, H, I, stride_at, stride_se, stride_sr,
                 stride_sc, t, pid_h, i0, wv, acc_w, acc_s, acc_a, acc_r, K: tl.constexpr, BLOCK_H: tl.constexpr,
                 BLOCK_I: tl.constexpr, GROUP_N: tl.constexpr, GROUP_K: tl.constexpr, E8M0: tl.constexpr):
    """warp_fp8._down_fp8_step's loads (routing, intermediate, scales) per slot, summed with its tiles."""
    G: tl.constexpr = BLOCK_I // GROUP_K
    offs_h = pid_h * BLOCK_H + tl.arange(0, BLOCK_H)
    offs_i = i0 + tl.arange(0, BLOCK_I)
    offs_g = i0 // GROUP_K + tl.arange(0, G)
    mask_s = (offs_h < H)[:, None] & (offs_g < tl.cdiv(I, GROUP_K))[None, :]
    s_offs = (offs_h // GROUP_N)[:, None] * stride_sr + offs_g[None, :] * stride_sc
    for j in tl.static_range(K):
        pair = t.to(tl.int64) * K + j
        e = tl.load(topk_ids_ptr + pair).to(tl.int64)
        acc_r += tl.load(topk_weights_ptr + pair).to(tl.int32, bitcast=True)
        acc_a += tl.load(act_ptr + pair * stride_at + offs_i, mask=offs_i < I, other=0)
        acc_s += _scale_words(w2_scale_ptr + e * stride_se + s_offs, mask_s, E8M0)
        acc_w += wv[j]
    return acc_w, acc_s, acc_a, acc_r


@triton.jit(do_not_specialize=["T"])
def nomath_down_kernel(
    act_ptr,  # (T*K, I) int32, from nomath_gate_up_kernel
    w2_ptr,  # (E, H, I / 4) int32: the e4m3 weights, four to a word
    w2_scale_ptr,  # as warp_down_fp8_kernel's
    topk_ids_ptr,  # (T, K) int32
    topk_weights_ptr,  # (T, K) fp32
    y_ptr,  # (T, H) bf16 buffer: each output's sum folded to 16 bits (its bits)
    H, I, E, T,
    stride_at, stride_we, stride_wr, stride_se, stride_sr, stride_sc, stride_yt,  # elements (words for w2)
    K: tl.constexpr, K_PAD: tl.constexpr, BLOCK_H: tl.constexpr, BLOCK_I: tl.constexpr, GROUP_N: tl.constexpr,
    GROUP_K: tl.constexpr, E8M0: tl.constexpr, USE_PDL: tl.constexpr,
):
    """warp_down_fp8_kernel's unrolled form: grid, tiles, the first chunk before the wait, loads and
    store; its math replaced by sums of the words."""
    pid = tl.program_id(0)
    t = pid % T
    pid_h = pid // T
    wv = _nomath_chunk(w2_ptr, topk_ids_ptr, H, I, stride_we, stride_wr, t, pid_h, 0, K, BLOCK_H, BLOCK_I)
    if USE_PDL:
        gdc_wait()
    acc_w, acc_s, acc_a, acc_r = _nomath_step(
        act_ptr, w2_scale_ptr, topk_ids_ptr, topk_weights_ptr, H, I, stride_at, stride_se, stride_sr, stride_sc, t,
        pid_h, 0, wv, tl.zeros([BLOCK_H, BLOCK_I // 4], dtype=tl.int32),
        tl.zeros([BLOCK_H, BLOCK_I // GROUP_K], dtype=tl.int32), tl.zeros([BLOCK_I], dtype=tl.int32),
        tl.zeros([], dtype=tl.int32), K, BLOCK_H, BLOCK_I, GROUP_N, GROUP_K, E8M0)
    for i0 in range(BLOCK_I, I, BLOCK_I):
        wv = _nomath_chunk(w2_ptr, topk_ids_ptr, H, I, stride_we, stride_wr, t, pid_h, i0, K, BLOCK_H, BLOCK_I)
        acc_w, acc_s, acc_a, acc_r = _nomath_step(
            act_ptr, w2_scale_ptr, topk_ids_ptr, topk_weights_ptr, H, I, stride_at, stride_se, stride_sr, stride_sc,
            t, pid_h, i0, wv, acc_w, acc_s, acc_a, acc_r, K, BLOCK_H, BLOCK_I, GROUP_N, GROUP_K, E8M0)
    offs_h = pid_h * BLOCK_H + tl.arange(0, BLOCK_H)
    r = _wsum(acc_w, 1) + _wsum(acc_s, 1) + _wsum(acc_a, 0) + acc_r
    y = (r ^ (r >> 16)).to(tl.int16).to(tl.bfloat16, bitcast=True)
    tl.store(y_ptr + t.to(tl.int64) * stride_yt + offs_h, y, mask=offs_h < H)


def _words(t: torch.Tensor) -> torch.Tensor:
    """A tensor's bytes as int32 words along its last axis (a view)."""
    return t.view(torch.int32)


def moe_nomath(x, w13, w2, topk_weights, topk_ids, *, config=None):
    """The FP8 pair's two launches (``warp.warp_gate_up_fp8`` / ``warp_down_fp8``) with the no-math
    kernels: (the int32 intermediate, y: 16 bits of sum per output, in a bf16 tensor)."""
    T, H = x.shape
    E, two_i, _ = w13.shape
    I = two_i // 2  # noqa: E741
    K = topk_ids.shape[1]
    if wp.fp8_slot_loop(K):
        raise ValueError(f"K={K}: the no-math copy has the unrolled down form only")
    cfg = config or warp_config(H, I, E, K, T, weights=w13.FORMAT)
    gu, dn = cfg["gate_up"], cfg["down"]
    xw, q, s = _words(x), _words(w13.weight), w13.scale
    act = torch.empty(T * K, I, dtype=torch.int32, device=x.device)
    nomath_gate_up_kernel[(T * K * triton.cdiv(I, gu["BLOCK_I"]),)](
        xw, q, s, topk_ids, act, H, I, E, T * K, K, w13.up_scale_row, xw.stride(0), q.stride(0), q.stride(1),
        s.stride(0), s.stride(1), s.stride(2), act.stride(0),
        BLOCK_I=gu["BLOCK_I"], BLOCK_H=gu["BLOCK_H"], **wp._fp8_meta(w13, gu["BLOCK_H"], "gate_up BLOCK_H"),
        USE_PDL=wp.USE_PDL, num_warps=gu["num_warps"], num_stages=gu["num_stages"])
    y = torch.empty(T, H, dtype=x.dtype, device=x.device)
    q, s = _words(w2.weight), w2.scale
    nomath_down_kernel[(T * triton.cdiv(H, dn["BLOCK_H"]),)](
        act, q, s, topk_ids, topk_weights, y, H, I, E, T, act.stride(0), q.stride(0), q.stride(1),
        s.stride(0), s.stride(1), s.stride(2), y.stride(0),
        K=K, K_PAD=triton.next_power_of_2(K), BLOCK_H=dn["BLOCK_H"], BLOCK_I=dn["BLOCK_I"],
        **wp._fp8_meta(w2, dn["BLOCK_I"], "down BLOCK_I"),
        USE_PDL=wp.USE_PDL, num_warps=dn["num_warps"], num_stages=dn["num_stages"],
        **({"launch_pdl": True} if wp.USE_PDL else {}))
    return act, y


def _wrap(v: torch.Tensor) -> torch.Tensor:
    """int64 sums as the wrapping int32 sums the kernels keep."""
    return ((v + 2**31) % 2**32 - 2**31).to(torch.int32)


def _scale_sums(w, e) -> torch.Tensor:
    """(pairs, scale rows): each routed expert's scales summed along a row as the kernels add them."""
    sc = w.scale[e]
    sc = sc.view(torch.int32) if sc.dtype == torch.float32 else sc
    return sc.to(torch.int64).sum(-1)


def expected_nomath(x, w13, w2, topk_weights, topk_ids, cfg):
    """(act, y) the no-math pair must write, from PyTorch: the intermediate's sum per (pair, neuron)
    of its gate and up rows' words, their scales and x's words; y's per (token, output) of its w2
    rows' words and scales over the slots, the slots' intermediate rows, and each routing weight's
    bits once per chunk of I, folded to 16 bits."""
    T, H = x.shape
    E, two_i, _ = w13.shape
    I = two_i // 2  # noqa: E741
    K = topk_ids.shape[1]
    e = topk_ids.reshape(-1).long()
    ws = _words(w13.weight)[e].sum(-1, dtype=torch.int64)  # (T*K, 2I)
    ss = _scale_sums(w13, e)
    i = torch.arange(I, device=x.device)
    act = (ws[:, :I] + ws[:, I:] + ss[:, i // w13.GROUP_N] + ss[:, w13.up_scale_row + i // w13.GROUP_N]
           + _words(x).sum(-1, dtype=torch.int64).repeat_interleave(K)[:, None])
    act = _wrap(act)
    h = torch.arange(H, device=x.device)
    per = (_words(w2.weight)[e].sum(-1, dtype=torch.int64) + _scale_sums(w2, e)[:, h // w2.GROUP_N]
           + act.sum(-1, dtype=torch.int64)[:, None]
           + triton.cdiv(I, cfg["down"]["BLOCK_I"]) * topk_weights.reshape(-1).contiguous().view(torch.int32)
           .to(torch.int64)[:, None])
    r = _wrap(per.view(T, K, H).sum(1))
    return act, (r ^ (r >> 16)).to(torch.int16).view(x.dtype)


def _same(got, want) -> bool:
    """(act, y) pairs equal bit for bit (y's bits as int16: a bf16 tensor of sums holds NaN patterns)."""
    return all(torch.equal(g.view(torch.int16), w.view(torch.int16)) for g, w in zip(got, want, strict=True))


def check_nomath(x, w13, w2, tw, ids, cfg, label=""):
    """The no-math pair against ``expected_nomath``, bit for bit; returns the expected (act, y)."""
    want = expected_nomath(x, w13, w2, tw, ids, cfg)
    assert _same(moe_nomath(x, w13, w2, tw, ids, config=cfg), want), (label, cfg)
    return want


def _filled(step, fill):
    """``timing.capture``, each output then filled with ``fill`` and the graph replayed once (an
    element it never writes keeps the fill)."""
    g, outs = capture(step)
    for o in outs:
        for t in o:
            t.fill_(fill)
    g.replay()
    torch.cuda.synchronize()
    return g, outs


def check_bound_ptx():
    """Compiled for sm_90a (offline) at Qwen3-30B-A3B T = 1's default tiles, block128: each no-math kernel has
    the shipped kernel's evict_first weight loads (as many, 128 bits each), its PDL instructions,
    and no e4m3 conversion and no FMA, without spills."""
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(harness.HERE), os.environ.get("PYTHONPATH")]))
    jobs, labels = [], []
    for fmt in ["block128"]:  # the format the bound measures
        for ln in compiled.record_launches("warp", QWEN, 1, gpu_name="no tuned table", weights=fmt):
            j = ln.job
            name = "nomath_" + j.name.removeprefix("warp_").replace("_fp8", "")
            words = {k: torch.int32 for k in ("x_ptr", "w13_ptr", "w2_ptr", "act_ptr") if k in j.args}
            args = {**j.args, **words}
            const = {k: v for k, v in j.constexprs.items() if k != "SLOT_LOOP"}
            jobs += [j, compiled.Job("fp8_warp", name, args, const, j.num_warps, j.num_stages, j.arch)]
            labels.append((fmt, j.name))
    built = compiled.compile_many(jobs)
    for (fmt, kernel), shipped, nomath in zip(labels, built[0::2], built[1::2], strict=True):
        a, b = shipped.asm["ptx"], nomath.asm["ptx"]
        weights = [re.findall(r"ld\.global\S*evict_first\S*\.v4\.b32", p) for p in (a, b)]
        assert len(weights[0]) == len(weights[1]) > 0, (fmt, kernel, len(weights[0]), len(weights[1]))
        assert len(re.findall(r"\bld\.global\S*evict_first", b)) == len(weights[1]), (fmt, kernel)
        for op in ("griddepcontrol.wait", "griddepcontrol.launch_dependents"):
            assert (op in a) == (op in b), (fmt, kernel, op)
        assert "e4m3" in a and "e4m3" not in b and not re.search(r"\bfma\.", b), (fmt, kernel)
        rep = compiled.ptxas_report(nomath)
        assert rep["spill_stores"] == 0 and rep["stack_frame"] == 0, (fmt, kernel, rep)
        print(f"{fmt} {kernel}: no math compiled for sm_90a, {len(weights[1])} evict_first 128-bit weight loads "
              f"as shipped, no e4m3 conversion and no FMA, {rep['registers']} registers "
              f"({compiled.ptxas_report(shipped)['registers']} shipped), no spills")


def check_bound():
    """In the interpreter: the no-math pair writes exactly the sums of what it must load (outputs
    filled with a pattern first), both formats at the interpreter's tiles on one odd shape, tiles of
    several rows on another; the streaming read's partial sums add up to its buffer; then the PTX
    offline."""
    several = {"gate_up": gate_up_cfg((16, 256, 4)), "down": down_cfg((8, 256, 2))}
    for shape, T, formats, cfg in [(wd.MoEShape("c1", H=160, I=136, E=7, K=3), 1, quant.FORMATS, None),
                                   (wd.MoEShape("c2", H=272, I=264, E=5, K=2), 2, ["block128"], several)]:
        w13, w2 = shape.weights(dtype=torch.bfloat16, seed=1)
        gen = torch.Generator().manual_seed(T)
        x = torch.randn(T, shape.H, generator=gen).to(torch.bfloat16)
        tw, ids = wd.route(torch.randn(T, shape.E, generator=gen), shape.K)
        for fmt in formats:
            q13, q2 = quant.quantize_experts(w13, w2, fmt)
            c = cfg or warp_config(shape.H, shape.I, shape.E, shape.K, T, weights=fmt)
            check_nomath(x, q13, q2, tw, ids, c, f"{shape.name} {fmt}")
            print(f"{shape.name} T={T} {fmt} {c['gate_up']['BLOCK_I']}x{c['gate_up']['BLOCK_H']} / "
                  f"{c['down']['BLOCK_H']}x{c['down']['BLOCK_I']}: no math, every word the pair must load summed "
                  "into its outputs, bit for bit")
            # the bound's routing with the weights in L2: every slot to expert 0, the pair against float64
            hot = torch.zeros_like(ids)
            check_nomath(x, q13, q2, tw, hot, c, f"{shape.name} {fmt} expert 0")
            ref = wd.reference_moe(x, q13, q2, tw, hot)
            with poisoned():
                y = wp.moe_warp(x, q13, q2, tw, hot, config=c)
            err = wd.rel_error(y, ref) / wd.rounding_floor(ref, torch.bfloat16)
            assert err <= 4.0 and not y.isnan().any(), (shape.name, fmt, err)
            print(f"{shape.name} T={T} {fmt}, every slot routed to expert 0: no math bit for bit, the pair "
                  f"{err:.2f} × the floor")
    from bench.timing import _read_kernel

    src = torch.randn(5000).to(torch.bfloat16)
    out = torch.empty(3)
    _read_kernel[(3,)](src, out, src.numel(), BLOCK=256)
    assert abs(out.double().sum() - src.double().sum()) < 1e-3 * src.double().abs().sum()
    print("the streaming read's partial sums add up to its buffer")
    if wd.INTERPRET:
        check_bound_ptx()


#: The presets with FP8 weights and the T each is measured at by default (Qwen3-30B-A3B: the bar's).
BOUND_PLAN = {"qwen3-30b-a3b": [1, 2, 4, 8], "olmoe-1b-7b": [1], "mixtral-8x7b": [1], "qwen3-235b-a22b": [1],
              "deepseek-v3": [1], "gpt-oss-20b": [1]}


def main_bound():
    p = harness.parser(__doc__, ["bound"], presets=list(BOUND_PLAN), Ts=TS)
    p.add_argument("--reps", type=int, default=50)
    args = p.parse_args()
    if args.check:
        check_bound()
        return 0
    ceiling = harness.read_ceiling()
    print(f"read ceiling {ceiling:.3f} TB/s", flush=True)
    rows, path = [], harness.results_dir() / "fp8_bound.csv"

    def add(fcase, version, variant, us, *, err=None, cfg=None, **detail):
        r = harness.row(fcase, us=us, err=err or 0.0, experiment="fp8_warp", version=version, variant=variant,
                        config=harness.literal(cfg), detail=harness.literal(detail))
        if err is None:
            r["error_over_floor"] = ""
        rows.append(r)
        print(f"{fcase.shape.name:16s} T={fcase.T} {variant:28s} {us:8.2f} µs  {fcase.floor_us / us:6.1%} of the "
              f"ceiling (FP8 bytes: {fcase.floor_us:.2f} µs)" + (f"  error/floor {err:.2f}" if err else ""), flush=True)

    for name in args.presets or list(BOUND_PLAN):
        for _, fcase in fp8_cases([name], args.T or BOUND_PLAN.get(name, [1]), ceiling):
            s, L = fcase.shape, len(fcase.layers)
            cfg = warp_config(s.H, s.I, s.E, s.K, fcase.T, weights="block128")
            steps = list(zip(fcase.layers, fcase.inputs, strict=True))
            # (a) the shipped pair, checked against float64 first
            us, err, _ = harness.checked_us(fcase, partial(wp.moe_warp, config=cfg), "fp8 pair (default)",
                                            reps=args.reps)
            add(fcase, "shipped", "fp8 pair (default)", us, err=err, cfg=cfg, copies=L)
            # (b) the same launches without math: copy 0 checked eagerly, then in the graph
            (q13, q2), i0 = steps[0]
            want = check_nomath(i0.x, q13, q2, i0.topk_weights, i0.topk_ids, cfg, s.name)
            g, outs = _filled(lambda steps=steps, cfg=cfg: [
                moe_nomath(i.x, w13, w2, i.topk_weights, i.topk_ids, config=cfg) for (w13, w2), i in steps], 0x5A5A)
            assert _same(outs[0], want), (s.name, fcase.T, "graph")
            us_b = time_replays(g, reps=args.reps).median_us / L
            assert _same(outs[0], want), (s.name, fcase.T, "replays")
            del g, outs
            add(fcase, "bound", "no math, same launches", us_b, cfg=cfg, copies=L, checked="sums, bit for bit")
            # (c) one streaming read of the call's FP8 bytes, each copy its own buffer
            nbytes = int(fcase.floor_us * 1e-6 * ceiling * 1e12)
            r = small_read(nbytes, copies=L, reps=args.reps)
            add(fcase, "bound", "read of the FP8 bytes", r["us"],
                cfg={k: r[k] for k in ("programs_per_sm", "BLOCK", "num_warps")}, bytes=r["bytes"], copies=L)
            # (d), (e): (a) and (b) with the weights in L2, every slot routed to expert 0 of copy 0 in
            # every step: the same instructions, the bytes from L2, so (d) is what the math takes
            hot = dataclasses.replace(i0, topk_ids=torch.zeros_like(i0.topk_ids))
            lay0 = (q13, q2)
            l2 = harness.Case(s, fcase.T, fcase.seed, [lay0] * L, [hot] * L, fcase.floor_us, ceiling,
                              wd.reference_moe(hot.x, *lay0, hot.topk_weights, hot.topk_ids))
            us_d, err_d, _ = harness.checked_us(l2, partial(wp.moe_warp, config=cfg), "fp8 pair, weights in L2",
                                                reps=args.reps)
            add(fcase, "bound", "fp8 pair, weights in L2", us_d, err=err_d, cfg=cfg, copies=L, routed="expert 0")
            want = check_nomath(hot.x, *lay0, hot.topk_weights, hot.topk_ids, cfg, s.name + " in L2")
            g, outs = _filled(lambda lay0=lay0, hot=hot, cfg=cfg, L=L: [
                moe_nomath(hot.x, *lay0, hot.topk_weights, hot.topk_ids, config=cfg) for _ in range(L)], 0x5A5A)
            us_e = time_replays(g, reps=args.reps).median_us / L
            assert _same(outs[0], want), (s.name, fcase.T, "in L2")
            del g, outs
            add(fcase, "bound", "no math, weights in L2", us_e, cfg=cfg, copies=L, routed="expert 0",
                checked="sums, bit for bit")
            harness.write("fp8_bound", rows, path)  # after every case: a run cut short keeps what it measured
    print(f"rows: {path}")
    bound_summary(rows)
    return 0


def bound_summary(rows):
    """Per preset and T: the shipped pair, its launches without math and the read, in µs and as a share
    of the ceiling, and the pair's time over its no-math launches'."""
    by = collections.defaultdict(dict)
    for r in rows:
        by[(r["preset"], r["T"])][r["variant"]] = r
    print("\npreset            T  FP8 bytes µs  pair µs (ceiling)  no math µs (ceiling)  read µs (ceiling)  "
          "pair/no math  in L2: pair µs  no math µs")
    for (p, T), v in by.items():
        a, b, c, d, e = (v.get(k) for k in ("fp8 pair (default)", "no math, same launches", "read of the FP8 bytes",
                                            "fp8 pair, weights in L2", "no math, weights in L2"))
        if a and b and c:
            print(f"{p:16s} {T:2d} {a['floor_us']:12.2f} {a['us']:8.2f} ({a['frac_ceiling']:4.0%}) "
                  f"{b['us']:11.2f} ({b['frac_ceiling']:4.0%}) {c['us']:10.2f} ({c['frac_ceiling']:4.0%}) "
                  f"{a['us'] / b['us']:12.2f}x" + (f" {d['us']:15.2f} {e['us']:11.2f}" if d and e else ""))


VERSIONS = {"count": (main_count, []), "tiles": (main_tiles, []), "bound": (main_bound, [])}

if __name__ == "__main__":
    harness.dispatch(__doc__, VERSIONS)
