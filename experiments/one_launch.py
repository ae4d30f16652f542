"""Warp decode in one launch, or with the down phase started before the gate/up phase ends.

    python experiments/one_launch.py --version 8 [--presets …] [--T 1 2]
    TRITON_INTERPRET=1 python experiments/one_launch.py --version 8 --check
    python experiments/one_launch.py --version 16 [--space first|wide] [--down-alone]
    python experiments/one_launch.py --version 16b [--space first|groups]
    python experiments/one_launch.py --version 16c
    TRITON_INTERPRET=1 python experiments/one_launch.py --version 16 --check   # both forms

- 8: every program one tile of one phase by ticket, the down programs after every gate/up
  program. Not promoted: 26.3 against the pair's 22.6 µs (one register budget for both phases).
- 16: one launch, each down program walks its token's experts in gate/up's order, waiting for
  one expert at most. Not promoted: 24.5 against 22.5 µs.
- 16b (``--form two``): v16's down phase as its own kernel, never calling ``gdc_wait``. Not
  promoted: a tie at OLMoE, +3 % at Qwen3-30B (its down streams slower per byte).
- 16c (``--form two --space seg``): v16b by segments of experts, pipelined loads. Not promoted:
  27.5 against 22.5 µs (the poll before each segment removes the early start).
v4 (the persistent schedule) is ``bench/persistent.py``, beside the package; v6 is at commit 2dee57b.

Rows: experiments/results/<GPU>/{ordered_launch,expert_order}.csv.
"""

from __future__ import annotations

import argparse
import itertools
import os
from functools import partial

import harness
import knobs
import torch
import triton
import triton.language as tl
from triton.language.extra.cuda import gdc_launch_dependents, gdc_wait

import warpdecode as wd
from bench.poison import poisoned
from warpdecode import _alloc
from warpdecode import warp as wp
from warpdecode.kernels.warp_pair import _down_chunk, _down_tile, _gate_up_tile

#: The E this experiment's kernels give the shipped tiles' id guard (kernels/ids.py): its ids come from
#: warpdecode.route, in range, so the guard admits every non-negative id.
IDS_IN_RANGE = tl.constexpr(2**31 - 1)

# ==================================================================================================
# version 8: Experiment (v8, not shipped): warp decode in one launch, the down programs ordered after every
#
# gate/up program by a ticket counter.
#
# The read bound (docs/design.md, ``read_variants.csv``): one launch of Qwen3-30B-A3B's 75.5 MB at
# T = 1, one program per 16 KB tile, reaches 87 % of the ceiling; split into warp decode's two
# launches, 80 %. The 85 % bar needs one launch. The persistent kernel (v4) held both phases'
# registers in every program and looped; the one-pass atomic kernel (v6) read w2 across its rows.
# Here every program does one tile of one phase, like the tile read, and the phases share a grid:
#
# - each program takes a ticket (an atomic counter) and does ticket < n_gate_up ? a gate/up tile : a
#   down tile. Tickets, not ``program_id``: a program holding a down ticket knows that every gate/up
#   ticket went to a program that is already running, so waiting for them cannot deadlock, whatever
#   order the hardware dispatches programs in (the rule CUB's decoupled look-back relies on).
# - a gate/up program stores its intermediate and counts itself done (release);
# - a down program loads its w2 tile (all of I when DN_BLOCK_I ≥ I) before it waits for the done
#   count to reach n_gate_up (acquire): its weight stream overlaps the gate/up tail inside one launch.
#   Or (``prefetch``) it only asks L2 for the tile's lines before the wait, which holds no register
#   (registers are allocated for the heavier phase, and held ones cost every gate/up program
#   occupancy), and loads the tile from L2 after it.
# - the last down program to finish resets the counters, so the next launch finds them at zero.
#
#     python experiments/one_launch.py --version 8 [--presets …] [--T 1 2 4 8]
#     TRITON_INTERPRET=1 python experiments/one_launch.py --version 8 --check   # correctness only, on the CPU
#
# On a GPU: checks every config against the float64 reference (poisoned output), then times the
# tuned two-kernel pair and each config of the one-launch kernel over the layer copies; rows go to
# experiments/results/<GPU>/ordered_launch.csv. What it found: docs/design.md.
# ==================================================================================================

MAX_SPINS_v8 = 1 << 22  # polls before a down program gives up and raises the flag: never hang the GPU


@triton.jit(do_not_specialize=["T"])
def warp_ordered_kernel(
    # pointers
    x_ptr,  # (T, H) compute dtype
    w13_ptr,  # (E, 2I, H) compute dtype
    w2_ptr,  # (E, H, I) compute dtype
    topk_ids_ptr,  # (T, K) int32, in [0, E)
    topk_weights_ptr,  # (T, K) fp32
    act_ptr,  # (T*K, I) fp32: the intermediate between the phases
    y_ptr,  # (T, H) compute dtype
    sync_ptr,  # (4,) int32: ticket, gate/up done, down done, timed-out flag; all 0 between launches
    # sizes
    H,
    I,
    T,
    # strides (elements)
    stride_xt,
    stride_w13e,
    stride_w13r,
    stride_w2e,
    stride_w2r,
    stride_at,
    stride_yt,
    # meta
    K: tl.constexpr,
    K_PAD: tl.constexpr,
    GU_BLOCK_I: tl.constexpr,
    GU_BLOCK_H: tl.constexpr,
    DN_BLOCK_H: tl.constexpr,
    DN_BLOCK_I: tl.constexpr,
    MAX_SPINS: tl.constexpr,
    PREFETCH_LINES: tl.constexpr,  # 0: load the first w2 chunk into registers before the wait;
    # else prefetch this many 128-byte lines of each w2 row into L2 (no registers), load after it
):
    n_pairs = T * K
    n_gate_up = n_pairs * tl.cdiv(I, GU_BLOCK_I)
    n_down = T * tl.cdiv(H, DN_BLOCK_H)
    ticket = tl.atomic_add(sync_ptr, 1, sem="relaxed", scope="gpu")
    if ticket < n_gate_up:
        _gate_up_tile(x_ptr, w13_ptr, topk_ids_ptr, topk_weights_ptr, act_ptr, H, I, IDS_IN_RANGE, K, stride_xt,
                      stride_w13e, stride_w13r, stride_at, ticket % n_pairs, ticket // n_pairs, GU_BLOCK_I, GU_BLOCK_H,
                      GU_BLOCK_H)
        tl.debug_barrier()  # every warp of this program has issued its stores
        tl.atomic_add(sync_ptr + 1, 1, sem="release", scope="gpu")
    else:
        unit = ticket - n_gate_up
        t = unit % T
        pid_h = unit // T
        # the w2 rows do not depend on the intermediate: in flight before the wait
        if PREFETCH_LINES == 0:
            wv = _down_chunk(w2_ptr, topk_ids_ptr, H, I, IDS_IN_RANGE, stride_w2e, stride_w2r, t, pid_h, 0, K, K_PAD,
                             DN_BLOCK_H,
                             DN_BLOCK_I, False)
        else:
            _prefetch_w2_l2(w2_ptr, topk_ids_ptr, H, I, stride_w2e, stride_w2r, t, pid_h, K, K_PAD, DN_BLOCK_H,
                            PREFETCH_LINES)
        spins = 0
        done = tl.atomic_add(sync_ptr + 1, 0, sem="acquire", scope="gpu")
        while (done < n_gate_up) & (spins < MAX_SPINS):
            done = tl.atomic_add(sync_ptr + 1, 0, sem="acquire", scope="gpu")
            spins += 1
        if spins >= MAX_SPINS:
            tl.atomic_xchg(sync_ptr + 3, 1, sem="relaxed", scope="gpu")
        if PREFETCH_LINES != 0:  # from L2 now
            wv = _down_chunk(w2_ptr, topk_ids_ptr, H, I, IDS_IN_RANGE, stride_w2e, stride_w2r, t, pid_h, 0, K, K_PAD,
                             DN_BLOCK_H,
                             DN_BLOCK_I, False)
        _down_tile(act_ptr, w2_ptr, topk_ids_ptr, topk_weights_ptr, y_ptr, H, I, IDS_IN_RANGE, stride_at, stride_w2e,
                   stride_w2r,
                   stride_yt, t, pid_h, wv, K, K_PAD, DN_BLOCK_H, DN_BLOCK_I, ".cg", False)
        tl.debug_barrier()
        finished = tl.atomic_add(sync_ptr + 2, 1, sem="acq_rel", scope="gpu")
        if finished == n_down - 1:  # the last program of the launch: every ticket is taken, every wait over
            tl.atomic_xchg(sync_ptr, 0, sem="relaxed", scope="gpu")
            tl.atomic_xchg(sync_ptr + 1, 0, sem="relaxed", scope="gpu")
            tl.atomic_xchg(sync_ptr + 2, 0, sem="relaxed", scope="gpu")


@triton.jit
def _prefetch_w2_l2(w2_ptr, topk_ids_ptr, H, I, stride_we, stride_wr, t, pid_h,
                    K: tl.constexpr, K_PAD: tl.constexpr, BLOCK_H: tl.constexpr, LINES: tl.constexpr):
    """``prefetch.global.L2::evict_last`` of every 128-byte line of the w2 rows token t needs for
    its BLOCK_H outputs: the DRAM reads start and no register waits for them (v3's instruction)."""
    offs_h = pid_h * BLOCK_H + tl.arange(0, BLOCK_H)
    offs_k = tl.arange(0, K_PAD)
    mask_k = offs_k < K
    offs_l = tl.arange(0, LINES) * (1024 // w2_ptr.dtype.element_ty.primitive_bitwidth)  # 128 B apart
    e = tl.load(topk_ids_ptr + t.to(tl.int64) * K + offs_k, mask=mask_k, other=0).to(tl.int64)
    ptrs = (w2_ptr + offs_h[:, None, None].to(tl.int64) * stride_wr + e[None, :, None] * stride_we
            + offs_l[None, None, :])
    mask = (offs_h < H)[:, None, None] & mask_k[None, :, None] & (offs_l < I)[None, None, :]
    tl.inline_asm_elementwise(
        "{ .reg .pred p; setp.ne.b32 p, $1, 0; @p prefetch.global.L2::evict_last [$2]; mov.u32 $0, 0; }",
        "=r,r,l", [mask.to(tl.int32), ptrs], dtype=tl.int32, is_pure=False, pack=1)


_sync: dict = {}


def sync_state(device) -> torch.Tensor:
    device = torch.device(device)
    if device not in _sync:
        _sync[device] = torch.zeros(4, dtype=torch.int32, device=device)
    return _sync[device]


def moe_warp_ordered(x, w13, w2, topk_weights, topk_ids, cfg: dict):
    T, H = x.shape
    E, two_i, _ = w13.shape
    I = two_i // 2  # noqa: E741
    K = topk_ids.shape[1]
    act = _alloc.empty(T * K, I, dtype=torch.float32, device=x.device)
    y = _alloc.empty(T, H, dtype=x.dtype, device=x.device)
    grid = (T * K * triton.cdiv(I, cfg["GU_BLOCK_I"]) + T * triton.cdiv(H, cfg["DN_BLOCK_H"]),)
    warp_ordered_kernel[grid](
        x, w13, w2, topk_ids, topk_weights, act, y, sync_state(x.device), H, I, T, x.stride(0), w13.stride(0),
        w13.stride(1), w2.stride(0), w2.stride(1), act.stride(0), y.stride(0),
        K=K, K_PAD=triton.next_power_of_2(K), GU_BLOCK_I=cfg["GU_BLOCK_I"], GU_BLOCK_H=cfg["GU_BLOCK_H"],
        DN_BLOCK_H=cfg["DN_BLOCK_H"], DN_BLOCK_I=cfg["DN_BLOCK_I"], MAX_SPINS=MAX_SPINS_v8,
        PREFETCH_LINES=triton.next_power_of_2(triton.cdiv(I, 64)) if cfg.get("prefetch") else 0,
        num_warps=cfg["num_warps"], num_stages=1)
    return y


def candidates_v8(shape, interpret: bool):
    """One num_warps for both phases (one kernel); gate/up tiles of 2–16 KB per matrix; down tiles
    holding all of I (so the whole w2 tile is in flight before the wait) or 256 columns of it; at
    most 64 weight elements per thread in either (128 where one row of all of I needs it).
    Compiled for sm_90a (no GPU) these take 96–246 registers per thread, which leaves 3–8
    programs per SM: the occupancy problem of the persistent kernel (v4) in part, since registers
    are allocated for the heavier phase. The one-warp tiles (the shipped gate/up
    kernel's shape with v9) take 127 registers, 16 programs per SM, at Qwen3-30B."""
    if interpret:
        return [{"GU_BLOCK_I": 4, "GU_BLOCK_H": 32, "DN_BLOCK_H": 4, "DN_BLOCK_I": triton.next_power_of_2(shape.I),
                 "num_warps": 4}]
    k_pad = triton.next_power_of_2(shape.K)
    out = []
    for w, gu_rows, gu_cols, dn_cols in itertools.product([1, 2, 4, 8], [1, 2, 4], [1024, 2048],
                                                          [256, triton.next_power_of_2(shape.I)]):
        gu_cols = min(gu_cols, triton.next_power_of_2(shape.H))
        if gu_rows * gu_cols // (32 * w) > 64:  # gate and up tiles of > 64 elements per thread spill
            continue
        dn_rows = max(1, min(8, 64 * 32 * w // (k_pad * dn_cols)))  # ≤ 64 weight elements per thread
        if dn_rows * k_pad * dn_cols // (32 * w) > 128:  # one row of all of I over one warp: spills
            continue
        out.append({"GU_BLOCK_I": gu_rows, "GU_BLOCK_H": gu_cols, "DN_BLOCK_H": dn_rows, "DN_BLOCK_I": dn_cols,
                    "num_warps": w})
    out = [c for i, c in enumerate(out) if c not in out[:i]]
    return out + [dict(c, prefetch=True) for c in out]  # the same tiles, w2 prefetched into L2 instead


def check_v8(shape, T: int, cfg: dict, device) -> float:
    """Error over the bf16 floor on fresh random inputs, the output poisoned; the counters back at zero."""
    from warpdecode.workload import make_inputs, make_layers

    (w13, w2), = make_layers(shape, 1) if device.type == "cuda" else [_cpu_layer(shape)]
    inp = make_inputs(shape, T, 1, seed=77)[0] if device.type == "cuda" else _cpu_inputs(shape, T)
    ref = wd.reference_moe(inp.x, w13, w2, inp.topk_weights, inp.topk_ids)
    with poisoned():  # NaN in every buffer: an element never written fails the check
        y = moe_warp_ordered(inp.x, w13, w2, inp.topk_weights, inp.topk_ids, cfg)
    assert sync_state(device).tolist() == [0, 0, 0, 0], sync_state(device).tolist()
    return wd.rel_error(y, ref) / wd.rounding_floor(ref, torch.bfloat16)


def _cpu_layer(shape):
    g = torch.Generator().manual_seed(0)
    w13 = torch.randn(shape.E, 2 * shape.I, shape.H, generator=g).mul_(shape.H**-0.5).bfloat16()
    w2 = torch.randn(shape.E, shape.H, shape.I, generator=g).mul_(shape.I**-0.5).bfloat16()
    return w13, w2


def _cpu_inputs(shape, T):
    from types import SimpleNamespace

    from warpdecode.routing import route

    g = torch.Generator().manual_seed(77)
    x = torch.randn(T, shape.H, generator=g).bfloat16()
    tw, ti = route(torch.randn(T, shape.E, generator=g), shape.K, renormalize=shape.renormalize)
    return SimpleNamespace(x=x, topk_weights=tw, topk_ids=ti)


def main_v8():
    p = argparse.ArgumentParser()
    p.add_argument("--presets", nargs="+", default=["qwen3-30b-a3b", "olmoe-1b-7b", "gpt-oss-20b"])
    p.add_argument("--T", type=int, nargs="+", default=[1, 2, 4, 8])
    p.add_argument("--check", action="store_true", help="correctness only (the CPU interpreter: tiny shapes)")
    args = p.parse_args()
    interpret = os.environ.get("TRITON_INTERPRET") == "1"
    device = torch.device("cpu" if interpret else "cuda")
    if args.check or interpret:
        for name, T in (("tiny", 1), ("tiny", 3), ("odd", 2)):
            shape = wd.get_preset(name) if name != "odd" else wd.MoEShape("odd", H=40, I=24, E=5, K=5)
            for cfg in candidates_v8(shape, interpret):
                ratio = check_v8(shape, T, cfg, device)
                print(f"{name} T={T} {cfg}: error {ratio:.3f} × the bf16 floor")
                assert ratio <= 1.05, ratio
        return
    _time_all(args, device)


def _time_all(args, device):
    from functools import partial

    from harness import cases, checked_us, checked_us_or_none, row

    from warpdecode.warp import moe_warp

    out = harness.results_dir() / "ordered_launch.csv"
    for name in args.presets:  # correctness first, at an awkward T
        shape = wd.get_preset(name)
        for cfg in candidates_v8(shape, False):
            assert check_v8(shape, 3, cfg, device) <= 1.05, (name, cfg)
    for case in cases(args.presets, args.T):
        s, T = case.shape, case.T
        timed = [("pair (tuned)", checked_us(case, moe_warp, "pair", tol=1.5, reps=50), "")]
        for cfg in candidates_v8(s, False):
            res = checked_us_or_none(case, partial(moe_warp_ordered, cfg=cfg), str(cfg), tol=1.5, reps=50)
            if res is not None:
                timed.append(("one launch, ordered", res, str(cfg)))
        assert sync_state(device)[3].item() == 0, "a down program gave up waiting"
        pair_us = timed[0][1][0]
        best = min(timed[1:], key=lambda r: r[1][0])
        rows = []
        for kind, (us, err, _), cfg in (timed[0], best):
            rows.append(row(case, kind=kind, config=cfg, vs_pair=round(us / pair_us, 4), us=us, err=err))
            print(f"{s.name:14s} T={T:2d} {kind:20s} {us:8.2f} us {100 * case.floor_us / us:5.1f}% {cfg}", flush=True)
        harness.save(out, rows)  # after every T: a time limit loses only the unfinished ones


# ==================================================================================================
# version 16: v16, an experiment: warp decode in one launch, each down program walking its token's experts in
#
# the order the gate/up programs finish them, so it waits for one expert at most.
#
#     python experiments/one_launch.py --version 16 [--presets qwen3-30b-a3b olmoe-1b-7b] [--T 1 2] [--space wide]
#     python experiments/one_launch.py --version 16 --form two ...   # v16b: the down phase as a kernel of its own
#     TRITON_INTERPRET=1 python experiments/one_launch.py --version 16 --check   # both forms' contracts, on the CPU
#
# Why (docs/design.md): every earlier design that moved the down phase into the gate/up tail waited
# for *all* of the gate/up phase before using its w2 rows (v2's PDL, v4's grid barrier, v8's done
# counter, v13 and v15's preloads); only v14 waited for less (a chunk of I), and it paid a serial
# partial-sum protocol at the end. But y[t] = Σ_k w_k · W2[e_k] · a[t, k] is a sum over the token's K
# experts, and the gate/up programs can be ordered expert by expert (pair-major). A down program that
# takes the experts in that same order needs pair 0's intermediate first, which was finished long
# before it was dispatched, and pair K−1's last, by which time it is (nearly) finished too. So it
# streams 7/8 of its w2 rows (at K = 8) without waiting for anything, and sums the experts in
# registers: no partial sums, no atomics in the data path, no fence in the gate/up programs.
#
# One launch, grid = gate/up programs (pair-major) then down programs; CTAs of a 1-D grid are
# dispatched in order in practice, so a down program is dispatched only after every gate/up program
# has been. (Not guaranteed by CUDA: a program that waits too long gives up and raises a flag, which
# the host turns into an error; it never hangs the GPU.)
# - The intermediate buffer holds a sentinel bit pattern (0xFFFFFFFF, a NaN no arithmetic produces:
#   GPUs return the canonical 0x7FFFFFFF) until its value is stored. A down program reads each step's
#   chunk from L2 one step ahead with the weights, and polls it (volatile loads) only where it still
#   finds the sentinel: no fence or counter in the gate/up programs, which only store. (The first form
#   polled every step: 24-48 dependent L2 round trips per program, 3.3 µs slower at Qwen3-30B T=1.)
# - The sentinel is written by a small fill kernel launched before the layer kernel, which starts with
#   programmatic dependent launch while the fill runs (``gdc_wait`` before a gate/up program's store
#   and before a down program's first poll), so the fill is not a kernel boundary on the weights'
#   stream.
# - Registers are the heavier phase's (one kernel): the down tile is one expert's [BLOCK_H, BLOCK_I]
#   step, the next step's weights loaded before the current step's poll, so it stays under the
#   gate/up tile's count.
#
# Byte ledger (Qwen3-30B, T=1): the pair's 75.5 MB, plus the sentinel fill (T·K·I·4 B = 24 KB) and
# every down program's reads of its token's intermediate from L2 (T·K·I·4 B each). Prediction: the
# one-launch tile read of the same bytes, 19.1 µs (``read_variants.csv``), plus the down tail after
# the last gate/up program (its last expert's step): ~20 µs against the pair's 22.4.
#
# v16b (``--form two``): the same down phase as a kernel of its own (its own warps and registers),
# after the shipped gate/up kernel with its tuned tile, launched with PDL and never calling
# ``gdc_wait``: the sentinel alone says what is stored. Its last program (a count) writes the sentinel
# back; the next call's gate/up kernel is an ordinary launch, after it.
#
# v16c (``--form two --space seg``): v16b's down kernel
# with the token's slots in segments (2 or 4 of K = 8); it waits (polls) before each segment until the
# segment's intermediate is all stored, then streams the segment's experts in a loop the compiler
# pipelines (``cp.async``, 2-4 stages), which it does not do for a loop with a poll inside.
# Compiled for sm_90a here: ``cp.async`` in every candidate, 64-176 registers.
#
# Measured on the H200 (docs/design.md): both forms correct and slower than the pair,
# v16 by 4-10 % at T = 1, v16b by 0-3 % (its down kernel alone streams 24-42 % slower than
# the shipped one, ``--down-alone``).
#
# Each candidate is checked against float64 (outputs poisoned), the sentinel state checked after every
# run, and timed against the tuned pair in the same process (the bench's routings, seed 1000 + T).
# Rows: experiments/results/<GPU>/expert_order.csv.
# ==================================================================================================

INTERPRET_v16 = os.environ.get("TRITON_INTERPRET") == "1"
SENTINEL = -1  # int32 bits 0xFFFFFFFF
MAX_SPINS = 200_000  # ~0.1-0.2 s of polling, then give up and raise the flag
MAX_REGS = 128  # the tuned pair's kernels: 96 (gate/up) and 161 (down) registers per thread





@triton.jit
def fill_kernel(bits_ptr, n, BLOCK: tl.constexpr, USE_PDL: tl.constexpr):
    """The sentinel into every element of the intermediate; the layer kernel may start meanwhile."""
    if USE_PDL:
        gdc_launch_dependents()
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(bits_ptr + offs, tl.full([BLOCK], -1, tl.int32), mask=offs < n)


@triton.jit
def _w2_group(w2_ptr, e, mask_g, offs_h, mask_h, i0, I, stride_we, stride_wr, BLOCK_I: tl.constexpr):
    """Columns [i0, i0 + BLOCK_I) of the rows offs_h of the experts e (a group of the token's slots):
    a [BLOCK_H, GROUP, BLOCK_I] tile."""
    offs_i = i0 + tl.arange(0, BLOCK_I)
    ptrs = (w2_ptr + e[None, :, None] * stride_we + offs_h[:, None, None].to(tl.int64) * stride_wr
            + offs_i[None, None, :])
    mask = mask_h[:, None, None] & mask_g[None, :, None] & (offs_i < I)[None, None, :]
    return tl.load(ptrs, mask=mask, other=0.0, eviction_policy="evict_first")


@triton.jit
def _poll(ptrs, mask, bits, MAX_SPINS: tl.constexpr):
    """Reload ``bits`` (volatile) while any of them is the sentinel, at most MAX_SPINS times:
    (the values, 1 if a sentinel is still there)."""
    pending = tl.max(tl.max((bits == -1).to(tl.int32), axis=1), axis=0)
    spins = 0
    while (pending > 0) & (spins < MAX_SPINS):
        bits = tl.load(ptrs, mask=mask, other=0, volatile=True)
        pending = tl.max(tl.max((bits == -1).to(tl.int32), axis=1), axis=0)
        spins += 1
    return bits, pending


@triton.jit
def _slots(ptr, t, g, K: tl.constexpr, GROUP: tl.constexpr):
    """The token's slots [g·GROUP, (g + 1)·GROUP): their offsets into a (T, K) array and mask."""
    offs = g * GROUP + tl.arange(0, GROUP)
    return ptr + t.to(tl.int64) * K + offs, offs < K


@triton.jit
def _down_expert_order(
    w2_ptr, topk_ids_ptr, topk_weights_ptr, act_bits_ptr, y_ptr, flag_ptr, H, I, T,
    stride_w2e, stride_w2r, stride_at, stride_yt,
    unit,  # which (token, block of BLOCK_H hidden outputs): token fastest
    K: tl.constexpr, BLOCK_H: tl.constexpr, BLOCK_I: tl.constexpr, CHUNKS: tl.constexpr,
    MAX_SPINS: tl.constexpr,
    WAIT: tl.constexpr,  # gdc_wait (for the fill) before the first read of the intermediate
    LEAN: tl.constexpr,  # sum each step across the lanes at once (one FP32 number per row)
    GROUP: tl.constexpr = 1,  # slots per step: 1 takes the experts one by one; K waits for all at once
):
    """y[t, rows] = Σ_k w_k · w2[e_k, rows, :] · act[t·K + k, :], GROUP slots at a time in slot
    order, each step's intermediate chunk polled only if it still holds the sentinel."""
    t = unit % T
    pid_h = unit // T
    offs_h = pid_h * BLOCK_H + tl.arange(0, BLOCK_H)
    mask_h = offs_h < H
    offs_i = tl.arange(0, BLOCK_I)
    offs_g = tl.arange(0, GROUP)
    STEPS: tl.constexpr = ((K + GROUP - 1) // GROUP) * CHUNKS
    if LEAN:
        acc = tl.zeros([BLOCK_H], dtype=tl.float32)
    else:
        acc = tl.zeros([BLOCK_H, BLOCK_I], dtype=tl.float32)
    id_ptrs, mask_g = _slots(topk_ids_ptr, t, 0, K, GROUP)
    wv = _w2_group(w2_ptr, tl.load(id_ptrs, mask=mask_g, other=0).to(tl.int64), mask_g, offs_h, mask_h, 0, I,
                   stride_w2e, stride_w2r, BLOCK_I)
    if WAIT:
        gdc_wait()  # the fill has finished: a value read from here on is this call's
    # the intermediate read like any data, from L2 (.cg: no stale line in this SM's L1), one step
    # ahead with the weights; polled (volatile loads) only where a step finds the sentinel
    a_ptrs = act_bits_ptr + (t.to(tl.int64) * K + offs_g)[:, None] * stride_at + offs_i[None, :]
    bits = tl.load(a_ptrs, mask=mask_g[:, None] & (offs_i < I)[None, :], other=0, cache_modifier=".cg")
    gave_up = 0
    for s in tl.static_range(STEPS):  # slot group by slot group, in the order gate/up finishes them
        g = s // CHUNKS
        i0 = (s % CHUNKS) * BLOCK_I
        if s + 1 < STEPS:  # the next step's weights and intermediate in flight first
            g1 = (s + 1) // CHUNKS
            i1 = ((s + 1) % CHUNKS) * BLOCK_I
            id_ptrs1, mask_g1 = _slots(topk_ids_ptr, t, g1, K, GROUP)
            wn = _w2_group(w2_ptr, tl.load(id_ptrs1, mask=mask_g1, other=0).to(tl.int64), mask_g1, offs_h, mask_h,
                           i1, I, stride_w2e, stride_w2r, BLOCK_I)
            bn = tl.load(a_ptrs + (g1 * GROUP) * stride_at + i1,
                         mask=mask_g1[:, None] & ((i1 + offs_i) < I)[None, :], other=0, cache_modifier=".cg")
        rw_ptrs, mask_s = _slots(topk_weights_ptr, t, g, K, GROUP)
        mask_a = mask_s[:, None] & ((i0 + offs_i) < I)[None, :]
        # a chunk of this group not all stored yet: poll it
        bits, pending = _poll(a_ptrs + (g * GROUP) * stride_at + i0, mask_a, bits, MAX_SPINS)
        gave_up += pending
        a = bits.to(tl.float32, bitcast=True) * tl.load(rw_ptrs, mask=mask_s, other=0.0)[:, None]
        prod = wv.to(tl.float32) * a[None, :, :]
        if LEAN:
            acc += tl.sum(tl.sum(prod, axis=2), axis=1)
        else:
            acc += tl.sum(prod, axis=1)  # the group's experts combined in registers
        if s + 1 < STEPS:
            wv = wn
            bits = bn
    if gave_up > 0:
        tl.atomic_xchg(flag_ptr, 1)  # the host raises
    if LEAN:
        y = acc
    else:
        y = tl.sum(acc, axis=1)
    tl.store(y_ptr + t.to(tl.int64) * stride_yt + offs_h, y.to(y_ptr.dtype.element_ty), mask=mask_h)


@triton.jit(do_not_specialize=["T"])
def expert_order_kernel(
    # pointers
    x_ptr,  # (T, H) compute dtype
    w13_ptr,  # (E, 2I, H) compute dtype: gate rows [0, I), up rows [I, 2I)
    w2_ptr,  # (E, H, I) compute dtype
    topk_ids_ptr,  # (T, K) int32, in [0, E)
    topk_weights_ptr,  # (T, K) fp32
    act_ptr,  # (T*K, I) fp32: the sentinel until stored
    act_bits_ptr,  # the same buffer as int32 bits, for the polls
    y_ptr,  # (T, H) compute dtype
    flag_ptr,  # (1,) int32: set if a down program gave up waiting
    # sizes
    H, I, T,
    # strides (elements)
    stride_xt, stride_w13e, stride_w13r, stride_w2e, stride_w2r, stride_at, stride_yt,
    # meta
    K: tl.constexpr,
    GU_BLOCK_I: tl.constexpr,  # gate/up: neurons per program
    GU_BLOCK_H: tl.constexpr,  # gate/up: columns of H per step
    BLOCK_H: tl.constexpr,  # down: hidden outputs per program
    BLOCK_I: tl.constexpr,  # down: columns of I per step
    CHUNKS: tl.constexpr,  # cdiv(I, BLOCK_I)
    MAX_SPINS: tl.constexpr,
    USE_PDL: tl.constexpr,
    LEAN: tl.constexpr,  # down: sum each step across the lanes at once (one FP32 number per row)
):
    pid = tl.program_id(0)
    blocks_i = tl.cdiv(I, GU_BLOCK_I)
    n_gate_up = T * K * blocks_i
    if pid < n_gate_up:  # pair-major: pair 0's neurons first, the token's last expert last
        # the shipped tile; with PDL its store waits for the sentinel fill launched before it
        knobs.gate_up_tile(x_ptr, w13_ptr, topk_ids_ptr, act_ptr, H, I, K, stride_xt, stride_w13e, stride_w13r,
                           stride_at, pid // blocks_i, pid % blocks_i, GU_BLOCK_I, GU_BLOCK_H, "evict_first", USE_PDL)
    else:
        _down_expert_order(w2_ptr, topk_ids_ptr, topk_weights_ptr, act_bits_ptr, y_ptr, flag_ptr, H, I, T, stride_w2e,
                           stride_w2r, stride_at, stride_yt, pid - n_gate_up, K, BLOCK_H, BLOCK_I, CHUNKS,
                           MAX_SPINS, USE_PDL, LEAN)


_FLAG = {}  # device -> (1,) int32, zero unless a down program gave up
LAST = [None]  # the compiled kernel of the last launch (registers, spills)


def flag(device) -> torch.Tensor:
    if str(device) not in _FLAG:
        _FLAG[str(device)] = torch.zeros(1, dtype=torch.int32, device=device)
    return _FLAG[str(device)]


def moe_expert_order(x, w13, w2, topk_weights, topk_ids, cfg: dict, out_dtype=torch.bfloat16):
    T, H = x.shape
    E, _, I = w2.shape  # noqa: E741
    K = topk_ids.shape[1]
    pdl = wp.USE_PDL and not INTERPRET_v16
    act = _alloc.empty(T * K, I, dtype=torch.float32, device=x.device)
    n = T * K * I
    fill_kernel[(triton.cdiv(n, 1024),)](act.view(torch.int32), n, BLOCK=1024, USE_PDL=pdl, num_warps=4)
    y = _alloc.empty(T, H, dtype=out_dtype, device=x.device)
    grid = T * K * triton.cdiv(I, cfg["GU_BLOCK_I"]) + T * triton.cdiv(H, cfg["BLOCK_H"])
    LAST[0] = expert_order_kernel[(grid,)](
        x, w13, w2, topk_ids, topk_weights, act, act.view(torch.int32), y, flag(x.device), H, I, T,
        x.stride(0), w13.stride(0), w13.stride(1), w2.stride(0), w2.stride(1), act.stride(0), y.stride(0),
        K=K, GU_BLOCK_I=cfg["GU_BLOCK_I"], GU_BLOCK_H=cfg["GU_BLOCK_H"],
        BLOCK_H=cfg["BLOCK_H"], BLOCK_I=cfg["BLOCK_I"], CHUNKS=triton.cdiv(I, cfg["BLOCK_I"]), MAX_SPINS=MAX_SPINS,
        USE_PDL=pdl, LEAN=cfg.get("lean", False), num_warps=cfg["num_warps"], num_stages=1,
        **({"launch_pdl": True} if pdl else {}),
    )
    return y


def check_flag():
    for dev, f in _FLAG.items():
        assert int(f[0]) == 0, f"{dev}: a down program gave up waiting"


@triton.jit
def _down_segments(
    w2_ptr, topk_ids_ptr, topk_weights_ptr, act_bits_ptr, y_ptr, flag_ptr, H, I, T,
    stride_w2e, stride_w2r, stride_at, stride_yt,
    unit,  # which (token, block of BLOCK_H hidden outputs): token fastest
    K: tl.constexpr, BLOCK_H: tl.constexpr, BLOCK_I: tl.constexpr, CHUNKS: tl.constexpr,
    MAX_SPINS: tl.constexpr,
    SEG: tl.constexpr,  # slots per segment (divides K)
    STAGES: tl.constexpr,  # software-pipelining depth of each segment's loop over its slots
):
    """v16c: the token's slots in segments of SEG, in slot order. Before a segment, wait (poll) until
    its whole intermediate is stored; then stream its experts' w2 rows in a loop the compiler
    pipelines (``cp.async`` into shared memory, STAGES deep), which it does not do for a loop with a
    poll inside (v16b's steps: one step ahead, in registers; its down kernel alone streamed 24-42 %
    slower than the shipped one)."""
    t = unit % T
    pid_h = unit // T
    offs_h = pid_h * BLOCK_H + tl.arange(0, BLOCK_H)
    mask_h = offs_h < H
    offs_i = tl.arange(0, BLOCK_I)
    offs_s = tl.arange(0, SEG)
    pairs = t.to(tl.int64) * K
    acc = tl.zeros([BLOCK_H, BLOCK_I], dtype=tl.float32)
    gave_up = 0
    for g in tl.static_range(K // SEG):
        for c in tl.static_range(CHUNKS):  # the segment's intermediate, chunk by chunk, until stored
            mask_a = (offs_s < SEG)[:, None] & ((c * BLOCK_I + offs_i) < I)[None, :]
            a_ptrs = act_bits_ptr + (pairs + g * SEG + offs_s)[:, None] * stride_at + c * BLOCK_I + offs_i[None, :]
            _, pending = _poll(a_ptrs, mask_a, tl.load(a_ptrs, mask=mask_a, other=0, volatile=True), MAX_SPINS)
            gave_up += pending
        tl.debug_barrier()  # no read below is issued before the polls above have seen every value
        for k in tl.range(g * SEG, (g + 1) * SEG, num_stages=STAGES):  # every value stored: pipelined
            e = tl.load(topk_ids_ptr + pairs + k).to(tl.int64)
            rw = tl.load(topk_weights_ptr + pairs + k)
            for c in tl.static_range(CHUNKS):
                offs_c = c * BLOCK_I + offs_i
                w = tl.load(w2_ptr + e * stride_w2e + offs_h[:, None].to(tl.int64) * stride_w2r + offs_c[None, :],
                            mask=mask_h[:, None] & (offs_c < I)[None, :], other=0.0, eviction_policy="evict_first")
                a = tl.load(act_bits_ptr + (pairs + k) * stride_at + offs_c, mask=offs_c < I, other=0,
                            cache_modifier=".cg")
                acc += w.to(tl.float32) * (a.to(tl.float32, bitcast=True) * rw)[None, :]
    if gave_up > 0:
        tl.atomic_xchg(flag_ptr, 1)  # the host raises
    y = tl.sum(acc, axis=1)
    tl.store(y_ptr + t.to(tl.int64) * stride_yt + offs_h, y.to(y_ptr.dtype.element_ty), mask=mask_h)


@triton.jit(do_not_specialize=["T", "NUM_PROGRAMS"])
def down_expert_order_kernel(
    # pointers
    w2_ptr,  # (E, H, I) compute dtype
    topk_ids_ptr,  # (T, K) int32
    topk_weights_ptr,  # (T, K) fp32
    act_bits_ptr,  # (T*K, I) int32 bits of the fp32 intermediate; the sentinel where not yet stored
    y_ptr,  # (T, H) compute dtype
    state_ptr,  # (2,) int32: [programs done (zero between calls), gave up]
    # sizes
    H, I, T, NUM_PROGRAMS,
    # strides (elements)
    stride_w2e, stride_w2r, stride_at, stride_yt,
    # meta
    K: tl.constexpr, BLOCK_H: tl.constexpr, BLOCK_I: tl.constexpr, CHUNKS: tl.constexpr,
    MAX_SPINS: tl.constexpr, LEAN: tl.constexpr, FILL: tl.constexpr,
    GROUP: tl.constexpr = 1,  # slots per step (_down_expert_order)
    RESET: tl.constexpr = True,  # False: leave the intermediate as found (the down kernel timed alone)
    SEG: tl.constexpr = 0,  # > 0: v16c, segments of SEG slots (_down_segments)
    STAGES: tl.constexpr = 1,  # v16c: pipelining depth
):
    """The second form's down phase as a kernel of its own, launched (PDL) while the shipped gate/up
    kernel runs and never waiting for it to finish: the sentinel says what is stored. The last
    program writes the sentinel back over the intermediate and zeroes the count, so the next call
    (whose gate/up kernel is an ordinary launch, after all of this) finds the buffer as this one did."""
    if SEG > 0:
        _down_segments(w2_ptr, topk_ids_ptr, topk_weights_ptr, act_bits_ptr, y_ptr, state_ptr + 1, H, I, T,
                       stride_w2e, stride_w2r, stride_at, stride_yt, tl.program_id(0), K, BLOCK_H, BLOCK_I, CHUNKS,
                       MAX_SPINS, SEG, STAGES)
    else:
        _down_expert_order(w2_ptr, topk_ids_ptr, topk_weights_ptr, act_bits_ptr, y_ptr, state_ptr + 1, H, I, T,
                           stride_w2e, stride_w2r, stride_at, stride_yt, tl.program_id(0), K, BLOCK_H, BLOCK_I,
                           CHUNKS, MAX_SPINS, False, LEAN, GROUP)
    if RESET:
        tl.debug_barrier()  # every warp of this program has used its reads of the intermediate
        done = tl.atomic_add(state_ptr, 1, sem="acq_rel")
        if done == NUM_PROGRAMS - 1:
            n = T * K * stride_at
            for r0 in range(0, n, FILL):
                offs = r0 + tl.arange(0, FILL)
                tl.store(act_bits_ptr + offs, tl.full([FILL], -1, tl.int32), mask=offs < n)
            tl.atomic_xchg(state_ptr, 0)


_STATE = {}  # (device, T, K, I) -> the two-kernel form's intermediate (the sentinel at rest) and state


def _two_kernel_state(device, T, K, I):  # noqa: E741
    key = (str(device), T, K, I)
    if key not in _STATE:
        _STATE[key] = (torch.full((T * K, I), SENTINEL, dtype=torch.int32, device=device),
                       torch.zeros(2, dtype=torch.int32, device=device))
    return _STATE[key]


def pair_expert_order(x, w13, w2, topk_weights, topk_ids, gu_cfg: dict, cfg: dict, out_dtype=torch.bfloat16):
    """The shipped gate/up kernel (its tuned config, pair-major unless ``cfg["pair_fastest"]``), then
    the down phase of the second form as its own kernel (``down_expert_order_kernel``)."""
    T, H = x.shape
    E, _, I = w2.shape  # noqa: E741
    K = topk_ids.shape[1]
    pdl = wp.USE_PDL and not INTERPRET_v16
    act_bits, state = _two_kernel_state(x.device, T, K, I)
    act = act_bits.view(torch.float32)
    knobs.gate_up_kernel[(T * K * triton.cdiv(I, gu_cfg["BLOCK_I"]),)](
        x, w13, topk_ids, act, H, I, T * K, K, x.stride(0), w13.stride(0), w13.stride(1), act.stride(0),
        BLOCK_I=gu_cfg["BLOCK_I"], BLOCK_H=gu_cfg["BLOCK_H"], USE_PDL=pdl,
        PAIR_FASTEST=cfg.get("pair_fastest", False), EVICT="evict_first",
        num_warps=gu_cfg["num_warps"], num_stages=gu_cfg["num_stages"],
    )
    y = _alloc.empty(T, H, dtype=out_dtype, device=x.device)
    grid = T * triton.cdiv(H, cfg["BLOCK_H"])
    LAST[0] = down_expert_order_kernel[(grid,)](
        w2, topk_ids, topk_weights, act_bits, y, state, H, I, T, grid,
        w2.stride(0), w2.stride(1), act_bits.stride(0), y.stride(0),
        K=K, BLOCK_H=cfg["BLOCK_H"], BLOCK_I=cfg["BLOCK_I"],
        CHUNKS=triton.cdiv(I, cfg["BLOCK_I"]), MAX_SPINS=MAX_SPINS, LEAN=cfg.get("lean", False), FILL=1024,
        GROUP=cfg.get("group", 1), SEG=_seg(cfg, K), STAGES=cfg.get("stages", 1),
        num_warps=cfg["num_warps"], num_stages=cfg.get("stages", 1), **({"launch_pdl": True} if pdl else {}),
    )
    return y


def down_alone(act, w2, topk_ids, topk_weights, cfg: dict, out_dtype=torch.bfloat16):
    """v16b's down kernel alone on an intermediate already stored (no sentinel anywhere, so no step
    waits), leaving it as it found it: its speed per byte, for comparison with the shipped down
    kernel timed the same way (``--down-alone``)."""
    T, K = topk_ids.shape
    _, H, I = w2.shape  # noqa: E741
    bits = act.view(torch.int32)
    state = _two_kernel_state(w2.device, T, K, I)[1]
    y = _alloc.empty(T, H, dtype=out_dtype, device=w2.device)
    grid = T * triton.cdiv(H, cfg["BLOCK_H"])
    LAST[0] = down_expert_order_kernel[(grid,)](
        w2, topk_ids, topk_weights, bits, y, state, H, I, T, grid, w2.stride(0), w2.stride(1), bits.stride(0),
        y.stride(0), K=K, BLOCK_H=cfg["BLOCK_H"], BLOCK_I=cfg["BLOCK_I"],
        CHUNKS=triton.cdiv(I, cfg["BLOCK_I"]), MAX_SPINS=MAX_SPINS, LEAN=cfg.get("lean", False), FILL=1024,
        GROUP=cfg.get("group", 1), SEG=_seg(cfg, K), STAGES=cfg.get("stages", 1),
        RESET=False, num_warps=cfg["num_warps"], num_stages=cfg.get("stages", 1),
    )
    return y


def _seg(cfg: dict, K: int) -> int:
    """v16c's segment size: ``cfg["seg"]`` (0 or absent: v16b's steps), which must divide K."""
    seg = cfg.get("seg", 0)
    if seg and (K % seg or seg & (seg - 1)):
        raise ValueError(f"cfg['seg'] = {seg} must be a power of two dividing K = {K}")
    return seg


def check_state():
    """The two-kernel form's buffers as a call must leave them: the sentinel everywhere, the count at
    zero, no program that gave up."""
    for key, (bits, state) in _STATE.items():
        assert bool((bits == SENTINEL).all()), f"{key}: the sentinel is not back"
        assert int(state[0]) == 0 and int(state[1]) == 0, f"{key}: state {state.tolist()}"


def candidates_two(shape, space: str = "first"):
    """Down tiles for the two-kernel form (its own registers): 2-16 rows, 256 columns to a whole row
    of I, 1-8 warps, 16-128 weights per thread per step; the gate/up grid pair-major (the form's
    point) or pair-fastest (the shipped order). ``space="groups"``: pair-major, with 1, 2, 4 or K
    slots per step (``group``; K waits for every expert at the first step, as the shipped kernel
    does after its ``gdc_wait``), since v16b's down kernel alone, one slot per step, streams its
    bytes 24-42 % slower than the shipped one."""
    out = []
    k_pad = triton.next_power_of_2(shape.K)
    if space == "seg":  # v16c: segments of 2 or 4 slots (K = 8), each a pipelined loop
        return [{"BLOCK_H": rows, "BLOCK_I": min(cols, triton.next_power_of_2(shape.I)), "num_warps": w,
                 "pair_fastest": False, "seg": seg, "stages": st}
                for rows, cols, w, seg, st in itertools.product([2, 4, 8], [256, 1024], [2, 4], [2, 4], [2, 3, 4])
                if shape.K % seg == 0 and 8 <= rows * min(cols, triton.next_power_of_2(shape.I)) // (32 * w) <= 64]
    groups, orders = ([1], [False, True]) if space == "first" else (sorted({1, 2, 4, k_pad}), [False])
    for w, rows, cols, fastest, group in itertools.product([1, 2, 4, 8], [2, 4, 8, 16], [256, 512, 1024], orders,
                                                           groups):
        cols = min(cols, triton.next_power_of_2(shape.I))
        if 16 <= rows * group * cols // (32 * w) <= 128 and rows >= w:
            out.append({"BLOCK_H": rows, "BLOCK_I": cols, "num_warps": w, "pair_fastest": fastest}
                       | ({"group": group} if group > 1 else {}))
    return [c for i, c in enumerate(out) if c not in out[:i]]


def candidates_v16(shape, space: str = "first"):
    """One num_warps for both phases. Gate/up: the tuned one-warp tile (1 × 2048) and the tiles that
    did best in the first form's run (2-4 rows × 1024-2048 over 2-4 warps). Down: steps of 256 to
    1024 columns (a whole expert row per step where I ≤ 1024), 8-64 weights per thread, the
    accumulator a tile or (``lean``) one number per row. ``space="wide"``: around the second form's
    best tiles (4 warps, 4 rows × whole rows of I, at the 128-register cap), with 8 warps and taller
    down tiles (checked up to 168 registers)."""
    out = []
    gate_up = [(1, 1, 2048), (1, 1, 1024), (2, 2, 1024), (2, 4, 1024), (4, 4, 1024), (4, 4, 2048)]
    rows_, cols_, leans = [1, 2, 4, 8], [256, 512, 1024], [False, True]
    if space == "wide":
        gate_up = [(4, 4, 1024), (4, 4, 2048), (4, 8, 1024), (8, 8, 1024), (8, 8, 2048), (8, 16, 1024)]
        rows_, cols_, leans = [4, 8, 16], [512, 1024], [False]
    for (w, gu_rows, gu_cols), rows, cols, lean in itertools.product(gate_up, rows_, cols_, leans):
        gu_cols = min(gu_cols, triton.next_power_of_2(shape.H))
        cols = min(cols, triton.next_power_of_2(shape.I))
        if not 8 <= rows * cols // (32 * w) <= 64:
            continue
        out.append({"GU_BLOCK_I": gu_rows, "GU_BLOCK_H": gu_cols, "BLOCK_H": rows, "BLOCK_I": cols, "num_warps": w,
                    "lean": lean})
    return [c for i, c in enumerate(out) if c not in out[:i]]


def _warm(job):
    """Compile one candidate at a preset's H and I (a few experts, T = 1), in a worker process,
    into Triton's cache; returns its (last kernel's) registers and spilled bytes."""
    name, form, cfg = job
    s = wd.get_preset(name)
    g = torch.Generator(device="cuda").manual_seed(0)
    w13 = torch.randn(s.K, 2 * s.I, s.H, device="cuda", generator=g).bfloat16()
    w2 = torch.randn(s.K, s.H, s.I, device="cuda", generator=g).bfloat16()
    x = torch.randn(1, s.H, device="cuda", generator=g).bfloat16()
    ids = torch.arange(s.K, device="cuda", dtype=torch.int32)[None]
    tw = torch.rand(1, s.K, device="cuda")
    if form == "one":
        moe_expert_order(x, w13, w2, tw, ids, cfg)
    else:
        pair_expert_order(x, w13, w2, tw, ids, wd.configs.warp_config(s.H, s.I, s.E, s.K, 1)["gate_up"], cfg)
    torch.cuda.synchronize()
    return LAST[0].n_regs, LAST[0].n_spills


def precompile(jobs, workers=16):
    """{(preset, form, config as str): (registers, spills)} for every job, compiled in parallel."""
    from concurrent.futures import ProcessPoolExecutor
    from multiprocessing import get_context

    with ProcessPoolExecutor(workers, mp_context=get_context("spawn")) as pool:
        return {(n, f, str(c)): r for (n, f, c), r in zip(jobs, pool.map(_warm, jobs), strict=True)}


def check_v16():
    """Two calls in a row at odd shapes (I not a multiple of the step, H not of the rows), K = 1 and
    K = E, a token naming one expert twice; against float64, outputs poisoned, the flag after each."""
    gen = torch.Generator().manual_seed(0)
    cases = [(1, 40, 48, 5, 2, 16, 4, 2), (3, 24, 40, 7, 7, 16, 4, 4), (2, 16, 64, 3, 1, 32, 8, 1),
             (1, 8, 33, 4, 4, 16, 2, 1), (2, 30, 64, 5, 3, 64, 4, 2)]  # T, H, I, E, K, BLOCK_I, BLOCK_H, GU rows
    for T, H, I, E, K, c, r, gr in cases:  # noqa: E741
        w13 = torch.randn(E, 2 * I, H, generator=gen) / H**0.5
        w2 = torch.randn(E, H, I, generator=gen) / I**0.5
        cfg = {"GU_BLOCK_I": gr, "GU_BLOCK_H": 16, "BLOCK_H": r, "BLOCK_I": c, "num_warps": 1, "lean": gr == 2}
        for call in range(2):
            x = torch.randn(T, H, generator=gen)
            ids = torch.stack([torch.randperm(E, generator=gen)[:K] for _ in range(T)]).to(torch.int32)
            if call == 1 and K >= 2:
                ids[0, 1] = ids[0, 0]  # one expert in two slots
            tw = torch.rand(T, K, generator=gen)
            ref = wd.reference_moe(x, w13, w2, tw, ids)
            gu = wd.configs.warp_config(H, I, E, K, T)["gate_up"]
            two = {"BLOCK_H": r, "BLOCK_I": c, "num_warps": 1, "pair_fastest": call == 1, "lean": gr == 2,
                   "group": triton.next_power_of_2(K) if call == 1 else 2}  # groups past K: masked slots
            with poisoned():  # an output element left unwritten is NaN
                y2 = pair_expert_order(x, w13, w2, tw, ids, gu, two, torch.float32)
            check_state()
            err2 = wd.rel_error(y2, ref)
            assert not y2.isnan().any() and err2 < 1e-5, (T, H, I, E, K, c, err2)
            print(f"two kernels: error {err2:.1e}, state reset")
            seg = {"BLOCK_H": r, "BLOCK_I": c, "num_warps": 1, "seg": 1 if K % 2 else 2, "stages": 2}
            with poisoned():
                y3 = pair_expert_order(x, w13, w2, tw, ids, gu, seg, torch.float32)
            check_state()
            err3 = wd.rel_error(y3, ref)
            assert not y3.isnan().any() and err3 < 1e-5, (T, H, I, E, K, c, err3)
            print(f"two kernels, segments of {seg['seg']}: error {err3:.1e}, state reset")
            with poisoned():  # an output element left unwritten is NaN
                y = moe_expert_order(x, w13, w2, tw, ids, cfg, torch.float32)
            check_flag()
            err = wd.rel_error(y, ref)
            assert not y.isnan().any() and err < 1e-5, (T, H, I, E, K, c, err)
            print(f"T={T} H={H} I={I} E={E} K={K} BLOCK_I={c} BLOCK_H={r} call {call + 1}: error {err:.1e}, "
                  "no program gave up")


def main_v16():
    p = argparse.ArgumentParser()
    p.add_argument("--presets", nargs="+", default=["qwen3-30b-a3b", "olmoe-1b-7b"])
    p.add_argument("--T", type=int, nargs="+", default=[1, 2])
    p.add_argument("--space", choices=["first", "wide", "groups", "seg"], default="first",
                   help="which tiles (candidates: first, wide; candidates_two: first, groups, seg)")
    p.add_argument("--form", choices=["one", "two"], default="one",
                   help="one launch, or the shipped gate/up kernel and a down kernel of its own (two)")
    p.add_argument("--down-alone", action="store_true",
                   help="with --form two: each down kernel alone on a stored intermediate, and the shipped one")
    p.add_argument("--check", action="store_true")
    args = p.parse_args()
    if args.check:
        return check_v16()

    from harness import cases, checked_us_or_none, down_runs, row

    if args.form == "one":
        jobs = [(n, "one", c) for n in args.presets for c in candidates_v16(wd.get_preset(n), args.space)]
    else:
        jobs = [(n, "two", c) for n in args.presets for c in candidates_two(wd.get_preset(n), args.space)]
    built = precompile(jobs)
    max_regs = MAX_REGS if args.space == "first" else 168
    rows = []
    for case in cases(args.presets, args.T):
        s, T = case.shape, case.T
        runs = down_runs(case, wp.warp_down, [])  # the tuned pair, before and after
        gu = wd.configs.warp_config(s.H, s.I, s.E, s.K, T)["gate_up"]
        keep = []
        for _, form, c in [j for j in jobs if j[0] == s.name]:
            regs, spills = built[(s.name, form, str(c))]
            if spills or (form == "one" and regs > max_regs):  # spilled streams are slow
                print(f"{s.name} {c}: {regs} registers, {spills} bytes spilled: skipped")
                continue
            if form == "one":
                fn = partial(lambda c, x, w13, w2, tw, ids: moe_expert_order(x, w13, w2, tw, ids, c), c)
                keep.append((f"one launch {c} ({regs} regs)", fn, c))
            else:
                fn = partial(lambda c, gu, x, w13, w2, tw, ids: pair_expert_order(x, w13, w2, tw, ids, gu, c), c, gu)
                keep.append((f"two kernels {c} ({regs} regs)", fn, c))
        runs[1:1] = keep
        if args.down_alone:  # the down kernels alone, on the intermediate each layer copy's step stores
            acts = {id(i.topk_ids): wp.warp_gate_up(i.x, w13, i.topk_ids, i.topk_weights, gu) for (w13, _), i in
                    zip(case.layers, case.inputs, strict=True)}
            tuned_down = wd.configs.warp_config(s.H, s.I, s.E, s.K, T)["down"]
            runs = [(f"down alone: shipped {tuned_down}", partial(
                lambda acts, d, x, w13, w2, tw, ids: wp.warp_down(acts[id(ids)], w2, ids, tw, d, torch.bfloat16),
                acts, tuned_down), None)]
            runs += [(f"down alone: {label[len('two kernels '):]}", partial(
                lambda acts, c, x, w13, w2, tw, ids: down_alone(acts[id(ids)], w2, ids, tw, c), acts, c), c)
                for label, _, c in keep]
        for label, step, _ in runs:
            res = checked_us_or_none(case, step, label, tol=1.5)
            if res is None:
                continue
            us, err, _ = res
            torch.cuda.synchronize()
            check_flag()  # no program gave up, in the checked run or any timed replay
            check_state()
            rows.append(row(case, variant=label, us=us, err=err))
            print(f"{s.name:14s} T={T} {label:90s} {us:8.2f} us {100 * case.floor_us / us:5.1f}% err/floor {err:.2f}",
                  flush=True)
    harness.save(harness.results_dir() / "expert_order.csv", rows)


VERSIONS = {
    "8": (main_v8, []),
    "16": (main_v16, []),
    "16b": (main_v16, ["--form", "two"]),
    "16c": (main_v16, ["--form", "two", "--space", "seg"]),
}


if __name__ == "__main__":
    harness.dispatch(__doc__, VERSIONS)
