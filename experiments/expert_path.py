"""The expert-centric path as vLLM runs it: align, GEMM tiles, launches.

    python experiments/expert_path.py --version align [--presets …] [--T 1 8 64 256]
    TRITON_INTERPRET=1 python experiments/expert_path.py --version align --check
    python experiments/expert_path.py --version tiles [--T 256]
    python experiments/expert_path.py --version pdl [--aligns histogram parallel]
    python experiments/expert_path.py --version half_m [--T 64 128 256]
    python experiments/expert_path.py --version swap_ab [--T 1 8 32 256]
    python experiments/expert_path.py --version bound [--presets olmoe-1b-7b dbrx …] [--T 32 64 128 256]
    TRITON_INTERPRET=1 python experiments/expert_path.py --version pdl --check   (half_m, swap_ab, bound likewise)

- align: one program with a histogram, one atomic pass, a register sort, many programs with no
  atomics. Promoted: many programs (OLMoE T = 256 7.76 → 3.31 µs).
- tiles: a wider GEMM tile search at T = 256. The tuned tiles are the fastest: nothing promoted.
- pdl: the four launches chained with PDL, bit-identical. Promoted (default on).
- half_m: half-height tiles on blocks whose upper half is padding, same bits. Promoted as a tuner
  candidate (Mixtral T = 256 −3 %).
- swap_ab: the GEMM tile transposed so the weights take wgmma's M axis. Promoted as a tuner
  candidate (picked at T = 1 on five presets; no change at T = 256).
- bound: the path against the same launches with no math (``expert_knobs.py``) and one read of its
  bytes, at T = 32 … 256: the bound the 85 % bar is reported against (``bash tools/gpu.sh xbound``).

Rows: experiments/results/<GPU>/{align_variants,expert_tiles,expert_pdl,half_m,swap_ab,expert_bound}.csv.
"""

from __future__ import annotations

import argparse
import copy
import itertools
import json
import os
import sys
import warnings
from collections import Counter
from functools import partial
from pathlib import Path

import expert_knobs as kn
import harness
import torch
import triton
import triton.language as tl
from triton.language.extra.cuda import gdc_launch_dependents

import warpdecode as wd
from bench.ladder import bytes_needed
from bench.poison import poisoned
from bench.sweep import meta
from bench.timing import capture, read_ceiling, small_read, time_replays
from warpdecode import _alloc, _runtime
from warpdecode import expert as ex
from warpdecode import tuner as tn
from warpdecode.configs import expert_config
from warpdecode.tuner import SWAP_FORMS as FORMS
from warpdecode.tuner import with_swap as swapped
from warpdecode.workload import make_inputs

# ==================================================================================================
# version align: Align (stage 2 of the expert-centric path) four ways, on the H200:
#
# the one-program kernel (``histogram``: one program, counts from ``tl.histogram`` over E bins, ranks from a pass
# of atomic adds), one where a single pass of atomic adds gives both, one with no
# atomics, whose ranks come from a sort of the pairs in registers, and the kernel
# the package runs (``parallel``: many programs, no atomics, no barrier; ``ex.align`` at
# 8 … 128 pairs per program). See docs/design.md.
#
#     python experiments/expert_path.py --version align [--presets ...] [--T 1 8 64 256]
#     TRITON_INTERPRET=1 python experiments/expert_path.py --version align --check   # the contract only, on the CPU
#
# Each timed graph aligns 32 different routings (fresh random top-K of the preset's K and E) at the
# block size the tuned expert path uses for that T; every kernel's output is checked against the
# contract first (the same runs per expert, padded, sentinels past the end). Rows: µs per align call
# to experiments/results/<GPU>/align_variants.csv. Exits 3 when the one-pass kernel is slower at the largest T.
# ==================================================================================================

@triton.jit(do_not_specialize=["NUM_PAIRS", "EM"])
def histogram_align_kernel(
    topk_ids_ptr,  # (T*K,) int32 in [0, E)
    sorted_token_ids_ptr,  # (EM,) int32 out
    expert_ids_ptr,  # (EM // BLOCK_M,) int32 out
    num_tokens_post_padded_ptr,  # (1,) int32 out
    cursor_ptr,  # (E,) int32 scratch: next free row of each expert
    NUM_PAIRS,  # T*K
    EM,
    E,
    BLOCK_M: tl.constexpr,
    BLOCK_P: tl.constexpr,  # ≥ NUM_PAIRS, power of two
    BLOCK_E: tl.constexpr,  # ≥ E, power of two
    CHUNK: tl.constexpr,  # blocks of expert_ids written per step
    FILL: tl.constexpr,  # sentinel rows written per step
    USE_PDL: tl.constexpr = False,  # let the gate/up GEMM launch now (it waits for this kernel)
):
    """One program: histogram → padded prefix sum → scatter. Like vLLM's small-batch kernel; the
    one-program align (warpdecode/kernels/expert.py at commit 612312a)."""
    if USE_PDL:
        gdc_launch_dependents()
    offs_p = tl.arange(0, BLOCK_P)
    mask_p = offs_p < NUM_PAIRS
    ids = tl.load(topk_ids_ptr + offs_p, mask=mask_p, other=0)
    counts = tl.histogram(ids, BLOCK_E, mask=mask_p)  # pairs per expert
    padded = tl.cdiv(counts, BLOCK_M) * BLOCK_M  # rows per expert after padding
    ends = tl.cumsum(padded, axis=0)
    starts = ends - padded
    total = tl.sum(padded, axis=0)
    tl.store(num_tokens_post_padded_ptr, total)

    offs_e = tl.arange(0, BLOCK_E)
    tl.store(cursor_ptr + offs_e, starts, mask=offs_e < E)
    for r0 in range(0, EM, FILL):  # every row starts as the "no pair" sentinel
        offs_r = r0 + tl.arange(0, FILL)
        tl.store(sorted_token_ids_ptr + offs_r, tl.full([FILL], 0, tl.int32) + NUM_PAIRS, mask=offs_r < EM)
    num_blocks = tl.cdiv(EM, BLOCK_M)
    for b0 in range(0, num_blocks, CHUNK):  # block b belongs to the expert whose rows cover b*BLOCK_M
        offs_b = b0 + tl.arange(0, CHUNK)
        row = offs_b * BLOCK_M
        before = (ends[None, :] <= row[:, None]) & (offs_e[None, :] < E)
        expert = tl.sum(before.to(tl.int32), axis=1)
        expert = tl.where(row < total, expert, -1)
        tl.store(expert_ids_ptr + offs_b, expert, mask=offs_b < num_blocks)
    tl.debug_barrier()  # cursors and sentinels are visible before the scatter

    # the row of each pair inside its expert's run. Relaxed: only atomicity matters here; the
    # default (acq_rel) would order every element's atomic behind a fence
    rank = tl.atomic_add(cursor_ptr + ids, 1, mask=mask_p, sem="relaxed")
    tl.store(sorted_token_ids_ptr + rank, offs_p, mask=mask_p)


def histogram_align(topk_ids, E: int, block_m: int, *, pdl: bool = False) -> ex.Alignment:
    """The one-program align: the kernel above."""
    al, EM, sizes = _outputs(topk_ids, E, block_m)
    cursor = _alloc.empty(E, dtype=torch.int32, device=topk_ids.device)
    histogram_align_kernel[(1,)](topk_ids, al.sorted_token_ids, al.expert_ids, al.num_tokens_post_padded, cursor,
                                 al.num_pairs, EM, E, **dict(sizes, BLOCK_E=max(16, triton.next_power_of_2(E + 1))),
                                 USE_PDL=pdl and _runtime.HAS_PDL)
    return al


@triton.jit(do_not_specialize=["NUM_PAIRS", "EM"])
def one_pass_align_kernel(
    topk_ids_ptr,  # (T*K,) int32 in [0, E)
    sorted_token_ids_ptr,  # (EM,) int32 out
    expert_ids_ptr,  # (EM // BLOCK_M,) int32 out
    num_tokens_post_padded_ptr,  # (1,) int32 out
    cursor_ptr,  # (E,) int32 scratch: pairs per expert, then the first row of each expert
    NUM_PAIRS,  # T*K
    EM,
    E,
    BLOCK_M: tl.constexpr,
    BLOCK_P: tl.constexpr,  # ≥ NUM_PAIRS, power of two
    BLOCK_E: tl.constexpr,  # ≥ E, power of two
    CHUNK: tl.constexpr,  # blocks of expert_ids written per step
    FILL: tl.constexpr,  # sentinel rows written per step
):
    """One program: count → padded prefix sum → scatter, the count and each pair's rank among its
    expert's pairs from one pass of atomic adds (in the order the adds land: the order inside an
    expert's run is free), where the shipped kernel counts with ``tl.histogram`` first."""
    offs_p = tl.arange(0, BLOCK_P)
    mask_p = offs_p < NUM_PAIRS
    offs_e = tl.arange(0, BLOCK_E)
    mask_e = offs_e < E
    ids = tl.load(topk_ids_ptr + offs_p, mask=mask_p, other=0)
    tl.store(cursor_ptr + offs_e, tl.zeros([BLOCK_E], dtype=tl.int32), mask=mask_e)
    for r0 in range(0, EM, FILL):  # every row starts as the "no pair" sentinel
        offs_r = r0 + tl.arange(0, FILL)
        tl.store(sorted_token_ids_ptr + offs_r, tl.full([FILL], 0, tl.int32) + NUM_PAIRS, mask=offs_r < EM)
    tl.debug_barrier()  # the zeroed counts and the sentinels are visible before the adds and the scatter
    # relaxed: only atomicity matters here; the default (acq_rel) would fence every element's add
    rank = tl.atomic_add(cursor_ptr + ids, 1, mask=mask_p, sem="relaxed")
    tl.debug_barrier()
    counts = tl.load(cursor_ptr + offs_e, mask=mask_e, other=0, cache_modifier=".cg")  # L2, where the adds went
    padded = tl.cdiv(counts, BLOCK_M) * BLOCK_M  # rows per expert after padding
    ends = tl.cumsum(padded, axis=0)
    starts = ends - padded
    total = tl.sum(padded, axis=0)
    tl.store(num_tokens_post_padded_ptr, total)
    num_blocks = tl.cdiv(EM, BLOCK_M)
    for b0 in range(0, num_blocks, CHUNK):  # block b belongs to the expert whose rows cover b*BLOCK_M
        offs_b = b0 + tl.arange(0, CHUNK)
        row = offs_b * BLOCK_M
        before = (ends[None, :] <= row[:, None]) & mask_e[None, :]
        expert = tl.sum(before.to(tl.int32), axis=1)
        expert = tl.where(row < total, expert, -1)
        tl.store(expert_ids_ptr + offs_b, expert, mask=offs_b < num_blocks)
    tl.debug_barrier()  # every thread has read the counts before they are overwritten
    tl.store(cursor_ptr + offs_e, starts, mask=mask_e)
    tl.debug_barrier()
    start = tl.load(cursor_ptr + ids, mask=mask_p, other=0, cache_modifier=".cg")
    tl.store(sorted_token_ids_ptr + start + rank, offs_p, mask=mask_p)


def _outputs(topk_ids, E: int, block_m: int):
    """(Alignment with empty index arrays, launch sizes) for an align kernel of this module."""
    num_pairs = topk_ids.numel()
    EM = ex.max_padded_rows(num_pairs, E, block_m)
    dev = topk_ids.device
    al = ex.Alignment(_alloc.empty(EM, dtype=torch.int32, device=dev),
                      _alloc.empty(EM // block_m, dtype=torch.int32, device=dev),
                      _alloc.empty(1, dtype=torch.int32, device=dev), block_m, num_pairs)
    sizes = dict(BLOCK_M=block_m, BLOCK_P=max(16, triton.next_power_of_2(num_pairs)),
                 BLOCK_E=max(16, triton.next_power_of_2(E)), CHUNK=64, FILL=min(1024, triton.next_power_of_2(EM)),
                 num_warps=4 if num_pairs <= 1024 else 8)
    return al, EM, sizes


def one_pass_align(topk_ids, E: int, block_m: int) -> ex.Alignment:
    """ex.align with the one-pass kernel."""
    al, EM, sizes = _outputs(topk_ids, E, block_m)
    cursor = _alloc.empty(E, dtype=torch.int32, device=topk_ids.device)
    one_pass_align_kernel[(1,)](topk_ids, al.sorted_token_ids, al.expert_ids, al.num_tokens_post_padded, cursor,
                                al.num_pairs, EM, E, **sizes)
    return al


@triton.jit(do_not_specialize=["NUM_PAIRS", "EM"])
def sorted_align_kernel(
    topk_ids_ptr,  # (T*K,) int32 in [0, E)
    sorted_token_ids_ptr,  # (EM,) int32 out
    expert_ids_ptr,  # (EM // BLOCK_M,) int32 out
    num_tokens_post_padded_ptr,  # (1,) int32 out
    NUM_PAIRS,  # T*K
    EM,
    E,
    BLOCK_M: tl.constexpr,
    BLOCK_P: tl.constexpr,  # ≥ NUM_PAIRS, power of two
    LOG_P: tl.constexpr,  # log2(BLOCK_P)
    BLOCK_E: tl.constexpr,  # ≥ E, power of two
    CHUNK: tl.constexpr,  # blocks of expert_ids written per step
    FILL: tl.constexpr,  # sentinel rows written per step
):
    """One program, no atomics: counts from ``tl.histogram``, then each pair's rank among its
    expert's pairs from a sort in registers (key = expert · BLOCK_P + pair, so a stable order):
    the j-th key of the sorted run of expert e has rank j − (pairs of experts before e). The shipped
    kernel gets the ranks from a pass of atomic adds on per-expert cursors in global memory."""
    offs_p = tl.arange(0, BLOCK_P)
    mask_p = offs_p < NUM_PAIRS
    ids = tl.load(topk_ids_ptr + offs_p, mask=mask_p, other=0)
    counts = tl.histogram(ids, BLOCK_E, mask=mask_p)  # pairs per expert
    padded = tl.cdiv(counts, BLOCK_M) * BLOCK_M
    ends = tl.cumsum(padded, axis=0)
    starts = ends - padded
    total = tl.sum(padded, axis=0)
    before = tl.cumsum(counts, axis=0) - counts  # pairs of the experts before e
    tl.store(num_tokens_post_padded_ptr, total)
    offs_e = tl.arange(0, BLOCK_E)
    for r0 in range(0, EM, FILL):  # every row starts as the "no pair" sentinel
        offs_r = r0 + tl.arange(0, FILL)
        tl.store(sorted_token_ids_ptr + offs_r, tl.full([FILL], 0, tl.int32) + NUM_PAIRS, mask=offs_r < EM)
    num_blocks = tl.cdiv(EM, BLOCK_M)
    for b0 in range(0, num_blocks, CHUNK):
        offs_b = b0 + tl.arange(0, CHUNK)
        row = offs_b * BLOCK_M
        expert = tl.sum(((ends[None, :] <= row[:, None]) & (offs_e[None, :] < E)).to(tl.int32), axis=1)
        tl.store(expert_ids_ptr + offs_b, tl.where(row < total, expert, -1), mask=offs_b < num_blocks)
    # padding lanes (p ≥ NUM_PAIRS) get expert BLOCK_E: they sort after every pair
    keys = tl.sort(tl.where(mask_p, ids, BLOCK_E) * BLOCK_P + offs_p)
    e_s = keys >> LOG_P
    valid = e_s < BLOCK_E
    e_c = tl.minimum(e_s, BLOCK_E - 1)
    dest = tl.gather(starts, e_c, 0) + offs_p - tl.gather(before, e_c, 0)
    tl.debug_barrier()  # the sentinels are written before the pairs
    tl.store(sorted_token_ids_ptr + dest, keys & (BLOCK_P - 1), mask=valid)


def sorted_align(topk_ids, E: int, block_m: int) -> ex.Alignment:
    """ex.align with the sort-based kernel."""
    al, EM, sizes = _outputs(topk_ids, E, block_m)
    sorted_align_kernel[(1,)](topk_ids, al.sorted_token_ids, al.expert_ids, al.num_tokens_post_padded,
                              al.num_pairs, EM, E, LOG_P=sizes["BLOCK_P"].bit_length() - 1, **sizes)
    return al


def parallel_align(topk_ids, E: int, block_m: int, block_c: int = 128, *, pdl: bool = False) -> ex.Alignment:
    """The shipped kernel (many programs, no atomics: ``ex.align``) at ``block_c`` pairs per program.
    This design was measured as a copy of the kernel kept here, with one scan of the pairs
    where the shipped one scans in steps of 4096 (the same code up to 4096 pairs); the copy went
    once the design shipped."""
    return ex.align(topk_ids, E, block_m, pdl=pdl, block_c=block_c)


VARIANTS = {"histogram": histogram_align, "one atomic pass": one_pass_align, "sort": sorted_align,
            "parallel": parallel_align,  # one program per 128 pairs
            **{f"parallel {c}": partial(parallel_align, block_c=c) for c in (8, 16, 32, 64)}}


def check_align(al: ex.Alignment, topk_ids, E: int):
    """The contract: each expert's pairs in its run, padded to block_m with the sentinel, -1 past the end."""
    ids = topk_ids.flatten().tolist()
    n, bm = len(ids), al.block_m
    rows, blocks = al.sorted_token_ids.tolist(), al.expert_ids.tolist()
    start = 0
    for e in range(E):
        pairs = [p for p, i in enumerate(ids) if i == e]
        padded = -(-len(pairs) // bm) * bm
        assert Counter(rows[start:start + padded]) == Counter(pairs) + Counter({n: padded - len(pairs)}), e
        assert all(blocks[b] == e for b in range(start // bm, (start + padded) // bm)), e
        start += padded
    assert int(al.num_tokens_post_padded.item()) == start
    assert all(r == n for r in rows[start:]) and all(b == -1 for b in blocks[start // bm:])


def main_align():
    p = argparse.ArgumentParser()
    p.add_argument("--presets", nargs="+", default=list(wd.MODEL_PRESETS))
    p.add_argument("--T", type=int, nargs="+", default=[1, 8, 64, 256])
    p.add_argument("--check", action="store_true", help="the contract only (the CPU interpreter)")
    args = p.parse_args()
    if args.check or os.environ.get("TRITON_INTERPRET") == "1":
        g = torch.Generator().manual_seed(0)
        for T, K, E, bm in [(256, 8, 64, 64), (3, 2, 8, 16), (1, 8, 128, 16), (64, 4, 61, 16), (5, 3, 3, 16)]:
            ids = torch.rand(T, E, generator=g).topk(K, dim=1).indices.to(torch.int32)
            for kind, fn in VARIANTS.items():
                with poisoned():
                    check_align(fn(ids, E, bm), ids, E)
                print(f"{kind}: T={T} K={K} E={E} BLOCK_M={bm}: the contract holds")
        return
    out = harness.results_dir() / "align_variants.csv"
    g = torch.Generator(device="cuda").manual_seed(7)
    rows, slower = [], False
    for name in args.presets:
        s = wd.get_preset(name)
        for T in args.T:
            bm = expert_config(s.H, s.I, s.E, s.K, T)["BLOCK_M"]
            routings = [torch.rand(T, s.E, device="cuda", generator=g).topk(s.K, dim=1).indices.to(torch.int32)
                        for _ in range(32)]
            us = {}
            for kind, fn in VARIANTS.items():
                with poisoned():
                    check_align(fn(routings[0], s.E, bm), routings[0], s.E)
                graph, _ = capture(lambda fn=fn, E=s.E, bm=bm, rs=routings: [fn(r, E, bm) for r in rs])
                us[kind] = time_replays(graph, reps=50).median_us / len(routings)
                rows.append({"preset": name, "T": T, "pairs": T * s.K, "E": s.E, "block_m": bm, "kind": kind,
                             "us": round(us[kind], 3), **meta()})
            shipped, one_pass = us["histogram"], us["one atomic pass"]
            print(f"{name:16s} T={T:3d} pairs={T * s.K:5d} E={s.E:3d} BLOCK_M={bm:3d}: "
                  + ", ".join(f"{k} {v:6.2f} us" for k, v in us.items()) + f"  ({shipped / one_pass:.2f}x)",
                  flush=True)
            slower |= T == max(args.T) and one_pass > shipped
    harness.save(out, rows)
    sys.exit(3 if slower else 0)


# ==================================================================================================
# version tiles: The expert-centric path's two GEMMs at large T over a wider set of tiles than the tuner's.
#
#
#     python experiments/expert_path.py --version tiles [--presets mixtral-8x7b olmoe-1b-7b] [--T 256]
#
# The tuner (``warpdecode/tuner.py``, ``gemm_candidates``) searches the neighbourhood of vLLM's
# tuned H100/H200 tables: 64–256 columns × 64–256 deep, 4 or 8 warps, 3–5 stages. At T = 256 the
# Mixtral and OLMoE rows stop at 84 % and 83 % of the read ceiling (the bar is 85 %), the GEMMs
# themselves at about 85 % (``logs/tune_expert.log``). This script times each GEMM over every tile
# of 64–256 columns × 32–128 deep, 4 or 8 warps, 3–6 stages that fits in shared memory, at the two
# largest row blocks the tuner tries, against the tuned config in the same process, then the
# whole path (``moe_expert``) with the best pair against the tuned one.
#
# Rows: µs per layer call of each GEMM to experiments/results/<GPU>/expert_tiles.csv.
# ==================================================================================================

SMEM = 227 * 1024  # Hopper's shared memory per program


def wide_candidates(block_m: int, operands: int):
    """Tiles whose pipelined operands fit: ``operands`` weight tiles (gate and up: 2) per stage."""
    out = []
    for n, k, w, s in itertools.product([64, 128, 256], [32, 64, 128], [4, 8], [3, 4, 5, 6]):
        if s * (block_m * k + operands * k * n) * 2 > SMEM or (w == 8 and block_m * n < 64 * 128):
            continue
        out.append({"BLOCK_N": n, "BLOCK_K": k, "GROUP_M": 1, "num_warps": w, "num_stages": s})
    return out


def main_tiles():
    p = argparse.ArgumentParser()
    p.add_argument("--presets", nargs="+", default=["mixtral-8x7b", "olmoe-1b-7b"])
    p.add_argument("--T", type=int, nargs="+", default=[256])
    p.add_argument("--reps", type=int, default=30)
    args = p.parse_args()
    ceiling = read_ceiling()
    rows = []
    for name in args.presets:
        shape = wd.get_preset(name)
        for T in args.T:
            bms = tn.block_m_candidates(T, shape)[-2:]
            jobs = [(kind, 2, (bm, c)) for bm in bms for kind, ops in (("gate_up", 2), ("down", 1))
                    for c in wide_candidates(bm, ops)]
            ok = tn.precompile(jobs)
            good = {tn._key(*j) for j, r in zip(jobs, ok, strict=True) if r is True}
            print(f"{name} T={T}: {len(good)} of {len(jobs)} candidates compile without spills", flush=True)

            L, w13s, w2s = tn._layer_copies(shape)
            inputs = make_inputs(shape, T, L, seed=1000 + T)  # the benchmark's routings
            nbytes = sum(bytes_needed(shape, i) for i in inputs) / L
            tws = [i.topk_weights for i in inputs]
            xs = [i.x for i in inputs]
            nones = [None] * L  # no activation scales: bf16 GEMMs
            tuned = expert_config(shape.H, shape.I, shape.E, shape.K, T)
            best = {}
            for bm in sorted(set(bms) | {tuned["BLOCK_M"]}):
                als = [ex.align(i.topk_ids, shape.E, bm) for i in inputs]
                hs = None
                for kind in ("gate_up", "down"):
                    cands = [c for c in wide_candidates(bm, 2 if kind == "gate_up" else 1)
                             if tn._key(kind, 2, (bm, c)) in good]
                    if bm == tuned["BLOCK_M"]:
                        cands = [tuned[kind]] + [c for c in cands if c != tuned[kind]]
                    if hs is None and kind == "down":
                        c_gu = tuned["gate_up"] if bm == tuned["BLOCK_M"] else best[(bm, "gate_up")][1]
                        hs = [ex.gate_up(x, None, w13, al, c_gu, gather_k=shape.K)
                              for x, w13, al in zip(xs, w13s, als, strict=True)]
                    for c in cands:
                        if kind == "gate_up":
                            step = tn._over_layers(partial(ex.gate_up, cfg=c, gather_k=shape.K),
                                                   xs, nones, w13s, als)
                        else:
                            step = tn._over_layers(partial(ex.down, cfg=c, scatter=True),
                                                   hs, nones, w2s, als, tws)
                        t = tn._time(step, args.reps)
                        if t is None:
                            continue
                        us = t / L
                        is_tuned = bm == tuned["BLOCK_M"] and c == tuned[kind]
                        if (bm, kind) not in best or us < best[(bm, kind)][0]:
                            best[(bm, kind)] = (us, c)
                        rows.append({"preset": name, "T": T, "gemm": kind, "BLOCK_M": bm, **c,
                                     "tuned": is_tuned, "us": round(us, 3), "ceiling_TBps": round(ceiling, 4),
                                     **meta()})
                        if is_tuned:
                            print(f"{name} T={T} {kind} BLOCK_M={bm} tuned {c}: {us:.2f} us", flush=True)
                    print(f"{name} T={T} {kind} BLOCK_M={bm} best {best[(bm, kind)][1]}: {best[(bm, kind)][0]:.2f} us",
                          flush=True)
            # the whole path: the tuned config against the best pair found
            bm = min(bms, key=lambda b: best[(b, "gate_up")][0] + best[(b, "down")][0])
            found = {"BLOCK_M": bm, "gate_up": best[(bm, "gate_up")][1], "down": best[(bm, "down")][1]}
            pairs = list(zip(zip(w13s, w2s, strict=True), inputs, strict=True))
            for label, cfg in (("tuned", tuned), ("found", found), ("tuned again", tuned)):
                g, _ = capture(lambda cfg=cfg, pairs=pairs: [
                    ex.moe_expert(i.x, w13, w2, i.topk_weights, i.topk_ids, config=cfg) for (w13, w2), i in pairs])
                us = time_replays(g, reps=60).median_us / L
                del g
                frac = nbytes / (ceiling * 1e12) * 1e6 / us
                print(f"{name} T={T} whole path, {label} {cfg}: {us:.2f} us, {100 * frac:.1f} % of the ceiling",
                      flush=True)
                rows.append({"preset": name, "T": T, "gemm": f"path {label}", "BLOCK_M": cfg["BLOCK_M"],
                             "us": round(us, 3), "frac_ceiling": round(frac, 4), "ceiling_TBps": round(ceiling, 4),
                             **meta()})
            w13s = w2s = hs = None
            torch.cuda.empty_cache()
    harness.save(harness.results_dir() / "expert_tiles.csv", rows)


# ==================================================================================================
# version pdl: An experiment: the expert-centric path's four launches chained with programmatic dependent launch.
#
#
#     python experiments/expert_path.py --version pdl [--presets …] [--T 1 8 64 256]
#     TRITON_INTERPRET=1 python experiments/expert_path.py --version pdl --check   # the contract only, on the CPU
#
# ``moe_expert(..., pdl=True)`` launches the gate/up GEMM, the down GEMM and combine while their
# predecessor still runs; each waits for it in-kernel (``gdc_wait``) before it reads anything, so
# only the gaps between launches can close, none of the bytes (a GEMM cannot fetch its weights
# before align has said which expert a block belongs to). vLLM's ``fused_moe`` does not launch this
# way, so the shipped baseline does not either; this measures what it would buy, at the bench's
# routings (seed 1000 + T), each form timed twice in alternation in one process, the outputs of
# both checked against each other (bit for bit) and against the float64 reference first.
#
# ``--aligns histogram parallel`` also swaps the align kernel (the one-program kernel,
# or the package's many-program one, at 128 pairs a program; both through
# ``experiments/expert_path.py --version align``): every (align, PDL) form is timed twice in
# alternation, and every form's output must be the same to the bit.
#
# Rows: µs per layer call to experiments/results/<GPU>/expert_pdl.csv.
# ==================================================================================================

def check_pdl():
    """PDL changes no bits (in the interpreter it is off; on a GPU the benchmark below checks it)."""
    gen = torch.Generator().manual_seed(0)
    for T, H, I, E, K in [(1, 40, 48, 5, 2), (5, 24, 40, 7, 7), (3, 16, 24, 3, 1)]:
        shape = wd.MoEShape("check", H=H, I=I, E=E, K=K)
        w13, w2 = shape.weights(dtype=torch.float32, seed=1)
        x = torch.randn(T, H, generator=gen)
        tw, ids = wd.route(torch.randn(T, E, generator=gen), K)
        with poisoned():
            a = ex.moe_expert(x, w13, w2, tw, ids)
            b = ex.moe_expert(x, w13, w2, tw, ids, pdl=True)
        err = wd.rel_error(b, wd.reference_moe(x, w13, w2, tw, ids))
        assert torch.equal(a, b) and err < 1e-5, (T, H, I, E, K, err)
        print(f"T={T} H={H} I={I} E={E} K={K}: same bits, error {err:.1e}")


def main_pdl():
    p = argparse.ArgumentParser()
    p.add_argument("--presets", nargs="+", default=["qwen3-30b-a3b", "olmoe-1b-7b", "mixtral-8x7b"])
    p.add_argument("--T", type=int, nargs="+", default=[1, 8, 64, 256])
    p.add_argument("--aligns", nargs="+", default=["histogram"], choices=["histogram", "parallel"])
    p.add_argument("--check", action="store_true")
    args = p.parse_args()
    if args.check:
        return check_pdl()

    import sys
    sys.path.insert(0, str(Path(__file__).parent))

    shipped_align = ex.align
    aligns = {"histogram": histogram_align, "parallel": parallel_align}

    from harness import cases, checked_us, row

    rows = []
    for case in cases(args.presets, args.T):
        first = None
        for align, pdl in [(a, pdl) for _ in range(2) for a in args.aligns for pdl in (False, True)]:
            ex.align = aligns[align]
            try:
                us, err, y = checked_us(case, partial(ex.moe_expert, pdl=pdl), f"align={align} pdl={pdl}")
            finally:
                ex.align = shipped_align
            first = y if first is None else first
            if not torch.equal(y, first):
                raise AssertionError(f"{case.shape.name} T={case.T}: align={align} pdl={pdl} changed the output's bits")
            rows.append(row(case, pdl=pdl, align=align, us=us, err=err))
            print(f"{case.shape.name:14s} T={case.T:3d} align={align:9s} pdl={pdl!s:5s} {us:9.2f} us "
                  f"{100 * case.floor_us / us:5.1f}% err/floor {err:.2f}", flush=True)
    harness.save(harness.results_dir() / "expert_pdl.csv", rows)


# ==================================================================================================
# version half_m: An experiment: the expert GEMMs with HALF_M, against the shipped tiles.
#
#
#     python experiments/expert_path.py --version half_m [--presets mixtral-8x7b olmoe-1b-7b ...] [--T 64 128 256]
#     TRITON_INTERPRET=1 python experiments/expert_path.py --version half_m --check   # the contract only, on the CPU
#
# At large T the expert path stops being a pure weight stream: Mixtral's 8 experts move the same
# 2.8 GB at T = 16 (99 % of the read ceiling) and at T = 256 (83 %). What grows is tensor-core work
# on padding: at T = 256 an expert holds ~64 pairs, BLOCK_M = 128 (vLLM's pick and the tuner's), so
# half of the rows every tile multiplies are padding. ``HALF_M`` runs a block whose upper half is
# all padding as a BLOCK_M/2-row tile (a second, pipelined loop in the same kernel): an expert with
# ≤ 64 pairs does half the tensor-core work and still reads its weights once.
#
# Here: the full path (``moe_expert``, the bench's routings, seed 1000 + T) with the tuned table's
# config, against the same config with ``HALF_M`` on both GEMMs, each timed twice in alternation in
# one process; the outputs checked against the float64 reference and against each other (bit for
# bit). Also printed: the share of blocks that run half-height. Rows to experiments/results/<GPU>/half_m.csv.
# ==================================================================================================

def halved(cfg: dict) -> dict:
    out = copy.deepcopy(cfg)
    for gemm in ("gate_up", "down"):
        out[gemm]["HALF_M"] = True
    return out


def half_share(topk_ids: torch.Tensor, E: int, block_m: int) -> float:
    """Of the blocks the GEMMs run, the share whose upper half is padding."""
    counts = torch.bincount(topk_ids.flatten().long(), minlength=E)
    blocks = -(-counts // block_m)
    last = counts - (blocks - 1) * block_m  # pairs in each expert's last block
    half = ((blocks > 0) & (last <= block_m // 2)).sum().item()
    return half / max(1, blocks.sum().item())


def check_half_m():
    """HALF_M changes no bits, on blocks of both kinds (BLOCK_M = 32, so 16-row half tiles)."""
    gen = torch.Generator().manual_seed(0)
    tile = {"BLOCK_N": 32, "BLOCK_K": 32, "GROUP_M": 1, "num_warps": 4, "num_stages": 2}
    for T, H, I, E, K in [(40, 40, 48, 5, 2), (40, 24, 40, 3, 1), (30, 16, 24, 7, 7)]:
        shape = wd.MoEShape("check", H=H, I=I, E=E, K=K)
        w13, w2 = shape.weights(dtype=torch.float32, seed=1)
        x = torch.randn(T, H, generator=gen)
        tw, ids = wd.route(torch.randn(T, E, generator=gen), K)
        cfg = {"BLOCK_M": 32, "gate_up": dict(tile), "down": dict(tile)}
        with poisoned():
            a = ex.moe_expert(x, w13, w2, tw, ids, config=cfg)
            b = ex.moe_expert(x, w13, w2, tw, ids, config=halved(cfg))
        err = wd.rel_error(b, wd.reference_moe(x, w13, w2, tw, ids))
        # On a GPU each output's products and sums do not depend on the tile's height: the same bits.
        # The interpreter's dot is NumPy's matmul, whose blocking (and so its FP32 summation order)
        # can follow the operand's height: there the two agree to FP32 rounding, not bit for bit.
        same = torch.equal(a, b) if not wd.INTERPRET else wd.rel_error(a, b) < 1e-6
        assert same and err < 1e-5, (T, H, I, E, K, wd.rel_error(a, b), err)
        print(f"T={T} H={H} I={I} E={E} K={K}: {'same bits' if not wd.INTERPRET else 'same values'} as the full tile, "
              f"error {err:.1e}, {100 * half_share(ids, E, 32):.0f}% of blocks half-height")


def main_half_m():
    p = argparse.ArgumentParser()
    p.add_argument("--presets", nargs="+", default=["mixtral-8x7b", "olmoe-1b-7b", "qwen3-30b-a3b", "gpt-oss-20b",
                                                    "qwen3-235b-a22b", "deepseek-v3"])
    p.add_argument("--T", type=int, nargs="+", default=[64, 128, 256])
    p.add_argument("--check", action="store_true")
    args = p.parse_args()
    if args.check:
        return check_half_m()

    from harness import cases, checked_us, row

    rows = []
    for case in cases(args.presets, args.T):
        s, T = case.shape, case.T
        cfg = expert_config(s.H, s.I, s.E, s.K, T)
        if cfg["BLOCK_M"] < 32:
            print(f"{s.name:14s} T={T:3d} BLOCK_M={cfg['BLOCK_M']}: no half tile", flush=True)
            continue
        share = sum(half_share(i.topk_ids, s.E, cfg["BLOCK_M"]) for i in case.inputs) / len(case.inputs)
        got = {}
        for half in (False, True, False, True):
            c = halved(cfg) if half else cfg
            us, err, y = checked_us(case, partial(ex.moe_expert, config=c), f"HALF_M={half}")
            got.setdefault(half, y)
            if not torch.equal(got[half], got[False]):
                raise AssertionError(f"{s.name} T={T}: HALF_M changed the output's bits")
            rows.append(row(case, BLOCK_M=cfg["BLOCK_M"], half_m=half, half_blocks=round(share, 3), us=us, err=err))
            print(f"{s.name:14s} T={T:3d} BLOCK_M={cfg['BLOCK_M']:3d} half={half!s:5s} {us:9.2f} us "
                  f"{100 * case.floor_us / us:5.1f}%  err/floor {err:.2f}  half-height blocks {100 * share:.0f}%",
                  flush=True)
    harness.save(harness.results_dir() / "half_m.csv", rows)


# ==================================================================================================
# version swap_ab: An experiment: the expert GEMMs with SWAP_AB, against the tuned tiles.
#
#
#     python experiments/expert_path.py --version swap_ab [--presets …] [--T 1 8 32 256]
#     TRITON_INTERPRET=1 python experiments/expert_path.py --version swap_ab --check   # against float64, on the CPU
#
# At OLMoE T = 256 an expert holds ~32 pairs and the tuned tile is 64 rows: on Hopper's tensor cores
# (64 rows per warp group) the block's rows are the MMA's M axis, so half of every product is
# padding, and at T ≤ 8 (16-row tiles) the compiler falls back from wgmma altogether. ``SWAP_AB``
# (vLLM's name) computes the tile transposed: the weight rows take the M axis (64 or 128 of them)
# and the block's rows the N axis, which takes any multiple of 8. The weights are read the same way
# and once; what changes is the tensor-core work and the accumulator's registers.
#
# Here: the full path (``moe_expert``, the bench's routings, seed 1000 + T) with the tuned table's
# tiles, plain (SWAP_AB off) and with SWAP_AB on the gate/up GEMM, the down GEMM, or both, each form
# timed twice in alternation in one process, every output checked against float64 first. (``logs/swap_ab.log`` was run
# before the table held any SWAP_AB, and names the plain form "tuned".) Rows to experiments/results/<GPU>/swap_ab.csv.
# ==================================================================================================

def check_swap_ab():
    """SWAP_AB against float64 and against the plain tile, both GEMMs, at 16 and 32 rows (with and
    without HALF_M), bf16 and FP8 activations."""
    gen = torch.Generator().manual_seed(0)
    tile = {"BLOCK_N": 32, "BLOCK_K": 32, "GROUP_M": 1, "num_warps": 4, "num_stages": 2}
    for T, H, I, E, K, block_m, fmt in [(40, 40, 48, 5, 2, 32, "native"), (30, 24, 40, 7, 3, 16, "native"),
                                        (12, 300, 88, 3, 1, 32, "fp8")]:
        shape = wd.MoEShape("check", H=H, I=I, E=E, K=K)
        w13, w2 = shape.weights(dtype=torch.bfloat16, seed=1)
        x = torch.randn(T, H, generator=gen).bfloat16()
        tw, ids = wd.route(torch.randn(T, E, generator=gen), K)
        ref = wd.reference_moe(x, w13, w2, tw, ids)
        floor = wd.rounding_floor(ref, torch.bfloat16)
        for half in ([False, True] if block_m >= 32 else [False]):
            cfg = {"BLOCK_M": block_m, "gate_up": dict(tile, HALF_M=half), "down": dict(tile, HALF_M=half)}
            with poisoned():
                plain = ex.moe_expert(x, w13, w2, tw, ids, act_format=fmt, config=cfg)
                bar = 4 if fmt == "native" else 1.05 * wd.rel_error(plain, ref) / floor  # FP8: ~30 × the floor
                for form, gemms in FORMS.items():
                    y = ex.moe_expert(x, w13, w2, tw, ids, act_format=fmt, config=swapped(cfg, gemms))
                    err = wd.rel_error(y, ref) / floor
                    near = wd.rel_error(y, plain) / floor
                    assert not y.isnan().any() and err <= bar and near <= 1.5, (T, H, I, E, K, form, err, near)
                    print(f"T={T} H={H} I={I} E={E} K={K} BLOCK_M={block_m} HALF_M={half} {fmt} {form}: "
                          f"error {err:.2f} × the floor, {near:.2f} from the plain tile")


def main_swap_ab():
    p = argparse.ArgumentParser()
    p.add_argument("--presets", nargs="+", default=["olmoe-1b-7b", "mixtral-8x7b", "qwen3-30b-a3b"])
    p.add_argument("--T", type=int, nargs="+", default=[1, 8, 32, 256])
    p.add_argument("--check", action="store_true")
    args = p.parse_args()
    if args.check:
        return check_swap_ab()

    from harness import cases, checked_us_or_none, row

    rows = []
    for case in cases(args.presets, args.T):
        s = case.shape
        cfg = expert_config(s.H, s.I, s.E, s.K, case.T)
        for _ in range(2):
            for form, gemms in FORMS.items():
                res = checked_us_or_none(case, partial(ex.moe_expert, config=swapped(cfg, gemms)), form)
                if res is None:  # a swapped tile out of shared memory
                    continue
                us, err, _y = res
                rows.append(row(case, form=form, BLOCK_M=cfg["BLOCK_M"], us=us, err=err))
                print(f"{s.name:14s} T={case.T:3d} BLOCK_M={cfg['BLOCK_M']:3d} {form:13s} {us:9.2f} us "
                      f"{100 * case.floor_us / us:5.1f}%  err/floor {err:.2f}", flush=True)
    harness.save(harness.results_dir() / "swap_ab.csv", rows)


# ==================================================================================================
# version bound: What stops the expert path short of the read ceiling at large T: the same launches
# with no math, and one read of the bytes.
#
#     python experiments/expert_path.py --version bound [--presets olmoe-1b-7b dbrx ...] [--T 32 64 128 256]
#     TRITON_INTERPRET=1 python experiments/expert_path.py --version bound --check   # on the CPU, and the PTX offline
#
# The bar is 85 % of the read ceiling at T ≥ 32; at T = 256 OLMoE and DBRX stay under it with the
# tuned tiles as with the defaults, and a wider tile search found nothing faster (version tiles).
# So, per layer shape and T, for the default config (every table off, as experiments/defaults.py
# runs it) and the tuned one (the shipped table, else the measured tune of the shapes that are not
# presets, ``tuned_shapes_cache.json`` in this GPU's results), in one process:
#   (a) path          ``moe_expert`` with that config, checked against float64 first;
#   (b) no math       the same four launches (align, gate/up, down, combine, PDL as shipped) with
#                     each GEMM's grid, tiles, loads and stores kept and its math dropped
#                     (``expert_knobs.py``, MATH=False: a sum of every loaded element's bits); copy 0's
#                     GEMM outputs checked bit for bit against PyTorch first, so every load ran.
#                     The same cp.async pipeline (two K steps in flight at 3 stages), in fewer
#                     registers, and where the shipped GEMM runs wgmma in one buffer less of shared
#                     memory (its asynchronous MMA holds one), so an SM may hold more programs; so
#                     also "no math, shipped smem": those loops one stage deeper, the shipped
#                     kernels' shared memory, one K step more in flight (each row's detail:
#                     registers, spills, shared memory, programs per SM of its GEMMs on this GPU);
#   (c) read          one streaming read of exactly the bytes the path must move (every touched
#                     expert's weights once, the activations, the output, the routing: the floor),
#                     the fastest grid of ``timing.small_read``;
# and each GEMM alone with and without math (its floor: its weight rows of the touched experts).
# (b) is the bound of these launches; (c) the ideal of any. Rows: experiments/results/<GPU>/expert_bound.csv;
# the table printed last: per shape and T, each form's share of the read ceiling. ``bash tools/gpu.sh
# xbound`` gives it 3 minutes, compiling included; the rows are saved after every case.
# ==================================================================================================

def _shape(name: str) -> wd.MoEShape:
    """A preset, or a real layer that is not one (``experiments/defaults.py``), by name."""
    from defaults import SHAPES

    extra = {s.name: s for s in SHAPES}
    return extra[name] if name in extra else wd.get_preset(name)


def bound_configs(shape: wd.MoEShape, T: int, measured: dict) -> dict:
    """{"default": the defaults' config, "tuned": the tuned one} (tuned left out where no table has it)."""
    from warpdecode import configs

    with configs.tables(shipped=False, cache=False):
        out = {"default": expert_config(shape.H, shape.I, shape.E, shape.K, T)}
    tuned = configs.bucket(configs.merge_tables(configs.load_tuned(), measured), "expert",
                           shape.H, shape.I, shape.E, shape.K, T)
    if tuned:
        out["tuned"] = tuned
    return out


def check_nomath(x, w13, w2, tw, ids, cfg: dict, pdl: bool = False):
    """The no-math GEMMs store what PyTorch says they must (every element they load summed in), bit
    for bit; returns the intermediate."""
    al = ex.align(ids, w13.shape[0], cfg["BLOCK_M"], pdl=pdl)
    h = kn.gate_up(x, w13, al, cfg["gate_up"], ids.shape[1], pdl=pdl)
    rows, want = kn.expected_gate_up(x, w13, al, ids.shape[1])
    assert torch.equal(kn.int_view(h[rows]), kn.int_view(want)), ("gate/up", cfg)
    o = kn.down(h, w2, al, tw, cfg["down"], pdl=pdl)
    pairs, want = kn.expected_down(h, w2, al, tw)
    assert pairs.numel() == ids.numel() and torch.equal(kn.int_view(o[pairs]), kn.int_view(want)), ("down", cfg)
    return h


def _ptx_counts(ptx: str) -> dict:
    import re

    return {k: len(re.findall(p, ptx)) for k, p in (
        ("wgmma", r"\bwgmma\.mma_async"), ("mma", r"\bmma\.sync"), ("cp.async", r"\bcp\.async\.c[ag]\b"),
        ("ld.global", r"\bld\.global"), ("st.global", r"\bst\.global"))}


def check_bound_ptx():
    """Compiled for sm_90a (offline): each no-math GEMM has the shipped kernel's cp.async, global
    loads and stores, and no tensor-core instruction, without spills."""
    from bench import compiled

    here = str(Path(__file__).resolve().parent)  # the compiler's child process imports expert_knobs
    os.environ["PYTHONPATH"] = os.pathsep.join([here, *filter(None, [os.environ.get("PYTHONPATH")])])
    olmoe = wd.get_preset("olmoe-1b-7b")
    tile = {"BLOCK_K": 64, "GROUP_M": 1, "num_warps": 4, "num_stages": 3, "HALF_M": True}
    # OLMoE's tuned T = 256 tiles with HALF_M (each kernel holds a full- and a half-height loop), down transposed
    cases = [("olmoe-1b-7b T=256", {"BLOCK_M": 64, "gate_up": dict(tile, BLOCK_N=64),
                                    "down": dict(tile, BLOCK_N=128, SWAP_AB=True)})]
    jobs, labels = [], []
    for label, cfg in cases:
        for ln in compiled.record_launches("expert", olmoe, 256, gpu_name="NVIDIA H200", config=cfg):
            copy = {"grouped_gate_up_kernel": kn.gate_up_kernel, "grouped_down_kernel": kn.down_kernel}.get(ln.kernel)
            if copy is None:
                continue
            j = ln.job
            const = {k: v for k, v in j.constexprs.items() if k in copy.arg_names}
            const.update(NUM_STAGES=j.num_stages, MATH=False)
            args = {k: v for k, v in j.args.items() if k in copy.arg_names}
            jobs += [j, compiled.job(copy, args, const, num_warps=j.num_warps, num_stages=j.num_stages)]
            labels.append((label, ln.kernel, {k: const[k] for k in ("BLOCK_M", "BLOCK_N", "BLOCK_K", "HALF_M",
                                                                    "SWAP_AB")}))
    built = compiled.compile_many(jobs)
    for (label, kernel, tile), shipped, nomath in zip(labels, built[0::2], built[1::2], strict=True):
        a, b = _ptx_counts(shipped.asm["ptx"]), _ptx_counts(nomath.asm["ptx"])
        rep = compiled.ptxas_report(nomath)
        assert a["wgmma"] > 0 and b["wgmma"] == b["mma"] == 0, (label, kernel, a, b)
        # the tiles' loads are the cp.async; ld.global are the index and routing-weight loads, replicated
        # across threads by the epilogue's layout (the transposed accumulator's has more copies)
        assert all(a[k] == b[k] > 0 for k in ("cp.async", "st.global")) and b["ld.global"] <= a["ld.global"], (a, b)
        assert rep["spill_stores"] == 0, (label, kernel, rep)
        print(f"{label} {kernel} {tile}: no math compiled for sm_90a: {b['cp.async']} cp.async and "
              f"{b['st.global']} st.global as shipped, {b['ld.global']} ld.global ({a['ld.global']} shipped), "
              f"no wgmma (shipped {a['wgmma']}), "
              f"{rep['registers']} registers ({compiled.ptxas_report(shipped)['registers']} shipped), "
              f"{nomath.shared} B shared ({shipped.shared} shipped), {compiled.programs_per_sm(nomath)} programs "
              f"per SM ({compiled.programs_per_sm(shipped)} shipped), no spills")


def check_bound():
    """On the CPU: the copy with MATH is the shipped kernel (the same values); without, it stores what
    every load must give (every element summed in); the whole path against float64; then the PTX."""
    gen = torch.Generator().manual_seed(0)
    tile = {"BLOCK_N": 32, "BLOCK_K": 32, "GROUP_M": 1, "num_warps": 4, "num_stages": 2}
    for T, H, I, E, K, block_m, extra, dtype in [  # noqa: E741
            (40, 40, 48, 5, 2, 32, {"HALF_M": True}, torch.float32),  # blocks of both heights
            (30, 24, 40, 7, 3, 16, {"SWAP_AB": True}, torch.bfloat16),  # tiles transposed, bf16 bits
            (3, 72, 40, 3, 1, 16, {}, torch.bfloat16)]:  # K = 1, three K steps
        shape = wd.MoEShape("check", H=H, I=I, E=E, K=K)
        w13, w2 = shape.weights(dtype=dtype, seed=1)
        x = torch.randn(T, H, generator=gen).to(dtype)
        tw, ids = wd.route(torch.randn(T, E, generator=gen), K)
        cfg = {"BLOCK_M": block_m, "gate_up": dict(tile, **extra), "down": dict(tile, **extra)}
        ref = wd.reference_moe(x, w13, w2, tw, ids)
        with poisoned(), warnings.catch_warnings():
            warnings.filterwarnings("ignore", "invalid value", RuntimeWarning)  # combine adds no-math bits
            y = ex.moe_expert(x, w13, w2, tw, ids, config=cfg)
            same = torch.equal(kn.moe(x, w13, w2, tw, ids, config=cfg, math=True), y)
            check_nomath(x, w13, w2, tw, ids, cfg)
            check_nomath(x, w13, w2, tw, ids, deeper(cfg))
            bound = kn.moe(x, w13, w2, tw, ids, config=cfg)
        err = wd.rel_error(y, ref) / (wd.rounding_floor(ref, dtype) if dtype != torch.float32 else 1e-6)
        assert same and err <= 4 and bound.shape == y.shape, (T, H, I, E, K, same, err)
        print(f"T={T} H={H} I={I} E={E} K={K} BLOCK_M={block_m} {extra or 'plain'} {str(dtype)[6:]}: path "
              f"{err:.2f} × the {'bf16 floor' if dtype != torch.float32 else '1e-6 bar'} from float64, MATH copy "
              "the same values, no math (and one stage deeper): every load summed into its output")
    if wd.INTERPRET:
        check_bound_ptx()


GEMMS = ("gate_up", "down")


def deeper(cfg: dict, gemms=GEMMS) -> dict:
    """``cfg`` with the no-math loops of ``gemms`` one stage deeper (``expert_knobs``' LOOP_STAGES)."""
    return {**cfg, **{g: dict(cfg[g], LOOP_STAGES=cfg[g]["num_stages"] + 1) for g in gemms}}


def main_bound():
    p = argparse.ArgumentParser()
    p.add_argument("--presets", nargs="+", default=["olmoe-1b-7b", "dbrx", "qwen3-30b-a3b", "mixtral-8x7b"])
    p.add_argument("--T", type=int, nargs="+", default=[32, 64, 128, 256])
    p.add_argument("--reps", type=int, default=60)
    p.add_argument("--check", action="store_true")
    args = p.parse_args()
    if args.check:
        return check_bound()

    from harness import cases, checked_us

    measured_path = harness.results_dir() / "tuned_shapes_cache.json"
    measured = json.loads(measured_path.read_text()) if measured_path.exists() else {}
    shapes = [_shape(n) for n in args.presets]
    pdl = _runtime.USE_PDL

    def key(kind, math, cfg):  # what decides a GEMM's binary (K is not specialized on)
        return json.dumps([kind, math, cfg["BLOCK_M"], cfg[kind], pdl], sort_keys=True)

    jobs = {}  # every GEMM binary the run may launch, compiled in parallel first
    for s in shapes:
        for T in args.T:
            for cfg in bound_configs(s, T, measured).values():
                for kind, math, c in itertools.product(GEMMS, (None, False), (cfg, deeper(cfg))):
                    if math is None and c is not cfg:
                        continue
                    jobs[key(kind, math, c)] = (kind, math, s.K, c["BLOCK_M"], c[kind], pdl)
    facts = dict(zip(jobs, kn.precompile(list(jobs.values())), strict=True))
    bad = {k: v for k, v in facts.items() if not isinstance(v, dict)}
    print(f"{len(jobs)} GEMM binaries compiled, {len(bad)} failed {list(bad.items())[:3]}", flush=True)

    def binaries(cfg, math, kinds=GEMMS):
        """The compiled facts of a form's GEMMs on this GPU (registers, spills, shared memory,
        programs per SM), for the rows' detail."""
        out = {}
        for kind in kinds:
            f = facts.get(key(kind, math, cfg))
            out.update({f"{kind}_{k}": v for k, v in f.items()} if isinstance(f, dict) else {})
        return out

    def shipped_shared(cfg):
        """The no-math form of ``cfg`` in the shipped kernels' shared memory: one stage deeper where
        the shipped GEMM holds one buffer more (wgmma: its asynchronous MMA reads one while the
        loads fill the others); None where no GEMM does (mma.sync tiles: the same already)."""
        gemms = [g for g in GEMMS if (facts.get(key(g, None, cfg)) or {}).get("shared", 0)
                 > (facts.get(key(g, False, cfg)) or {}).get("shared", 0)]
        return deeper(cfg, gemms) if gemms else None

    ceiling = read_ceiling()
    print(f"read ceiling {ceiling:.3f} TB/s", flush=True)
    out = harness.results_dir() / "expert_bound.csv"
    rows, summary = [], {}

    def add(case, variant, us, *, cfg=None, err=None, floor_us=None, **detail):
        floor_us = case.floor_us if floor_us is None else floor_us
        rows.append({"preset": case.shape.name, "T": case.T, "seed": case.seed, "variant": variant,
                     "config": cfg or "", "us": round(us, 3), "floor_us": round(floor_us, 3),
                     "frac_ceiling": round(floor_us / us, 4), "ceiling_TBps": round(case.ceiling, 4),
                     "error_over_floor": "" if err is None else round(err, 3), **detail, **meta()})
        summary[(case.shape.name, case.T, variant)] = floor_us / us
        print(f"{case.shape.name:14s} T={case.T:3d} {variant:30s} {us:9.2f} us {100 * floor_us / us:5.1f}%"
              + (f"  err/floor {err:.2f}" if err is not None else ""), flush=True)

    def graph_us(step, L):
        g, _ = capture(step)
        us = time_replays(g, reps=args.reps).median_us / L
        del g
        return us

    for case in cases(shapes, args.T, ceiling=ceiling):
        s, T, L = case.shape, case.T, len(case.layers)
        steps = list(zip(case.layers, case.inputs, strict=True))
        weights = sum(torch.unique(i.topk_ids).numel() for i in case.inputs) / L * 3 * s.I * s.H * 2
        for label, cfg in bound_configs(s, T, measured).items():
            # (a) the whole path, checked against float64 first
            us, err, _ = checked_us(case, partial(ex.moe_expert, config=cfg), f"path {label}", reps=args.reps)
            add(case, f"path {label}", us, cfg=cfg, err=err, **binaries(cfg, None))
            # (b) the same launches, no math; copy 0's GEMM outputs checked first; then in the
            # shipped kernels' shared memory, where that differs
            (w13, w2), i0 = steps[0]
            for form, c in (("no math", cfg), ("no math, shipped smem", shipped_shared(cfg))):
                if c is None:
                    continue
                check_nomath(i0.x, w13, w2, i0.topk_weights, i0.topk_ids, c, pdl=pdl)
                add(case, f"{form} {label}", graph_us(lambda c=c, steps=steps: [
                    kn.moe(i.x, w13, w2, i.topk_weights, i.topk_ids, config=c, pdl=pdl) for (w13, w2), i in steps], L),
                    cfg=c, **binaries(c, False))
            # each GEMM alone, shipped and no math, over aligned copies (floor: its weight rows)
            als = [ex.align(i.topk_ids, s.E, cfg["BLOCK_M"]) for i in case.inputs]
            hs = [ex.gate_up(i.x, None, w13, al, cfg["gate_up"], gather_k=s.K)
                  for ((w13, _), i), al in zip(steps, als, strict=True)]
            for math, tag in ((None, ""), (False, " no math")):
                gu = [partial(ex.gate_up, i.x, None, w13, al, cfg["gate_up"], gather_k=s.K, pdl=pdl) if math is None
                      else partial(kn.gate_up, i.x, w13, al, cfg["gate_up"], s.K, pdl=pdl)
                      for ((w13, _), i), al in zip(steps, als, strict=True)]
                dn = [partial(ex.down, h, None, w2, al, i.topk_weights, cfg["down"], scatter=True, pdl=pdl)
                      if math is None else partial(kn.down, h, w2, al, i.topk_weights, cfg["down"], pdl=pdl)
                      for ((_, w2), i), al, h in zip(steps, als, hs, strict=True)]
                for gemm, kind, fns, share in (("gate/up", "gate_up", gu, 2 / 3), ("down", "down", dn, 1 / 3)):
                    add(case, f"{gemm}{tag} {label}", graph_us(lambda fns=fns: [f() for f in fns], L), cfg=cfg[kind],
                        floor_us=share * weights / (ceiling * 1e12) * 1e6, floor="weights",
                        **binaries(cfg, math, (kind,)))
            del als, hs
        # (c) one streaming read of the floor's bytes, each layer copy's own buffer
        r = small_read(int(case.floor_us * 1e-6 * ceiling * 1e12), copies=L, reps=args.reps)
        add(case, "read", r["us"], cfg={k: r[k] for k in ("programs_per_sm", "BLOCK", "num_warps")})
        harness.save(out, rows)  # after every case: a run cut short keeps what it measured
    bound_summary(summary, shapes, args.T, ceiling)


def bound_summary(frac: dict, shapes, Ts, ceiling: float):
    """Per shape and T: each form's fraction of the read ceiling, and the best path's time over
    the best no-math time of the same launches (the share of its bound the path reaches)."""
    forms = {"path default": "path dflt", "path tuned": "path tuned", "no math default": "bound dflt",
             "no math tuned": "bound tuned", "no math, shipped smem default": "smem dflt",
             "no math, shipped smem tuned": "smem tuned", "read": "read"}
    print(f"\n% of the read ceiling ({ceiling:.3f} TB/s). bound: the same launches without math; smem: the "
          "same in the shipped kernels' shared memory (- where that is the bound's); read: one read of the "
          "bytes. The bar: 85 %.")
    print(f"{'shape':16s} {'T':>4s} " + " ".join(f"{f:>11s}" for f in forms.values()) + "  path/bound")
    for s in shapes:
        for T in Ts:
            f = {v: frac.get((s.name, T, v)) for v in forms}
            paths = [x for v, x in f.items() if x and v.startswith("path")]
            bounds = [x for v, x in f.items() if x and v.startswith("no math")]
            share = f"{100 * max(paths) / max(bounds):9.1f}%" if paths and bounds else ""
            print(f"{s.name:16s} {T:4d} " + " ".join(f"{100 * x:10.1f}%" if x else f"{'-':>11s}" for x in f.values())
                  + f"  {share}")

VERSIONS = {
    "align": (main_align, []),
    "tiles": (main_tiles, []),
    "pdl": (main_pdl, []),
    "half_m": (main_half_m, []),
    "swap_ab": (main_swap_ab, []),
    "bound": (main_bound, []),
}


if __name__ == "__main__":
    harness.dispatch(__doc__, VERSIONS)
