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
# # 9 · FP8 weights: half the bytes, the same rounding
#
# **What this rung adds:** expert weights in FP8 e4m3 with block scales, the form production FP8
# checkpoints ship (DeepSeek-V3, Qwen3-FP8: one FP32 scale per 128 × 128 block) and Blackwell's
# tensor cores read (OCP MXFP8: one power-of-two scale per 32 columns). Warp decode dequantizes
# them in registers and reads the bf16 activations as they are; the expert-centric path runs them
# weight-only, or as the classical w8a8 GEMM with the activations quantized to e4m3 too.
#
# **Why:** decode is a weight stream (rungs 1–5), so half the bytes is the largest speed lever
# left; and the accuracy claim of warp decode in FP8 is about the *activations*: quantizing them
# to e4m3, as w8a8 does, costs far more than rounding the output once.
#
# ```bash
# python tools/run_notebooks.py notebooks/09_fp8_weights.ipynb
# ```
#
# On a GPU it runs the Qwen3-30B-A3B layer; in the CPU interpreter the `tiny` preset (odd H and I,
# so partial scale blocks, prime E). Speed is measured by `bash tools/gpu.sh fp8` on an H200
# (`results/<GPU>/fp8_speed.csv`); the cell below shows it where that file exists.

# %%
import re

import torch
from lessons import compiled, ladder

import warpdecode as wd
from warpdecode import quant
from warpdecode.kernels import warp_fp8 as k8

S = ladder.SETTINGS
shape = wd.get_preset(S.preset)
print(f"kernels run on: {S.gpu}; layer: {shape}")
print(ladder.tuning_note([shape]))

# %% [markdown]
# ## The byte ledger, halved
#
# One call at T = 1 reads the K routed experts' rows once: 3·I·H weights each. In bf16 that is two
# bytes a weight; in e4m3 one, plus the scales: 4 bytes per 128 × 128 block (0.02 %), or one byte
# per 32 weights for MXFP8 (3.1 %). At Qwen3-30B-A3B's shape, whatever this machine runs:

# %%
q = wd.get_preset("qwen3-30b-a3b")
weights = q.K * 3 * q.I * q.H
scales = {"block128": q.K * 4 * (2 * -(-q.I // 128) * -(-q.H // 128) + -(-q.H // 128) * -(-q.I // 128)),
          "mxfp8": q.K * (2 * q.I * -(-q.H // 32) + q.H * -(-q.I // 32))}
print(f"bf16     {2 * weights / 1e6:6.2f} MB")
for f, s in scales.items():
    print(f"{f:8s} {(weights + s) / 1e6:6.2f} MB  ({(weights + s) / (2 * weights):.3f} of bf16)")

# %% [markdown]
# ## The two formats
#
# `wd.quantize_experts(w13, w2, format=...)` makes either from the bf16 weights;
# `wd.experts_from_checkpoint(...)` wraps a checkpoint's tensors without copying them. w13's gate
# and up rows are blocked separately (they are two projections in a checkpoint), and a dimension
# that is not a multiple of 128 (or 32) ends in a partial block.

# %%
w13, w2 = shape.weights(device=S.device, seed=0)
fp8 = {f: wd.quantize_experts(w13, w2, f) for f in quant.FORMATS}
for f, (q13, q2) in fp8.items():
    print(f"{f:8s} w13 {tuple(q13.weight.shape)} e4m3, scales {tuple(q13.scale.shape)} {q13.scale.dtype}; "
          f"w2 scales {tuple(q2.scale.shape)}")
    # the round trip: within e4m3's rounding (4 significant bits) of the weights
    assert wd.rel_error(q13.dequantize(), w13) < 0.035 and wd.rel_error(q2.dequantize(), w2) < 0.035

# %% [markdown]
# ## The kernel: the bf16 pair, dequantizing in registers
#
# The same two kernels as rung 4, one warp per output; each 16-byte load now brings 16 e4m3
# weights. Each step's FP32 products are summed per scale group, each group's sum multiplied by
# its scale once, and the sums over groups taken at the end:

# %%
print(k8.__doc__.split("\n\n")[0])
print(ladder.source(k8.warp_gate_up_fp8_kernel, start="    acc_g = tl.zeros", stop="    gate = tl.sum"))

# %% [markdown]
# Compiled for the H200 (on any machine: `bench.compiled`), every weight load is 128 bits:

# %%
jobs = [ln.job for ln in compiled.record_launches("warp", q, 1, gpu_name=ladder.RESULTS_GPU, weights="block128")]
for job, c in zip(jobs, compiled.compile_many(jobs), strict=True):
    weight_loads = [ln for ln in c.asm["ptx"].splitlines() if "ld.global" in ln and "evict_first" in ln]
    widths = {int(m[1] or 1) * int(m[2]) for m in (re.search(r"ld\.global\S*?(?:\.v(\d))?\.[bfsu](\d+)\s", ln)
                                                 for ln in weight_loads)}
    print(f"{job.name}: {len(weight_loads)} weight loads in the PTX, of {sorted(widths)} bits")
    assert widths == {128}

# %% [markdown]
# ## Error: the output rounded once, and what activation quantization adds
#
# Every path reads the same FP8 weights, and the reference is float64 on those weights,
# dequantized exactly: the error measures each path's rounding, never the weights'
# quantization. Warp decode rounds only the output, so it sits at the bf16 floor; the weight-only
# expert path also rounds the intermediate and the combine (as with bf16 weights, rung 3); w8a8
# quantizes the activations and the intermediate to e4m3, the step warp decode removes.

# %%
rows = []
for T in S.Ts:
    g = torch.Generator().manual_seed(T)
    x = torch.randn(T, shape.H, generator=g).to(S.device, torch.bfloat16)
    tw, ti = wd.route(torch.randn(T, shape.E, generator=g).to(S.device), shape.K)
    ref16 = wd.reference_moe(x, w13, w2, tw, ti)
    for f, (q13, q2) in fp8.items():
        ref = wd.reference_moe(x, q13, q2, tw, ti)
        floor = wd.rounding_floor(ref, torch.bfloat16)
        y = {name: wd.moe(x, q13, q2, tw, ti, **kw) for name, kw in (
            ("warp", dict(method="warp")), ("expert", dict(method="expert")),
            ("w8a8", dict(method="expert", act_format="fp8")))}
        err = {name: wd.rel_error(v, ref) / floor for name, v in y.items()}
        assert err["warp"] <= ladder.bound("warp") and err["expert"] <= ladder.bound("expert")
        assert 5 < err["w8a8"] <= ladder.bound("expert_fp8")
        rows.append({"T": T, "format": f, **{k: f"{v:.2f}" for k, v in err.items()},
                     "quantization": f"{wd.rel_error(ref, ref16) / wd.rounding_floor(ref16, torch.bfloat16):.0f}",
                     "w8a8/warp vs bf16": f"{wd.rel_error(y['w8a8'], ref16) / wd.rel_error(y['warp'], ref16):.2f}"})
print("error / the bf16 floor of the FP8 layer (quantization: the FP8 layer against the bf16 one, same unit;")
print("last column: both paths against the bf16 layer, the weights' quantization included)")
print(ladder.table(rows))

# %% [markdown]
# The quantization column is the weights' own cost, a property of the checkpoint, not of any
# kernel: a model served in FP8 carries it whichever path runs the layer. Measured against the bf16
# layer, so with that cost included, the last column is what activation quantization adds on top:
# the w8a8 path's error over warp decode's, the comparison the blog draws.
#
# ## Speed against the FP8 byte floor
#
# Measured on an H200 by `bash tools/gpu.sh fp8` (CUDA graphs over layer copies, the read ceiling
# measured in the same run); shown here where the CSV exists.

# %%
speed = ladder.results("fp8_speed.csv")
if not speed:
    print("no results/NVIDIA_H200/fp8_speed.csv in this checkout: run `bash tools/gpu.sh fp8` on an H200")
else:
    from lessons import fp8 as bench

    for line in bench.figures(speed, ladder.results("fp8_accuracy.csv")):
        print(line)

# %% [markdown]
# ## Where MXFP8 differs from 128 × 128 blocks on Hopper
#
# In warp decode, not at all but for its scale bytes: both are dequantized on CUDA cores (an exact
# e4m3 → FP32 conversion and one multiply per scale group). The expert path's GEMMs scale each
# K step's product by one scale per weight row, so a step stays inside one scale group: 128
# columns for blocks, 32 for MXFP8, four times the steps. Hopper's tensor cores take no block
# scales; Blackwell's (`tcgen05.mma` with block scaling) read MXFP8's directly.
