"""Warp decode's gate/up kernel against a read of its tile, one ingredient at a time.

    python experiments/gate_up.py --version ladder [--presets …] [--T 1]
    TRITON_INTERPRET=1 python experiments/gate_up.py --version ladder --check
    python experiments/gate_up.py --version slices [--presets …] [--T 1 2 4 8]
    TRITON_INTERPRET=1 python experiments/gate_up.py --version slices --check

- ladder: rungs 1–4 (read; expert ids loaded; x and dot products; SiLU·up and store) cost next
  to nothing; rung 5, the per-step reduction (v9, ``LEAN``), takes gate/up from 16.0 to 14.8 µs
  at Qwen3-30B T = 1. Verdict: v9 promoted into every tuned bucket.

- slices: the gate/up step loaded in slices (``SUB_H``, FMA chains on Triton ≥ 3.8) against one
  load per step (the sums a tree), in the pair at its tuned and default configs.

Rows: experiments/results/<GPU>/gate_up_ladder.csv, gate_up_slices.csv.
"""

from __future__ import annotations

import argparse
import os
from functools import partial

import harness
import torch
import triton
import triton.language as tl

import warpdecode as wd
from bench.poison import poisoned
from warpdecode import configs
from warpdecode import warp as wp

# ==================================================================================================
# version ladder: where does warp decode's gate/up kernel lose to a plain read?
#
#
# At Qwen3-30B-A3B T = 1 the gate/up kernel alone takes 15.8 µs for its 50.3 MB, a one-program-
# per-16 KB-tile read of the same bytes 13.4 µs (``read_variants.csv``), and tile shape and loads
# in flight per SM are ruled out (docs/design.md). This ladder adds the kernel's
# ingredients to a read one at a time, each rung the same grid and tile as the tuned kernel:
#
# 1. ``read, expert from pid``: the kernel's loads (a gate row block and its up row block, per
#    (pair, neuron block)), the expert index computed from the pair, the rows summed, one store;
# 2. ``read, expert from topk_ids``: the same, the expert index loaded first (each program's
#    weight addresses now wait for one load);
# 3. ``+ x, dot products``: the activation loaded and both dot products accumulated in FP32;
# 4. ``+ SiLU·up, store``: the shipped kernel with [BLOCK_I, BLOCK_H] tile accumulators like rungs
#    1–3 (its own copy here, ``gate_up_tile_acc_kernel``);
# 5. the shipped kernel, ``warp_gate_up_kernel``: the per-step reduction (v9 in docs/design.md),
#    which holds a fraction of rungs 1–4's registers.
#
#     python experiments/gate_up.py --version ladder [--presets …] [--T 1]
#     TRITON_INTERPRET=1 python experiments/gate_up.py --version ladder --check   # correctness only, on the CPU
#
# Rows go to experiments/results/<GPU>/gate_up_ladder.csv: µs per layer call and the fraction of the read ceiling
# for the gate/up bytes. What it found: docs/design.md.
# ==================================================================================================

RUNGS = ["read, expert from pid", "read, expert from topk_ids", "+ x, dot products"]


@triton.jit(do_not_specialize=["NUM_PAIRS"])
def gate_up_probe_kernel(
    x_ptr,  # (T, H) compute dtype
    w13_ptr,  # (E, 2I, H) compute dtype
    topk_ids_ptr,  # (T, K) int32
    out_ptr,  # (programs, BLOCK_I) fp32: what each program computed, so no rung is optimised away
    H,
    I,
    NUM_PAIRS,
    K,
    E,
    stride_xt,
    stride_we,
    stride_wr,
    BLOCK_I: tl.constexpr,
    BLOCK_H: tl.constexpr,
    RUNG: tl.constexpr,  # 0, 1, 2: the first three rungs of the module docstring
):
    pid = tl.program_id(0)
    pair = pid % NUM_PAIRS  # the shipped kernel's grid order
    pid_i = pid // NUM_PAIRS
    if RUNG == 0:
        e = (pair % E).to(tl.int64)  # no load in front of the weight addresses
    else:
        e = tl.load(topk_ids_ptr + pair).to(tl.int64)
    t = pair // K
    offs_i = pid_i * BLOCK_I + tl.arange(0, BLOCK_I)
    mask_i = offs_i < I
    offs_h = tl.arange(0, BLOCK_H)
    gate_ptrs = w13_ptr + e * stride_we + offs_i[:, None].to(tl.int64) * stride_wr + offs_h[None, :]
    up_ptrs = gate_ptrs + I * stride_wr
    acc_g = tl.zeros([BLOCK_I, BLOCK_H], dtype=tl.float32)
    acc_u = tl.zeros([BLOCK_I, BLOCK_H], dtype=tl.float32)
    for h0 in range(0, H, BLOCK_H):
        mask_h = (h0 + offs_h) < H
        mask = mask_i[:, None] & mask_h[None, :]
        g = tl.load(gate_ptrs + h0, mask=mask, other=0.0, eviction_policy="evict_first").to(tl.float32)
        u = tl.load(up_ptrs + h0, mask=mask, other=0.0, eviction_policy="evict_first").to(tl.float32)
        if RUNG == 2:
            xv = tl.load(x_ptr + t.to(tl.int64) * stride_xt + h0 + offs_h, mask=mask_h, other=0.0).to(tl.float32)
            acc_g += g * xv[None, :]
            acc_u += u * xv[None, :]
        else:
            acc_g += g
            acc_u += u
    s = tl.sum(acc_g, axis=1) + tl.sum(acc_u, axis=1)
    tl.store(out_ptr + pid.to(tl.int64) * BLOCK_I + tl.arange(0, BLOCK_I), s, mask=mask_i)


@triton.jit(do_not_specialize=["NUM_PAIRS"])
def gate_up_tile_acc_kernel(
    x_ptr, w13_ptr, topk_ids_ptr, act_ptr, H, I, NUM_PAIRS, K, stride_xt, stride_we, stride_wr, stride_at,
    BLOCK_I: tl.constexpr, BLOCK_H: tl.constexpr,
):
    """Rung 4: the shipped gate/up kernel (kernels/warp_pair.py) with two [BLOCK_I, BLOCK_H] FP32
    tile accumulators, summed across the warp once at the end."""
    pid = tl.program_id(0)
    pair, pid_i = pid % NUM_PAIRS, pid // NUM_PAIRS
    t = pair // K
    e = tl.load(topk_ids_ptr + pair).to(tl.int64)
    offs_i = pid_i * BLOCK_I + tl.arange(0, BLOCK_I)
    mask_i = offs_i < I
    offs_h = tl.arange(0, BLOCK_H)
    gate_ptrs = w13_ptr + e * stride_we + offs_i[:, None].to(tl.int64) * stride_wr + offs_h[None, :]
    up_ptrs = gate_ptrs + I * stride_wr
    x_ptrs = x_ptr + t.to(tl.int64) * stride_xt + offs_h
    acc_g = tl.zeros([BLOCK_I, BLOCK_H], dtype=tl.float32)
    acc_u = tl.zeros([BLOCK_I, BLOCK_H], dtype=tl.float32)
    for h0 in range(0, H, BLOCK_H):
        mask_h = (h0 + offs_h) < H
        xv = tl.load(x_ptrs + h0, mask=mask_h, other=0.0).to(tl.float32)
        mask = mask_i[:, None] & mask_h[None, :]
        g = tl.load(gate_ptrs + h0, mask=mask, other=0.0, eviction_policy="evict_first")
        u = tl.load(up_ptrs + h0, mask=mask, other=0.0, eviction_policy="evict_first")
        acc_g += g.to(tl.float32) * xv[None, :]
        acc_u += u.to(tl.float32) * xv[None, :]
    g = tl.sum(acc_g, axis=1)
    u = tl.sum(acc_u, axis=1)
    a = g * tl.sigmoid(g) * u
    tl.store(act_ptr + pair.to(tl.int64) * stride_at + offs_i, a.to(act_ptr.dtype.element_ty), mask=mask_i)


def gate_up_tile_acc(x, w13, topk_ids, cfg: dict) -> torch.Tensor:
    """Rung 4, launched as warpdecode.warp.warp_gate_up launches the shipped kernel (no PDL)."""
    T, H = x.shape
    I = w13.shape[1] // 2  # noqa: E741
    K = topk_ids.shape[1]
    act = torch.empty(T * K, I, dtype=torch.float32, device=x.device)
    gate_up_tile_acc_kernel[(T * K * triton.cdiv(I, cfg["BLOCK_I"]),)](
        x, w13, topk_ids, act, H, I, T * K, K, x.stride(0), w13.stride(0), w13.stride(1), act.stride(0),
        BLOCK_I=cfg["BLOCK_I"], BLOCK_H=cfg["BLOCK_H"], num_warps=cfg["num_warps"], num_stages=cfg["num_stages"])
    return act


def probe(x, w13, topk_ids, cfg: dict, rung: int) -> torch.Tensor:
    T, H = x.shape
    E, two_i, _ = w13.shape
    I = two_i // 2  # noqa: E741
    K = topk_ids.shape[1]
    grid = (T * K * triton.cdiv(I, cfg["BLOCK_I"]),)
    out = torch.empty(grid[0], cfg["BLOCK_I"], dtype=torch.float32, device=x.device)
    gate_up_probe_kernel[grid](x, w13, topk_ids, out, H, I, T * K, K, E, x.stride(0), w13.stride(0), w13.stride(1),
                               BLOCK_I=cfg["BLOCK_I"], BLOCK_H=cfg["BLOCK_H"], RUNG=rung,
                               num_warps=cfg["num_warps"], num_stages=cfg["num_stages"])
    return out


def expected(x, w13, topk_ids, cfg: dict, rung: int) -> torch.Tensor:
    """What each program should have stored, in float64 (the rows summed, or the two dot products)."""
    T, H = x.shape
    E, two_i, _ = w13.shape
    I = two_i // 2  # noqa: E741
    K = topk_ids.shape[1]
    n_pairs, bi = T * K, cfg["BLOCK_I"]
    out = torch.zeros(n_pairs * triton.cdiv(I, bi), bi, dtype=torch.float64)
    for pid in range(out.shape[0]):
        pair, pid_i = pid % n_pairs, pid // n_pairs
        e = pair % E if rung == 0 else int(topk_ids.flatten()[pair])
        rows = range(pid_i * bi, min(I, (pid_i + 1) * bi))
        for j, i in enumerate(rows):
            g, u = w13[e, i].double(), w13[e, I + i].double()
            if rung == 2:
                xv = x[pair // K].double()
                out[pid, j] = g @ xv + u @ xv
            else:
                out[pid, j] = g.sum() + u.sum()
    return out


def check_cpu():
    shape = wd.MoEShape("odd", H=48, I=20, E=5, K=3)
    g = torch.Generator().manual_seed(0)
    x = torch.randn(2, shape.H, generator=g).bfloat16()
    w13 = torch.randn(shape.E, 2 * shape.I, shape.H, generator=g).bfloat16()
    ids = torch.stack([torch.randperm(shape.E, generator=g)[: shape.K] for _ in range(2)]).int()
    cfg = {"BLOCK_I": 8, "BLOCK_H": 32, "num_warps": 4, "num_stages": 1}
    for rung in range(3):
        got = probe(x, w13, ids, cfg, rung).double()
        want = expected(x, w13, ids, cfg, rung)
        mask = torch.zeros_like(want, dtype=torch.bool)  # rows past I were not stored
        for pid in range(want.shape[0]):
            mask[pid, : max(0, min(cfg["BLOCK_I"], shape.I - (pid // (2 * shape.K)) * cfg["BLOCK_I"]))] = True
        err = ((got - want)[mask].norm() / want[mask].norm()).item()
        print(f"rung {rung} ({RUNGS[rung]}): relative error {err:.2e} against float64")
        assert err < 1e-5, err


def main_ladder():
    p = argparse.ArgumentParser()
    p.add_argument("--presets", nargs="+", default=["qwen3-30b-a3b", "olmoe-1b-7b", "gpt-oss-20b"])
    p.add_argument("--T", type=int, nargs="+", default=[1])
    p.add_argument("--check", action="store_true")
    args = p.parse_args()
    if args.check or os.environ.get("TRITON_INTERPRET") == "1":
        check_cpu()
        return

    from bench.sweep import meta
    from bench.timing import read_ceiling
    from warpdecode.tuner import _over_layers, _time
    from warpdecode.workload import make_inputs, make_layers, num_copies

    ceiling = read_ceiling()
    rows = []
    for name in args.presets:
        shape = wd.get_preset(name)
        L = num_copies(shape)
        layers = make_layers(shape, L)
        w13s = [w for w, _ in layers]
        for T in args.T:
            inputs = make_inputs(shape, T, L, seed=1000 + T)
            xs, ids = [i.x for i in inputs], [i.topk_ids for i in inputs]
            # rung 0 reads experts pair % E: as many distinct experts as the routed call reads
            gate_up_bytes = sum(torch.unique(i).numel() for i in ids) / L * 2 * shape.I * shape.H * 2
            floor_us = gate_up_bytes / (ceiling * 1e12) * 1e6
            cfg = configs.warp_config(shape.H, shape.I, shape.E, shape.K, T)["gate_up"]
            timed = [(RUNGS[r], _time(_over_layers(partial(probe, cfg=cfg, rung=r), xs, w13s, ids), 50) / L)
                     for r in range(3)]
            timed.append(("+ SiLU·up, store (tile accumulators)",
                          _time(_over_layers(partial(gate_up_tile_acc, cfg=cfg), xs, w13s, ids), 50) / L))
            timed.append(("shipped, lean accumulators",  # v9: the per-step reduction
                          _time(_over_layers(partial(wp.warp_gate_up, cfg=cfg), xs, w13s, ids), 50) / L))
            for rung, us in timed:
                rows.append({"preset": name, "T": T, "rung": rung, "config": str(cfg), "us": round(us, 3),
                             "gate_up_MB": round(gate_up_bytes / 1e6, 2), "frac_ceiling": round(floor_us / us, 4),
                             "ceiling_TBps": round(ceiling, 4), **meta()})
                print(f"{name:14s} T={T} {rung:28s} {us:8.2f} us {100 * floor_us / us:5.1f}%", flush=True)
        layers = w13s = None
        torch.cuda.empty_cache()
    harness.save(harness.results_dir() / "gate_up_ladder.csv", rows)


# ==================================================================================================
# version slices: the gate/up step in slices against one load per step, on the release that runs it.
#
#     python experiments/gate_up.py --version slices [--presets …] [--T 1 2 4 8]
#     TRITON_INTERPRET=1 python experiments/gate_up.py --version slices --check   # both forms against float64
#
# Triton ≥ 3.8 sums one lane's products of a step as a tree (mul, then adds) where 3.6 chains
# them into FMAs; ``warp_pair.gate_up_slice`` loads a wide step in slices whose products chain on
# every release (``SUB_H``; compiled for sm_90a at the 2048-column step: 128 FMA and 69 registers
# against 64 FMA + 67 mul + 75 add and 102 registers). This times the pair with the gate/up step as
# the release gets it (``sliced`` where the rule slices it) and with one load per step
# (``SUB_H = BLOCK_H``), the same down kernel, at the tuned and the default configurations of the
# cases where the pair runs. On Triton 3.6 ``gate_up_slice`` never slices, so both rows are one
# load; a ``sliced`` row there is the 3.8 rule's form forced (``--force``).
# ==================================================================================================


def slice_pair(gate_up_cfg: dict, down_cfg: dict):
    """The pair with this gate/up config (its ``SUB_H`` as given) and down config."""
    def pair(x, w13, w2, tw, ids):
        return wp.warp_down(wp.warp_gate_up(x, w13, ids, tw, gate_up_cfg), w2, ids, tw, down_cfg, x.dtype)
    return pair


def check_slices():
    """Sliced and one-load gate/up steps against float64 at odd sizes (H not a multiple of the step)."""
    gen = torch.Generator().manual_seed(5)
    for T, H, I, E, K in [(1, 200, 24, 5, 2), (3, 136, 16, 7, 7)]:  # noqa: E741
        x = torch.randn(T, H, generator=gen)
        w13 = torch.randn(E, 2 * I, H, generator=gen) / H**0.5
        w2 = torch.randn(E, H, I, generator=gen) / I**0.5
        ids = torch.stack([torch.randperm(E, generator=gen)[:K] for _ in range(T)]).to(torch.int32)
        tw = torch.rand(T, K, generator=gen)
        ref = wd.reference_moe(x, w13, w2, tw, ids)
        down = {"BLOCK_H": 4, "BLOCK_I": 16, "num_warps": 1, "num_stages": 1}
        for sub in (128, 32):
            gu = {"BLOCK_I": 2, "BLOCK_H": 128, "SUB_H": sub, "num_warps": 1, "num_stages": 1}
            with poisoned():
                err = wd.rel_error(slice_pair(gu, down)(x, w13, w2, tw, ids), ref)
            print(f"T={T} H={H} I={I} E={E} K={K} SUB_H={sub}: relative error {err:.1e} against float64")
            assert err < 1e-5, err


def main_slices():
    p = argparse.ArgumentParser()
    p.add_argument("--presets", nargs="+", default=list(wd.PRESETS))
    p.add_argument("--T", type=int, nargs="+", default=[1, 2, 4, 8])
    p.add_argument("--check", action="store_true")
    p.add_argument("--force", action="store_true", help="slice as the 3.8 rule does on any release")
    args = p.parse_args()
    if args.check or os.environ.get("TRITON_INTERPRET") == "1":
        return check_slices()

    from harness import cases, checked_us_or_none, row

    from warpdecode.kernels import warp_pair as kp

    rows = []
    for case in cases(args.presets, args.T):
        s, T = case.shape, case.T
        tuned = configs.warp_config(s.H, s.I, s.E, s.K, T)
        with configs.tables(shipped=False, cache=False):
            default = configs.warp_config(s.H, s.I, s.E, s.K, T)
        for source, cfg in (("tuned", tuned), ("default", default)):
            if "gate_up" not in cfg or "grouped" in cfg or "fused" in cfg:
                continue
            gu = dict(cfg["gate_up"])
            saved, kp.TREE_SUMS = kp.TREE_SUMS, kp.TREE_SUMS or args.force
            try:
                sub = kp.gate_up_slice(gu)
            finally:
                kp.TREE_SUMS = saved
            forms = [("one load", {**gu, "SUB_H": gu["BLOCK_H"]})]
            if sub < gu["BLOCK_H"]:
                forms.append((f"sliced SUB_H={sub}", {**gu, "SUB_H": sub}))
            for form, g in forms:
                res = checked_us_or_none(case, slice_pair(g, cfg["down"]), f"{source} {form}", tol=1.5)
                if res is None:
                    continue
                us, err, _ = res
                rows.append(row(case, variant=f"{source}, {form}", config=str(g), us=us, err=err))
                print(f"{s.name:18s} T={T:<3d} {source:7s} {form:18s} {str(g):80s} {us:8.2f} us "
                      f"{100 * case.floor_us / us:5.1f}% err/floor {err:.2f}", flush=True)
    harness.save(harness.results_dir() / "gate_up_slices.csv", rows)


VERSIONS = {
    "ladder": (main_ladder, []),
    "slices": (main_slices, []),
}


if __name__ == "__main__":
    harness.dispatch(__doc__, VERSIONS)
