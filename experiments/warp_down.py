"""Warp decode's down kernel: where it loses to a read of its bytes, and three designs that move its
weight stream into the gate/up kernel's tail.

    python experiments/warp_down.py --version ladder [--all-tiles]
    TRITON_INTERPRET=1 python experiments/warp_down.py --version ladder --check
    python experiments/warp_down.py --version 13 [--presets …] [--T 1 2]
    TRITON_INTERPRET=1 python experiments/warp_down.py --version 13 --check
    python experiments/warp_down.py --version 14 …      (--check likewise)
    python experiments/warp_down.py --version 15 [--kinds tma cp.async]
    python experiments/warp_down.py --version 15 --check   # compiles for sm_90a, no GPU needed
    python experiments/warp_down.py --version 18 [--presets …] [--T 1 2 4 8]
    TRITON_INTERPRET=1 python experiments/warp_down.py --version 18 --check
    python experiments/warp_down.py --version count [--presets …] [--T 1]   # compiles for sm_90a, no GPU needed

- ladder: the load geometry costs ~2 µs at T = 1 (the kernel's loads 10.3–10.5 µs against a tile
  read of the routed experts' w2 at 8.4 µs); no tile the tuner tries reaches the read.
- 13: the whole w2 tile in registers before ``gdc_wait``. Not promoted: 168–255 registers, no gain.
- 14: split over I, each chunk started when its part of the intermediate exists. Not promoted:
  the partial-sum protocol at the end costs more than the early chunks gain (+9 %).
- 15: the whole tile into shared memory (Gluon, TMA or cp.async) before the wait. Not promoted:
  the down kernel alone is no faster with every byte requested (+5 %).
- 17: K 2-D tiles (``PER_SLOT``) against the [rows, K, columns] tile: promoted where Triton ≥ 3.8.
- 18: one [K, rows, columns] tile (``K_FIRST``) against the shipped form: on the H200 to decide.
- count: the pair's two kernels as the H200's table or defaults launch them, compiled for sm_90a by the
  installed Triton, and the down kernel in the other forms: registers, spills and lane instructions
  per weight byte by mnemonic. Run under each release to compare what they compile (OLMoE T = 1 is
  1.07× slower on Triton 3.6 than on 3.9 with the same tiles: vllm_baseline.csv).

Rows: experiments/results/<GPU>/{down_ladder,down_preload,chunk_flags,down_tma,down_2d,down_kfirst}.csv.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import re
import sys
from functools import partial
from pathlib import Path
from unittest import mock

import harness
import torch
import triton
import triton.language as tl
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.ampere import async_copy
from triton.experimental.gluon.language.nvidia.hopper import mbarrier, tma
from triton.language.extra.cuda import gdc_wait

import warpdecode as wd
from bench.poison import poisoned
from warpdecode import _alloc, configs
from warpdecode import warp as wp
from warpdecode.kernels import warp_pair as kp
from warpdecode.kernels.warp_pair import _down_chunk

#: The E this experiment's kernels give the shipped tiles' id guard (kernels/ids.py): its ids come from
#: warpdecode.route, in range, so the guard admits every non-negative id.
IDS_IN_RANGE = tl.constexpr(2**31 - 1)

#: Gluon's CTA-wide barrier: ``thread_barrier`` in Triton 3.6, ``barrier`` from 3.8 on (the API is experimental)
_thread_barrier = getattr(gl, "thread_barrier", None) or gl.barrier

# ==================================================================================================
# version ladder: Experiment: where does warp decode's down kernel lose to a plain read of its bytes?
#
#
# Nsight Compute (``logs/profile_details.log``, ``logs/profile_v15_details.log``): at
# Qwen3-30B-A3B T = 1 the down kernel alone takes 12.5 µs for its 25.2 MB, a one-program-per-16 KB-
# tile read of the same bytes 8.2 µs; and v15, which has all of its bytes in flight at once, takes as
# long as the shipped kernel, so bytes in flight per SM are not it. As ``gate_up_ladder.py`` did for
# the gate/up kernel, this adds the kernel's ingredients to a read one at a time, each
# rung with the tuned kernel's grid and [rows, K, columns] tile, each kernel alone:
#
# 0. ``tile read``: ``experiments/reads.py --version tiles``'s best tile read over one buffer of the same bytes;
#    then the same read over the routed experts' w2 blocks (``region_read_kernel``), expert by expert
#    and interleaved as the down kernel reads them (programs side by side at one offset of every block);
# 1. ``read, experts from pid``: the kernel's loads, the K experts of a token spread over w2 (e =
#    37·(t·K + k) mod E, as many distinct experts as the routing reads), the weights summed;
#    1b. ``read, experts side by side``: the same with e = (t·K + k) mod E (one buffer at T = 1);
# 2. ``read, experts from topk_ids``: the same, each program's expert ids loaded first;
# 3. ``+ intermediate, routing weights`` (the shipped kernel, ``warp_down_kernel``, launched alone).
#
#     python experiments/warp_down.py --version ladder [--presets qwen3-30b-a3b olmoe-1b-7b] [--T 1 2] [--all-tiles]
#     TRITON_INTERPRET=1 python experiments/warp_down.py --version ladder --check    # correctness only, on the CPU
#
# Rows go to experiments/results/<GPU>/down_ladder.csv: µs per call and the fraction of the read ceiling for the
# down kernel's bytes.
# ==================================================================================================

RUNGS = ["read, experts from pid", "read, experts from topk_ids", "read, experts side by side"]


@triton.jit(do_not_specialize=["T"])
def down_probe_kernel(
    w2_ptr,  # (E, H, I) compute dtype
    topk_ids_ptr,  # (T, K) int32
    out_ptr,  # (programs, BLOCK_H) fp32: what each program computed, so no rung is optimised away
    H, I, T, E, stride_we, stride_wr,
    K: tl.constexpr, K_PAD: tl.constexpr, BLOCK_H: tl.constexpr, BLOCK_I: tl.constexpr,
    RUNG: tl.constexpr,  # 0, 1, 2: the rungs 1, 2 and 1b of the module docstring
):
    pid = tl.program_id(0)
    t = pid % T  # the shipped kernel's grid order
    pid_h = pid // T
    offs_h = pid_h * BLOCK_H + tl.arange(0, BLOCK_H)
    offs_k = tl.arange(0, K_PAD)
    mask_k = offs_k < K
    if RUNG == 0:
        e = ((t * K + offs_k) * 37 % E).to(tl.int64)  # no load in front of the weight addresses
    elif RUNG == 2:
        e = ((t * K + offs_k) % E).to(tl.int64)  # adjacent experts: at T = 1 one buffer of K experts
    else:
        e = tl.load(topk_ids_ptr + t.to(tl.int64) * K + offs_k, mask=mask_k, other=0).to(tl.int64)
    offs_i = tl.arange(0, BLOCK_I)
    rows = w2_ptr + offs_h[:, None, None].to(tl.int64) * stride_wr + e[None, :, None] * stride_we
    acc = tl.zeros([BLOCK_H, BLOCK_I], dtype=tl.float32)
    for i0 in range(0, I, BLOCK_I):
        mask = (offs_h < H)[:, None, None] & mask_k[None, :, None] & ((i0 + offs_i) < I)[None, None, :]
        w = tl.load(rows + i0 + offs_i[None, None, :], mask=mask, other=0.0, eviction_policy="evict_first")
        acc += tl.sum(w.to(tl.float32), axis=1)
    tl.store(out_ptr + pid.to(tl.int64) * BLOCK_H + tl.arange(0, BLOCK_H), tl.sum(acc, axis=1), mask=offs_h < H)


@triton.jit
def region_read_kernel(w2_ptr, experts_ptr, out_ptr, PER_E, TILES_PER_E, N_E,
                       BLOCK: tl.constexpr, SUB: tl.constexpr, INTERLEAVE: tl.constexpr):
    """The tile read over the routed experts' w2 blocks, 16 KB per program as four independent
    loads, the expert loaded first: expert by expert (program p reads tile p % TILES_PER_E of
    expert p // TILES_PER_E), or INTERLEAVE'd as the down kernel reads them (tile p // N_E of
    expert p % N_E: programs side by side read the same offset in every expert's block)."""
    pid = tl.program_id(0)
    if INTERLEAVE:
        which, tile = pid % N_E, pid // N_E
    else:
        which, tile = pid // TILES_PER_E, pid % TILES_PER_E
    e = tl.load(experts_ptr + which).to(tl.int64)
    base = w2_ptr + e * PER_E + tile.to(tl.int64) * BLOCK
    acc = tl.zeros([SUB], dtype=tl.float32)
    for j in tl.static_range(BLOCK // SUB):
        offs = j * SUB + tl.arange(0, SUB)
        lim = PER_E - tile.to(tl.int64) * BLOCK
        acc += tl.load(base + offs, mask=offs < lim, other=0.0, eviction_policy="evict_first").to(tl.float32)
    tl.store(out_ptr + which * TILES_PER_E + tile, tl.sum(acc, axis=0))


def region_read(w2, experts, out, interleave: bool = False):
    E, H, I = w2.shape  # noqa: E741
    tiles = triton.cdiv(H * I, 8192)
    region_read_kernel[(experts.numel() * tiles,)](w2, experts, out, H * I, tiles, experts.numel(), BLOCK=8192,
                                                   SUB=2048, INTERLEAVE=interleave, num_warps=8)
    return out


def probe(w2, topk_ids, cfg: dict, rung: int) -> torch.Tensor:
    E, H, I = w2.shape  # noqa: E741
    T, K = topk_ids.shape
    grid = (T * triton.cdiv(H, cfg["BLOCK_H"]),)
    out = torch.empty(grid[0], cfg["BLOCK_H"], dtype=torch.float32, device=w2.device)
    down_probe_kernel[grid](w2, topk_ids, out, H, I, T, E, w2.stride(0), w2.stride(1), K=K,
                            K_PAD=triton.next_power_of_2(K), BLOCK_H=cfg["BLOCK_H"], BLOCK_I=cfg["BLOCK_I"],
                            RUNG=rung, num_warps=cfg["num_warps"], num_stages=1)
    return out


def expected(w2, topk_ids, cfg: dict, rung: int) -> torch.Tensor:
    """What each program should have stored, in float64: its rows of its token's K experts, summed."""
    E, H, I = w2.shape  # noqa: E741
    T, K = topk_ids.shape
    bh = cfg["BLOCK_H"]
    out = torch.zeros(T * triton.cdiv(H, bh), bh, dtype=torch.float64)
    for pid in range(out.shape[0]):
        t, pid_h = pid % T, pid // T
        experts = [(t * K + k) * 37 % E if rung == 0 else (t * K + k) % E if rung == 2 else int(topk_ids[t, k])
                   for k in range(K)]
        for j, h in enumerate(range(pid_h * bh, min(H, (pid_h + 1) * bh))):
            out[pid, j] = sum(w2[e, h].double().sum() for e in experts)
    return out


def check_cpu():
    g = torch.Generator().manual_seed(0)
    for T, H, I, E, K, cfg in [(2, 20, 48, 7, 3, {"BLOCK_H": 8, "BLOCK_I": 16, "num_warps": 4}),
                               (1, 16, 40, 5, 5, {"BLOCK_H": 4, "BLOCK_I": 32, "num_warps": 2})]:
        w2 = torch.randn(E, H, I, generator=g).bfloat16()
        ids = torch.stack([torch.randperm(E, generator=g)[:K] for _ in range(T)]).int()
        valid = torch.zeros(T * triton.cdiv(H, cfg["BLOCK_H"]), cfg["BLOCK_H"], dtype=torch.bool)
        for pid in range(valid.shape[0]):  # rows past H are not stored
            valid[pid, : max(0, min(cfg["BLOCK_H"], H - (pid // T) * cfg["BLOCK_H"]))] = True
        for rung in range(3):
            got, want = probe(w2, ids, cfg, rung).double(), expected(w2, ids, cfg, rung)
            err = ((got - want)[valid].norm() / want[valid].norm()).item()
            print(f"T={T} H={H} I={I} E={E} K={K} rung {rung + 1} ({RUNGS[rung]}): relative error {err:.2e} "
                  "against float64")
            assert err < 1e-5, err
        experts = torch.unique(ids).int()
        for interleave in (False, True):
            got = region_read(w2, experts, torch.empty(experts.numel() * triton.cdiv(H * I, 8192)), interleave)
            want = torch.stack([w2[int(e)].double().sum() for e in experts])
            err = ((got.double() - want).norm() / want.norm()).item()
            print(f"T={T} H={H} I={I} E={E} K={K} tile read of the routed experts (interleaved: {interleave}): "
                  f"relative error {err:.2e} against float64")
            assert err < 1e-5, err


def main_ladder():
    p = argparse.ArgumentParser()
    p.add_argument("--presets", nargs="+", default=["qwen3-30b-a3b", "olmoe-1b-7b"])
    p.add_argument("--T", type=int, nargs="+", default=[1, 2])
    p.add_argument("--all-tiles", action="store_true",
                   help="also the shipped kernel alone with every down tile the tuner tries")
    p.add_argument("--check", action="store_true")
    args = p.parse_args()
    if args.check or os.environ.get("TRITON_INTERPRET") == "1":
        check_cpu()
        return

    from bench.sweep import meta
    from bench.timing import capture, read_ceiling, time_replays
    from warpdecode.workload import make_inputs, make_layers, num_copies

    sys.path.insert(0, str(Path(__file__).parent))
    from reads import _tile_read

    ceiling = read_ceiling()
    rows = []
    for name in args.presets:
        shape = wd.get_preset(name)
        L = num_copies(shape)
        w2s = [w2 for _, w2 in make_layers(shape, L)]
        for T in args.T:
            inputs = make_inputs(shape, T, L, seed=1000 + T)
            down_bytes = sum(torch.unique(i.topk_ids).numel() for i in inputs) / L * shape.H * shape.I * 2
            floor_us = down_bytes / (ceiling * 1e12) * 1e6
            cfg = configs.warp_config(shape.H, shape.I, shape.E, shape.K, T)["down"]
            results = rungs(shape, w2s, inputs, cfg, int(down_bytes) // 2, capture, time_replays, _tile_read)
            if args.all_tiles:
                results += every_tile(shape, w2s, inputs, time_replays)
            for rung, us in results:
                rows.append({"preset": name, "T": T, "rung": rung, "config": str(cfg), "us": round(us, 3),
                             "down_MB": round(down_bytes / 1e6, 2), "frac_ceiling": round(floor_us / us, 4),
                             "ceiling_TBps": round(ceiling, 4), **meta()})
                print(f"{name:14s} T={T} {rung:42s} {us:8.2f} us {100 * floor_us / us:5.1f}%", flush=True)
        w2s = None
        torch.cuda.empty_cache()
    harness.save(harness.results_dir() / "down_ladder.csv", rows)


def every_tile(shape, w2s, inputs, time_replays):
    """(label, µs per call) of the shipped down kernel alone with each tile the tuner tries, each
    checked first against the float64 down projection (outputs poisoned, one replay)."""
    from bench.timing import capture_poisoned
    from warpdecode.tuner import warp_candidates

    L, T = len(w2s), inputs[0].x.shape[0]
    acts = [torch.randn(T * shape.K, shape.I, device="cuda") for _ in range(L)]
    i0 = inputs[0]
    ref = down_reference(acts[0], w2s[0], i0.topk_ids, i0.topk_weights)
    out = []
    with mock.patch.object(wp, "USE_PDL", False):
        for c in warp_candidates(shape.H, shape.I, shape.K)[1]:
            g, ys = capture_poisoned(lambda c=c: [wp.warp_down(a, w, i.topk_ids, i.topk_weights, c, torch.bfloat16)
                                                  for a, w, i in zip(acts, w2s, inputs, strict=True)])
            err = wd.rel_error(ys[0], ref) / wd.rounding_floor(ref, torch.bfloat16)
            if not err <= 1.5:  # NaN fails too
                raise AssertionError(f"{shape.name} T={T} {c}: error {err:.2f} × the bf16 floor")
            out.append((f"shipped kernel alone, {c}", time_replays(g, reps=40).median_us / L))
    return out


def down_reference(act, w2, topk_ids, topk_weights):
    """y[t] = Σ_k topk_weights[t, k] · w2[topk_ids[t, k]] @ act[t·K + k], in float64."""
    T, K = topk_ids.shape
    w = w2[topk_ids.flatten().long()].double()  # (T·K, H, I)
    y = torch.einsum("phi,pi->ph", w, act.double()) * topk_weights.flatten().double()[:, None]
    return y.view(T, K, -1).sum(dim=1)


def rungs(shape, w2s, inputs, cfg, n, capture, time_replays, tile_read):
    """(rung, µs per call) for every rung, each over the layer copies in one CUDA graph."""
    L, T = len(w2s), inputs[0].x.shape[0]
    ids = [i.topk_ids for i in inputs]
    acts = [torch.randn(T * shape.K, shape.I, device="cuda") for _ in range(L)]
    bufs = [torch.randn(n, device="cuda", dtype=torch.bfloat16) for _ in range(L)]
    outs = [torch.empty(triton.cdiv(n, 8192), device="cuda") for _ in range(L)]

    def timed(step):
        g, _ = capture(step)
        return time_replays(g, reps=60).median_us / L

    out = [("tile read of the bytes", timed(lambda: [
        tile_read[(o.numel(),)](b, o, n, BLOCK=8192, SUB=2048, num_warps=8) for b, o in zip(bufs, outs, strict=True)]))]
    experts = [torch.unique(i).int() for i in ids]
    sums = [torch.empty(e.numel() * triton.cdiv(shape.H * shape.I, 8192), device="cuda") for e in experts]
    for interleave in (False, True):
        out.append((f"tile read of the routed experts' w2{', interleaved' if interleave else ''}", timed(
            lambda il=interleave: [region_read(w, e, o, il) for w, e, o in zip(w2s, experts, sums, strict=True)])))
    for r in (0, 2, 1):
        out.append((RUNGS[r], timed(lambda r=r: [probe(w, i, cfg, r) for w, i in zip(w2s, ids, strict=True)])))
    with mock.patch.object(wp, "USE_PDL", False):  # alone: no overlap with the previous launch
        out.append(("+ intermediate, routing weights (shipped)", timed(lambda: [
            wp.warp_down(a, w, i.topk_ids, i.topk_weights, cfg, torch.bfloat16)
            for a, w, i in zip(acts, w2s, inputs, strict=True)])))
    return out


# ==================================================================================================
# version 13: v13, an experiment: the warp down kernel with all of its w2 tile loaded before ``gdc_wait``.
#
#
#     python experiments/warp_down.py --version 13 [--presets qwen3-30b-a3b olmoe-1b-7b] [--T 1 2]
#     TRITON_INTERPRET=1 python experiments/warp_down.py --version 13 --check   # the contract only, on the CPU
#
# The shipped down kernel (kernels/warp_pair.py) loads the first BLOCK_I columns of its [BLOCK_H, K,
# BLOCK_I] tile before it waits for the gate/up kernel (programmatic dependent launch), and the rest
# after: at Qwen3-30B T=1, two thirds of w2's 25 MB follow kernel 1 (v2's diagnosis).
# Here a program loads its whole tile, in CHUNKS (≤ 4) chunks of BLOCK_I columns held in registers
# at once, before the wait; after it only the intermediate is read. The tuner's one-shot tiles
# (BLOCK_I ≥ I, padded to a power of two) wasted a quarter of their registers at I = 768 on masked
# columns and spilled, so it dropped them; three chunks of 256 do not pad.
#
# Byte ledger (Qwen3-30B, T=1): w2 of 8 experts, 25.2 MB, the same as the shipped kernel; the
# prediction: with most of it requested during the gate/up kernel's last wave, the pair from 22.4
# towards the one-launch read of its 75.5 MB (19.1 µs, ``read_variants.csv``).
#
# Each candidate runs in the pair with the tuned gate/up kernel, against the tuned pair in the same
# process (the same routings, seed 1000 + T like the benchmark), checked against the float64
# reference first. Rows: experiments/results/<GPU>/down_preload.csv.
# ==================================================================================================

INTERPRET_v13 = os.environ.get("TRITON_INTERPRET") == "1"


@triton.jit
def _fold(acc, wv, act_ptr, pairs, rw, mask_k, stride_at, i0, I, BLOCK_I: tl.constexpr):
    """acc += Σ_k wv[:, k, :] · rw[k] · act[pair_k, i0 : i0 + BLOCK_I] (the combine over K in registers)."""
    offs_i = i0 + tl.arange(0, BLOCK_I)
    a = tl.load(act_ptr + pairs[:, None] * stride_at + offs_i[None, :], mask=mask_k[:, None] & (offs_i < I)[None, :],
                other=0.0).to(tl.float32) * rw[:, None]
    return acc + tl.sum(wv.to(tl.float32) * a[None, :, :], axis=1)


@triton.jit(do_not_specialize=["T"])
def down_preload_kernel(
    act_ptr,  # (T*K, I) fp32
    w2_ptr,  # (E, H, I) compute dtype
    topk_ids_ptr,  # (T, K) int32
    topk_weights_ptr,  # (T, K) fp32
    y_ptr,  # (T, H) compute dtype
    H, I, T, stride_at, stride_we, stride_wr, stride_yt,
    K: tl.constexpr, K_PAD: tl.constexpr, BLOCK_H: tl.constexpr, BLOCK_I: tl.constexpr,
    CHUNKS: tl.constexpr,  # cdiv(I, BLOCK_I), 1 … 4: the whole tile is loaded before the wait
    USE_PDL: tl.constexpr,
):
    pid = tl.program_id(0)
    t = pid % T
    pid_h = pid // T
    w0 = _down_chunk(w2_ptr, topk_ids_ptr, H, I, IDS_IN_RANGE, stride_we, stride_wr, t, pid_h, 0, K, K_PAD, BLOCK_H,
                     BLOCK_I, False)
    w1 = w0
    w2 = w0
    w3 = w0
    if CHUNKS > 1:
        w1 = _down_chunk(w2_ptr, topk_ids_ptr, H, I, IDS_IN_RANGE, stride_we, stride_wr, t, pid_h, BLOCK_I,
                         K, K_PAD, BLOCK_H, BLOCK_I, False)
    if CHUNKS > 2:
        w2 = _down_chunk(w2_ptr, topk_ids_ptr, H, I, IDS_IN_RANGE, stride_we, stride_wr, t, pid_h, 2 * BLOCK_I,
                         K, K_PAD, BLOCK_H, BLOCK_I, False)
    if CHUNKS > 3:
        w3 = _down_chunk(w2_ptr, topk_ids_ptr, H, I, IDS_IN_RANGE, stride_we, stride_wr, t, pid_h, 3 * BLOCK_I,
                         K, K_PAD, BLOCK_H, BLOCK_I, False)
    if USE_PDL:
        gdc_wait()  # kernel 1 has finished and its intermediate is visible

    offs_k = tl.arange(0, K_PAD)
    mask_k = offs_k < K
    pairs = t.to(tl.int64) * K + offs_k
    rw = tl.load(topk_weights_ptr + pairs, mask=mask_k, other=0.0)
    acc = tl.zeros([BLOCK_H, BLOCK_I], dtype=tl.float32)
    acc = _fold(acc, w0, act_ptr, pairs, rw, mask_k, stride_at, 0, I, BLOCK_I)
    if CHUNKS > 1:
        acc = _fold(acc, w1, act_ptr, pairs, rw, mask_k, stride_at, BLOCK_I, I, BLOCK_I)
    if CHUNKS > 2:
        acc = _fold(acc, w2, act_ptr, pairs, rw, mask_k, stride_at, 2 * BLOCK_I, I, BLOCK_I)
    if CHUNKS > 3:
        acc = _fold(acc, w3, act_ptr, pairs, rw, mask_k, stride_at, 3 * BLOCK_I, I, BLOCK_I)
    offs_h = pid_h * BLOCK_H + tl.arange(0, BLOCK_H)
    tl.store(y_ptr + t.to(tl.int64) * stride_yt + offs_h, tl.sum(acc, axis=1).to(y_ptr.dtype.element_ty),
             mask=offs_h < H)


def down_preload(act, w2, topk_ids, topk_weights, cfg: dict, out_dtype) -> torch.Tensor:
    E, H, I = w2.shape  # noqa: E741
    T, K = topk_ids.shape
    chunks = triton.cdiv(I, cfg["BLOCK_I"])
    if chunks > 4:
        raise ValueError(f"BLOCK_I={cfg['BLOCK_I']} leaves {chunks} chunks of I={I}; at most 4")
    y = _alloc.empty(T, H, dtype=out_dtype, device=act.device)
    down_preload_kernel[(T * triton.cdiv(H, cfg["BLOCK_H"]),)](
        act, w2, topk_ids, topk_weights, y, H, I, T, act.stride(0), w2.stride(0), w2.stride(1), y.stride(0),
        K=K, K_PAD=triton.next_power_of_2(K), BLOCK_H=cfg["BLOCK_H"], BLOCK_I=cfg["BLOCK_I"], CHUNKS=chunks,
        USE_PDL=wp.USE_PDL, num_warps=cfg["num_warps"], num_stages=1,
        **({"launch_pdl": True} if wp.USE_PDL else {}),
    )
    return y


def candidates_v13(I: int, K: int, per_thread: int = 256):  # noqa: E741
    """(rows, warps) with a row per warp or fewer; chunks of 256–1024 columns, ≤ 4 of them; the
    whole tile at ≤ ``per_thread`` elements per thread."""
    k_pad = triton.next_power_of_2(K)
    out = []
    for (r, w), c in itertools.product([(1, 1), (2, 1), (2, 2), (4, 2), (4, 4), (8, 4), (8, 8), (1, 2), (2, 4),
                                        (4, 8)], [256, 512, 1024]):
        chunks = triton.cdiv(I, c)
        if chunks <= 4 and r * k_pad * c * chunks // (32 * w) <= per_thread and w <= r * max(1, c // 256):
            out.append({"BLOCK_H": r, "BLOCK_I": c, "num_warps": w})
    return out


def check_v13():
    """The kernel against the float64 reference at odd shapes (the interpreter runs it on the CPU)."""
    gen = torch.Generator().manual_seed(0)
    cases = [(1, 40, 48, 5, 2, 16), (3, 24, 40, 7, 7, 16), (2, 16, 64, 3, 1, 32), (1, 8, 33, 4, 4, 16),
             (1, 16, 64, 5, 3, 16), (2, 8, 16, 3, 2, 16)]  # odd H, I; K = 1, K = E; 1 … 4 chunks
    for T, H, I, E, K, c in cases:
        x = torch.randn(T, H, generator=gen)
        w13 = torch.randn(E, 2 * I, H, generator=gen) / H**0.5
        w2 = torch.randn(E, H, I, generator=gen) / I**0.5
        ids = torch.stack([torch.randperm(E, generator=gen)[:K] for _ in range(T)]).to(torch.int32)
        tw = torch.rand(T, K, generator=gen)
        act = wp.warp_gate_up(x, w13, ids, tw, wd.configs.warp_config(H, I, E, K, T)["gate_up"])
        cfg = {"BLOCK_H": 4, "BLOCK_I": c, "num_warps": 1}
        with poisoned():  # an output element left unwritten is NaN
            y = down_preload(act, w2, ids, tw, cfg, torch.float32)
        ref = wd.reference_moe(x, w13, w2, tw, ids)
        err = wd.rel_error(y, ref)
        assert err < 1e-5, (T, H, I, E, K, c, err)
        print(f"T={T} H={H} I={I} E={E} K={K} BLOCK_I={c} chunks={triton.cdiv(I, c)}: error {err:.1e}")


def main_v13():
    p = argparse.ArgumentParser()
    p.add_argument("--presets", nargs="+", default=["qwen3-30b-a3b", "olmoe-1b-7b"])
    p.add_argument("--T", type=int, nargs="+", default=[1, 2])
    p.add_argument("--check", action="store_true")
    args = p.parse_args()
    if args.check:
        return check_v13()

    from harness import cases, checked_us_or_none, down_runs, row

    from warpdecode.tuner import _compiled_for

    rows = []
    compiled = {}  # config -> (registers per thread, spilled bytes)
    for case in cases(args.presets, args.T):
        s, T = case.shape, case.T
        for label, step, cfg in down_runs(case, down_preload, candidates_v13(s.I, s.K), prefix="preload "):
            cache = _compiled_for(down_preload_kernel)
            before = set(cache)
            res = checked_us_or_none(case, step, label, tol=1.5)
            if res is None:
                continue
            us, err, _ = res
            new = [cache[key] for key in cache if key not in before]
            if new:  # compiled for this config just now
                compiled[json.dumps(cfg, sort_keys=True)] = (new[0].n_regs, new[0].n_spills)
            regs, spills = compiled.get(json.dumps(cfg, sort_keys=True), ("", ""))
            rows.append(row(case, variant=label, regs=regs, spills=spills, us=us, err=err))
            print(f"{s.name:14s} T={T} {label:78s} {us:8.2f} us {100 * case.floor_us / us:5.1f}% "
                  f"err/floor {err:.2f} regs {regs} spills {spills}", flush=True)
    harness.save(harness.results_dir() / "down_preload.csv", rows)


# ==================================================================================================
# version 14: v14, an experiment: the warp down kernel split over I, each chunk started as soon as its part of
#
# the intermediate exists.
#
#     python experiments/warp_down.py --version 14 [--presets qwen3-30b-a3b olmoe-1b-7b] [--T 1 2]
#     TRITON_INTERPRET=1 python experiments/warp_down.py --version 14 --check   # the contract only, on the CPU
#
# Why (docs/design.md, v2 and v13): with programmatic dependent launch the down kernel's programs
# become resident during the gate/up kernel's last wave, but each waits (``gdc_wait``) for the whole
# gate/up kernel before it uses its w2 rows, and holds its registers meanwhile. So what overlaps
# kernel 1's tail is capped by how many down programs fit beside it, whatever each has loaded (v13).
# Every down output needs every neuron of every routed expert, so no down program can finish before
# kernel 1 does — unless the down work is split over I. Here a program owns one chunk of BLOCK_I
# columns of one [BLOCK_H, K, BLOCK_I] tile, chunk-major in the grid (chunk 0's programs first). The
# gate/up kernel's grid runs neuron blocks slowest, so neurons 0…BLOCK_I−1 of every pair are written
# first: by the time the down programs are resident, chunk 0 is done, and its programs can finish and
# leave while kernel 1 still runs, making room for the next.
#
# The protocol, with no fence or atomic added to kernel 1:
# - The intermediate lives in a buffer whose every element holds a sentinel bit pattern (0xFFFFFFFF,
#   a NaN that no arithmetic produces: GPUs return the canonical 0x7FFFFFFF) until kernel 1 stores
#   its value. A down program reads its chunk of the token's K rows (volatile loads, past L1) until no
#   element is the sentinel; a spin limit sets a flag instead of hanging.
# - Each program stores its partial sums (BLOCK_H FP32 numbers) to a scratch and bumps its row block's
#   counter (acq_rel); the last of the CHUNKS programs of a row block sums the partials in chunk order
#   (the same result whatever the arrival order), stores y once, and zeroes the counter.
# - The last program of the grid (a second counter) writes the sentinel back into the intermediate
#   and zeroes that counter, so the next call finds the buffer as this one did. The next call's gate/up
#   kernel is an ordinary launch, so it starts only after all of this.
# No deadlock: a down program is dispatched only after every gate/up program has started (PDL), so
# the programs it waits for are running. Without PDL (the CPU interpreter) kernel 1 has finished.
#
# Byte ledger (Qwen3-30B, T=1): the same 75.5 MB as the shipped pair, plus the partials (CHUNKS × H ×
# 4 B = 24 KB) and the sentinel refill (T·K·I·4 B = 24 KB). Prediction: the pair from 22.4 µs
# towards the one-launch tile read of the same bytes (19.1 µs, ``read_variants.csv``), if the down
# programs of chunks 0 and 1 keep HBM busy during kernel 1's tail.
#
# Each candidate runs with the tuned gate/up kernel, against the tuned pair in the same process (the
# bench's routings, seed 1000 + T), checked against the float64 reference, the protocol's state
# checked after. Rows: experiments/results/<GPU>/chunk_flags.csv.
# ==================================================================================================

INTERPRET_v14 = os.environ.get("TRITON_INTERPRET") == "1"
SENTINEL = -1  # int32 bits 0xFFFFFFFF
MAX_SPINS = 200_000  # ~0.1-0.2 s of polling, then give up and raise the flag


@triton.jit(do_not_specialize=["T", "NUM_PROGRAMS"])
def down_chunked_kernel(
    act_bits_ptr,  # (T*K, I) int32 view of the fp32 intermediate; the sentinel where not yet written
    w2_ptr,  # (E, H, I) compute dtype
    topk_ids_ptr,  # (T, K) int32
    topk_weights_ptr,  # (T, K) fp32
    y_ptr,  # (T, H) compute dtype
    part_ptr,  # (CHUNKS, T, H) fp32 scratch: each chunk's partial sums
    count_ptr,  # (T * cdiv(H, BLOCK_H),) int32, zero between calls: chunks done per (token, row block)
    state_ptr,  # (2,) int32: [programs done (zero between calls), timed out]
    H, I, T, NUM_PROGRAMS, stride_at, stride_we, stride_wr, stride_yt,
    K: tl.constexpr, K_PAD: tl.constexpr, BLOCK_H: tl.constexpr, BLOCK_I: tl.constexpr,
    CHUNKS: tl.constexpr, MAX_SPINS: tl.constexpr, FILL: tl.constexpr,
):
    pid = tl.program_id(0)
    n_h = tl.cdiv(H, BLOCK_H)
    c = pid // (T * n_h)  # the chunk varies slowest: chunk 0's programs are dispatched first
    rest = pid % (T * n_h)
    t = rest % T
    pid_h = rest // T
    i0 = c * BLOCK_I
    wv = _down_chunk(w2_ptr, topk_ids_ptr, H, I, IDS_IN_RANGE, stride_we, stride_wr, t, pid_h, i0, K, K_PAD, BLOCK_H,
                     BLOCK_I, False)

    offs_k = tl.arange(0, K_PAD)
    mask_k = offs_k < K
    pairs = t.to(tl.int64) * K + offs_k
    offs_i = i0 + tl.arange(0, BLOCK_I)
    amask = mask_k[:, None] & (offs_i < I)[None, :]
    a_ptrs = act_bits_ptr + pairs[:, None] * stride_at + offs_i[None, :]
    bits = tl.load(a_ptrs, mask=amask, other=0, volatile=True)
    pending = tl.sum((bits == -1).to(tl.int32))
    spins = 0
    while (pending > 0) & (spins < MAX_SPINS):  # kernel 1 has not written all of this chunk yet
        bits = tl.load(a_ptrs, mask=amask, other=0, volatile=True)
        pending = tl.sum((bits == -1).to(tl.int32))
        spins += 1
    if pending > 0:
        tl.atomic_xchg(state_ptr + 1, 1)  # timed out; the host raises

    rw = tl.load(topk_weights_ptr + pairs, mask=mask_k, other=0.0)
    a = bits.to(tl.float32, bitcast=True) * rw[:, None]
    part = tl.sum(tl.sum(wv.to(tl.float32) * a[None, :, :], axis=1), axis=1)  # [BLOCK_H]
    offs_h = pid_h * BLOCK_H + tl.arange(0, BLOCK_H)
    mask_h = offs_h < H
    y_ptrs = y_ptr + t.to(tl.int64) * stride_yt + offs_h
    if CHUNKS == 1:
        tl.store(y_ptrs, part.to(y_ptr.dtype.element_ty), mask=mask_h)
    else:
        tl.store(part_ptr + (c * T + t).to(tl.int64) * H + offs_h, part, mask=mask_h)
        old = tl.atomic_add(count_ptr + t * n_h + pid_h, 1, sem="acq_rel")  # release mine, acquire the others'
        if old == CHUNKS - 1:  # the row block's last chunk: its partials in chunk order, y stored once
            tl.atomic_xchg(count_ptr + t * n_h + pid_h, 0)
            acc = tl.zeros([BLOCK_H], dtype=tl.float32)
            for cc in tl.static_range(CHUNKS):
                acc += tl.load(part_ptr + (cc * T + t).to(tl.int64) * H + offs_h, mask=mask_h, other=0.0,
                               volatile=True)
            tl.store(y_ptrs, acc.to(y_ptr.dtype.element_ty), mask=mask_h)

    done = tl.atomic_add(state_ptr, 1, sem="acq_rel")  # after this program's reads of the intermediate
    if done == NUM_PROGRAMS - 1:  # the grid's last: the sentinel back everywhere, the count to zero
        n = T * K * I
        for r0 in range(0, n, FILL):
            offs = r0 + tl.arange(0, FILL)
            tl.store(act_bits_ptr + offs, tl.full([FILL], -1, tl.int32), mask=offs < n)
        tl.atomic_xchg(state_ptr, 0)


_STATE = {}  # (device, T, K, H, I, BLOCK_H, CHUNKS) -> buffers of the protocol


def _buffers(device, T, K, H, I, block_h, chunks):  # noqa: E741
    key = (str(device), T, K, H, I, block_h, chunks)
    if key not in _STATE:
        _STATE[key] = dict(
            act=torch.full((T * K, I), SENTINEL, dtype=torch.int32, device=device).view(torch.float32),
            part=torch.empty(chunks, T, H, dtype=torch.float32, device=device),
            count=torch.zeros(T * triton.cdiv(H, block_h), dtype=torch.int32, device=device),
            state=torch.zeros(2, dtype=torch.int32, device=device),
        )
    return _STATE[key]


def pair_chunked(x, w13, w2, topk_ids, topk_weights, gu_cfg: dict, cfg: dict, out_dtype=torch.bfloat16):
    """The tuned gate/up kernel writing into the protocol's intermediate, then the chunked down kernel."""
    T, H = x.shape
    E, _, I = w2.shape  # noqa: E741
    K = topk_ids.shape[1]
    chunks = triton.cdiv(I, cfg["BLOCK_I"])
    b = _buffers(x.device, T, K, H, I, cfg["BLOCK_H"], chunks)
    act = b["act"]
    kp.warp_gate_up_kernel[(T * K * triton.cdiv(I, gu_cfg["BLOCK_I"]),)](
        x, w13, topk_ids, topk_weights, act, H, I, w13.shape[0], T * K, K, x.stride(0), w13.stride(0), w13.stride(1),
        act.stride(0),
        BLOCK_I=gu_cfg["BLOCK_I"], BLOCK_H=gu_cfg["BLOCK_H"], USE_PDL=wp.USE_PDL,
        num_warps=gu_cfg["num_warps"], num_stages=gu_cfg["num_stages"],
    )
    y = _alloc.empty(T, H, dtype=out_dtype, device=x.device)
    grid = chunks * T * triton.cdiv(H, cfg["BLOCK_H"])
    down_chunked_kernel[(grid,)](
        act.view(torch.int32), w2, topk_ids, topk_weights, y, b["part"], b["count"], b["state"],
        H, I, T, grid, act.stride(0), w2.stride(0), w2.stride(1), y.stride(0),
        K=K, K_PAD=triton.next_power_of_2(K), BLOCK_H=cfg["BLOCK_H"], BLOCK_I=cfg["BLOCK_I"], CHUNKS=chunks,
        MAX_SPINS=MAX_SPINS, FILL=1024,
        num_warps=cfg["num_warps"], num_stages=1, **({"launch_pdl": True} if wp.USE_PDL else {}),
    )
    return y


def check_state():
    """Every protocol buffer as a call must leave it: the intermediate all sentinel, counters zero,
    no time-out."""
    for key, b in _STATE.items():
        assert bool((b["act"].view(torch.int32) == SENTINEL).all()), f"{key}: the sentinel is not back"
        assert int(b["count"].abs().sum()) == 0, f"{key}: a row block's count was left"
        assert int(b["state"][0]) == 0, f"{key}: the grid's count was left"
        assert int(b["state"][1]) == 0, f"{key}: a down program gave up waiting"


def candidates_v14(I: int, K: int):  # noqa: E741
    """Chunks of 128 or 256 columns, 4-16 rows, 2-8 warps: 16-128 bf16 weights per thread (the
    shipped down tile, 8 rows × 256 columns over 4 warps at K = 8, holds 128)."""
    k_pad = triton.next_power_of_2(K)
    return [{"BLOCK_H": r, "BLOCK_I": c, "num_warps": w}
            for r, c, w in itertools.product([4, 8, 16], [128, 256], [2, 4, 8])
            if 16 <= r * k_pad * c // (32 * w) <= 128]


def check_v14():
    """Two calls in a row (the second finds the buffers the first left) at odd shapes, 1-4 chunks,
    K = 1 and K = E, against float64; the protocol's state after each."""
    gen = torch.Generator().manual_seed(0)
    cases = [(1, 40, 48, 5, 2, 16, 4), (3, 24, 40, 7, 7, 16, 4), (2, 16, 64, 3, 1, 32, 8), (1, 8, 33, 4, 4, 16, 2),
             (1, 16, 64, 5, 3, 64, 4), (2, 16, 64, 3, 2, 16, 4)]  # T, H, I, E, K, BLOCK_I, BLOCK_H
    for T, H, I, E, K, c, r in cases:  # noqa: E741
        w13 = torch.randn(E, 2 * I, H, generator=gen) / H**0.5
        w2 = torch.randn(E, H, I, generator=gen) / I**0.5
        gu = wd.configs.warp_config(H, I, E, K, T)["gate_up"]
        for call in range(2):
            x = torch.randn(T, H, generator=gen)
            ids = torch.stack([torch.randperm(E, generator=gen)[:K] for _ in range(T)]).to(torch.int32)
            tw = torch.rand(T, K, generator=gen)
            with poisoned():  # an output element left unwritten is NaN
                y = pair_chunked(x, w13, w2, ids, tw, gu, {"BLOCK_H": r, "BLOCK_I": c, "num_warps": 1}, torch.float32)
            check_state()
            err = wd.rel_error(y, wd.reference_moe(x, w13, w2, tw, ids))
            assert err < 1e-5, (T, H, I, E, K, c, err)
            print(f"T={T} H={H} I={I} E={E} K={K} BLOCK_I={c} chunks={triton.cdiv(I, c)} call {call + 1}: "
                  f"error {err:.1e}, state reset")


def main_v14():
    p = argparse.ArgumentParser()
    p.add_argument("--presets", nargs="+", default=["qwen3-30b-a3b", "olmoe-1b-7b"])
    p.add_argument("--T", type=int, nargs="+", default=[1, 2])
    p.add_argument("--check", action="store_true")
    args = p.parse_args()
    if args.check:
        return check_v14()

    from harness import cases, checked_us_or_none, down_runs, row

    rows = []
    preset = None
    for case in cases(args.presets, args.T):
        s, T = case.shape, case.T
        if s.name != preset:  # the protocol's state belongs to the previous preset's layers
            _STATE.clear()
            preset = s.name
        tuned = wd.configs.warp_config(s.H, s.I, s.E, s.K, T)

        def chunked(cfg, x, w13, w2, tw, ids, tuned=tuned):
            return pair_chunked(x, w13, w2, ids, tw, tuned["gate_up"], cfg)

        if wp.schedule_of(tuned) != "split":
            print(f"{s.name} T={T}: the tuned schedule is {wp.schedule_of(tuned)}; compared with the pair anyway")
        runs = down_runs(case, wp.warp_down, [])  # the tuned pair, before and after
        runs[1:1] = [(f"chunked {c}", partial(chunked, c), c) for c in candidates_v14(s.I, s.K)]
        for label, step, _ in runs:
            res = checked_us_or_none(case, step, label, tol=1.5)
            if res is None:
                continue
            us, err, _ = res
            torch.cuda.synchronize()
            check_state()  # back at rest after the checked run and every timed replay
            rows.append(row(case, variant=label, us=us, err=err))
            print(f"{s.name:14s} T={T} {label:62s} {us:8.2f} us {100 * case.floor_us / us:5.1f}% err/floor {err:.2f}",
                  flush=True)
    _STATE.clear()
    harness.save(harness.results_dir() / "chunk_flags.csv", rows)


# ==================================================================================================
# version 15: v15, an experiment: the warp down kernel with its whole w2 tile in flight into shared memory
#
# (TMA boxes, or 16-byte cp.async requests; written in Gluon) before ``gdc_wait``, so the bytes in
# flight cost no registers.
#
#     python experiments/warp_down.py --version 15 [--presets …] [--T 1 2] [--kinds tma cp.async]
#     python experiments/warp_down.py --version 15 --check     # compiles the kernel for sm_90a (no GPU needed)
#
# Nsight Compute on the T = 1 pair (``experiments/profiling.py --version pair``,
# ``logs/profile_details.log``):
# the tuned down kernel runs 256 programs of 161 registers per thread at Qwen3-30B T = 1, 0.65 waves,
# 7 warps per SM, 42 % of DRAM's peak, 12.5 µs alone, where a read of its 25.2 MB in tiles takes
# 8.2 µs (65 %, L2 flushed, no PDL overlap; the gate/up kernel is at 97 % of its tile read). A
# program holds one chunk of its [rows, K, I] tile in registers at a time, so an SM has about
# 64 KB in flight; v13 (all chunks in registers) held more per program but fitted fewer programs.
#
# Here a program asks TMA for its whole tile, K experts × cdiv(I, BOX_I) boxes of [BLOCK_H, BOX_I]
# of w2 seen as (E·H, I), into shared memory, before it waits for kernel 1 (w2 does not depend on
# it); after the wait it reads the FP32 intermediate and folds each box from shared memory into an
# FP32 accumulator. At Qwen3-30B T = 1 the whole of w2 is 190 KB per SM: with BLOCK_H = 2 (24 KB a
# program, 1024 programs) all of it can be requested while kernel 1 still runs, limited by shared
# memory (228 KB per SM), not registers. Prediction: the pair from 22.4 µs towards the one-launch
# tile read of its 75.5 MB (19.1 µs, 87 %). The TMA form lost; the cp.async
# form asks for the same bytes in 16-byte pieces, one per thread and step, where TMA's small boxes
# (1 KB at 2 rows) queue on one unit per SM.
#
# Each candidate runs in the pair with the tuned gate/up kernel (which lets it launch early), against
# the tuned pair in the same process, at the benchmark's routings (seed 1000 + T), checked against the
# float64 reference first (outputs poisoned). Rows: experiments/results/<GPU>/down_tma.csv.
# ==================================================================================================

BOX_I = 256  # columns per TMA box: 512 bytes of bf16


@gluon.jit
def _gdc_wait():
    """griddepcontrol.wait (kernel 1 finished, its stores visible), as triton.language.extra.cuda's."""
    gl.inline_asm_elementwise("griddepcontrol.wait; // dummy $0", "=r", [], dtype=gl.int32, is_pure=False, pack=1)


@gluon.jit
def down_tma_kernel(
    act_ptr,  # (T*K, I) fp32
    w2_desc,  # TMA descriptor of w2 seen as (E*H, I), boxes [BLOCK_H, BOX_I]
    topk_ids_ptr,  # (T, K) int32
    topk_weights_ptr,  # (T, K) fp32
    y_ptr,  # (T, H) bf16
    H, I, T, stride_at, stride_yt,
    K: gl.constexpr, BLOCK_H: gl.constexpr, BOX_I: gl.constexpr, N_BOX: gl.constexpr, USE_PDL: gl.constexpr,
):
    pid = gl.program_id(0)
    t = pid % T
    h0 = (pid // T) * BLOCK_H
    boxes = gl.allocate_shared_memory(w2_desc.dtype, [K * N_BOX, BLOCK_H, BOX_I], w2_desc.layout)
    bar = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    mbarrier.init(bar, count=1)
    mbarrier.expect(bar, K * N_BOX * w2_desc.block_type.nbytes)
    for k in gl.static_range(K):  # w2 does not depend on kernel 1: all of it in flight now
        e = gl.load(topk_ids_ptr + t * K + k)
        for j in gl.static_range(N_BOX):
            tma.async_copy_global_to_shared(w2_desc, [e * H + h0, j * BOX_I], bar, boxes.index(k * N_BOX + j))
    if USE_PDL:
        _gdc_wait()

    mbarrier.wait(bar, phase=0)
    _fold_and_store(boxes, act_ptr, topk_weights_ptr, y_ptr, H, I, t, h0, stride_at, stride_yt,
                    K, BLOCK_H, BOX_I, N_BOX)
    mbarrier.invalidate(bar)


@gluon.jit
def _fold_and_store(tiles, act_ptr, topk_weights_ptr, y_ptr, H, I, t, h0, stride_at, stride_yt,
                    K: gl.constexpr, BLOCK_H: gl.constexpr, BOX_I: gl.constexpr, N_BOX: gl.constexpr):
    """y[t, h0:h0+BLOCK_H] = Σ_k rw_k · Σ_i tiles[k, :, i] · act[t·K + k, i], from shared memory."""
    layout: gl.constexpr = gl.BlockedLayout([1, 8], [1, 32], [gl.num_warps(), 1], [1, 0])
    offs_i = gl.arange(0, BOX_I, layout=gl.SliceLayout(0, layout))
    acc = gl.zeros([BLOCK_H, BOX_I], gl.float32, layout)
    for k in gl.static_range(K):
        pair = t * K + k
        rw = gl.load(topk_weights_ptr + pair)
        for j in gl.static_range(N_BOX):
            cols = j * BOX_I + offs_i
            a = gl.load(act_ptr + pair * stride_at + cols, mask=cols < I, other=0.0) * rw
            w = tiles.index(k * N_BOX + j).load(layout).to(gl.float32)
            acc += w * gl.expand_dims(a, 0)
    offs_h = h0 + gl.arange(0, BLOCK_H, layout=gl.SliceLayout(1, layout))
    gl.store(y_ptr + t * stride_yt + offs_h, gl.sum(acc, axis=1).to(y_ptr.dtype.element_ty), mask=offs_h < H)


@gluon.jit
def down_cpasync_kernel(
    act_ptr,  # (T*K, I) fp32
    w2_ptr,  # (E, H, I) bf16
    topk_ids_ptr,  # (T, K) int32
    topk_weights_ptr,  # (T, K) fp32
    y_ptr,  # (T, H) bf16
    H, I, T, stride_at, stride_we, stride_wr, stride_yt,
    K: gl.constexpr, BLOCK_H: gl.constexpr, BOX_I: gl.constexpr, N_BOX: gl.constexpr, USE_PDL: gl.constexpr,
):
    """v15 with 16-byte cp.async requests (one per thread and step) instead of TMA boxes."""
    pid = gl.program_id(0)
    t = pid % T
    h0 = (pid // T) * BLOCK_H
    layout: gl.constexpr = gl.BlockedLayout([1, 8], [1, 32], [gl.num_warps(), 1], [1, 0])
    tiles = gl.allocate_shared_memory(w2_ptr.dtype.element_ty, [K * N_BOX, BLOCK_H, BOX_I],
                                      gl.SwizzledSharedLayout(vec=8, per_phase=1, max_phase=1, order=[1, 0]))
    offs_h = h0 + gl.arange(0, BLOCK_H, layout=gl.SliceLayout(1, layout))
    offs_i = gl.arange(0, BOX_I, layout=gl.SliceLayout(0, layout))
    for k in gl.static_range(K):  # w2 does not depend on kernel 1: all of it in flight now
        e = gl.load(topk_ids_ptr + t * K + k).to(gl.int64)
        rows = w2_ptr + e * stride_we + gl.expand_dims(offs_h, 1).to(gl.int64) * stride_wr
        for j in gl.static_range(N_BOX):
            cols = j * BOX_I + offs_i
            mask = gl.expand_dims(offs_h < H, 1) & gl.expand_dims(cols < I, 0)
            async_copy.async_copy_global_to_shared(tiles.index(k * N_BOX + j), rows + gl.expand_dims(cols, 0),
                                                   mask=mask)
    async_copy.commit_group()
    if USE_PDL:
        _gdc_wait()
    async_copy.wait_group(0)
    _thread_barrier()  # every thread's copies landed before any thread reads them
    _fold_and_store(tiles, act_ptr, topk_weights_ptr, y_ptr, H, I, t, h0, stride_at, stride_yt,
                    K, BLOCK_H, BOX_I, N_BOX)


def _descriptor(w2, block_h: int):
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

    E, H, I = w2.shape  # noqa: E741
    layout = gl.NVMMASharedLayout.get_default_for([block_h, BOX_I], gl.bfloat16)
    return TensorDescriptor.from_tensor(w2.view(E * H, I), [block_h, BOX_I], layout)


def down_tma(act, w2, topk_ids, topk_weights, cfg: dict, out_dtype) -> torch.Tensor:
    """v15's down kernel: TMA boxes (cfg["kind"] "tma", the default) or 16-byte cp.async ("cp.async")."""
    E, H, I = w2.shape  # noqa: E741
    T, K = topk_ids.shape
    y = _alloc.empty(T, H, dtype=out_dtype, device=act.device)
    grid = (T * triton.cdiv(H, cfg["BLOCK_H"]),)
    meta = dict(K=K, BLOCK_H=cfg["BLOCK_H"], BOX_I=BOX_I, N_BOX=triton.cdiv(I, BOX_I), USE_PDL=wp.USE_PDL,
                num_warps=cfg["num_warps"], **({"launch_pdl": True} if wp.USE_PDL else {}))
    if cfg.get("kind", "tma") == "tma":
        down_tma_kernel[grid](act, _descriptor(w2, cfg["BLOCK_H"]), topk_ids, topk_weights, y, H, I, T,
                              act.stride(0), y.stride(0), **meta)
    else:
        down_cpasync_kernel[grid](act, w2, topk_ids, topk_weights, y, H, I, T, act.stride(0), w2.stride(0),
                                  w2.stride(1), y.stride(0), **meta)
    return y


def candidates_v15(H: int, I: int, K: int, kinds=("tma", "cp.async")):  # noqa: E741
    """Rows per program and warps, where the tile fits in shared memory beside a second program."""
    out = []
    for kind, r, w in itertools.product(kinds, [2, 4, 8, 16], [1, 2, 4]):
        smem = K * triton.cdiv(I, BOX_I) * r * BOX_I * 2
        if smem <= 112 * 1024 and w <= r and H % r == 0:
            out.append({"kind": kind, "BLOCK_H": r, "num_warps": w})
    return out


def check_v15():
    """Compiles every candidate at the two presets' shapes for sm_90a (no GPU needed): registers,
    shared memory, no spills."""
    if wd.INTERPRET:  # Triton's own helpers (gl.sum) were built for the interpreter: compile in a child
        import os
        import subprocess
        import sys
        env = {**os.environ, "TRITON_INTERPRET": "0", "PYTHONPATH": os.pathsep.join(sys.path)}
        subprocess.run([sys.executable, __file__, "--version", "15", "--check"], env=env, check=True)
        return
    from triton.backends.compiler import GPUTarget
    from triton.experimental.gluon._runtime import GluonASTSource

    from bench.compiled import Compiled, ptxas_report

    for name in ("qwen3-30b-a3b", "olmoe-1b-7b"):
        s = wd.get_preset(name)
        for cfg in candidates_v15(s.H, s.I, s.K):
            sig = {"act_ptr": "*fp32", "topk_ids_ptr": "*i32", "topk_weights_ptr": "*fp32", "y_ptr": "*bf16",
                   "H": "i32", "I": "i32", "T": "i32", "stride_at": "i32", "stride_yt": "i32",
                   "K": "constexpr", "BLOCK_H": "constexpr", "BOX_I": "constexpr", "N_BOX": "constexpr",
                   "USE_PDL": "constexpr"}
            if cfg["kind"] == "tma":
                layout = gl.NVMMASharedLayout.get_default_for([cfg["BLOCK_H"], BOX_I], gl.bfloat16)
                kernel, sig["w2_desc"] = down_tma_kernel, f"tensordesc<bf16[{cfg['BLOCK_H']}, {BOX_I}],{layout!r}>"
            else:
                kernel = down_cpasync_kernel
                sig.update(w2_ptr="*bf16", stride_we="i32", stride_wr="i32")
            sig = {a: sig[a] for a in kernel.arg_names}
            const = {"K": s.K, "BLOCK_H": cfg["BLOCK_H"], "BOX_I": BOX_I, "N_BOX": triton.cdiv(s.I, BOX_I),
                     "USE_PDL": True}
            # as the launcher specializes them: pointers, and sizes and strides that are multiples of 16
            div16 = {"act_ptr", "w2_ptr", "topk_ids_ptr", "topk_weights_ptr", "y_ptr", "H", "I", "stride_at",
                     "stride_we", "stride_wr", "stride_yt"}
            attrs = {(i,): [["tt.divisibility", 16]] for i, a in enumerate(kernel.arg_names) if a in div16}
            src = GluonASTSource(kernel, sig, const, attrs)
            c = triton.compile(src, target=GPUTarget("cuda", 90, 32), options={"num_warps": cfg["num_warps"]})
            rep = ptxas_report(Compiled(kernel.__name__, dict(c.asm), c.metadata.shared, cfg["num_warps"], 1))
            assert rep["spill_stores"] == 0 and "griddepcontrol.wait" in c.asm["ptx"], (name, cfg, rep)
            print(f"{name} {cfg}: compiled for sm_90a, {rep['registers']} registers, "
                  f"{c.metadata.shared} bytes of shared memory, no spills")


def main_v15():
    p = argparse.ArgumentParser()
    p.add_argument("--presets", nargs="+", default=["qwen3-30b-a3b", "olmoe-1b-7b"])
    p.add_argument("--T", type=int, nargs="+", default=[1, 2])
    p.add_argument("--kinds", nargs="+", default=["tma", "cp.async"], choices=["tma", "cp.async"])
    p.add_argument("--check", action="store_true")
    args = p.parse_args()
    if args.check:
        return check_v15()

    from harness import cases, checked_us_or_none, down_runs, row

    rows = []
    for case in cases(args.presets, args.T):
        s, T = case.shape, case.T
        for label, step, _ in down_runs(case, down_tma, candidates_v15(s.H, s.I, s.K, args.kinds)):
            res = checked_us_or_none(case, step, label, tol=1.5)
            if res is None:
                continue
            us, err, _ = res
            rows.append(row(case, variant=label, us=us, err=err))
            print(f"{s.name:14s} T={T} {label:60s} {us:8.2f} us {100 * case.floor_us / us:5.1f}% "
                  f"err/floor {err:.2f}", flush=True)
    harness.save(harness.results_dir() / "down_tma.csv", rows)


# ==================================================================================================
# version 17: the down tile's two forms, each at the tuned config: one [rows, K, columns] tile, or
#
# (``PER_SLOT``) K 2-D [rows, columns] tiles accumulated slot by slot.
#
#     python experiments/warp_down.py --version 17 [--presets …] [--T 1 2 4 8 16]
#     python experiments/warp_down.py --version 17 --check     # both forms against float64 (interpreter)
#     python experiments/warp_down.py --version 17 --from-log LOG --triton 3.8.0 --shipped-form per-slot  # a printout
#
# The 3-D tile has two axes of contiguity 1 (rows, experts). Triton 3.6's coalesce pass orders the
# rows first (warps over rows, as warp_pair.py documents); 3.8 and 3.9 order the experts first, so
# the warps go over K, every step's combine crosses warps through shared memory and the FP32
# accumulator is replicated in each K-warp (registers 95 → 194, the largest tiles spill 8.9 KB).
# K 2-D tiles leave no tie to break: the same layout, and registers within ±2, on 3.6, 3.8 and 3.9.
# Result (``down_2d.csv``, H200): on 3.6 the 3-D tile is faster (the per-slot form 0.94–1.17× its
# time, 1.10× at T = 1 on most presets); on 3.8 the per-slot form is faster everywhere the tile is
# large (0.07–0.97× the 3-D tile's time; Qwen3-235B T = 1 87 against 983 µs) and within 0–13 % of
# 3.6's 3-D tile. So ``PER_SLOT`` follows the Triton release.


def down_form(per_slot: bool, k_first: bool = False):
    """The shipped down kernel with its tile in the given form (``k_first``: v18's [K, rows, columns])."""
    def down(act, w2, topk_ids, topk_weights, cfg: dict, out_dtype) -> torch.Tensor:
        E, H, I = w2.shape  # noqa: E741
        T, K = topk_ids.shape
        y = _alloc.empty(T, H, dtype=out_dtype, device=act.device)
        kp.warp_down_kernel[(T * triton.cdiv(H, cfg["BLOCK_H"]),)](
            act, w2, topk_ids, topk_weights, y, H, I, w2.shape[0], T, act.stride(0), w2.stride(0), w2.stride(1),
                y.stride(0),
            K=K, K_PAD=triton.next_power_of_2(K), BLOCK_H=cfg["BLOCK_H"], BLOCK_I=cfg["BLOCK_I"],
            USE_PDL=wp.USE_PDL, PER_SLOT=per_slot, K_FIRST=k_first, num_warps=cfg["num_warps"],
            num_stages=cfg["num_stages"],
            **({"launch_pdl": True} if wp.USE_PDL else {}))
        return y
    return down


def _form(per_slot: bool) -> str:
    return "per-slot" if per_slot else "3-D"


def check_v17():
    """Both forms against float64 at odd shapes (K = 1, K = E, I not a multiple of BLOCK_I): FP32
    rounding each (their sums differ in order: Σ_j first, then into the accumulator, or slot by slot)."""
    gen = torch.Generator().manual_seed(17)
    for T, H, I, E, K, c in [(1, 40, 48, 5, 2, 16), (3, 24, 40, 7, 7, 16), (2, 16, 64, 3, 1, 32), (2, 8, 33, 6, 3, 16)]:
        x = torch.randn(T, H, generator=gen)
        w13 = torch.randn(E, 2 * I, H, generator=gen) / H**0.5
        w2 = torch.randn(E, H, I, generator=gen) / I**0.5
        ids = torch.stack([torch.randperm(E, generator=gen)[:K] for _ in range(T)]).to(torch.int32)
        tw = torch.rand(T, K, generator=gen)
        act = wp.warp_gate_up(x, w13, ids, tw, wd.configs.warp_config(H, I, E, K, T)["gate_up"])
        cfg = {"BLOCK_H": 4, "BLOCK_I": c, "num_warps": 1, "num_stages": 1}
        ref = wd.reference_moe(x, w13, w2, tw, ids)
        errs = {}
        for per_slot in (True, False):
            with poisoned():  # an output element left unwritten is NaN
                errs[per_slot] = wd.rel_error(down_form(per_slot)(act, w2, ids, tw, cfg, torch.float32), ref)
        assert max(errs.values()) < 1e-5, (T, H, I, E, K, c, errs)
        print(f"T={T} H={H} I={I} E={E} K={K}: per-slot error {errs[True]:.1e}, 3-D {errs[False]:.1e}")


#: A line v17 prints per timed run: preset, T, label, config, µs, % of the floor, error over the floor.
_LINE = re.compile(r"^(?P<preset>\S+)\s+T=(?P<T>\d+)\s+(?P<label>shipped again|shipped|per-slot|3-D)\s*"
                   r"(?P<config>\{.*?\})?\s+(?P<us>[\d.]+) us\s+(?P<pct>[\d.]+)% err/floor (?P<err>[\d.]+)")


def rows_from_log(text: str, *, triton_version: str, torch_version: str, gpu: str, shipped_per_slot: bool):
    """v17's printout as rows (``shipped`` is the form the release picks, ``shipped_per_slot``)."""
    rows = []
    for line in text.splitlines():
        m = _LINE.match(line)
        if not m:
            continue
        label = m["label"]
        per_slot = shipped_per_slot if label.startswith("shipped") else label == "per-slot"
        us, frac = float(m["us"]), round(float(m["pct"]) / 100, 4)
        rows.append({"experiment": "warp_down", "version": "17", "variant": _form(per_slot) + (
            " (again)" if label == "shipped again" else ""), "preset": m["preset"], "T": int(m["T"]),
            "seed": 1000, "config": m["config"] or "", "us": us, "floor_us": round(frac * us, 3),
            "frac_ceiling": frac, "error_over_floor": float(m["err"]), "gpu": gpu, "torch": torch_version,
            "triton": triton_version, "run": f"triton {triton_version}"})
    return rows


def main_v17():
    p = argparse.ArgumentParser()
    p.add_argument("--presets", nargs="+", default=list(wd.PRESETS))
    p.add_argument("--T", type=int, nargs="+", default=[1, 2, 4, 8, 16])
    p.add_argument("--check", action="store_true")
    p.add_argument("--from-log", type=Path, help="rows from a run's printout instead of timing")
    p.add_argument("--triton", help="with --from-log: the Triton release of that run")
    p.add_argument("--torch", default="2.11.0", help="with --from-log: the torch release of that run")
    p.add_argument("--gpu", default="NVIDIA H200")
    p.add_argument("--shipped-form", choices=["per-slot", "3-D"], help="with --from-log: what 'shipped' ran")
    args = p.parse_args()
    if args.check:
        return check_v17()
    if args.from_log:
        rows = rows_from_log(args.from_log.read_text(), triton_version=args.triton, torch_version=args.torch,
                             gpu=args.gpu, shipped_per_slot=args.shipped_form == "per-slot")
        print(harness.write("down_2d", rows, harness.results_dir(args.gpu) / "down_2d.csv"), len(rows), "rows")
        return None

    from harness import cases, checked_us_or_none, down_runs, row

    rows = []
    other = True  # per slot: no release ships it as its form (warp_pair.down_form)
    for case in cases(args.presets, args.T):
        s, T = case.shape, case.T
        tuned = wd.configs.warp_config(s.H, s.I, s.E, s.K, T)
        for label, step, _ in down_runs(case, down_form(other), [tuned["down"]], prefix=f"{_form(other)} "):
            res = checked_us_or_none(case, step, label, tol=1.5)
            if res is None:
                continue
            us, err, _ = res
            rows.append(row(case, variant=label, us=us, err=err))
            print(f"{s.name:18s} T={T:<3d} {label:60s} {us:8.2f} us {100 * case.floor_us / us:5.1f}% "
                  f"err/floor {err:.2f}", flush=True)
    harness.save(harness.results_dir() / "down_2d.csv", rows)


# ==================================================================================================
# version 18: the down tile as one [K, rows, columns] tile (``warp_pair.K_FIRST``) against the shipped
# form, each at the tuned config.
#
#     python experiments/warp_down.py --version 18 [--presets …] [--T 1 2 4 8]
#     python experiments/warp_down.py --version 18 --check     # both forms against float64 (interpreter)
#
# On Triton 3.8 the per-slot form (v17) has, compiled for sm_90a at Qwen3-30B-A3B T = 1's config, 65
# barriers against 3.6's 10, 64-bit intermediate loads, and one layout conversion of the intermediate per
# slot and step. With the experts first, 3.8's coalesce pass breaks the tie of the two contiguity-1 axes
# towards the rows (warps over rows, K inside each thread, as 3.6's [rows, K, columns] tile); the
# intermediate of all K slots is one [K, columns] load (16-byte loads) converted once per step, and the
# slots' products are taken from the tile in registers and chained, one FMA per weight. Compiled, at
# every tuned and default config of the presets: 3.6's barriers per step and its load widths, one
# FMA and one convert per weight; registers within -8 … +32 of the per-slot form's, except gpt-oss-20b
# T = 2, 4 (254 against 167); 28–56 B spilled at the three largest tuned tiles (Qwen3-235B-A22B T = 1,
# DeepSeek-V3 T = 2, 8), where the per-slot form spills nothing. On 3.6 the same tile puts its warps
# over K (3.6 orders K before the rows): there it is timed only to show that it is no form for 3.6.
# Rows: experiments/results/<GPU>/down_kfirst.csv, and lines ``<preset> T=<T> <label> <µs> us <%>%
# err/floor <e>`` then ``<preset> T=<T> k-first/shipped <ratio>`` per case.


def check_v18():
    """The shipped form and the [K, rows, columns] tile against float64 at odd shapes (K = 1, K = E,
    K not a power of two, I not a multiple of BLOCK_I, rows past H), poisoned."""
    gen = torch.Generator().manual_seed(18)
    shapes = [(1, 40, 48, 5, 2, 16), (3, 24, 40, 7, 7, 16), (2, 16, 64, 3, 1, 32), (2, 12, 33, 6, 3, 16)]
    for T, H, I, E, K, c in shapes:  # noqa: E741
        act = torch.randn(T * K, I, generator=gen)
        w2 = (torch.randn(E, H, I, generator=gen) / I**0.5).bfloat16()
        ids = torch.stack([torch.randperm(E, generator=gen)[:K] for _ in range(T)]).to(torch.int32)
        tw = torch.rand(T, K, generator=gen)
        ref = torch.einsum("tkhi,tki,tk->th", w2.double()[ids.long()], act.double().view(T, K, I), tw.double())
        cfg = {"BLOCK_H": 8, "BLOCK_I": c, "num_warps": 1, "num_stages": 1}
        errs = {}
        for label, form in (("shipped", down_form(False, kp.K_FIRST)), ("k-first", down_form(False, True))):
            with poisoned():  # an output element left unwritten is NaN
                y = form(act, w2, ids, tw, cfg, torch.float32)
            errs[label] = ((y.double() - ref).norm() / ref.norm()).item()
        assert max(errs.values()) < 1e-6, (T, H, I, E, K, c, errs)
        print(f"T={T} H={H} I={I} E={E} K={K}: k-first error {errs['k-first']:.1e}, shipped {errs['shipped']:.1e}")


def main_v18():
    p = argparse.ArgumentParser()
    p.add_argument("--presets", nargs="+", default=list(wd.PRESETS))
    p.add_argument("--T", type=int, nargs="+", default=[1, 2, 4, 8])
    p.add_argument("--check", action="store_true")
    args = p.parse_args()
    if args.check:
        return check_v18()

    from harness import cases, checked_us_or_none, down_runs, row

    shipped = "k-first" if kp.K_FIRST else "3-D"
    print(f"triton {triton.__version__}, torch {torch.__version__}: shipped form {shipped}", flush=True)
    rows = []
    for case in cases(args.presets, args.T):
        s, T = case.shape, case.T
        tuned = wd.configs.warp_config(s.H, s.I, s.E, s.K, T)
        us_of = {}
        for label, step, _ in down_runs(case, down_form(False, True), [tuned["down"]], prefix="k-first "):
            res = checked_us_or_none(case, step, label, tol=1.5)
            if res is None:
                continue
            us, err, _ = res
            us_of[label.split(" ")[0] if not label.startswith("shipped again") else "again"] = us
            rows.append(row(case, variant=label, us=us, err=err, detail={"shipped_form": shipped},
                            run=f"triton {triton.__version__}"))  # one CSV holds both releases' rows
            print(f"{s.name:18s} T={T:<3d} {label:60s} {us:8.2f} us {100 * case.floor_us / us:5.1f}% "
                  f"err/floor {err:.2f}", flush=True)
        if "k-first" in us_of and "shipped" in us_of:
            print(f"{s.name:18s} T={T:<3d} k-first/shipped {us_of['k-first'] / us_of['shipped']:.3f}", flush=True)
    harness.save(harness.results_dir() / "down_kfirst.csv", rows)


def main_count():
    """Lane instructions per weight byte of the pair's kernels (``fp8_warp.executed``: each loop body
    once per step), per release, into ``results/compiled/pair_instructions.csv``."""
    import collections
    import dataclasses

    from fp8_warp import _sass, executed

    from bench import compiled

    p = argparse.ArgumentParser()
    p.add_argument("--presets", nargs="+", default=["olmoe-1b-7b", "qwen3-30b-a3b"])
    p.add_argument("--T", type=int, nargs="+", default=[1])
    args = p.parse_args()
    forms = {"3-D": (False, False), "per-slot": (True, False), "k-first": (False, True)}
    jobs = []
    for name, T in itertools.product(args.presets, args.T):
        s = wd.get_preset(name)
        for ln in compiled.record_launches("warp", s, T, gpu_name="NVIDIA H200", arch=90):
            j, gate = ln.job, "gate_up" in ln.job.name
            if gate:
                jobs.append((s, T, "gate_up", "shipped", j))
                continue
            shipped = (j.constexprs["PER_SLOT"], j.constexprs["K_FIRST"])
            for form, (per_slot, k_first) in forms.items():
                label = "shipped" if (per_slot, k_first) == shipped else f"{form} form"
                jobs.append((s, T, "down", label, dataclasses.replace(
                    j, constexprs={**j.constexprs, "PER_SLOT": per_slot, "K_FIRST": k_first})))
    rows = []
    for (s, T, kernel, variant, j), c in zip(jobs, compiled.compile_many([r[-1] for r in jobs]), strict=True):
        k, rep = j.constexprs, compiled.ptxas_report(c)
        gate = kernel == "gate_up"
        trips = triton.cdiv(s.H, k["BLOCK_H"]) if gate else triton.cdiv(s.I, k["BLOCK_I"])
        weight_bytes = (2 * k["BLOCK_I"] * s.H if gate else k["BLOCK_H"] * s.K * s.I) * 2  # one program's rows
        per_byte = 32 * j.num_warps / weight_bytes
        ops = collections.Counter()
        for op, n in executed(_sass(c), trips).items():
            ops[op.split(".")[0]] += n
        tile = {key: k[key] for key in ("BLOCK_I", "BLOCK_H", "SUB_H", "PER_SLOT", "K_FIRST") if key in k}
        r = {"triton": triton.__version__, "arch": "sm_90a", "preset": s.name, "T": T, "kernel": kernel,
             "variant": variant, "tile": json.dumps(tile), "num_warps": j.num_warps, "registers": rep["registers"],
             "spill_bytes": rep["spill_stores"] + rep["spill_loads"],
             "instr_per_byte": round(sum(ops.values()) * per_byte, 3),
             "top": "; ".join(f"{op} {n * per_byte:.2f}" for op, n in ops.most_common(8))}
        rows.append(r)
        print(f"triton {r['triton']} {s.name} T={T} {kernel:7s} {variant:14s} {r['tile']} w{j.num_warps}: "
              f"{r['registers']} regs, spills {r['spill_bytes']} B, {r['instr_per_byte']:.3f} instr/B ({r['top']})",
              flush=True)
    harness.write_compiled("pair_instructions", rows, {"sm_90a"})


VERSIONS = {
    "count": (main_count, []),
    "ladder": (main_ladder, []),
    "13": (main_v13, []),
    "14": (main_v14, []),
    "15": (main_v15, []),
    "17": (main_v17, []),
    "18": (main_v18, []),
}


if __name__ == "__main__":
    harness.dispatch(__doc__, VERSIONS)
