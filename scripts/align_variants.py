"""Align (stage 2 of the expert-centric path) two ways, on the H200: the kernel before session 7,
whose counts come from ``tl.histogram`` over E bins and whose ranks come from a second pass of
atomic adds, against the shipped one, where a single pass of atomic adds gives both.

    python scripts/align_variants.py [--presets ...] [--T 1 8 64 256]

Each timed graph aligns 32 different routings (fresh random top-K of the preset's K and E) at the
block size the tuned expert path uses for that T; both kernels' outputs are checked against the
contract first (the same runs per expert, padded, sentinels past the end). Rows: µs per align call
to results/<GPU>/align_variants.csv. Exits 3 when the shipped kernel is slower at the largest T.
"""

import argparse
import sys
from collections import Counter
from pathlib import Path

import torch
import triton
import triton.language as tl

import warpdecode as wd
from warpdecode import _alloc
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
):
    """The align kernel before session 7 (commit 135ef55): a histogram over E bins, then the ranks."""
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


def histogram_align(topk_ids, E: int, block_m: int) -> ex.Alignment:
    """ex.align as it was before session 7."""
    num_pairs = topk_ids.numel()
    EM = ex.max_padded_rows(num_pairs, E, block_m)
    dev = topk_ids.device
    sorted_token_ids = _alloc.empty(EM, dtype=torch.int32, device=dev)
    expert_ids = _alloc.empty(EM // block_m, dtype=torch.int32, device=dev)
    num_tokens_post_padded = _alloc.empty(1, dtype=torch.int32, device=dev)
    cursor = _alloc.empty(E, dtype=torch.int32, device=dev)
    histogram_align_kernel[(1,)](
        topk_ids, sorted_token_ids, expert_ids, num_tokens_post_padded, cursor, num_pairs, EM, E,
        BLOCK_M=block_m, BLOCK_P=max(16, triton.next_power_of_2(num_pairs)),
        BLOCK_E=max(16, triton.next_power_of_2(E + 1)), CHUNK=64, FILL=min(1024, triton.next_power_of_2(EM)),
        num_warps=4 if num_pairs <= 1024 else 8)
    return ex.Alignment(sorted_token_ids, expert_ids, num_tokens_post_padded, block_m, num_pairs)


VARIANTS = {"histogram (before)": histogram_align, "one atomic pass (shipped)": ex.align}


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
    args = p.parse_args()
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
            before, now = us.values()
            print(f"{name:16s} T={T:3d} pairs={T * s.K:5d} E={s.E:3d} BLOCK_M={bm:3d}: "
                  + ", ".join(f"{k} {v:6.2f} us" for k, v in us.items()) + f"  ({before / now:.2f}x)", flush=True)
            slower |= T == max(args.T) and now > before
    data.merge_write(out, rows)
    sys.exit(3 if slower else 0)


if __name__ == "__main__":
    main()
