"""Align (stage 2 of the expert-centric path) four ways, on the H200: the kernel shipped until
session 9 (``histogram``: one program, counts from ``tl.histogram`` over E bins, ranks from a pass
of atomic adds), one where a single pass of atomic adds gives both (session 7), one with no
atomics, whose ranks come from a sort of the pairs in registers (session 9), and the kernel
shipped since session 10 (``parallel``: many programs, no atomics, no barrier; ``ex.align`` at
8 … 128 pairs per program). See results/NOTES.md.

    python scripts/align_variants.py [--presets ...] [--T 1 8 64 256]
    TRITON_INTERPRET=1 python scripts/align_variants.py --check   # the contract only, on the CPU

Each timed graph aligns 32 different routings (fresh random top-K of the preset's K and E) at the
block size the tuned expert path uses for that T; every kernel's output is checked against the
contract first (the same runs per expert, padded, sentinels past the end). Rows: µs per align call
to results/<GPU>/align_variants.csv. Exits 3 when the one-pass kernel is slower at the largest T.
"""

import argparse
import os
import sys
from collections import Counter
from functools import partial
from pathlib import Path

import torch
import triton
import triton.language as tl
from triton.language.extra.cuda import gdc_launch_dependents

import warpdecode as wd
from warpdecode import _alloc, _runtime
from warpdecode import expert as ex
from warpdecode.bench import data
from warpdecode.bench.sweep import meta
from warpdecode.bench.timing import capture, time_replays
from warpdecode.configs import expert_config


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
    shipped align until session 9 (warpdecode/kernels/expert.py at commit 612312a)."""
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
    """ex.align as it was until session 9: the one-program kernel above."""
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
    Session 10 measured this design as a copy of the kernel kept here, with one scan of the pairs
    where the shipped one scans in steps of 4096 (the same code up to 4096 pairs); the copy went
    once the design shipped."""
    return ex.align(topk_ids, E, block_m, pdl=pdl, block_c=block_c)


VARIANTS = {"histogram": histogram_align, "one atomic pass": one_pass_align, "sort": sorted_align,
            "parallel": parallel_align,  # one program per 128 pairs
            **{f"parallel {c}": partial(parallel_align, block_c=c) for c in (8, 16, 32, 64)}}


def check(al: ex.Alignment, topk_ids, E: int):
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


def main():
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
                with _alloc.poisoned():
                    check(fn(ids, E, bm), ids, E)
                print(f"{kind}: T={T} K={K} E={E} BLOCK_M={bm}: the contract holds")
        return
    out = Path(f"results/{torch.cuda.get_device_name().replace(' ', '_')}/align_variants.csv")
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
                with _alloc.poisoned():
                    check(fn(routings[0], s.E, bm), routings[0], s.E)
                graph, _ = capture(lambda fn=fn, E=s.E, bm=bm, rs=routings: [fn(r, E, bm) for r in rs])
                us[kind] = time_replays(graph, reps=50).median_us / len(routings)
                rows.append({"preset": name, "T": T, "pairs": T * s.K, "E": s.E, "block_m": bm, "kind": kind,
                             "us": round(us[kind], 3), **meta()})
            shipped, one_pass = us["histogram"], us["one atomic pass"]
            print(f"{name:16s} T={T:3d} pairs={T * s.K:5d} E={s.E:3d} BLOCK_M={bm:3d}: "
                  + ", ".join(f"{k} {v:6.2f} us" for k, v in us.items()) + f"  ({shipped / one_pass:.2f}x)",
                  flush=True)
            slower |= T == max(args.T) and one_pass > shipped
    data.merge_write(out, rows)
    sys.exit(3 if slower else 0)


if __name__ == "__main__":
    main()
