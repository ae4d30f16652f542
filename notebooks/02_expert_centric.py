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
# # 2 · The expert-centric path, stage by stage
#
# **What this rung adds:** the path production engines run. Rung 1's loop asked the host which
# experts were hit and launched a dozen kernels per expert. The expert-centric path instead sorts
# the (token, expert) pairs by expert *on the device*, lays the tokens out expert-major, and runs
# every expert's matmuls in one **grouped GEMM** launch per projection. No host sync, a fixed number
# of launches, and a step a CUDA graph can capture. vLLM's `fused_moe`, TensorRT-LLM and Hugging
# Face's `grouped_mm` are all built this way; this repository speaks vLLM's vocabulary
# (`sorted_token_ids`, `expert_ids`, `num_tokens_post_padded`).
#
# **Why:** to see what each of its eight stages does with the data, and which of them exist only
# to move data into and out of the layout the GEMMs want. At decode those are the stages warp
# decode (rung 4) deletes.
#
# ```bash
# python tools/run_notebooks.py notebooks/02_expert_centric.ipynb
# ```
#
# The stage-by-stage walk-through runs the same small example on every device (the `tiny` layer
# shape, four tokens); the timings are re-measured on a GPU and read from
# `results/NVIDIA_H200/stages.csv` without one.

# %%
import torch
from lessons import emulate as em
from lessons import ladder, poisoned, unfused

import warpdecode as wd
from warpdecode import expert as ex

S = ladder.SETTINGS
print(f"kernels run on: {S.gpu}")

# %%
# where this GPU's launch configurations come from: a tuned table, or the defaults and the command
# that tunes the shapes used here
print(ladder.tuning_note([wd.get_preset(S.preset)]))

# %% [markdown]
# | stage | function | what it does | |
# |---|---|---|---|
# | 1 route | `warpdecode.route` | logits → `topk_weights`, `topk_ids` | computes |
# | 2 align | `expert.align` | sort the T·K pairs by expert, pad each expert's run to `BLOCK_M` rows | moves data |
# | 3 gather | `unfused.gather` | token rows → expert-major buffer | moves data |
# | 4 quantize | `expert.quantize` | bf16: nothing; FP8: e4m3 values + 1×128 scales | moves data |
# | 5 gate/up | `expert.gate_up` | grouped GEMM, SiLU·up in the epilogue, rounded to bf16 | computes |
# | 6 down | `expert.down` | grouped GEMM, × routing weight in the epilogue, rounded | computes |
# | 7 scatter | `unfused.scatter` | expert-major rows → (T·K, H) in token order | moves data |
# | 8 combine | `expert.combine` | Σ over the K slots, in bf16 like vLLM's `moe_sum` | moves data |
#
# In this notebook each stage is its own kernel, so that each can be shown and timed. vLLM's
# `fused_moe`, and `warpdecode.moe(method="expert")`, fuse gather into the gate/up GEMM's loads and
# scatter into the down GEMM's stores: the same numbers (the last cell of the walk-through checks
# it to the bit) in four launches instead of six. The package ships only that fused form: gather and
# scatter as kernels of their own live beside it, in `bench/unfused.py` (`unfused` here).
#
# ## A small example
#
# Four tokens, K = 3 of E = 7 experts, routed by hand so that the example has what matters: experts
# with several tokens, an expert with one, and two experts (1 and 4) with none. Pair `p = t·K + j`
# is token t's slot j.

# %%
shape = wd.get_preset("tiny")  # H=160, I=88, E=7, K=3: odd sizes, so every masked tail runs
T, K, E = 4, shape.K, shape.E
dev = S.device
topk_ids = torch.tensor([[2, 0, 5], [5, 2, 6], [0, 5, 3], [5, 6, 2]], dtype=torch.int32, device=dev)
g = torch.Generator(device="cpu").manual_seed(0)
topk_weights = torch.softmax(torch.randn(T, K, generator=g), dim=-1).to(dev)
x = torch.randn(T, shape.H, generator=g).to(dev, torch.bfloat16)
w13, w2 = shape.weights(device=dev, seed=0)
ref = wd.reference_moe(x, w13, w2, topk_weights, topk_ids)
floor = wd.rounding_floor(ref, torch.bfloat16)

# One fixed launch configuration for the walk-through, valid on the GPU and in the interpreter;
# the full path (`warpdecode.moe`) picks its own from warpdecode/configs.py.
tile = {"BLOCK_N": 32, "BLOCK_K": 32, "GROUP_M": 1, "num_warps": 4, "num_stages": 1}
cfg = {"BLOCK_M": 16, "gate_up": dict(tile), "down": dict(tile)}
BLOCK_M = cfg["BLOCK_M"]
for t in range(T):
    print(f"token {t}: pairs {[t * K + j for j in range(K)]} → experts {topk_ids[t].tolist()}")

# %% [markdown]
# ### Stage 2 · align
#
# One kernel (`moe_align_kernel`, one program per 16 pairs: each counts every pair per expert →
# padded prefix sum → places its own pairs, and pads its share of the blocks) writes three arrays:
#
# - `sorted_token_ids` (EM,): pair indices grouped by expert, each expert's run padded up to a
#   multiple of `BLOCK_M` with the **sentinel** `T·K` ("no pair"). EM is the worst case,
#   `T·K + E·(BLOCK_M − 1)` rounded up (capped at `T·K·BLOCK_M`), known on the host without a sync.
# - `expert_ids` (EM / BLOCK_M,): the expert of each `BLOCK_M`-row block, `-1` past the end.
# - `num_tokens_post_padded` (1,): the rows in use. Everything past it is never written and never read.
#
# This is the contract the grouped GEMM relies on: **every block of `BLOCK_M` rows belongs to one
# expert**, so one program loads one expert's weights. Inside a run the pairs keep their order here;
# vLLM's kernel places them with atomic adds, in whatever order those land (both are correct: no
# row of the GEMM depends on another).

# %%
# NBVAL_CHECK_OUTPUT
with poisoned():
    al = ex.align(topk_ids, E, BLOCK_M)
used = int(al.num_tokens_post_padded.item())
sentinel = al.num_pairs
print(f"EM = {al.EM}, num_tokens_post_padded = {used}, sentinel = T*K = {sentinel}")
print(f"expert_ids = {al.expert_ids.tolist()}")
for b in range(al.EM // BLOCK_M):
    run = al.sorted_token_ids[b * BLOCK_M:(b + 1) * BLOCK_M].tolist()
    if b * BLOCK_M >= used:
        print(f"block {b}: past num_tokens_post_padded (expert_ids = {al.expert_ids[b].item()}), never read")
        continue
    pairs = sorted(p for p in run if p != sentinel)
    print(f"block {b}: expert {al.expert_ids[b].item()}, pairs {pairs} + {run.count(sentinel)} × sentinel")

counts = torch.bincount(topk_ids.flatten().long(), minlength=E)
assert used == int(((counts + BLOCK_M - 1) // BLOCK_M * BLOCK_M).sum())
for b in range(used // BLOCK_M):  # the contract: each used block holds only pairs of its own expert
    run = al.sorted_token_ids[b * BLOCK_M:(b + 1) * BLOCK_M]
    pairs = run[run != sentinel].long()
    assert (topk_ids.flatten()[pairs] == al.expert_ids[b]).all()
assert sorted(al.sorted_token_ids[:used][al.sorted_token_ids[:used] != sentinel].tolist()) == list(range(T * K))
assert (al.expert_ids[used // BLOCK_M:] == -1).all()

# %% [markdown]
# Twelve pairs became 80 rows: at decode, most rows of the GEMM are padding. That costs the tensor
# cores some wasted MACs, which at decode are free (the step is bound by weight bytes), but the
# layout itself has to be built, written and read, in launches of its own.
#
# ### Stage 3 · gather
#
# Row r of the expert-major buffer `a` (EM, H) is `x[sorted_token_ids[r] // K]`; padding rows are
# zeros. Rows past `num_tokens_post_padded` are never written: under `poisoned()` they stay NaN,
# which is how a test would catch a kernel that read them.

# %%
with poisoned():
    a = unfused.gather(x, al, K)
rows = al.sorted_token_ids[:used].long()
valid = rows != sentinel
print(f"a: {tuple(a.shape)} {a.dtype}; {int(valid.sum())} token rows, {int((~valid).sum())} padding rows (zeros), "
      f"{al.EM - used} rows never written (NaN)")
assert torch.equal(a[:used][valid], x[rows[valid] // K])
assert (a[:used][~valid] == 0).all() and a[used:].isnan().all()

# %% [markdown]
# ### Stage 4 · quantize
#
# In bf16 the GEMM takes `a` as it is: the stage launches nothing. With `act_format="fp8"` it writes
# e4m3 values and one power-of-two FP32 scale per row per 128 columns (DeepSeek-V3's 1×128 blocks).
# A power-of-two scale makes `q · s` exact, so the only error is e4m3's 3-bit mantissa: about 2⁻⁴
# relative, roughly 16 times bf16's. Rung 3 measures what that costs the layer;
# `bench.emulate.quantize_fp8` is the float64 model of this kernel, and it agrees bit for bit.

# %%
a_native, no_scales = ex.quantize(a, al, "native")
assert a_native is a and no_scales is None  # bf16: nothing to do
with poisoned():
    q, scales = ex.quantize(a, al, "fp8")
H = shape.H
deq = (q[:used].double() * scales[:used].double().repeat_interleave(128, dim=1)[:, :H])[valid]
print(f"q: {tuple(q.shape)} {q.dtype}; scales: {tuple(scales.shape)}, e.g. row 0: {scales[0].tolist()}")
print(f"relative error of the dequantized activations: {wd.rel_error(deq, a[:used][valid]):.2e}")
assert torch.equal(torch.log2(scales[:used]), torch.log2(scales[:used]).round())  # powers of two
assert torch.equal(deq, em.quantize_fp8(a[:used][valid].double()))  # the float64 model, bit for bit

# %% [markdown]
# ### Stage 5 · gate/up grouped GEMM
#
# One launch for every expert: program (m, n) takes rows `m·BLOCK_M …` of `a`, reads the expert
# `expert_ids[m]`, and computes a `BLOCK_M × BLOCK_N` tile of both the gate and the up projection with
# `tl.dot` (FP32 accumulators), then `silu(gate)·up` in the epilogue, **rounded to bf16** on the
# store. Padding rows ride through the tensor cores (a tile is `BLOCK_M` rows either way) but are
# masked out of the loads and the store, as vLLM's `token_mask` does: no bytes move for them, and
# under `poisoned()` they stay NaN. Each valid row is checked against float64, where the only error
# left is that one rounding.

# %%
with poisoned():
    h = ex.gate_up(a, None, w13, al, cfg["gate_up"])
e_of_row = al.expert_ids.repeat_interleave(BLOCK_M)[:used].long()  # the expert of each used row
gu = torch.einsum("rh,rnh->rn", a[:used][valid].double(), w13[e_of_row[valid]].double())
I = shape.I  # noqa: E741
h_ref = torch.nn.functional.silu(gu[:, :I]) * gu[:, I:]
err_h = wd.rel_error(h[:used][valid], h_ref)
print(f"h: {tuple(h.shape)} {h.dtype}; valid rows vs float64: "
      f"{err_h / wd.rounding_floor(h_ref, torch.bfloat16):.3f} × floor")
assert err_h <= 1.1 * wd.rounding_floor(h_ref, torch.bfloat16)  # one rounding, FP32 accumulation
assert h[:used][~valid].isnan().all() and h[used:].isnan().all()  # padding rows: never written

# %% [markdown]
# ### Stage 6 · down grouped GEMM
#
# The same grouping over `h`, with the routing weight of each row's pair multiplied in the epilogue
# (vLLM's `MUL_ROUTED_WEIGHT`), **rounded to bf16**: one weighted expert output per (token, slot)
# pair. Padding rows of `h` are not read, and their rows of `o` are not written.

# %%
with poisoned():
    o = ex.down(h, None, w2, al, topk_weights, cfg["down"])
pair = rows[valid]
o_ref = torch.einsum("ri,rhi->rh", h[:used][valid].double(), w2[e_of_row[valid]].double())
o_ref = o_ref * topk_weights.flatten()[pair].double()[:, None]
err_o = wd.rel_error(o[:used][valid], o_ref)
print(f"o: {tuple(o.shape)} {o.dtype}; valid rows vs float64 (from the bf16 h): "
      f"{err_o / wd.rounding_floor(o_ref, torch.bfloat16):.3f} × floor")
assert err_o <= 1.1 * wd.rounding_floor(o_ref, torch.bfloat16)
assert o[:used][~valid].isnan().all()  # padding rows: never written

# %% [markdown]
# ### Stage 7 · scatter and stage 8 · combine
#
# Scatter copies each pair's row back to token order, `s[p] = o[row of p]`: pure data movement,
# checked bit for bit. Combine sums each token's K rows **in bf16**, one rounding per add, as vLLM's
# `moe_sum` does (`scalar_t x = 0; x += input[...]`): checked bit for bit against that sum written
# in PyTorch. Then the output of the eight stages against the float64 reference.

# %%
with poisoned():
    s = unfused.scatter(o, al)
    y = ex.combine(s, topk_ids, topk_weights, E)
assert s.shape == (T * K, shape.H) and torch.equal(s[pair], o[:used][valid])

y_sum = torch.zeros(T, shape.H, dtype=torch.bfloat16, device=dev)
for j in range(K):  # combine_kernel's order: slot 0 first, rounded after every add
    y_sum = (y_sum.float() + s[j::K].float()).to(torch.bfloat16)
assert torch.equal(y, y_sum)

err = wd.rel_error(y, ref)
print(f"y: {tuple(y.shape)} {y.dtype}; error = {err:.3e} = {err / floor:.2f} × floor "
      f"(bound {ladder.bound('expert')} × floor)")
assert err <= ladder.bound("expert") * floor

with poisoned():  # the whole path, with the configuration warpdecode picks on this device
    y_full = wd.moe(x, w13, w2, topk_weights, topk_ids, method="expert")
assert wd.rel_error(y_full, ref) <= ladder.bound("expert") * floor

# %% [markdown]
# What `moe(method="expert")` runs is vLLM's form: row r of a gate/up tile loads
# `x[sorted_token_ids[r] // K]` itself (stage 3 inside the GEMM's loads), and the down GEMM stores
# row r at row `sorted_token_ids[r]` of a (T·K, H) buffer (stage 7 inside its stores). The same
# roundings in the same order, so the same bits as the stages above, with the same configuration:

# %%
cfg_all = wd.configs.expert_config(shape.H, shape.I, E, K, T)
with poisoned():
    y_fused = ex.moe_expert(x, w13, w2, topk_weights, topk_ids, config=cfg_all)
    y_apart = unfused.moe_expert_unfused(x, w13, w2, topk_weights, topk_ids, config=cfg_all)
print("fused gather/scatter == eight separate stages, bit for bit:", torch.equal(y_fused, y_apart))
assert torch.equal(y_fused, y_apart)

# %% [markdown]
# ## Five of the eight stages only move data
#
# Route, the two GEMMs: computation. Align, gather, quantize, scatter, combine: data movement, to
# build the expert-major layout and take it apart again. Their bytes are tiny next to the weights,
# but each is a launch, and at decode a launch costs more than its bytes. The ledger for
# Qwen3-30B-A3B at T = 1, next to the stage times measured on the H200 (`stages.csv`, each stage
# timed alone in a CUDA graph over three copies of the layer):

# %%
s30 = wd.get_preset("qwen3-30b-a3b")
_, ids1 = wd.route(torch.randn(1, s30.E, generator=g), s30.K)
ledger = ladder.expert_stage_bytes(s30, ids1, block_m=16)
ceiling_tbps = ladder.read_ceiling_tbps()
h200 = {r["stage"]: float(r["median_us"]) for r in ladder.results("stages.csv")
        if r["preset"] == s30.name and r["T"] == "1" and r["path"] == "expert"}
moves_data = {"2 align", "3 gather", "4 quantize", "7 scatter", "8 combine"}
rows_l = [{"stage": st, "kind": "moves data" if st in moves_data else "computes", "KB": f"{b / 1e3:.1f}",
           "µs at ceiling": f"{ladder.floor_us(b, ceiling_tbps):.2f}",
           "H200 µs": f"{h200[st]:.1f}" if st in h200 else "no launch"} for st, b in ledger.items()]
print(f"{s30.name}, T=1, BLOCK_M=16; H200 read ceiling {ceiling_tbps:.2f} TB/s")
print(ladder.table(rows_l))
data_us = sum(h200[st] for st in moves_data if st in h200)
print(f"\nthe data-moving stages: {sum(ledger[st] for st in moves_data) / 1e3:.0f} KB, "
      f"{data_us:.1f} µs of the {sum(h200.values()):.1f} µs summed over all stages on the H200")
assert sum(ledger[st] for st in moves_data) < 0.02 * sum(ledger.values())  # < 2% of the bytes...
assert data_us > 0.25 * sum(h200.values())  # ...more than a quarter of the time

# %% [markdown]
# Each data-moving stage takes several µs on the H200 for a few hundred KB: that is a launch and a
# kernel's ramp-up, not bandwidth. As T grows the GEMMs' bytes grow with the distinct experts and the
# fixed costs fade; at T = 1 they are a large share of the step (printed below). Fusing gather and
# scatter into the GEMMs, as vLLM does, removes two of those launches; align and combine stay.
#
# ![Expert-centric stages at each T, NVIDIA H200](../figures/stage_breakdown.png)
#
# *NVIDIA H200, Qwen3-30B-A3B, bf16: `figures/stage_breakdown.png`, drawn from
# `results/NVIDIA_H200/stages.csv` by `bench/plots.py`.*
#
# The numbers behind it, at T = 1 and T = 256:

# %%
st_rows = [r for r in ladder.results("stages.csv") if r["preset"] == "qwen3-30b-a3b" and r["path"] == "expert"]
by_t = ladder.pivot(st_rows, "stage", "T", "median_us")
print(f"{ladder.RESULTS_GPU}, qwen3-30b-a3b, µs per stage (results/NVIDIA_H200/stages.csv)")
print(ladder.table(by_t))
for t in ("1", "256"):
    tot = sum(float(r["median_us"]) for r in st_rows if r["T"] == t)
    data_t = sum(float(r["median_us"]) for r in st_rows if r["T"] == t and r["stage"] in moves_data)
    gemm_t = sum(float(r["median_us"]) for r in st_rows if r["T"] == t and "GEMM" in r["stage"])
    print(f"T={t}: data-moving stages {data_t:.1f} of {tot:.1f} µs ({data_t / tot:.0%}), "
          f"the two GEMMs {gemm_t:.1f} µs ({gemm_t / tot:.0%})")

# %% [markdown]
# On a GPU, the harness re-measures the stages here (`bench.sweep.stages`: each stage
# alone, in a CUDA graph, over layer copies so the weights come from HBM).

# %%
if S.on_gpu:
    from lessons import sweep

    fresh = [r for r in sweep.stages([wd.get_preset(S.preset)], [1, 64], reps=S.reps) if r["path"] == "expert"]
    print(f"measured now on {S.gpu}, {S.preset}:")
    print(ladder.table(ladder.pivot(fresh, "stage", "T", "median_us")))
    assert all(float(r["median_us"]) > 0 for r in fresh)
else:
    print("no GPU: nothing to time here; the table above is the H200's")

# %% [markdown]
# The expert-centric path is what a batch needs: at T = 256 the two GEMMs take most of its time (the
# shares printed above) and run near the memory ceiling (rung 3). At decode, its data-moving
# launches (two even in vLLM's fused form) and its half-empty tiles are overhead. Rung 3
# ([03_grouped_gemm](03_grouped_gemm.ipynb)) opens the grouped GEMM kernel and measures where its
# precision goes; rung 4 removes the layout altogether.
