# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#       jupytext_version: 1.19.7
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 4 · Warp decode: one warp per output, two kernels
#
# **What this rung adds:** the flip of the parallel axis, written here in forty lines. The
# expert-centric path gives each program a tile of *one expert's rows × tokens* and builds a layout
# (sort, pad, gather, scatter, combine) so that tile exists. Warp decode
# ([Cursor's post](https://cursor.com/blog/warp-decode)) gives each **warp one output value** and lets
# it stream exactly the weight rows that value needs. The layer becomes two kernels: gate/up, with
# SiLU·up in registers, and down, with the top-K combine folded in. The intermediate stays FP32 and
# the output is rounded once.
#
# **Why:** at decode the expert-centric path spends much of its time on launches that only move data
# (rung 2), and it rounds more often than it has to (rung 3).
#
# ```bash
# python tools/run_notebooks.py notebooks/04_warp_decode.ipynb
# ```
#
# The notebook writes a minimal pair, checks it against the float64 reference, changes one thing
# at a time in two exercises, then times it beside the package's pair and lists what the package
# adds. On a GPU it runs Qwen3-30B-A3B's layer; on a CPU the `tiny` preset in Triton's interpreter,
# with the H200's measurements read from the repository.

# %%
import inspect

import lessons  # the notebooks' helpers (notebooks/lessons.py): the checkout's bench/ and results
import torch
import triton
import triton.language as tl

import warpdecode as wd
from warpdecode.kernels import warp_pair

ON_GPU = wd.DEFAULT_DEVICE.type == "cuda"
DEVICE = wd.DEFAULT_DEVICE
shape = wd.get_preset("qwen3-30b-a3b" if ON_GPU else "tiny")
Ts = (1, 8) if ON_GPU else (1, 2)  # the interpreter runs one program at a time
H200 = "NVIDIA H200"  # whose measurements this notebook reads where it cannot measure


def h200_rows(name: str, experiment: bool = False) -> list[dict]:
    """The rows of results/NVIDIA_H200/<name>, or of experiments/results/NVIDIA_H200/<name>."""
    data = lessons.data
    return data.read((data.experiments_dir(H200) if experiment else data.gpu_dir(H200)) / name)


print(f"kernels run on: {wd.gpu_name()}; layer {shape.name}: H={shape.H} I={shape.I} E={shape.E} K={shape.K}")

# %% [markdown]
# ## The pair, written here
#
# Kernel 1 owns `act[pair, i]`, one neuron of one (token, slot) pair: it reads the pair's expert
# from `topk_ids` and streams that expert's gate row and up row against the token's activation.
# Kernel 2 owns `y[t, h]`: it streams row `h` of each of the token's K experts' `w2` against their
# intermediates and adds them, each weighted by its routing weight, into one FP32 sum. One program
# is one warp (`num_warps=1`); `tl.sum` is a reduction across the warp's 32 lanes.

# %%
@triton.jit
def mini_gate_up(x_ptr, w13_ptr, ids_ptr, act_ptr, H, I, K, BLOCK_H: tl.constexpr):
    pair, i = tl.program_id(0), tl.program_id(1)  # this warp's output: act[pair, i]
    t, e = pair // K, tl.load(ids_ptr + pair).to(tl.int64)  # its token, and the expert it is routed to
    g = tl.zeros([BLOCK_H], tl.float32)
    u = tl.zeros([BLOCK_H], tl.float32)
    for h0 in range(0, H, BLOCK_H):  # stream neuron i's gate row and up row across H
        h = h0 + tl.arange(0, BLOCK_H)
        xv = tl.load(x_ptr + t * H + h, mask=h < H, other=0.0).to(tl.float32)
        g += xv * tl.load(w13_ptr + (e * 2 * I + i) * H + h, mask=h < H, other=0.0).to(tl.float32)
        u += xv * tl.load(w13_ptr + (e * 2 * I + I + i) * H + h, mask=h < H, other=0.0).to(tl.float32)
    g, u = tl.sum(g), tl.sum(u)  # across the warp's lanes
    tl.store(act_ptr + pair * I + i, g * tl.sigmoid(g) * u)  # SiLU(g)·u, stored in act's dtype


@triton.jit
def mini_down(act_ptr, w2_ptr, ids_ptr, tw_ptr, y_ptr, H, I, K, BLOCK_I: tl.constexpr):
    t, h = tl.program_id(0), tl.program_id(1)  # this warp's output: y[t, h]
    acc = tl.zeros([BLOCK_I], tl.float32)
    for j in range(K):  # the token's K experts, each weighted by its routing weight: the combine
        e, w = tl.load(ids_ptr + t * K + j).to(tl.int64), tl.load(tw_ptr + t * K + j)
        for i0 in range(0, I, BLOCK_I):  # stream row h of the expert's w2 across I
            i = i0 + tl.arange(0, BLOCK_I)
            a = tl.load(act_ptr + (t * K + j) * I + i, mask=i < I, other=0.0).to(tl.float32)
            acc += w * a * tl.load(w2_ptr + (e * H + h) * I + i, mask=i < I, other=0.0).to(tl.float32)
    tl.store(y_ptr + t * H + h, tl.sum(acc))  # the one rounding: FP32 to y's dtype


def mini_moe(x, w13, w2, topk_weights, topk_ids, act_dtype=torch.float32, fill=None):
    """The pair: T·K·I warps for gate/up, then T·H warps for down. ``fill``: a value written into
    the intermediate and the output first (NaN poisons them: an element never written shows)."""
    (T, H), I, K = x.shape, w2.shape[2], topk_ids.shape[1]
    act = torch.empty(T * K, I, dtype=act_dtype, device=x.device)
    y = torch.empty_like(x)
    if fill is not None:
        act.fill_(fill), y.fill_(fill)
    mini_gate_up[(T * K, I)](x, w13, topk_ids, act, H, I, K, BLOCK_H=1024, num_warps=1)
    mini_down[(T, H)](act, w2, topk_ids, topk_weights, y, H, I, K, BLOCK_I=1024, num_warps=1)
    return y


# %% [markdown]
# ## Against the float64 reference
#
# Poisoned outputs, fresh random weights and routing, and the error in multiples of the bf16
# rounding floor (the error of rounding the exact result to bf16 once). The only rounding is the
# store of `y`, so the error should be the floor itself; 1.1 allows for FP32 accumulation.

# %%
def layer(T: int, seed: int):
    g = torch.Generator().manual_seed(seed)
    w13, w2 = shape.weights(device=DEVICE, seed=seed)
    x = torch.randn(T, shape.H, generator=g).to(DEVICE, torch.bfloat16)
    tw, ids = wd.route(torch.randn(T, shape.E, generator=g).to(DEVICE), shape.K, renormalize=shape.renormalize)
    ref = wd.reference_moe(x, w13, w2, tw, ids)
    return (x, w13, w2, tw, ids), ref, wd.rounding_floor(ref, torch.bfloat16)


cases = {T: layer(T, seed=T) for T in Ts}
err32 = {}  # the minimal pair's error per T (its intermediate in FP32), for the exercises below
for T, (inputs, ref, floor) in cases.items():
    y = mini_moe(*inputs, fill=float("nan"))
    err32[T] = wd.rel_error(y, ref)  # NaN anywhere makes it NaN, and NaN fails the assertion
    print(f"T={T}: minimal pair {err32[T] / floor:.3f} × floor")
    assert y.shape == ref.shape and err32[T] <= 1.1 * floor

# %% [markdown]
# ## Exercise 1: round the intermediate
#
# A bf16 pipeline would store SiLU·up as bf16 between the kernels. Change one argument,
# `act_dtype=torch.bfloat16`, and the store in `mini_gate_up` rounds: one more rounding per
# intermediate value, and the error grows past the floor (about 1.4× on real layers).

# %%
for T, (inputs, ref, floor) in cases.items():
    err16 = wd.rel_error(mini_moe(*inputs, act_dtype=torch.bfloat16, fill=float("nan")), ref)
    print(f"T={T}: FP32 intermediate {err32[T] / floor:.3f} × floor, bf16 intermediate {err16 / floor:.3f} × floor")
    assert err16 > 1.1 * err32[T]

# %% [markdown]
# ## Exercise 2: move the combine out of the down kernel
#
# Launch `mini_down` with each (token, slot) pair as a "token" of one slot: it writes each pair's
# weighted output, rounded to bf16, and a second pass adds the K rows in bf16, as vLLM's `moe_sum`
# does. Count what that costs: every pair's row written and read back, and K more roundings.

# %%
def unfused_moe(x, w13, w2, topk_weights, topk_ids):
    (T, H), I, K = x.shape, w2.shape[2], topk_ids.shape[1]
    act = torch.empty(T * K, I, dtype=torch.float32, device=x.device)
    mini_gate_up[(T * K, I)](x, w13, topk_ids, act, H, I, K, BLOCK_H=1024, num_warps=1)
    slots = torch.full((T * K, H), float("nan"), dtype=x.dtype, device=x.device)  # one row per pair
    mini_down[(T * K, H)](act, w2, topk_ids.reshape(-1, 1), topk_weights.reshape(-1, 1), slots, H, I, 1,
                          BLOCK_I=1024, num_warps=1)
    y = slots.view(T, K, H)[:, 0]
    for j in range(1, K):  # the combine pass, in bf16
        y = y + slots.view(T, K, H)[:, j]
    return y, slots


for T, (inputs, ref, floor) in cases.items():
    y_sep, slots = unfused_moe(*inputs)
    y_out = 2 * T * shape.H  # bytes of y, bf16
    moved = 2 * slots.numel() * slots.element_size() + y_out  # slots written, read back; y written
    err = wd.rel_error(y_sep, ref)
    print(f"T={T}: combine apart moves {moved:,} B of outputs against {y_out:,} B "
          f"({moved / y_out:.0f}× = 2K + 1), error {err / floor:.3f} × floor")
    assert moved == (2 * shape.K + 1) * y_out and err > 1.1 * floor

# %% [markdown]
# ## What the package adds to this pair
#
# `warpdecode.moe(method="warp")` runs the same two kernels (`warpdecode/kernels/warp_pair.py`),
# with these additions, each measured on the H200 (the files under `experiments/results/` name the
# scripts):
#
# - **Tiles of several rows and long steps per program**, tuned per layer and T
#   (`warpdecode/tuned/`): more bytes in flight per SM. Measured together below.
# - **Each step's products summed at once**: one FP32 number per row rather than a tile of
#   accumulators (as `mini_gate_up`'s `g` and `u`), so registers go to loads in flight
#   (`gate_up_ladder.csv`, the cell after the next).
# - **Programmatic dependent launch**: the down kernel starts early, loads its first `w2` columns,
#   then waits for gate/up; that hides its ramp-up (measured below on a GPU).
# - **Pairs fastest in the grid**: programs side by side read the same rows for different tokens,
#   so a shared expert's rows come from L2 (`grid_order.csv`).
# - **Ids outside [0, E) guarded** in the kernels (`kernels/ids.py`): they read nothing and their
#   token's outputs are NaN, at no measurable cost (`public_call.csv`).
#
# The minimal pair against the package's, both as `warpdecode`'s benchmark times a call: captured in
# a CUDA graph, weights rotated through copies larger than L2, median of interleaved replays.

# %%
if ON_GPU:
    sweep, read_ceiling = lessons.sweep, lessons.read_ceiling  # the benchmark's own timing (bench/)
    rows = sweep.speed([shape], list(Ts), ["minimal", "warp"], ceiling_tbps=read_ceiling(2.0), reps=50,
                       extra={"minimal": mini_moe})
    print(f"measured now on {wd.gpu_name()}")
else:
    rows = [{"preset": r["preset"], "T": r["T"], "method": r["variant"], "median_us": r["us"]}
            for r in h200_rows("minimal_pair.csv", experiment=True)]
    print("no GPU: the H200's rows (experiments/minimal_pair.py)")
us = {(r["preset"], int(r["T"]), r["method"]): float(r["median_us"]) for r in rows}
for preset, T in sorted({(p, T) for p, T, _ in us}):
    mini, shipped = us[(preset, T, "minimal")], us[(preset, T, "warp")]
    print(f"{preset:14s} T={T}: minimal pair {mini:7.1f} µs, the package's {shipped:7.1f} µs ({mini / shipped:.2f}×)")
    assert shipped < mini

# %% [markdown]
# What the per-step sums bought: the gate/up kernel's ingredients added one at a time to a plain
# read of the same tile, on the H200 at T = 1 (every rung but the last keeps a tile of
# accumulators):

# %%
rungs = [r for r in h200_rows("gate_up_ladder.csv", experiment=True) if r["T"] == "1"
         and r["preset"] == "qwen3-30b-a3b"]
for r in rungs:
    print(f"{r['variant']:50s} {float(r['us']):6.1f} µs  {float(r['frac_ceiling']):.0%} of the read ceiling")
lean = next(float(r["us"]) for r in rungs if "lean" in r["variant"])
tile = next(float(r["us"]) for r in rungs if r["variant"].startswith("+ SiLU·up, store"))
print(f"per-step sums: {tile / lean:.2f}× faster than a tile of accumulators")
assert lean < tile

# %% [markdown]
# Programmatic dependent launch, measured here on a GPU that has it (the same kernels with the
# launch flag off):

# %%
if ON_GPU and wd.warp.USE_PDL:
    from unittest import mock

    def without_pdl(*args):
        with mock.patch.object(wd.warp, "USE_PDL", False):
            return wd.moe(*args, method="warp")

    pdl = sweep.speed([shape], [1], ["warp", "without PDL"], ceiling_tbps=read_ceiling(2.0), reps=50,
                      extra={"without PDL": without_pdl})
    print({r["method"]: r["median_us"] for r in pdl}, "µs at T = 1")
else:
    print("no GPU with programmatic dependent launch here: this cell measures on one")

# %% [markdown]
# The down tile the installed Triton compiles. It differs by release: `[rows, K, columns]` on 3.6,
# the experts first, `[K, rows, columns]`, from 3.8 (slot by slot where a thread would hold too many
# weights); `warp_pair.py` keeps each release's form in its own functions:

# %%
form = warp_pair._down_tile_k_first if warp_pair.K_FIRST else warp_pair._down_tile_3d
print(f"triton {triton.__version__}: {form.fn.__name__}")
print(inspect.getsource(form.fn))

# %% [markdown]
# ## Speed as a fraction of the ceiling
#
# From `results/NVIDIA_H200/speed.csv` (the public call in a CUDA graph): warp decode's fraction of
# the measured read ceiling, and the expert-centric path's time over warp decode's.

# %%
speed = h200_rows("speed.csv")
t_us = {(r["preset"], int(r["T"]), r["method"]): float(r["median_us"]) for r in speed}
for preset in wd.MODEL_PRESETS:
    cells = [f"T={T}: {float(r['frac_ceiling']):.0%}, {t_us[(preset, T, 'expert')] / float(r['median_us']):.2f}×"
             for r in speed if r["preset"] == preset and r["method"] == "warp" and (T := int(r["T"])) <= 16]
    print(f"{preset:16s} " + "  ".join(cells))
assert all(t_us[(p, 1, "expert")] > t_us[(p, 1, "warp")] for p in wd.MODEL_PRESETS)

# %% [markdown]
# At T = 1 warp decode beats the tuned expert-centric path on every preset. As T grows, tokens share
# experts and every sharing pair streams the shared rows again; rung 5
# ([05_grouped_schedule](05_grouped_schedule.ipynb)) reads each routed expert's rows once for all
# its tokens, and rung 6 ([06_profiling_and_accuracy](06_profiling_and_accuracy.ipynb)) finds where
# the expert-centric path takes over.
