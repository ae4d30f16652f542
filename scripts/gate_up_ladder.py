"""Experiment, not yet run on a GPU: where does warp decode's gate/up kernel lose to a plain read?

At Qwen3-30B-A3B T = 1 the gate/up kernel alone takes 15.8 µs for its 50.3 MB, a one-program-
per-16 KB-tile read of the same bytes 13.4 µs (``read_variants.csv``), and tile shape and loads
in flight per SM are ruled out (results/NOTES.md, session 4). This ladder adds the kernel's
ingredients to a read one at a time, each rung the same grid and tile as the tuned kernel:

1. ``read, expert from pid``: the kernel's loads (a gate row block and its up row block, per
   (pair, neuron block)), the expert index computed from the pair, the rows summed, one store;
2. ``read, expert from topk_ids``: the same, the expert index loaded first (each program's
   weight addresses now wait for one load);
3. ``+ x, dot products``: the activation loaded and both dot products accumulated in FP32;
4. ``+ SiLU·up, store``: the shipped kernel with [BLOCK_I, BLOCK_H] tile accumulators like rungs
   1–3 (its own copy here, ``gate_up_tile_acc_kernel``);
5. the shipped kernel, ``warp_gate_up_kernel``: the per-step reduction (v9 in results/NOTES.md),
   which holds a fraction of rungs 1–4's registers.

    python scripts/gate_up_ladder.py [--presets qwen3-30b-a3b olmoe-1b-7b] [--T 1]
    TRITON_INTERPRET=1 python scripts/gate_up_ladder.py --check    # correctness only, on the CPU

Rows go to results/<GPU>/gate_up_ladder.csv: µs per layer call and the fraction of the read ceiling
for the gate/up bytes. The session that runs it records the outcome in results/NOTES.md.
"""

import argparse
import os
from functools import partial
from pathlib import Path

import torch
import triton
import triton.language as tl

import warpdecode as wd
from warpdecode import configs
from warpdecode import warp as wp

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


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--presets", nargs="+", default=["qwen3-30b-a3b", "olmoe-1b-7b", "gpt-oss-20b"])
    p.add_argument("--T", type=int, nargs="+", default=[1])
    p.add_argument("--check", action="store_true")
    args = p.parse_args()
    if args.check or os.environ.get("TRITON_INTERPRET") == "1":
        check_cpu()
        return

    from warpdecode.bench import data
    from warpdecode.bench.sweep import meta
    from warpdecode.bench.timing import read_ceiling
    from warpdecode.bench.tune import _over_layers, _time
    from warpdecode.bench.workload import make_inputs, make_layers, num_copies

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
    data.merge_write(Path(f"results/{torch.cuda.get_device_name().replace(' ', '_')}/gate_up_ladder.csv"), rows)


if __name__ == "__main__":
    main()
