"""Experiment (v8, not shipped): warp decode in one launch, the down programs ordered after every
gate/up program by a ticket counter.

The read bound (results/NOTES.md, ``read_variants.csv``): one launch of Qwen3-30B-A3B's 75.5 MB at
T = 1, one program per 16 KB tile, reaches 87 % of the ceiling; split into warp decode's two
launches, 80 %. The 85 % bar needs one launch. The persistent kernel (v4) held both phases'
registers in every program and looped; the one-pass atomic kernel (v6) read w2 across its rows.
Here every program does one tile of one phase, like the tile read, and the phases share a grid:

- each program takes a ticket (an atomic counter) and does ticket < n_gate_up ? a gate/up tile : a
  down tile. Tickets, not ``program_id``: a program holding a down ticket knows that every gate/up
  ticket went to a program that is already running, so waiting for them cannot deadlock, whatever
  order the hardware dispatches programs in (the rule CUB's decoupled look-back relies on).
- a gate/up program stores its intermediate and counts itself done (release);
- a down program loads its w2 tile (all of I when DN_BLOCK_I ≥ I) before it waits for the done
  count to reach n_gate_up (acquire): its weight stream overlaps the gate/up tail inside one launch.
  Or (``prefetch``) it only asks L2 for the tile's lines before the wait, which holds no register
  (registers are allocated for the heavier phase, and held ones cost every gate/up program
  occupancy), and loads the tile from L2 after it.
- the last down program to finish resets the counters, so the next launch finds them at zero.

    python scripts/ordered_launch.py [--presets qwen3-30b-a3b olmoe-1b-7b gpt-oss-20b] [--T 1 2 4 8]
    TRITON_INTERPRET=1 python scripts/ordered_launch.py --check   # correctness only, on the CPU

On a GPU: checks every config against the float64 reference (poisoned output), then times the
tuned two-kernel pair and each config of the one-launch kernel over the layer copies; rows go to
results/<GPU>/ordered_launch.csv. Nothing here has run on a GPU yet (session 4 ended without
device time); the session that runs it records the outcome in results/NOTES.md.
"""

import argparse
import itertools
import os
from pathlib import Path

import torch
import triton
import triton.language as tl

import warpdecode as wd
from warpdecode import _alloc
from warpdecode.kernels.warp_pair import _down_chunk, _down_tile, _gate_up_tile

MAX_SPINS = 1 << 22  # polls before a down program gives up and raises the flag: never hang the GPU


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
        _gate_up_tile(x_ptr, w13_ptr, topk_ids_ptr, act_ptr, H, I, K, stride_xt, stride_w13e, stride_w13r,
                      stride_at, ticket % n_pairs, ticket // n_pairs, GU_BLOCK_I, GU_BLOCK_H)
        tl.debug_barrier()  # every warp of this program has issued its stores
        tl.atomic_add(sync_ptr + 1, 1, sem="release", scope="gpu")
    else:
        unit = ticket - n_gate_up
        t = unit % T
        pid_h = unit // T
        # the w2 rows do not depend on the intermediate: in flight before the wait
        if PREFETCH_LINES == 0:
            wv = _down_chunk(w2_ptr, topk_ids_ptr, H, I, stride_w2e, stride_w2r, t, pid_h, 0, K, K_PAD, DN_BLOCK_H,
                             DN_BLOCK_I)
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
            wv = _down_chunk(w2_ptr, topk_ids_ptr, H, I, stride_w2e, stride_w2r, t, pid_h, 0, K, K_PAD, DN_BLOCK_H,
                             DN_BLOCK_I)
        _down_tile(act_ptr, w2_ptr, topk_ids_ptr, topk_weights_ptr, y_ptr, H, I, stride_at, stride_w2e, stride_w2r,
                   stride_yt, t, pid_h, wv, K, K_PAD, DN_BLOCK_H, DN_BLOCK_I, ".cg")
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
        DN_BLOCK_H=cfg["DN_BLOCK_H"], DN_BLOCK_I=cfg["DN_BLOCK_I"], MAX_SPINS=MAX_SPINS,
        PREFETCH_LINES=triton.next_power_of_2(triton.cdiv(I, 64)) if cfg.get("prefetch") else 0,
        num_warps=cfg["num_warps"], num_stages=1)
    return y


def candidates(shape, interpret: bool):
    """One num_warps for both phases (one kernel); gate/up tiles of 2–16 KB per matrix; down tiles
    holding all of I (so the whole w2 tile is in flight before the wait) or 256 columns of it; at
    most 64 weight elements per thread in either (128 where one row of all of I needs it).
    Compiled for sm_90a (no GPU) these take 96–246 registers per thread, which leaves 3–8
    programs per SM: the occupancy problem of the persistent kernel (v4) in part, since registers
    are allocated for the heavier phase. The one-warp tiles (session 5: the shipped gate/up
    kernel's shape since v9) take 127 registers, 16 programs per SM, at Qwen3-30B."""
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


def check(shape, T: int, cfg: dict, device) -> float:
    """Error over the bf16 floor on fresh random inputs, the output poisoned; the counters back at zero."""
    from warpdecode.bench.workload import make_inputs, make_layers

    (w13, w2), = make_layers(shape, 1) if device.type == "cuda" else [_cpu_layer(shape)]
    inp = make_inputs(shape, T, 1, seed=77)[0] if device.type == "cuda" else _cpu_inputs(shape, T)
    ref = wd.reference_moe(inp.x, w13, w2, inp.topk_weights, inp.topk_ids)
    with _alloc.poisoned():  # NaN in every buffer: an element never written fails the check
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


def main():
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
            for cfg in candidates(shape, interpret):
                ratio = check(shape, T, cfg, device)
                print(f"{name} T={T} {cfg}: error {ratio:.3f} × the bf16 floor")
                assert ratio <= 1.05, ratio
        return
    _time_all(args, device)


def _time_all(args, device):
    from functools import partial

    from warpdecode.bench import data
    from warpdecode.bench.experiment import cases, checked_us, checked_us_or_none, row
    from warpdecode.warp import moe_warp

    out = Path(f"results/{torch.cuda.get_device_name().replace(' ', '_')}/ordered_launch.csv")
    for name in args.presets:  # correctness first, at an awkward T
        shape = wd.get_preset(name)
        for cfg in candidates(shape, False):
            assert check(shape, 3, cfg, device) <= 1.05, (name, cfg)
    for case in cases(args.presets, args.T):
        s, T = case.shape, case.T
        timed = [("pair (tuned)", checked_us(case, moe_warp, "pair", tol=1.5, reps=50), "")]
        for cfg in candidates(s, False):
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
        data.merge_write(out, rows)  # after every T: a time limit loses only the unfinished ones


if __name__ == "__main__":
    main()
