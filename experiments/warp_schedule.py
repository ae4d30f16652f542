"""Warp decode's schedule: cache knobs, grid order, what moves its time, and the schedule choice.

    python experiments/warp_schedule.py --version 5 [--presets …] [--T 1 2 4 8 16]
    python experiments/warp_schedule.py --version order [--placements 4]
    python experiments/warp_schedule.py --version heat [--seconds 10] [--pause 20]
    python experiments/warp_schedule.py --version draws [--seeds 1000 3000 6000]
    python experiments/warp_schedule.py --version invariant [--presets …] [--T 1 4 16 64]

- 5: the weight loads' L2 policy, A/B against the tuned pair through this file's copy of the
  gate/up kernel with the policy as a knob. No consistent gain: the package loads evict_first.
  (v5's other knobs are at commit 5a0a4eb, v7's pipelined loop at 4db7704.)
- order: gate/up's grid with the pair index fastest (shipped) against one pair after another:
  equal at T = 1, the shipped order 4–11 % faster at T = 2, at every weight placement.
- heat: Mixtral T = 1 rested and after 10 s of matmuls: the same time. The spread between runs is
  the process's memory history, so every preset is measured in its own process.
- draws: the pair, the grouped schedule and the expert path on six routing draws. The tuner's
  two-draw choice is the majority's everywhere.
- invariant: what ``batch_invariant=True`` costs: ``moe`` with it (the pair at T = 1's tiles at
  every T) against ``moe`` without it (``auto``: the tuned schedule, or the expert path past the
  crossover), per preset at T = 1, 4, 16, 64.

Rows: experiments/results/<GPU>/{warp_variants,grid_order,schedule_draws,batch_invariance}.csv.
"""

from __future__ import annotations

import argparse
import copy
import subprocess
import time
from functools import partial
from pathlib import Path

import harness
import knobs
import torch
import triton
import triton.language as tl
from harness import cases, checked_us, row
from triton.language.extra.cuda import gdc_wait

import warpdecode as wd
from bench.ladder import bytes_needed
from bench.sweep import meta
from bench.timing import read_ceiling
from warpdecode import _alloc, configs
from warpdecode import warp as wp
from warpdecode.configs import warp_config
from warpdecode.expert import moe_expert
from warpdecode.presets import get_preset
from warpdecode.tuner import _over_layers, _time
from warpdecode.warp import moe_warp
from warpdecode.workload import make_inputs, make_layers, num_copies

# ==================================================================================================
# version 5: A/B of warp decode's cache knobs at T = 1…16 on every preset, against the tuned configs.
#
#
#     python experiments/warp_schedule.py --version 5 [--presets ...] [--T 1 2 4 8 16]
#
# Variants: the weight loads' L2 policy (``evict_first`` streams past L2, as the shipped kernels
# do; ``""`` the default, ``evict_last``), through this file's copy of the pair with the policy as a
# knob (``EVICT``); ``tuned`` is the shipped pair. The CSV also holds rows of two variants measured
# at commit 5a0a4eb and then removed, being slower nearly everywhere: ``group=1`` (the gate/up program of the first pair
# routed to an expert walks every pair of that expert, so its rows come from HBM once) and
# ``down_tokens=N`` (a down program walking N tokens); and rows ``down num_stages=2/3`` (the down
# kernel's loop over I pipelined, measured at commit 4db7704, within 1 %). Rows go to
# experiments/results/<GPU>/warp_variants.csv: time per layer call, and the fraction of the read ceiling.
# ==================================================================================================




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
    """The 3-D down tile (``knobs.down_tile_3d``, inlined) with ``EVICT``."""
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
    knobs.gate_up_kernel[(T * K * triton.cdiv(I, gu["BLOCK_I"]),)](
        x, w13, topk_ids, act, H, I, T * K, K, x.stride(0), w13.stride(0), w13.stride(1), act.stride(0),
        BLOCK_I=gu["BLOCK_I"], BLOCK_H=gu["BLOCK_H"], USE_PDL=wp.USE_PDL, PAIR_FASTEST=True, EVICT=gu["evict"],
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


def main_v5():
    p = argparse.ArgumentParser()
    p.add_argument("--presets", nargs="+", default=wd.MODEL_PRESETS)
    p.add_argument("--T", type=int, nargs="+", default=[1, 2, 4, 8, 16])
    p.add_argument("--out", default=str(harness.results_dir() / "warp_variants.csv"))
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
    harness.save(Path(args.out), rows)


# ==================================================================================================
# version order: Does warp decode's time at small T depend on where the weights sit in memory, and does the
#
# gate/up kernel's grid order change that? (Mixtral T=1 measured 163–186 µs across runs with the
# same configs, docs/design.md.)
#
# For each preset and placement, a spacer of random size is allocated first, so the layer copies
# land at other addresses; then the tuned pair runs with the gate/up grid in both orders:
# ``pair`` (the pair index fastest, shipped) and ``neuron`` (one pair's neuron blocks after
# another: programs side by side read consecutive rows of one expert). Both orders run the
# gate/up kernel with its grid order as a knob (``knobs.gate_up_kernel``), then the shipped down kernel.
#
#     python experiments/warp_schedule.py --version order [--presets mixtral-8x7b ...] [--placements 4]
#
# Writes experiments/results/<GPU>/grid_order.csv: µs per layer, fraction of the read ceiling, by placement.
# ==================================================================================================




def pair_in_order(x, w13, w2, topk_ids, topk_weights, c_gu: dict, c_dn: dict, pair_fastest: bool):
    """gate_up_kernel in the given grid order, then the shipped down kernel (with PDL where the GPU has it)."""
    T, H = x.shape
    I = w13.shape[1] // 2  # noqa: E741
    K = topk_ids.shape[1]
    act = _alloc.empty(T * K, I, dtype=torch.float32, device=x.device)
    knobs.gate_up_kernel[(T * K * triton.cdiv(I, c_gu["BLOCK_I"]),)](
        x, w13, topk_ids, act, H, I, T * K, K, x.stride(0), w13.stride(0), w13.stride(1), act.stride(0),
        BLOCK_I=c_gu["BLOCK_I"], BLOCK_H=c_gu["BLOCK_H"], USE_PDL=wp.USE_PDL, PAIR_FASTEST=pair_fastest,
        EVICT="evict_first",
        num_warps=c_gu["num_warps"], num_stages=c_gu["num_stages"])
    return wp.warp_down(act, w2, topk_ids, topk_weights, c_dn, x.dtype)


def main_order():
    p = argparse.ArgumentParser()
    p.add_argument("--presets", nargs="+", default=["mixtral-8x7b", "qwen3-30b-a3b", "gpt-oss-20b", "qwen3-235b-a22b"])
    p.add_argument("--T", type=int, nargs="+", default=[1, 2])
    p.add_argument("--placements", type=int, default=4)
    p.add_argument("--seed", type=int, default=5000, help="routing draw: make_inputs seed = SEED + T (bench: 1000)")
    p.add_argument("--out", default=str(harness.results_dir() / "grid_order.csv"))
    args = p.parse_args()
    ceiling = read_ceiling()
    gen = torch.Generator().manual_seed(7)
    rows = []
    for name in args.presets:
        shape = get_preset(name)
        for placement in range(args.placements):
            spacer_mb = 0 if placement == 0 else int(torch.randint(1, 4096, (1,), generator=gen))
            spacer = torch.empty(spacer_mb << 20, dtype=torch.uint8, device="cuda")
            L = num_copies(shape)
            layers = make_layers(shape, L, seed=placement)
            w13s, w2s = [a for a, _ in layers], [b for _, b in layers]
            for T in args.T:
                inputs = make_inputs(shape, T, L, seed=args.seed + T)
                xs, ids, tws = [i.x for i in inputs], [i.topk_ids for i in inputs], [i.topk_weights for i in inputs]
                cfg = configs.warp_config(shape.H, shape.I, shape.E, shape.K, T)
                floor = sum(bytes_needed(shape, i) for i in inputs) / L / (ceiling * 1e12) * 1e6
                for order in ("pair", "neuron"):
                    step = partial(pair_in_order, c_gu=cfg["gate_up"], c_dn=cfg["down"], pair_fastest=order == "pair")
                    us = _time(_over_layers(step, xs, w13s, w2s, ids, tws), 50) / L
                    rows.append({"preset": name, "T": T, "seed": args.seed + T, "placement": placement,
                                 "spacer_MB": spacer_mb,
                                 "order": order, "us": round(us, 2), "floor_us": round(floor, 2),
                                 "frac_ceiling": round(floor / us, 4), "ceiling_TBps": round(ceiling, 4), **meta()})
                    print(f"{name:16s} T={T} seed {args.seed + T} placement {placement} "
                          f"(+{spacer_mb:4d} MB) {order:6s} "
                          f"{us:8.2f} us "
                          f"{100 * floor / us:5.1f}%", flush=True)
            del layers, w13s, w2s, spacer
            torch.cuda.empty_cache()
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    harness.save(Path(args.out), rows)


# ==================================================================================================
# version heat: Is the spread of Mixtral's T=1 time (163–186 µs for the same kernels and configs) the GPU's
#
# state after heavy work? Times warp decode and the expert-centric path on Mixtral at T=1 three
# ways: on a rested GPU, right after SECONDS of dense bf16 matmuls at full power (what a sweep's
# DeepSeek-V3 T=256 rows do just before Mixtral's), and again after a pause; with the SM clock,
# power and temperature nvidia-smi reports after each.
#
#     python experiments/warp_schedule.py --version heat [--seconds 10] [--pause 20]
# ==================================================================================================

def smi() -> str:
    q = "clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_throttle_reasons.active"
    return subprocess.run(["nvidia-smi", f"--query-gpu={q}", "--format=csv,noheader"], capture_output=True,
                          text=True).stdout.strip()


def heat(seconds: float):
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    t0 = time.time()
    while time.time() - t0 < seconds:
        for _ in range(20):
            a = (a @ a).clamp_(-1, 1)
        torch.cuda.synchronize()


def main_heat():
    p = argparse.ArgumentParser()
    p.add_argument("--seconds", type=float, default=10)
    p.add_argument("--pause", type=float, default=20)
    args = p.parse_args()
    shape = get_preset("mixtral-8x7b")
    L = num_copies(shape)
    layers = make_layers(shape, L)
    inputs = make_inputs(shape, 1, L, seed=1001)
    cols = ([i.x for i in inputs], [w for w, _ in layers], [w for _, w in layers],
            [i.topk_weights for i in inputs], [i.topk_ids for i in inputs])

    def both(label):
        for name, fn in (("warp", moe_warp), ("expert", moe_expert)):
            us = _time(_over_layers(partial(fn), *cols), 100) / L
            print(f"{label:28s} {name:6s} {us:8.2f} us   [{smi()}]", flush=True)

    both("rested")
    heat(args.seconds)
    both(f"after {args.seconds:.0f} s of matmuls")
    time.sleep(args.pause)
    both(f"after a {args.pause:.0f} s pause")
    heat(args.seconds)
    both(f"after {args.seconds:.0f} s of matmuls")


# ==================================================================================================
# version draws: Experiment: does warp decode's tuned schedule choice hold on other routing draws?
#
#
# The tuner (``tune --paths grouped``) keeps the grouped schedule in a bucket where it beat the
# two-kernel pair on two routing draws (seeds 3000 + T and 6000 + T). The benchmark's draw is
# 1000 + T, and there the choice has looked wrong: OLMoE T=8, grouped 127.9 µs in the tuner,
# 159.4 µs in a benchmark sweep, where the pair alone measured 151.2 µs. This times
# the pair (``split``), the grouped schedule and the expert-centric path on several draws in one
# process, each output checked against float64 first, and records how many distinct experts each
# draw routes to.
#
#     python experiments/warp_schedule.py --version draws [--presets …] [--T 4 8 16] [--seeds 1000 3000 6000]
#
# Rows: experiments/results/<GPU>/schedule_draws.csv (µs per layer call, the floor, distinct experts).
# ==================================================================================================

def main_draws():
    p = argparse.ArgumentParser()
    p.add_argument("--presets", nargs="+", default=["olmoe-1b-7b", "gpt-oss-20b", "mixtral-8x7b", "qwen3-235b-a22b"])
    p.add_argument("--T", type=int, nargs="+", default=[4, 8, 16])
    p.add_argument("--seeds", type=int, nargs="+", default=[1000, 2000, 3000, 4000, 5000, 6000],
                   help="routing draws: inputs at seed + T (benchmark 1000, tuner 3000 and 6000)")
    args = p.parse_args()
    rows = []
    for case in cases(args.presets, args.T, seeds=args.seeds):
        s = case.shape
        cfg = configs.warp_config(s.H, s.I, s.E, s.K, case.T)
        tuned = "grouped" if "grouped" in cfg else "split"
        forms = {"split": partial(moe_warp, config=cfg, schedule="split"),
                 "grouped": partial(moe_warp, config=cfg, schedule="grouped"), "expert": moe_expert}
        times = {}
        for form, fn in forms.items():
            us, err, _ = checked_us(case, fn, form)
            times[form] = us
            rows.append(row(case, form=form, tuned=tuned, distinct=case.distinct, us=us, err=err))
        print(f"{s.name:16s} T={case.T:3d} seed {case.seed:5d} distinct {case.distinct:6.1f} (tuned: {tuned:7s}) "
              + "  ".join(f"{f} {t:8.2f} us {100 * case.floor_us / t:5.1f}%" for f, t in times.items()), flush=True)
    harness.save(harness.results_dir() / "schedule_draws.csv", rows)


# ==================================================================================================
# version invariant: What batch_invariant=True costs.
#
# ``batch_invariant=True`` gives a token the same bits in any batch by running warp decode's pair
# with T = 1's launch configuration at every T (warpdecode/api.py). Against it, the same call
# without it (``auto``: the tuned pair or grouped schedule up to the crossover, the expert path
# past it). Both through the operator ``torch.ops.warpdecode.moe``, what a compiled model runs (no
# validation, no host sync), timed over the case's layer copies in CUDA graphs, each output checked
# against float64 first.
#
#     python experiments/warp_schedule.py --version invariant [--presets …] [--T 1 4 16 64] [--reps 60]
#
# Rows: experiments/results/<GPU>/batch_invariance.csv (``form`` auto or batch_invariant; detail:
# the invariant form's time over auto's, ``cost``). The CSV is written after every case.
# ==================================================================================================

def main_invariant():
    p = argparse.ArgumentParser()
    p.add_argument("--presets", nargs="+", default=wd.MODEL_PRESETS)
    p.add_argument("--T", type=int, nargs="+", default=[1, 4, 16, 64])
    p.add_argument("--reps", type=int, default=60)
    args = p.parse_args()
    path = harness.results_dir() / "batch_invariance.csv"
    rows = []
    for case in cases(args.presets, args.T):
        times = {}
        for form, invariant in (("auto", False), ("batch_invariant", True)):
            def fn(x, w13, w2, tw, ids, invariant=invariant):
                return torch.ops.warpdecode.moe(x, w13, w2, tw, ids, "auto", None, "native", None, False, invariant)

            us, err, _ = checked_us(case, fn, form, tol=8.0, reps=args.reps)
            times[form] = us
            rows.append(row(case, form=form, us=us, err=err,
                            cost=round(us / times["auto"], 4) if invariant else None))
        print(f"{case.shape.name:16s} T={case.T:3d} "
              + "  ".join(f"{f} {t:9.2f} us ({100 * case.floor_us / t:5.1f}%)" for f, t in times.items())
              + f"  cost {times['batch_invariant'] / times['auto']:.3f}x", flush=True)
        harness.save(path, rows)


VERSIONS = {
    "5": (main_v5, []),
    "order": (main_order, []),
    "heat": (main_heat, []),
    "draws": (main_draws, []),
    "invariant": (main_invariant, []),
}


if __name__ == "__main__":
    harness.dispatch(__doc__, VERSIONS)
