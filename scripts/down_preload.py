"""v13, an experiment: the warp down kernel with all of its w2 tile loaded before ``gdc_wait``.

    python scripts/down_preload.py [--presets qwen3-30b-a3b olmoe-1b-7b] [--T 1 2]
    TRITON_INTERPRET=1 python scripts/down_preload.py --check   # the contract only, on the CPU

The shipped down kernel (kernels/warp_pair.py) loads the first BLOCK_I columns of its [BLOCK_H, K,
BLOCK_I] tile before it waits for the gate/up kernel (programmatic dependent launch), and the rest
after: at Qwen3-30B T=1, two thirds of w2's 25 MB follow kernel 1 (session 1's diagnosis of v2).
Here a program loads its whole tile, in CHUNKS (≤ 4) chunks of BLOCK_I columns held in registers
at once, before the wait; after it only the intermediate is read. The tuner's one-shot tiles
(BLOCK_I ≥ I, padded to a power of two) wasted a quarter of their registers at I = 768 on masked
columns and spilled, so it dropped them; three chunks of 256 do not pad.

Byte ledger (Qwen3-30B, T=1): w2 of 8 experts, 25.2 MB, the same as the shipped kernel; the
prediction: with most of it requested during the gate/up kernel's last wave, the pair from 22.4
towards the one-launch read of its 75.5 MB (19.1 µs, ``read_variants.csv``).

Each candidate runs in the pair with the tuned gate/up kernel, against the tuned pair in the same
process (the same routings, seed 1000 + T like the benchmark), checked against the float64
reference first. Rows: results/<GPU>/down_preload.csv.
"""

import argparse
import itertools
import json
import os
from pathlib import Path

import torch
import triton
import triton.language as tl
from triton.language.extra.cuda import gdc_wait

import warpdecode as wd
from warpdecode import _alloc
from warpdecode import warp as wp
from warpdecode.kernels.warp_pair import _down_chunk

INTERPRET = os.environ.get("TRITON_INTERPRET") == "1"


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
    w0 = _down_chunk(w2_ptr, topk_ids_ptr, H, I, stride_we, stride_wr, t, pid_h, 0, K, K_PAD, BLOCK_H, BLOCK_I)
    w1 = w0
    w2 = w0
    w3 = w0
    if CHUNKS > 1:
        w1 = _down_chunk(w2_ptr, topk_ids_ptr, H, I, stride_we, stride_wr, t, pid_h, BLOCK_I,
                         K, K_PAD, BLOCK_H, BLOCK_I)
    if CHUNKS > 2:
        w2 = _down_chunk(w2_ptr, topk_ids_ptr, H, I, stride_we, stride_wr, t, pid_h, 2 * BLOCK_I,
                         K, K_PAD, BLOCK_H, BLOCK_I)
    if CHUNKS > 3:
        w3 = _down_chunk(w2_ptr, topk_ids_ptr, H, I, stride_we, stride_wr, t, pid_h, 3 * BLOCK_I,
                         K, K_PAD, BLOCK_H, BLOCK_I)
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


def candidates(I: int, K: int, per_thread: int = 256):  # noqa: E741
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


def check():
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
        act = wp.warp_gate_up(x, w13, ids, wd.configs.warp_config(H, I, E, K, T)["gate_up"])
        cfg = {"BLOCK_H": 4, "BLOCK_I": c, "num_warps": 1}
        with _alloc.poisoned():  # an output element left unwritten is NaN
            y = down_preload(act, w2, ids, tw, cfg, torch.float32)
        ref = wd.reference_moe(x, w13, w2, tw, ids)
        err = wd.rel_error(y, ref)
        assert err < 1e-5, (T, H, I, E, K, c, err)
        print(f"T={T} H={H} I={I} E={E} K={K} BLOCK_I={c} chunks={triton.cdiv(I, c)}: error {err:.1e}")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--presets", nargs="+", default=["qwen3-30b-a3b", "olmoe-1b-7b"])
    p.add_argument("--T", type=int, nargs="+", default=[1, 2])
    p.add_argument("--check", action="store_true")
    args = p.parse_args()
    if args.check:
        return check()

    from warpdecode.bench import data
    from warpdecode.bench.experiment import cases, checked_us_or_none, down_runs, row
    from warpdecode.bench.tune import _compiled_for

    rows = []
    compiled = {}  # config -> (registers per thread, spilled bytes)
    for case in cases(args.presets, args.T):
        s, T = case.shape, case.T
        for label, step, cfg in down_runs(case, down_preload, candidates(s.I, s.K), prefix="preload "):
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
    data.merge_write(Path(f"results/{torch.cuda.get_device_name().replace(' ', '_')}/down_preload.csv"), rows)


if __name__ == "__main__":
    main()
