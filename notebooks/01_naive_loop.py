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
# # 1 · The naive expert loop
#
# **What this rung adds:** the layer itself. Its math, the routing that picks K of E experts per
# token, the float64 reference every later rung is measured against, and the eager PyTorch loop
# over experts that a first implementation (and Hugging Face's eager experts) runs. Then the two
# numbers that frame the whole ladder: the bytes a decode step must read, and the time those bytes
# take at the GPU's measured bandwidth. The loop misses that time by two orders of magnitude, and
# this notebook shows where the time goes instead.
#
# **Why start here:** every later kernel is a way of getting closer to the byte floor computed
# below without moving further from the reference.
#
# Run it (from the repository root, after `pip install -e ".[notebooks]"`):
#
# ```bash
# python tools/run_notebooks.py notebooks/01_naive_loop.ipynb
# ```
#
# On a CUDA GPU it runs the Qwen3-30B-A3B layer; without one, every kernel runs in Triton's CPU
# interpreter on the `tiny` preset, and the timings shown are the measured H200 rows from
# `results/NVIDIA_H200/`.

# %%
import torch
from lessons import ladder, poisoned  # first: the checkout on sys.path; warpdecode decides GPU or CPU interpreter

import warpdecode as wd

S = ladder.SETTINGS
shape = wd.get_preset(S.preset)
print(f"kernels run on: {S.gpu}")
print(f"layer: {shape.name}  H={shape.H} I={shape.I} E={shape.E} K={shape.K}, bf16")

# %%
# where this GPU's launch configurations come from: a tuned table, or the defaults and the command
# that tunes the shapes used here
print(ladder.tuning_note([wd.get_preset(S.preset)]))

# %% [markdown]
# ## The layer
#
# | symbol | meaning |
# | --- | --- |
# | `T` | tokens in the decode step |
# | `E` | routed experts in the layer |
# | `K` | experts per token (top-k) |
# | `H` | hidden size |
# | `I` | intermediate size of one expert |
#
# Each token `t` is sent to K of the E experts, `e = topk_ids[t, j]` for slots `j = 0…K−1`, with
# weights `topk_weights[t, j]`. Expert `e` is a gated MLP: a gate matrix `Wg[e]` and an up matrix
# `Wu[e]` (I × H each, stored together as `w13[e]`, (2I, H), gate rows first) and a down matrix
# `W2[e]` (H × I):
#
# $$y_t = \sum_{j=0}^{K-1} w_{tj}\; W_2[e_{tj}]\,\big(\mathrm{silu}(W_g[e_{tj}]\,x_t) \odot W_u[e_{tj}]\,x_t\big)$$
#
# ## Routing
#
# The router's logits (T, E) go through a softmax; the top K are kept and, for Qwen3 and Mixtral,
# renormalised to sum to one (`warpdecode.route`; OLMoE does not renormalise).

# %%
T = 4
g = torch.Generator(device="cpu").manual_seed(0)
router_logits = torch.randn(T, shape.E, generator=g).to(S.device)
topk_weights, topk_ids = wd.route(router_logits, shape.K, renormalize=shape.renormalize)
print("topk_ids (T, K):\n", topk_ids.cpu())
print("topk_weights (T, K):\n", topk_weights.cpu())

# the K experts of a token are distinct, and (renormalised) their weights sum to one
assert topk_ids.shape == topk_weights.shape == (T, shape.K) and topk_ids.dtype == torch.int32
assert all(len(set(row)) == shape.K for row in topk_ids.tolist())
assert torch.allclose(topk_weights.sum(-1), torch.ones(T, device=S.device))

# %% [markdown]
# ## The reference: an executable spec in float64
#
# One function, plain PyTorch, float64, every shape annotated. Every error in this repository is
# the relative L2 distance to it, `rel_error(y, ref) = ‖y − ref‖ / ‖ref‖`, and is reported in
# multiples of the **rounding floor**: the error of the float64 result rounded once to bf16, the
# best any bf16 output can do.

# %%
print(ladder.source(wd.reference_moe, "T, H = x.shape", "return y"))

# %%
w13, w2 = shape.weights(device=S.device, seed=0)  # bf16, std 1/sqrt(fan_in) like a trained layer
x = torch.randn(T, shape.H, generator=g).to(S.device, torch.bfloat16)
ref = wd.reference_moe(x, w13, w2, topk_weights, topk_ids)  # (T, H) float64
floor = wd.rounding_floor(ref, torch.bfloat16)
print(f"ref {tuple(ref.shape)} {ref.dtype};  bf16 rounding floor = {floor:.3e}")
assert ref.dtype == torch.float64 and 1e-4 < floor < 1e-2  # bf16 keeps 8 significant bits: ~2^-9 relative

# %% [markdown]
# ## Rung 1: the eager expert loop
#
# For each expert that received a token: find its tokens, gather them, two matmuls, SiLU·up, scale
# by the routing weight, `index_add_` into the output. Everything is in bf16, so the gate and up
# projections, the SiLU, the product, each expert's output, the scaled output and every add into
# `y` are rounded: expect several floors of error.

# %%
print(ladder.source(wd.loop.moe_loop, "I = w2.shape[2]", "return y"))

# %%
with poisoned():  # every buffer a path allocates starts as NaN: an unwritten element fails
    y_loop = wd.moe(x, w13, w2, topk_weights, topk_ids, method="loop")
err = wd.rel_error(y_loop, ref)
print(f"loop: error = {err:.3e} = {err / floor:.2f} × floor (bound {ladder.bound('loop')} × floor)")
assert y_loop.shape == (T, shape.H) and y_loop.dtype == torch.bfloat16
assert err <= ladder.bound("loop") * floor

# %% [markdown]
# ## The byte ledger: what a decode step must read
#
# At decode, T is small and each expert's weights are read to multiply a handful of vectors: two
# FLOPs per weight element per token, against two bytes per element. No GPU has the FLOP-to-byte
# ratio to be compute-bound here, so the floor on time is **bytes / bandwidth**. What must be read
# is each *distinct* routed expert's weights once, `3·H·I` elements each, plus the activations in,
# the output out and the routing ids, which are negligible.
#
# At T = 1 that is exactly K experts. The ledger for every model preset:

# %%
rows = []
for name in wd.MODEL_PRESETS:
    s = wd.get_preset(name)
    one_token = torch.arange(s.K, dtype=torch.int32).view(1, s.K)  # T = 1: K distinct experts
    nbytes = ladder.decode_bytes(s, one_token)
    assert nbytes == s.K * s.expert_bytes + 2 * s.H * 2 + s.K * 8  # weights + x in + y out + ids
    rows.append({"preset": name, "bytes": nbytes, "H": s.H, "I": s.I, "E": s.E, "K": s.K,
                 "expert MB": f"{s.expert_bytes / 1e6:.2f}", "T=1 reads MB": f"{nbytes / 1e6:.1f}",
                 "layer MB": f"{s.layer_bytes / 1e6:.0f}", "share read": f"{s.K / s.E:.1%}"})
print(ladder.table(rows, [c for c in rows[0] if c != "bytes"]))

# %%
# NBVAL_CHECK_OUTPUT
# The ledger is the benchmark's own count: results/NVIDIA_H200/speed.csv holds the same bytes at T = 1.
csv_bytes = {r["preset"]: int(r["bytes"]) for r in ladder.results("speed.csv")
             if r["T"] == "1" and r["method"] == "warp"}
for r in rows:
    assert csv_bytes[r["preset"]] == r["bytes"], r["preset"]
print("T=1 bytes agree with speed.csv for", len(rows), "presets")

# %% [markdown]
# The time those bytes take is set by the bandwidth a streaming read actually reaches, which is
# below the datasheet: the harness measures it with a Triton kernel streaming a buffer of gigabytes
# (`bench.timing.read_ceiling`). On a GPU this cell measures it now; on the CPU it takes
# the H200's value recorded in `results/NVIDIA_H200/ceiling.csv`.

# %%
if S.on_gpu:
    from lessons import read_ceiling

    ceiling_tbps, ceiling_from = read_ceiling(2.0), f"measured now on {S.gpu}"
else:
    ceiling_tbps, ceiling_from = ladder.read_ceiling_tbps(), f"{ladder.RESULTS_GPU}, results/NVIDIA_H200/ceiling.csv"
print(f"read ceiling: {ceiling_tbps:.2f} TB/s ({ceiling_from})")
for r in rows:
    r["floor µs"] = f"{ladder.floor_us(r['bytes'], ceiling_tbps):.1f}"
print(ladder.table(rows, ["preset", "T=1 reads MB", "floor µs"]))
assert 1.0 < ceiling_tbps < 10.0  # TB/s: an HBM GPU, not a misread

# %% [markdown]
# ### More tokens, more distinct experts
#
# With T tokens the step must read every expert that *any* token picked. For uniform routing the
# expected count is `E·(1 − (1 − K/E)^T)`: it grows almost linearly while T·K ≪ E and saturates at
# E, where the whole layer is read once however many tokens there are. Past that point the step
# stops being bound by weight bytes per token, and batching pays.

# %%
s = wd.get_preset("qwen3-30b-a3b")
gT = torch.Generator(device="cpu").manual_seed(1)
rows_t = []
for t in (1, 2, 4, 8, 16, 32, 64, 128, 256):
    _, ids = wd.route(torch.randn(t, s.E, generator=gT), s.K)
    distinct = torch.unique(ids).numel()
    rows_t.append({"T": t, "expected distinct": f"{ladder.expected_distinct(s.E, s.K, t):.1f}", "drawn": distinct,
                   "MB read": f"{ladder.decode_bytes(s, ids) / 1e6:.0f}",
                   "floor µs": f"{ladder.floor_us(ladder.decode_bytes(s, ids), ceiling_tbps):.1f}"})
    assert s.K <= distinct <= min(s.E, t * s.K)
print(f"{s.name} (E={s.E}, K={s.K}), random router logits, read ceiling {ceiling_tbps:.2f} TB/s")
print(ladder.table(rows_t))

# %% [markdown]
# ## Where the loop's time goes
#
# The loop's bytes are the same as any path's, so it is not slow for lack of bandwidth. Two things
# cost it:
#
# 1. **Host syncs.** `torch.unique(ids).tolist()` needs the set of hit experts on the host, so the
#    CPU waits for the GPU to finish everything before it; `torch.where(ids == e)` with one argument
#    is a `nonzero`, whose output size depends on the data: another wait, once per expert. The GPU
#    idles while Python decides what to launch next, and the step cannot be captured in a CUDA graph.
# 2. **Launches.** About ten small ops per expert, each its own kernel, each moving a few KB
#    (or one expert's few MB of weights) in a launch that costs microseconds.
#
# Counting the aten ops one call dispatches shows both, on any device:

# %%
ops = ladder.aten_ops(wd.loop.moe_loop, x, w13, w2, topk_weights, topk_ids)
hit = torch.unique(topk_ids).numel()
launching = [name for name, is_view in ops if not is_view]
syncs = [name for name in launching if name in ladder.SYNC_OPS]
print(f"T={T}: {hit} experts hit; {len(launching)} ops that launch a kernel ({len(launching) / hit:.1f} per expert), "
      f"{len(ops) - len(launching)} views; {len(syncs)} host syncs: {sorted(set(syncs))}")
first = launching.index("eq")  # the first expert's ops run from its `ids == e` to its index_add_
print("one expert's ops:", launching[first:launching.index("index_add_") + 1])
assert len(syncs) == 1 + hit  # unique once, nonzero per expert

# %% [markdown]
# On the GPU, the harness times the loop (eagerly: a graph cannot capture a host sync) next to
# the two paths of the later rungs, each over several copies of the layer so no call finds its
# weights in L2 (`bench.sweep.speed`). On the CPU, the cell shows the rows measured on
# the H200.

# %%
cols = ["preset", "T", "method", "median_us", "floor_us", "frac_ceiling"]
if S.on_gpu:
    from lessons import sweep

    timed = sweep.speed([shape], [1, 8], ["loop", "expert", "warp"], ceiling_tbps=ceiling_tbps, reps=S.reps)
    print(f"measured now on {S.gpu}:")
    print(ladder.table(timed, cols))
    loop_t1 = next(r for r in timed if r["T"] == 1 and r["method"] == "loop")
    assert all(r["checked"] for r in timed)  # the harness checked every timed output against the reference
else:
    timed = [r for r in ladder.results("speed.csv") if r["preset"] == "qwen3-30b-a3b" and r["T"] in ("1", "8")
             and r["method"] in ("loop", "expert", "warp")]
    print(f"measured on {ladder.RESULTS_GPU} (results/NVIDIA_H200/speed.csv):")
    print(ladder.table(timed, cols))
    loop_t1 = next(r for r in timed if r["T"] == "1" and r["method"] == "loop")
# one ceiling for every floor of this notebook: the row's bytes at the ceiling above (a row of the CSV
# carries its own run's ceiling, which can differ from ceiling.csv's by a few percent)
loop_floor = ladder.floor_us(int(loop_t1["bytes"]), ceiling_tbps)
print(f"\nthe loop at T=1 takes {float(loop_t1['median_us']):.0f} µs for bytes that need {loop_floor:.1f} µs at "
      f"{ceiling_tbps:.2f} TB/s: {100 * loop_floor / float(loop_t1['median_us']):.1f}% of the read ceiling")
assert loop_floor / float(loop_t1["median_us"]) < 0.2

# %% [markdown]
# On the H200 the loop takes orders of magnitude longer than its bytes need (the last line above): it
# spends its time launching and waiting, not reading. The next rung
# ([02_expert_centric](02_expert_centric.ipynb)) removes the syncs and most launches by running the
# same computation *expert-centric*, the way vLLM, TensorRT-LLM and Hugging Face's `grouped_mm` do:
# sort the (token, expert) pairs by expert once, then run every expert in one grouped GEMM launch.
