"""The minimal warp-decode pair notebook 4 writes, against the shipped pair.

    python experiments/minimal_pair.py --version v1 [--presets …] [--T 1 4 8]
    TRITON_INTERPRET=1 python experiments/minimal_pair.py --version v1 --check

version v1: the pair as notebook 4 writes it (a copy: the notebook holds the lesson's), one warp
per output, one row per program, 1024-column steps, no PDL, no tuned table: what the shipped pair
(``warpdecode.moe(method="warp")``, timed beside it in the same process) adds to it, on the
H200. Verdict: the lesson's starting point; ``minimal_pair.csv``.
"""

from __future__ import annotations

import os

import harness
import torch
import triton
import triton.language as tl

import warpdecode as wd


@triton.jit
def mini_gate_up(x_ptr, w13_ptr, ids_ptr, act_ptr, H, I, K, BLOCK_H: tl.constexpr):
    pair, i = tl.program_id(0), tl.program_id(1)
    t, e = pair // K, tl.load(ids_ptr + pair).to(tl.int64)
    g = tl.zeros([BLOCK_H], tl.float32)
    u = tl.zeros([BLOCK_H], tl.float32)
    for h0 in range(0, H, BLOCK_H):
        h = h0 + tl.arange(0, BLOCK_H)
        xv = tl.load(x_ptr + t * H + h, mask=h < H, other=0.0).to(tl.float32)
        g += xv * tl.load(w13_ptr + (e * 2 * I + i) * H + h, mask=h < H, other=0.0).to(tl.float32)
        u += xv * tl.load(w13_ptr + (e * 2 * I + I + i) * H + h, mask=h < H, other=0.0).to(tl.float32)
    g, u = tl.sum(g), tl.sum(u)
    tl.store(act_ptr + pair * I + i, g * tl.sigmoid(g) * u)


@triton.jit
def mini_down(act_ptr, w2_ptr, ids_ptr, tw_ptr, y_ptr, H, I, K, BLOCK_I: tl.constexpr):
    t, h = tl.program_id(0), tl.program_id(1)
    acc = tl.zeros([BLOCK_I], tl.float32)
    for j in range(K):
        e, w = tl.load(ids_ptr + t * K + j).to(tl.int64), tl.load(tw_ptr + t * K + j)
        for i0 in range(0, I, BLOCK_I):
            i = i0 + tl.arange(0, BLOCK_I)
            a = tl.load(act_ptr + (t * K + j) * I + i, mask=i < I, other=0.0).to(tl.float32)
            acc += w * a * tl.load(w2_ptr + (e * H + h) * I + i, mask=i < I, other=0.0).to(tl.float32)
    tl.store(y_ptr + t * H + h, tl.sum(acc))


def mini_moe(x, w13, w2, topk_weights, topk_ids):
    (T, H), I, K = x.shape, w2.shape[2], topk_ids.shape[1]
    act = torch.empty(T * K, I, dtype=torch.float32, device=x.device)
    y = torch.empty_like(x)
    mini_gate_up[(T * K, I)](x, w13, topk_ids, act, H, I, K, BLOCK_H=1024, num_warps=1)
    mini_down[(T, H)](act, w2, topk_ids, topk_weights, y, H, I, K, BLOCK_I=1024, num_warps=1)
    return y


def check_cpu():
    for shape in (wd.get_preset("tiny"), wd.MoEShape("odd", H=96, I=40, E=5, K=1)):
        for T in (1, 3):
            g = torch.Generator().manual_seed(T)
            w13, w2 = shape.weights(seed=T)
            x = torch.randn(T, shape.H, generator=g).bfloat16()
            tw, ids = wd.route(torch.randn(T, shape.E, generator=g), shape.K)
            ref = wd.reference_moe(x, w13, w2, tw, ids)
            err = wd.rel_error(mini_moe(x, w13, w2, tw, ids), ref) / wd.rounding_floor(ref, torch.bfloat16)
            print(f"{shape.name} T={T}: minimal pair error {err:.3f} × the bf16 floor")
            assert err <= 1.1, err


def main_v1():
    p = harness.parser(__doc__, VERSIONS, presets=["qwen3-30b-a3b"], Ts=[1, 4, 8])
    args = p.parse_args()
    if args.check or os.environ.get("TRITON_INTERPRET") == "1":
        return check_cpu()
    rows = []
    for case in harness.cases(args.presets or ["qwen3-30b-a3b", "olmoe-1b-7b"], args.T or [1, 4, 8]):
        for label, fn in (("minimal", mini_moe), ("warp", lambda *a: wd.moe(*a, method="warp"))):
            us, err, _ = harness.checked_us(case, fn, label, tol=1.5)
            rows.append(harness.row(case, variant=label, us=us, err=err))
            print(f"{case.shape.name:16s} T={case.T:<3d} {label:8s} {us:8.2f} us {100 * case.floor_us / us:5.1f}% "
                  f"err/floor {err:.3f}", flush=True)
    harness.save(harness.results_dir() / "minimal_pair.csv", rows)


VERSIONS = {"v1": (main_v1, [])}


if __name__ == "__main__":
    harness.dispatch(__doc__, VERSIONS)
