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
# # 3 · The grouped Triton kernel: its speed and where its precision goes
#
# **What this rung adds:** the inside of the expert-centric path's two compute stages. How the
# production-style grouped GEMM tiles the work, what the align contract buys it, what the compiler
# makes of it at decode sizes, how close it comes to the memory ceiling as T grows, and, stage by
# stage, which roundings put its output two to three bf16 floors away from the float64 reference.
#
# **Why:** the grouped GEMM is the baseline warp decode has to beat, on time and on error. Knowing
# exactly where each is lost tells us what a different design can win back.
#
# ```bash
# python tools/run_notebooks.py notebooks/03_grouped_gemm.ipynb
# ```
#
# On a GPU the accuracy cells run Qwen3-30B-A3B and the speed cells re-measure it; on the CPU they
# run the `tiny` preset in Triton's interpreter and show the H200's measured rows.

# %%
import inspect

import torch
from lessons import compiled, ladder, poisoned
from lessons import emulate as em

import warpdecode as wd
from warpdecode.kernels import expert as kx

S = ladder.SETTINGS
shape = wd.get_preset(S.preset)
print(f"kernels run on: {S.gpu}; layer: {shape.name} H={shape.H} I={shape.I} E={shape.E} K={shape.K}")

# %%
# where this GPU's launch configurations come from: a tuned table, or the defaults and the command
# that tunes the shapes used here
print(ladder.tuning_note([wd.get_preset(S.preset)]))

# %% [markdown]
# ## The kernel
#
# `grouped_gate_up_kernel` (stage 5) in full: the program's place in the grid (`_grouped_order`, both
# GEMMs'), then its tile, `_gate_up_rows`; `grouped_down_kernel` (stage 6) is the same loop over I with
# one accumulator and the routing weight in the epilogue.

# %%
print(inspect.getsource(kx.grouped_gate_up_kernel.fn))
print(inspect.getsource(kx._grouped_order.fn))
print(inspect.getsource(kx._gate_up_rows.fn))

# %% [markdown]
# How to read it:
#
# - **The grid** is `cdiv(EM, BLOCK_M) × cdiv(I, BLOCK_N)` programs; program `(pid_m, pid_n)` owns a
#   `BLOCK_M × BLOCK_N` tile of the output. `GROUP_M` reorders the programs so that neighbours
#   share rows of `a` in L2 (the grouped ordering of Triton's matmul tutorial).
# - **The align contract** makes each `BLOCK_M`-row block of `a` belong to one expert, so the whole
#   program needs one expert id, `e = expert_ids[pid_m]`, and streams one expert's rows of `w13`. A
#   block past `num_tokens_post_padded` returns at once: the grid is sized for the worst case on the
#   host, without a device sync, and the surplus programs exit.
# - **The main loop** walks H in steps of `BLOCK_K`: one `BLOCK_M × BLOCK_K` tile of activations,
#   one `BLOCK_K × BLOCK_N` tile each of gate and up rows, two `tl.dot`s into FP32 accumulators. The
#   activation tile is loaded once for both projections.
# - **The epilogue** computes `silu(gate)·up` in FP32 and stores it **rounded to bf16**, the first of
#   the path's roundings.
# - `DOT_FP32` exists for the CPU interpreter, whose bf16 `tl.dot` is wrong; on a GPU the dot takes
#   bf16 operands on the tensor cores.
# - `HALF_M` (off unless the tuner picks it) is for large T, where an expert's pairs fill one block
#   only in part: at Mixtral T = 256 (~64 pairs per expert, `BLOCK_M = 128`) about half the rows a
#   tile multiplies are padding. A block whose upper half is all padding then runs the same tile at
#   `BLOCK_M / 2` rows (`_upper_half_empty` reads one index to decide): half the tensor-core work,
#   the same weights read once. Each row's products and sums are the same in either tile, so the
#   output is the same to the bit (`tests/test_expert_stages.py::test_half_m_tiles_match_float64`).
#
# ### What the compiler makes of it at decode
#
# The launches `warpdecode.expert.moe_expert` makes on an H200 for Qwen3-30B-A3B at T = 1 (the tuned
# configuration from `warpdecode/tuned/NVIDIA_H200.json`), compiled for sm_90a here
# (`bench.compiled`: Triton's real pipeline and ptxas, no GPU needed). What the compiler
# reports belongs to this Triton version, so it is printed, not compared:

# %%
launches = [ln for ln in ladder.recorded_jobs("expert", "qwen3-30b-a3b", 1) if ln.kernel.startswith("grouped_")]
tuned = [ln.job for ln in launches]
plain = [compiled.Job(j.module, j.name, j.args, {**j.constexprs, "SWAP_AB": False}, j.num_warps, j.num_stages)
         for j in tuned]
for ln, job, c in zip(launches * 2, tuned + plain, compiled.compile_many(tuned + plain), strict=True):
    ptx = c.asm["ptx"]
    ce = job.constexprs
    report = compiled.ptxas_report(c)
    mma = sorted({m for m in ptx.split() if m.startswith(("mma.sync", "wgmma.mma_async"))})
    print(f"{ln.kernel}: grid {ln.grid}, BLOCK_M×N×K = {ce['BLOCK_M']}×{ce['BLOCK_N']}×{ce['BLOCK_K']}, "
          f"{job.num_warps} warps, {job.num_stages} stages, SWAP_AB={ce['SWAP_AB']}")
    print(f"  tensor-core instructions: {mma}; shared memory {c.shared // 1024} KB; "
          f"{report['registers']} registers/thread, spills {report['spill_stores']} B")
    assert mma  # the tile's tl.dot runs on the tensor cores

# %% [markdown]
# Two things to notice. Written the plain way (`SWAP_AB=False`, the second pair of lines), a
# 16-row tile puts the block's rows on the tensor cores' M axis, and Hopper's `wgmma` needs 64 rows
# per warp group there: Triton emits Ampere-style `mma.sync` (16×8 tiles per warp) instead. And at
# T = 1 the eight hit experts each get one 16-row block holding **one** real row: 15 of every 16
# MACs are padding. The tuned table (first pair) runs the tile transposed, `SWAP_AB` as vLLM calls
# it: the 64 weight rows take the M axis and the block's 16 rows the N axis, which takes any
# multiple of 8, so the compiler can use `wgmma` (m64n16k16), with fewer registers per thread. The
# tensor cores were never the limit (the kernel waits on memory), yet the tuner keeps the
# transposed tiles wherever they measured ≥ 1 % faster: the same bytes, fewer registers and another
# instruction path, measured rather than explained here. Where the H200's table runs them at T = 1:

# %%
# NBVAL_CHECK_OUTPUT
swap = {p: [g for g in ("gate_up", "down") if ladder.tuned_config("expert", p, 1)[g].get("SWAP_AB")]
        for p in wd.MODEL_PRESETS}
for p, gemms in swap.items():
    print(f"{p:16s} T=1: SWAP_AB in {', '.join(gemms) or 'neither GEMM'}")
print(f"{sum(bool(g) for g in swap.values())} of {len(swap)} presets run a transposed tile at T = 1")

# %% [markdown]
# ## The byte ledger, and speed against the ceiling
#
# The gate/up GEMM must read each hit expert's `2I × H` gate and up rows once; the down GEMM its
# `H × I` rows. From `results/NVIDIA_H200/stages.csv` the grouped GEMM stages alone, as a fraction
# of the H200's measured read ceiling (bytes from `ladder.expert_stage_bytes`, expert counts drawn
# from the router like the benchmark's):

# %%
s30 = wd.get_preset("qwen3-30b-a3b")
ceiling_tbps = ladder.read_ceiling_tbps()
g = torch.Generator(device="cpu").manual_seed(0)
stage_us = {(r["T"], r["stage"]): float(r["median_us"]) for r in ladder.results("stages.csv")
            if r["preset"] == s30.name and r["path"] == "expert"}
rows = []
for t in (1, 8, 64, 256):
    _, ids = wd.route(torch.randn(t, s30.E, generator=g), s30.K)
    bm = ladder.tuned_config("expert", s30, t)["BLOCK_M"]
    led = ladder.expert_stage_bytes(s30, ids, bm)
    for st in ("5 gate/up GEMM", "6 down GEMM"):
        us = stage_us[(str(t), st)]
        rows.append({"T": t, "stage": st, "BLOCK_M": bm, "MB": f"{led[st] / 1e6:.1f}", "H200 µs": f"{us:.1f}",
                     "of ceiling": f"{ladder.floor_us(led[st], ceiling_tbps) / us:.0%}"})
print(f"{ladder.RESULTS_GPU}, {s30.name}, read ceiling {ceiling_tbps:.2f} TB/s")
print(ladder.table(rows))
frac = {(r["T"], r["stage"]): float(r["of ceiling"].rstrip("%")) for r in rows}
print(f"GEMMs at T = 1: {min(v for (t, _), v in frac.items() if t == 1):.0f}–"
      f"{max(v for (t, _), v in frac.items() if t == 1):.0f}% of the ceiling; from T = 8 on: at least "
      f"{min(v for (t, _), v in frac.items() if t >= 8):.0f}%")

# %% [markdown]
# The GEMMs themselves stream well once they have work (from T = 8 on, the last line above). At
# T = 1 they reach much less of it: each is a small kernel whose ramp-up and last wave weigh on a
# few tens of MB. The **whole path** is further from the ceiling, because
# align and combine add their launches (gather and scatter ride inside the two GEMMs, as in vLLM).
# The four launches are chained with programmatic dependent launch, as TensorRT-LLM launches its
# MoE kernels: each is resident and waiting before its predecessor ends, which closes the gaps
# between them, not a kernel's own ramp-up and last wave.
# Across every preset and T (`speed.csv`, method `expert`, the tuned configurations):

# %%
speed = ladder.results("speed.csv")
exp_rows = [r for r in speed if r["method"] == "expert"]
print(f"{ladder.RESULTS_GPU}: expert-centric path, whole layer, fraction of the read ceiling")
print(ladder.table(ladder.pivot(exp_rows, "preset", "T", "frac_ceiling", lambda v: f"{100 * float(v):.0f}%")))
t1 = {r["preset"]: float(r["frac_ceiling"]) for r in exp_rows if r["T"] == "1"}
t64 = {r["preset"]: float(r["frac_ceiling"]) for r in exp_rows if r["T"] == "64"}
assert all(t64[p] > t1[p] for p in t1)  # the path needs tokens to amortise its fixed costs

# %%
if S.on_gpu:
    from lessons import read_ceiling, sweep

    ceiling_now = read_ceiling(2.0)
    fresh = sweep.speed([shape], list(S.Ts), ["expert"], ceiling_tbps=ceiling_now, reps=S.reps)
    print(f"measured now on {S.gpu} (read ceiling {ceiling_now:.2f} TB/s):")
    print(ladder.table(fresh, ["preset", "T", "method", "median_us", "floor_us", "frac_ceiling", "error_over_floor"]))
    assert all(r["checked"] for r in fresh)
else:
    print("no GPU: the H200's rows above are the measurement")

# %% [markdown]
# ## Where the precision goes
#
# The path rounds at four places, each a store or a sum in a narrow type:
#
# 1. **the intermediate**: `silu(gate)·up` stored as bf16 by the gate/up GEMM;
# 2. **the per-slot outputs**: each pair's weighted expert output stored as bf16 by the down GEMM;
# 3. **the combine**: the K slots summed in bf16, one rounding per add (vLLM's `moe_sum`);
# 4. optionally **FP8 activations**: e4m3 with 1×128 power-of-two block scales, before each GEMM.
#
# `bench.emulate` computes the layer in float64 and makes exactly those roundings, each behind
# its own switch. First, the check that makes the attribution worth anything: the emulation of the
# whole path must land where the real kernels land.

# %%
rows_k = []
for t in S.Ts:
    gt = torch.Generator(device="cpu").manual_seed(100 + t)
    w13, w2 = shape.weights(device=S.device, seed=t)
    x = torch.randn(t, shape.H, generator=gt).to(S.device, torch.bfloat16)
    tw, ti = wd.route(torch.randn(t, shape.E, generator=gt).to(S.device), shape.K, renormalize=shape.renormalize)
    ref = wd.reference_moe(x, w13, w2, tw, ti)
    floor = wd.rounding_floor(ref, torch.bfloat16)
    for method, kwargs in [("expert", {}), ("expert_fp8", {"act_format": "fp8"})]:
        with poisoned():
            y = wd.moe(x, w13, w2, tw, ti, method="expert", **kwargs)
        y_em = em.emulate(x, w13, w2, tw, ti, em.PATHS[method])
        err, err_em = wd.rel_error(y, ref), wd.rel_error(y_em, ref)
        rows_k.append({"T": t, "method": method, "kernels ×floor": f"{err / floor:.3f}",
                       "emulated ×floor": f"{err_em / floor:.3f}",
                       "‖kernels − emulated‖ ×floor": f"{wd.rel_error(y, y_em) / floor:.3f}",
                       "same bits": f"{(y == y_em).float().mean().item():.1%}"})
        assert err <= ladder.bound(method) * floor
        assert abs(err_em / err - 1) < 0.05  # the emulation explains the kernels' error to within 5%
    x_last, w13_last, w2_last, tw_last, ti_last, ref_last = x, w13, w2, tw, ti, ref
print(f"{shape.name} on {S.gpu}")
print(ladder.table(rows_k))

# %% [markdown]
# The emulation leaves out only the kernels' FP32 accumulation order, and that moves a rounding
# here and there, not the error. So each rounding can now be switched on alone, and then one after
# another, and with all of them on the emulation *is* the expert path:

# %%
alone = em.attribution(x_last, w13_last, w2_last, tw_last, ti_last, steps=em.ALONE, ref=ref_last)
cumulative = em.attribution(x_last, w13_last, w2_last, tw_last, ti_last, steps=em.CUMULATIVE, ref=ref_last)
fmt = [{"step": r["step"], "error": f"{r['error']:.3e}", "×floor": f"{r['error_over_floor']:.2f}"} for r in alone]
print(f"{shape.name}, T={x_last.shape[0]}: each rounding alone (plus the output rounding every path makes)")
print(ladder.table(fmt))
fmt = [{"step": r["step"], "error": f"{r['error']:.3e}", "×floor": f"{r['error_over_floor']:.2f}"} for r in cumulative]
print("\nbuilt up one rounding at a time")
print(ladder.table(fmt))

ratios = [r["error_over_floor"] for r in cumulative]
assert abs(ratios[0] - 1) < 1e-9  # float64 rounded once is the floor, by definition
assert ratios[0] < ratios[1] < ratios[2] < ratios[3] < ratios[4]  # every rounding costs something
assert ratios[4] > 5 * ratios[3]  # FP8's 3-bit mantissa dwarfs the bf16 roundings

# %% [markdown]
# Reading the table:
#
# - Each bf16 rounding, alone, costs about as much as the output rounding itself: errors of
#   independent roundings add in quadrature, so one extra rounding of values the size of the
#   output takes the error from 1 to roughly √2 ≈ 1.4 floors.
# - The combine is worth more than one rounding: it rounds K − 1 partial sums (two for the `tiny`
#   preset's K = 3, seven for the K = 8 models). Together the three bf16 steps give the 2–3 floors
#   the H200 measures for the path on every preset (`accuracy.csv`).
# - FP8 activations cost an order of magnitude more: e4m3 keeps 3 mantissa bits to bf16's 7. The
#   scales are exact (powers of two), so that is all rounding.
#
# None of these roundings is needed to compute the layer. Each is there because a value crosses
# memory between two kernels (or is summed by a separate kernel) and is stored narrow to save bytes.
# Warp decode keeps the intermediate in FP32 and sums the K slots in registers, so it makes only
# the last rounding: the floor. That is rung 4 ([04_warp_decode](04_warp_decode.ipynb)).
