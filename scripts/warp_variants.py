"""A/B of warp decode's cache knobs at T = 1…16 on every preset, against the tuned configs.

    python scripts/warp_variants.py [--presets ...] [--T 1 2 4 8 16]

Variants: the weight loads' L2 policy (``evict_first`` streams past L2, as the shipped kernels
do; ``""`` the default, ``evict_last``), through this file's copy of the pair with the policy as a
knob (``EVICT``); ``tuned`` is the shipped pair. The CSV also holds rows of two variants measured
at commit 5a0a4eb and then removed, being slower nearly everywhere: ``group=1`` (the gate/up program of the first pair
routed to an expert walks every pair of that expert, so its rows come from HBM once) and
``down_tokens=N`` (a down program walking N tokens); and rows ``down num_stages=2/3`` (the down
kernel's loop over I pipelined, measured at commit 4db7704, within 1 %). Rows go to
results/<GPU>/warp_variants.csv: time per layer call, and the fraction of the read ceiling.
"""

import argparse
import copy
from functools import partial
from pathlib import Path

import torch
import triton
import triton.language as tl
from triton.language.extra.cuda import gdc_launch_dependents, gdc_wait

import warpdecode as wd
from warpdecode import _alloc
from warpdecode import warp as wp
from warpdecode.bench import data
from warpdecode.bench.experiment import cases, checked_us, row
from warpdecode.configs import warp_config
from warpdecode.warp import moe_warp


@triton.jit
def _gate_up_tile(x_ptr, w13_ptr, topk_ids_ptr, act_ptr, H, I, K, stride_xt, stride_we, stride_wr, stride_at,
                  pair, pid_i, BLOCK_I: tl.constexpr, BLOCK_H: tl.constexpr, EVICT: tl.constexpr):
    """kernels/warp_pair.py ``_gate_up_tile`` with the weight loads' cache policy as a knob."""
    t = pair // K
    e = tl.load(topk_ids_ptr + pair).to(tl.int64)
    offs_i = pid_i * BLOCK_I + tl.arange(0, BLOCK_I)
    mask_i = offs_i < I
    offs_h = tl.arange(0, BLOCK_H)
    gate_ptrs = w13_ptr + e * stride_we + offs_i[:, None].to(tl.int64) * stride_wr + offs_h[None, :]
    up_ptrs = gate_ptrs + I * stride_wr
    x_ptrs = x_ptr + t.to(tl.int64) * stride_xt + offs_h
    acc_g = tl.zeros([BLOCK_I], dtype=tl.float32)
    acc_u = tl.zeros([BLOCK_I], dtype=tl.float32)
    for h0 in range(0, H, BLOCK_H):
        mask_h = (h0 + offs_h) < H
        xv = tl.load(x_ptrs + h0, mask=mask_h, other=0.0).to(tl.float32)
        mask = mask_i[:, None] & mask_h[None, :]
        g = tl.load(gate_ptrs + h0, mask=mask, other=0.0, eviction_policy=EVICT)
        u = tl.load(up_ptrs + h0, mask=mask, other=0.0, eviction_policy=EVICT)
        acc_g += tl.sum(g.to(tl.float32) * xv[None, :], axis=1)
        acc_u += tl.sum(u.to(tl.float32) * xv[None, :], axis=1)
    a = acc_g * tl.sigmoid(acc_g) * acc_u
    tl.store(act_ptr + pair.to(tl.int64) * stride_at + offs_i, a.to(act_ptr.dtype.element_ty), mask=mask_i)


@triton.jit(do_not_specialize=["NUM_PAIRS"])
def gate_up_kernel(x_ptr, w13_ptr, topk_ids_ptr, act_ptr, H, I, NUM_PAIRS, K, stride_xt, stride_we, stride_wr,
                   stride_at, BLOCK_I: tl.constexpr, BLOCK_H: tl.constexpr, USE_PDL: tl.constexpr,
                   EVICT: tl.constexpr):
    """kernels/warp_pair.py ``warp_gate_up_kernel`` with ``EVICT``."""
    if USE_PDL:
        gdc_launch_dependents()
    pid = tl.program_id(0)
    _gate_up_tile(x_ptr, w13_ptr, topk_ids_ptr, act_ptr, H, I, K, stride_xt, stride_we, stride_wr, stride_at,
                  pid % NUM_PAIRS, pid // NUM_PAIRS, BLOCK_I, BLOCK_H, EVICT)


@triton.jit
def _down_chunk(w2_ptr, topk_ids_ptr, H, I, stride_we, stride_wr, t, pid_h, i0, K: tl.constexpr,
                K_PAD: tl.constexpr, BLOCK_H: tl.constexpr, BLOCK_I: tl.constexpr, EVICT: tl.constexpr):
    """kernels/warp_pair.py ``_down_chunk`` with ``EVICT``."""
    offs_h = pid_h * BLOCK_H + tl.arange(0, BLOCK_H)
    offs_k = tl.arange(0, K_PAD)
    mask_k = offs_k < K
    offs_i = i0 + tl.arange(0, BLOCK_I)
    e = tl.load(topk_ids_ptr + t.to(tl.int64) * K + offs_k, mask=mask_k, other=0).to(tl.int64)
    w_ptrs = (w2_ptr + offs_h[:, None, None].to(tl.int64) * stride_wr + e[None, :, None] * stride_we
              + offs_i[None, None, :])
    mask = (offs_h < H)[:, None, None] & mask_k[None, :, None] & (offs_i < I)[None, None, :]
    return tl.load(w_ptrs, mask=mask, other=0.0, eviction_policy=EVICT)


@triton.jit(do_not_specialize=["T"])
def down_kernel(act_ptr, w2_ptr, topk_ids_ptr, topk_weights_ptr, y_ptr, H, I, T, stride_at, stride_we, stride_wr,
                stride_yt, K: tl.constexpr, K_PAD: tl.constexpr, BLOCK_H: tl.constexpr, BLOCK_I: tl.constexpr,
                USE_PDL: tl.constexpr, EVICT: tl.constexpr):
    """kernels/warp_pair.py ``warp_down_kernel`` (its ``_down_tile`` inlined) with ``EVICT``."""
    pid = tl.program_id(0)
    t = pid % T
    pid_h = pid // T
    wv = _down_chunk(w2_ptr, topk_ids_ptr, H, I, stride_we, stride_wr, t, pid_h, 0, K, K_PAD, BLOCK_H, BLOCK_I, EVICT)
    if USE_PDL:
        gdc_wait()
    offs_h = pid_h * BLOCK_H + tl.arange(0, BLOCK_H)
    offs_k = tl.arange(0, K_PAD)
    mask_k = offs_k < K
    pairs = t.to(tl.int64) * K + offs_k
    offs_i = tl.arange(0, BLOCK_I)
    rw = tl.load(topk_weights_ptr + pairs, mask=mask_k, other=0.0)
    a_ptrs = act_ptr + pairs[:, None] * stride_at + offs_i[None, :]
    acc = tl.zeros([BLOCK_H, BLOCK_I], dtype=tl.float32)
    for i0 in range(0, I, BLOCK_I):
        if i0 > 0:
            wv = _down_chunk(w2_ptr, topk_ids_ptr, H, I, stride_we, stride_wr, t, pid_h, i0, K, K_PAD, BLOCK_H,
                             BLOCK_I, EVICT)
        mask_i = (i0 + offs_i) < I
        a = tl.load(a_ptrs + i0, mask=mask_k[:, None] & mask_i[None, :], other=0.0).to(tl.float32) * rw[:, None]
        acc += tl.sum(wv.to(tl.float32) * a[None, :, :], axis=1)
    y = tl.sum(acc, axis=1)
    tl.store(y_ptr + t.to(tl.int64) * stride_yt + offs_h, y.to(y_ptr.dtype.element_ty), mask=offs_h < H)


def pair_with_evict(x, w13, w2, topk_weights, topk_ids, *, config: dict):
    """The pair as warpdecode.warp launches it, with ``config[...]["evict"]`` as the weight loads' policy."""
    T, H = x.shape
    E, two_i, _ = w13.shape
    I = two_i // 2  # noqa: E741
    K = topk_ids.shape[1]
    gu, dn = config["gate_up"], config["down"]
    act = _alloc.empty(T * K, I, dtype=torch.float32, device=x.device)
    gate_up_kernel[(T * K * triton.cdiv(I, gu["BLOCK_I"]),)](
        x, w13, topk_ids, act, H, I, T * K, K, x.stride(0), w13.stride(0), w13.stride(1), act.stride(0),
        BLOCK_I=gu["BLOCK_I"], BLOCK_H=gu["BLOCK_H"], USE_PDL=wp.USE_PDL, EVICT=gu["evict"],
        num_warps=gu["num_warps"], num_stages=gu["num_stages"])
    y = _alloc.empty(T, H, dtype=x.dtype, device=x.device)
    down_kernel[(T * triton.cdiv(H, dn["BLOCK_H"]),)](
        act, w2, topk_ids, topk_weights, y, H, I, T, act.stride(0), w2.stride(0), w2.stride(1), y.stride(0),
        K=K, K_PAD=triton.next_power_of_2(K), BLOCK_H=dn["BLOCK_H"], BLOCK_I=dn["BLOCK_I"], USE_PDL=wp.USE_PDL,
        EVICT=dn["evict"], num_warps=dn["num_warps"], num_stages=dn["num_stages"],
        **({"launch_pdl": True} if wp.USE_PDL else {}))
    return y


def variants(base: dict, T: int):
    out = {"tuned": base}
    for evict in ("", "evict_last"):
        c = copy.deepcopy(base)
        c["gate_up"]["evict"] = c["down"]["evict"] = evict
        out[f"evict={evict or 'normal'}"] = c
    return out


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--presets", nargs="+", default=wd.MODEL_PRESETS)
    p.add_argument("--T", type=int, nargs="+", default=[1, 2, 4, 8, 16])
    p.add_argument("--out", default=f"results/{torch.cuda.get_device_name().replace(' ', '_')}/warp_variants.csv")
    args = p.parse_args()
    rows = []
    for case in cases(args.presets, args.T):
        s = case.shape
        base = warp_config(s.H, s.I, s.E, s.K, case.T)
        base = {"gate_up": base["gate_up"], "down": base["down"]}
        for vname, cfg in variants(base, case.T).items():
            run = moe_warp if vname == "tuned" else pair_with_evict
            us, err, _ = checked_us(case, partial(run, config=cfg), vname, tol=1.5)
            rows.append(row(case, variant=vname, us=us, err=err))
            print(f"{s.name:16s} T={case.T:3d} {vname:34s} {us:9.2f} us  {100 * case.floor_us / us:5.1f}%  "
                  f"err/floor {err:.2f}", flush=True)
    data.merge_write(Path(args.out), rows)


if __name__ == "__main__":
    main()
