# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#       jupytext_version: 1.19.6
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 5 · When tokens share experts: the grouped schedule
#
# **What this rung adds:** a second pair of warp-decode kernels for the T where tokens share
# experts. The pair of rung 4 streams an expert's rows once per (token, slot) routed to it; the
# grouped schedule (`warpdecode/kernels/warp_grouped.py`) gives each program a block of **one
# expert's rows and every token**, so the rows are read once however many tokens share them. There is
# still no sort, no padding of the weights' side, no gather and no scatter pass.
#
# **Why:** past T = 1, on layers with few experts (Mixtral's 8 at any T > 1) or many tokens, the
# pair's reads grow with T·K while the bytes that must move grow with the distinct experts routed.
#
# ```bash
# python tools/run_notebooks.py notebooks/05_grouped_schedule.ipynb
# ```

# %%
import inspect

import lessons  # the notebooks' helpers (notebooks/lessons.py)
import torch

import warpdecode as wd
from warpdecode import configs
from warpdecode.kernels import warp_grouped

ON_GPU = wd.DEFAULT_DEVICE.type == "cuda"
DEVICE = wd.DEFAULT_DEVICE
shape = wd.get_preset("qwen3-30b-a3b" if ON_GPU else "tiny")
Ts = (1, 8, 64) if ON_GPU else (1, 4)
H200_TABLE = configs.read_table(configs.tuned_file("NVIDIA H200"))  # the H200's tuned table, read anywhere


def h200_bucket(preset: str, T: int) -> dict:
    """The warp-decode bucket of the H200's table a call with T tokens takes on that GPU."""
    s = wd.get_preset(preset)
    return configs.bucket(H200_TABLE, "warp", s.H, s.I, s.E, s.K, T)


print(f"kernels run on: {wd.gpu_name()}; layer {shape.name}")

# %% [markdown]
# ## What the pair streams, against what must move
#
# For one routing draw per preset: the (token, slot) pairs, each of which streams its expert's
# rows, over the distinct experts routed (each of whose rows must move once):

# %%
g = torch.Generator().manual_seed(8)
for p in wd.MODEL_PRESETS:
    s = wd.get_preset(p)
    cells = []
    for T in (1, 4, 8, 16):
        _, ids = wd.route(torch.randn(T, s.E, generator=g), s.K)
        cells.append(f"T={T}: {T * s.K / torch.unique(ids).numel():.1f}×")
    print(f"{p:16s} " + "  ".join(cells))

# %% [markdown]
# ## Which schedule runs where
#
# The tuner times both schedules in every bucket of every preset and keeps `grouped` only where it
# wins over two routing draws. What `wd.moe(..., method="warp")` runs on the H200:

# %%
# NBVAL_CHECK_OUTPUT
buckets = (1, 2, 4, 8, 16)
runs = {p: {T: wd.warp.schedule_of(h200_bucket(p, T)) for T in buckets} for p in wd.MODEL_PRESETS}
for p, by_T in runs.items():
    print(f"{p:16s} " + "  ".join(f"T≤{T}: {sched:7s}" for T, sched in by_T.items()))
assert all(by_T[1] == "split" for by_T in runs.values())  # at T = 1 every pair has its own expert
assert any(by_T[16] == "grouped" for by_T in runs.values())

# %% [markdown]
# The tuner's times behind that choice (µs per layer call, each schedule's best configuration):

# %%
for p in wd.MODEL_PRESETS:
    for T in buckets:
        m = h200_bucket(p, T)["measured_us"]
        if "grouped" in m:
            print(f"{p:16s} T≤{T:<3d} pair {m['split']:7.1f}  grouped {m['grouped']:7.1f}  "
                  f"grouped / pair {m['grouped'] / m['split']:.2f}  → {runs[p][T]}")

# %% [markdown]
# ## The grouped gate/up kernel
#
# The expert varies fastest; a program whose expert no token chose exits at once. `_routed` is the
# `[T_PAD, K_PAD]` mask of the (token, slot) pairs routed to this program's expert. Each step loads a
# tile of gate and up rows once and multiplies it by every token's activation at once on the tensor
# cores (bf16 × bf16 is exact in FP32, and the tensor cores sum in FP32). Each token's routing weight
# for this expert is folded in with SiLU·up, in registers.

# %%
print(inspect.getsource(warp_grouped._routed.fn))
print(inspect.getsource(warp_grouped.warp_gate_up_grouped_kernel.fn))

# %% [markdown]
# ## The three-term split
#
# The down kernel wants tensor cores too, and their operands are 16-bit. Rounding the FP32
# intermediate to bf16 would add a rounding; instead the gate/up kernel stores it as **three bf16
# terms whose sum is it exactly**: bf16 keeps 8 of FP32's 24 significand bits, with FP32's exponent
# range, so hi, mid and lo hold 8 + 8 + 8. The same split in PyTorch, on FP32 values of every scale:

# %%
# NBVAL_CHECK_OUTPUT
gs = torch.Generator().manual_seed(3)
a = torch.randn(1 << 16, generator=gs) * torch.logspace(-20, 20, 1 << 16)
hi = a.bfloat16()
mid = (a - hi.float()).bfloat16()
lo = (a - hi.float() - mid.float()).bfloat16()
print(f"hi == a: {bool((hi.float() == a).all())}, hi + mid == a: {bool((hi.float() + mid.float() == a).all())}, "
      f"hi + mid + lo == a: {bool((hi.float() + mid.float() + lo.float() == a).all())}")
assert torch.equal(hi.float() + mid.float() + lo.float(), a)

# %% [markdown]
# ## The grouped down kernel: one expert's share, an FP32 atomics combine
#
# A program owns one expert's `w2` rows for a block of hidden outputs and multiplies them by the three
# terms for every token routed to the expert. The sum over experts crosses programs, so it goes
# through an FP32 scratch in global memory (atomic adds); the last of the block's E programs to
# arrive reads the sums and rounds them to `y`, once. With K > 2 the order of the FP32 additions
# varies from run to run, so an output's last bit can too (`batch_invariant=True` asks for the pair).

# %%
print(inspect.getsource(warp_grouped.warp_down_grouped_kernel.fn))

# %% [markdown]
# ## Against the float64 reference
#
# Poisoned outputs, with the router's draw and with every token routed to the same K experts (the
# case the schedule is for): one rounding, as for the pair, so the error is the floor.

# %%
for T in Ts:
    gt = torch.Generator().manual_seed(50 + T)
    w13, w2 = shape.weights(device=DEVICE, seed=T)
    x = torch.randn(T, shape.H, generator=gt).to(DEVICE, torch.bfloat16)
    tw, ids = wd.route(torch.randn(T, shape.E, generator=gt).to(DEVICE), shape.K, renormalize=shape.renormalize)
    shared = torch.arange(shape.K, device=DEVICE, dtype=ids.dtype).expand(T, shape.K).contiguous()
    for routing, route_ids in (("router", ids), ("all on the same K experts", shared)):
        ref = wd.reference_moe(x, w13, w2, tw, route_ids)
        floor = wd.rounding_floor(ref, torch.bfloat16)
        with lessons.poisoned():  # every buffer the call allocates starts as NaN
            y = wd.moe(x, w13, w2, tw, route_ids, method="warp", schedule="grouped")
        err = wd.rel_error(y, ref)
        print(f"T={T} {routing:26s} {err / floor:.4f} × floor")
        assert y.shape == (T, shape.H) and err <= 1.1 * floor

# %% [markdown]
# ## Speed where it runs
#
# From `results/NVIDIA_H200/speed.csv` (the public call in a CUDA graph), warp decode's time (the
# schedule the table picks) over the expert-centric path's, at the T where the table picks `grouped`:

# %%
speed = lessons.data.speed_table("NVIDIA H200")  # {preset: {method: {T: row}}}
t_us = {(p, T, m): r["median_us"] for p, by_m in speed.items() for m, by_T in by_m.items() for T, r in by_T.items()}
points = [(p, T) for p, by_T in runs.items() for T, sched in by_T.items()
          if sched == "grouped" and (p, T, "warp") in t_us]
for p, T in points:
    print(f"{p:16s} T={T:<3d} warp (grouped) {t_us[(p, T, 'warp')]:7.1f} µs, "
          f"expert-centric {t_us[(p, T, 'expert')]:7.1f} µs")
faster = sum(t_us[(p, T, "expert")] < t_us[(p, T, "warp")] for p, T in points)
print(f"the expert-centric path is faster at {faster} of these {len(points)} points")

# %% [markdown]
# The grouped schedule beats the pair where tokens share experts, but it pays for the token axis
# with tensor-core tiles padded to 16 tokens and a combine through atomics, and the expert-centric
# path's sorted layout can be faster still (the count above). `method="auto"` runs whichever
# path is faster at each T; rung 6 ([06_profiling_and_accuracy](06_profiling_and_accuracy.ipynb))
# puts every path side by side and finds that crossover.
