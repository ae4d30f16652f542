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
# # 4 · Warp decode: one warp per output, two kernels
#
# **What this rung adds:** the flip of the parallel axis. The expert-centric path gives each program
# a tile of *experts' rows × tokens* and builds a layout (sort, pad, gather, scatter, combine) so
# that tile exists. Warp decode, published by Cursor, gives each **warp one output value** and
# lets it stream exactly the weights that value needs. The whole layer becomes two kernels, a
# gate/up kernel and a down kernel with the top-K combine folded in; the intermediate stays FP32 and
# the output is rounded once. Once tokens share experts, a second pair of kernels, the **grouped
# schedule**, reads each routed expert's rows once for all its tokens; the tuned table says where.
#
# **Why:** at decode the expert-centric path spends a large share of its time on launches that only
# move data (rung 2 measures it), and it rounds three times more than it has to (rung 3). Warp decode removes both.
#
# ```bash
# python tools/run_notebooks.py notebooks/04_warp_decode.ipynb
# ```
#
# Each kernel comes in the order kernel → assertion against the float64 reference → benchmark.
# The compiler cells show what Triton makes of the kernels for the H200 (sm_90a) on any machine.
# On a GPU the accuracy and timing cells run Qwen3-30B-A3B; on the CPU the `tiny` preset in the
# interpreter, with the H200's measurements read from `results/NVIDIA_H200/`.

# %%
import torch

import warpdecode as wd
from warpdecode import _alloc, compiled, ladder
from warpdecode.kernels import warp_grouped as kg
from warpdecode.kernels import warp_pair as kp

S = ladder.SETTINGS
GPU = ladder.RESULTS_GPU
shape = wd.get_preset(S.preset)
s30 = wd.get_preset("qwen3-30b-a3b")
print(f"kernels run on: {S.gpu}; layer: {shape.name} H={shape.H} I={shape.I} E={shape.E} K={shape.K}")


# %%
# where this GPU's launch configurations come from: a tuned table, or the defaults and the command
# that tunes the shapes used here
print(wd.configs.tuning_note([wd.get_preset(S.preset)]))

# %% [markdown]
# ## The flip
#
# | | expert-centric (rungs 2–3) | warp decode |
# |---|---|---|
# | a program owns | a tile: one expert's rows × (padded) tokens | `BLOCK` outputs of one pair or token |
# | parallel over | expert blocks × column tiles | outputs: neurons × pairs, then hidden units × tokens |
# | layout work | align, gather, scatter (and quantize) | none: a warp reads `topk_ids` and goes straight to its rows |
# | top-K combine | a separate kernel, summed in bf16 | a sum over one axis of a tile, in FP32 registers |
# | roundings | intermediate, per-slot outputs, K − 1 partial sums, output | output |
# | launches (bf16) | 4, route excluded (align, gate/up gathering its rows, down scattering its rows, combine) | 2 |
#
# What each path launches on an H200 for Qwen3-30B-A3B at T = 1, with the tuned configurations
# (recorded from the launchers on `meta` tensors, so this runs anywhere):

# %%
# NBVAL_CHECK_OUTPUT
for path in ("expert", "warp"):
    launches = ladder.recorded_jobs(path, s30, 1)
    print(f"{path}: {len(launches)} launches")
    for ln in launches:
        print(f"  {ln.kernel:24s} grid {str(ln.grid):10s} {ln.job.num_warps} warps/program")

# %% [markdown]
# ## The byte ledger
#
# Kernel 1 streams, for every (token, slot) pair, its expert's I gate rows and I up rows across H,
# and writes the FP32 intermediate `(T·K, I)`. Kernel 2 streams each token's K experts' `w2` rows
# across I and writes `y (T, H)`. At T = 1 every pair has its own expert, so what is streamed is
# exactly what must move; for larger T, tokens that share an expert each stream its rows (the
# grouped schedule, below, is the answer to that). Against the H200's measured read ceiling, and
# each kernel's time timed alone in `stages.csv`:

# %%
ceiling_tbps = ladder.read_ceiling_tbps()
stage_us = {(r["T"], r["stage"]): float(r["median_us"]) for r in ladder.results("stages.csv")
            if r["preset"] == s30.name and r["path"] == "warp"}
g = torch.Generator(device="cpu").manual_seed(0)
rows = []
for t in (1, 8):
    _, ids = wd.route(torch.randn(t, s30.E, generator=g), s30.K)
    for kernel, b in ladder.warp_kernel_bytes(s30, ids).items():
        us = stage_us[(str(t), kernel)]
        rows.append({"T": t, "kernel": kernel, "streamed MB": f"{b['streamed'] / 1e6:.1f}",
                     "must move MB": f"{b['must move'] / 1e6:.1f}",
                     "floor µs": f"{ladder.floor_us(b['must move'], ceiling_tbps):.1f}",
                     "H200 µs": f"{us:.1f}", "of ceiling": f"{ladder.floor_us(b['must move'], ceiling_tbps) / us:.0%}"})
print(f"{s30.name}; {GPU}, read ceiling {ceiling_tbps:.2f} TB/s (stages.csv: each kernel alone)")
print(ladder.table(rows))

# %% [markdown]
# ## Kernel 1, gate/up, line by line
#
# Both kernels live in `warpdecode/kernels/warp_pair.py`, made of two tiles, `_gate_up_tile` and
# `_down_tile` (with `_down_chunk`, one chunk of w2 rows). The down tile has one form per Triton
# release: `[rows, K, columns]` on 3.6 (`_down_tile_3d`), the experts first from 3.8
# (`_down_tile_k_first`, or slot by slot, `_down_tile_per_slot`, where a thread would hold too many
# weights); the cells below print the form the installed Triton runs.
#
# **Which output this program owns.** Program ids are laid out with the pair index fastest, so the
# programs resident side by side work on the *same* neuron rows for different pairs: when two
# tokens share an expert, the second finds its rows in L2. Nothing is sorted: the program reads its
# pair's expert straight from `topk_ids`, and guards it there (`kernels/ids.py`): an id outside
# [0, E) reads no weights, and the down kernel writes its token as NaN.

# %%
print(ladder.source(kp.warp_gate_up_kernel, "if USE_PDL:", "pid % NUM_PAIRS"))
print(ladder.source(kp._gate_up_tile, "t = pair // K", "e, ok = guarded(tl.load(topk_ids_ptr"))

# %% [markdown]
# **The tile.** `BLOCK_I` neuron rows × `BLOCK_H` columns of H. The gate row of neuron i is
# `w13[e, i, :]`, its up row `w13[e, I + i, :]`; both are read against the same activation `x[t]`,
# which is loaded once per step for both.

# %%
print(ladder.source(kp._gate_up_tile, "offs_i = pid_i", "x_ptrs ="))

# %% [markdown]
# **The stream.** Each step loads a `BLOCK_I × BLOCK_H` tile of gate and of up rows with the cache
# policy `evict_first` (these bytes are read once, so they should not push anything useful out of
# L2), multiplies them by the activation in FP32 and sums each row's products across the warp at
# once: a warp shuffle (five steps over 32 lanes) per row and step, after which each row is one FP32
# number in registers. No `tl.dot`: with one activation vector per row there is nothing for a tensor
# core to reuse, and each 2-byte weight needs just one FMA.

# %%
print(ladder.source(kp._gate_up_tile, "acc_g = tl.zeros", "acc_u +="))

# %% [markdown]
# **The store.** SiLU(g)·u is computed in registers and stored as FP32: the intermediate is never
# rounded to bf16.

# %%
print(ladder.source(kp._gate_up_tile, "tl.sigmoid", "tl.store(act_ptr"))

# %% [markdown]
# ## Kernel 2, down with the combine folded in, line by line
#
# **Which outputs.** One token, `BLOCK_H` hidden units, all K of the token's slots. Tokens vary
# fastest, for the same L2 reason.

# %%
print(ladder.source(kp.warp_down_kernel, "pid = tl.program_id(0)", "pid_h = pid // T"))

# %% [markdown]
# **The `[BLOCK_H, K, BLOCK_I]` tile** (`_down_chunk_3d`; `[K, BLOCK_H, BLOCK_I]` from Triton 3.8,
# `_down_chunk_k_first`). For each output row h, the same columns of all K routed experts'
# `w2[e, h, :]` rows. The K axis is the top-K combine: instead of a separate kernel that adds K
# bf16 rows, the sum over the K experts is a sum over that axis of this tile.

# %%
# the down tile's form this Triton release runs (warp_pair.K_FIRST: the experts first, from 3.8)
down_chunk, down_step, down_tile = ((kp._down_chunk_k_first, kp._down_step_k_first, kp._down_tile_k_first)
                                    if kp.K_FIRST else (kp._down_chunk_3d, kp._down_tile_3d, kp._down_tile_3d))
print(ladder.source(down_chunk, "offs_h = pid_h", "return tl.load"))

# %% [markdown]
# **Overlap with kernel 1.** The first `BLOCK_I` columns of `w2` do not depend on kernel 1, so they
# are loaded *before* `gdc_wait()`, the point where the kernel waits for kernel 1's intermediate
# (programmatic dependent launch, below). The routing weights are folded into the activations.

# %%
print(ladder.source(kp.warp_down_kernel, "# the first BLOCK_I columns", "stride_yt, t, pid_h"))
print(ladder.source(down_step, "rw = tl.load", "rw = tl.load"))

# %% [markdown]
# **The stream, the combine, the dot product, one rounding.** Summing over axis 1 adds the K experts'
# products in FP32 registers; summing over axis 1 of `acc` is the dot product across the warp's
# lanes; `y` is rounded to bf16 once, in the store.

# %%
print(ladder.source(down_tile, "acc = ", "return acc"))
print(ladder.source(kp._down_tile, "y = tl.sum", "tl.store(y_ptr"))

# %% [markdown]
# ## The pair against the reference
#
# Warp decode against the float64 reference on this device's layer, its outputs poisoned before the
# launch so that an unwritten element fails: its error should be the rounding floor itself, for
# the only rounding is the store of `y`. Rounding the intermediate to bf16 (`act_dtype=torch.bfloat16`,
# as a bf16 pipeline between the kernels would) adds one rounding, and the error shows it.

# %%
def layer_inputs(t: int, seed: int):
    gt = torch.Generator(device="cpu").manual_seed(200 + seed)
    w13, w2 = shape.weights(device=S.device, seed=seed)
    x = torch.randn(t, shape.H, generator=gt).to(S.device, torch.bfloat16)
    tw, ti = wd.route(torch.randn(t, shape.E, generator=gt).to(S.device), shape.K, renormalize=shape.renormalize)
    return x, w13, w2, tw, ti


rows_c = []
for t in S.Ts:
    x, w13, w2, tw, ti = layer_inputs(t, t)
    ref = wd.reference_moe(x, w13, w2, tw, ti)
    floor = wd.rounding_floor(ref, torch.bfloat16)
    with _alloc.poisoned():
        y = wd.moe(x, w13, w2, tw, ti, method="warp", schedule="split")
        y_act = wd.moe(x, w13, w2, tw, ti, method="warp", schedule="split", act_dtype=torch.bfloat16)
    err, err_act = wd.rel_error(y, ref), wd.rel_error(y_act, ref)
    same = (y == ref.to(torch.bfloat16)).float().mean().item()
    rows_c.append({"T": t, "pair ×floor": f"{err / floor:.4f}", "bf16 intermediate ×floor": f"{err_act / floor:.3f}",
                   "y == round(ref)": f"{same:.2%}"})
    assert y.shape == (t, shape.H) and y.dtype == torch.bfloat16
    assert err <= ladder.bound("warp") * floor
    assert err_act <= ladder.bound("warp_bf16_act") * floor and err_act > err
print(f"{shape.name} on {S.gpu}")
print(ladder.table(rows_c))

# %% [markdown]
# Almost every element of `y` is the float64 result rounded to bf16: the few that differ sit within
# an FP32 accumulation error of a rounding boundary.
#
# ## "One warp per output" in Triton
#
# A Triton program is a CTA, not a warp; the kernel only says what tile a program owns. The
# compiler decides which thread holds which element: the **layout** in the TritonGPU IR. For a bf16
# tile of R rows × C columns with C ≥ 256, Triton's default blocked layout gives each lane
# `sizePerThread = [1, 8]` (8 × 2 B: one 16-byte load), puts the 32 lanes of a warp along the row
# (`threadsPerWarp = [1, 32]`) and then places the warps, filling columns before rows. So with
# `BLOCK_H = 256` and `BLOCK_I = num_warps` each warp covers exactly one row, and `tl.sum(axis=1)` is
# a warp shuffle: literally one warp per output.
#
# The tuned configurations do not all do that. Compiled for sm_90a here, for Qwen3-30B-A3B: a
# one-warp-per-row configuration, and the H200's tuned choices at T = 1 and T = 4 (the buckets of
# `warpdecode/tuned/NVIDIA_H200.json`, read through `configs.warp_config` as on the H200). What the
# compiler reports (registers, spills, shared memory, load widths) belongs to this Triton version,
# so it is printed, not compared (`tests/test_compile_sm90.py` holds the facts the kernels rely on):

# %%
tuned = {t: ladder.tuned_config("warp", s30, t) for t in (1, 4)}
if S.on_gpu and S.gpu == GPU:  # on the H200 itself, the launcher's own lookup agrees
    assert all(wd.configs.warp_config(s30.H, s30.I, s30.E, s30.K, t) == tuned[t] for t in tuned)
one_warp_per_row = {"gate_up": {"BLOCK_I": 4, "BLOCK_H": 256, "num_warps": 4, "num_stages": 3},
                    "down": {"BLOCK_H": 4, "BLOCK_I": 256, "num_warps": 4, "num_stages": 1}}
variants = {"4 rows × 256, 4 warps": (1, one_warp_per_row), "tuned, T=1": (1, tuned[1]), "tuned, T=4": (4, tuned[4])}
jobs = {name: ladder.recorded_jobs("warp", s30, t, config=cfg) for name, (t, cfg) in variants.items()}
built = dict(zip(jobs, [compiled.compile_many([ln.job for ln in lns]) for lns in jobs.values()], strict=True))
for name, lns in jobs.items():
    for ln, c in zip(lns, built[name], strict=True):
        r = compiled.ptxas_report(c)
        ce = ln.job.constexprs
        tile = (f"[{ce['BLOCK_I']}, {ce['BLOCK_H']}]" if ln.kernel == "warp_gate_up_kernel"
                else f"{ce['K']} × [{ce['BLOCK_H']}, {ce['BLOCK_I']}]" if ce["PER_SLOT"]
                else f"[{ce['K_PAD']}, {ce['BLOCK_H']}, {ce['BLOCK_I']}]" if ce.get("K_FIRST")
                else f"[{ce['BLOCK_H']}, {ce['K_PAD']}, {ce['BLOCK_I']}]")
        weight_layout = next((L for L in compiled.layouts(c) if "sizePerThread = [1, 8]" in L
                              or "sizePerThread = [1, 1, 8]" in L), "(no [1, 8] layout)")
        print(f"{name} · {ln.kernel}: tile {tile}, {ln.job.num_warps} warps → {r['registers']} registers/thread, "
              f"{r['spill_stores']} B spilled, {c.shared} B shared, loads {sorted(set(compiled.global_loads(c)))} bits")
        print(f"    {weight_layout.split(' = ', 1)[-1]}")

# %% [markdown]
# What to read in it:
#
# - **4 rows × 256, 4 warps**: `warpsPerCTA = [4, 1]`: one warp per row, the ideal as written.
#   The down kernel's `[rows, K, columns]` tile gets `sizePerThread = [1, 1, 8]`,
#   `warpsPerCTA = [4, 1, 1]`: rows over warps, the K experts inside each thread (the combine costs
#   no communication at all), columns over lanes. Where the Triton release would put that tile's
#   warps over K (3.8 and later), the kernel puts the experts first instead, one `[K, rows, columns]`
#   tile (`warp_pair.K_FIRST`), whose tie the compiler breaks towards rows again; each slot's
#   products are taken from it in registers and chained into one FP32 tile, the same combine in
#   each thread's registers (K `[rows, columns]` tiles, `warp_pair.PER_SLOT`, where a thread would
#   hold too many of a step's weights).
# - **tuned, T = 1 and T = 4**: one row, one warp, and a step of many 256-column pieces: the single
#   warp walks the row piece by piece, each lane holding several 16-byte loads per projection, and
#   the sum still never leaves the warp. The down kernel stacks its rows over its warps. Longer rows
#   per step mean more bytes in flight per warp; the tuner found that fastest.
#   "One warp per output" is the mental model, and the compiler is free to bend it where the tuner
#   finds that faster.
#
# ### Registers decide how many bytes are in flight
#
# A memory-bound kernel runs as fast as the bytes it keeps in flight allow, and what an SM keeps in
# flight is (programs it holds) × (bytes each program has requested). A Hopper SM holds at most 32
# programs, 64 warps and 64 K registers. Written the obvious way, the gate/up tile would keep two
# `[BLOCK_I, BLOCK_H]` FP32 accumulators (gate and up) and sum them across the warp once, at the
# end: per lane, twice as many registers for the accumulators as for the bf16 weights it loads each
# step. The shipped tile sums each step's products at once and keeps one FP32 number per row, so its
# registers go to loads in flight. The arithmetic, per thread, for tiles the tuner picks (the
# register file caps the programs an SM holds at 65536 / (registers × 32 × warps), and at 32):

# %%
# NBVAL_CHECK_OUTPUT
def per_thread(tile: dict) -> dict:
    lanes = 32 * tile["num_warps"]
    loads = 2 * tile["BLOCK_I"] * tile["BLOCK_H"] * 2 // 4 // lanes  # gate and up, bf16, in 4-byte registers
    return {"weights loaded": loads, "tile accumulators": 2 * tile["BLOCK_I"] * tile["BLOCK_H"] // lanes,
            "per-step sums": 2 * max(1, tile["BLOCK_I"] // tile["num_warps"])}


def programs_by_registers(regs: int, warps: int) -> int:
    return min(32, 65536 // (regs * 32 * warps))


for label, tile in {"1 × 1024, 1 warp": {"BLOCK_I": 1, "BLOCK_H": 1024, "num_warps": 1},
                    "1 × 2048, 1 warp": {"BLOCK_I": 1, "BLOCK_H": 2048, "num_warps": 1}}.items():
    p = per_thread(tile)
    big = p["weights loaded"] + p["tile accumulators"]  # at least: loads and accumulators live together
    lean = p["weights loaded"] + p["per-step sums"]
    print(f"{label}: {p['weights loaded']} registers of weights per step; with tile accumulators ≥ {big} "
          f"registers/thread → ≤ {programs_by_registers(big, tile['num_warps'])} programs/SM; "
          f"with per-step sums ≥ {lean} → ≤ {programs_by_registers(lean, tile['num_warps'])}")

# %% [markdown]
# These are lower bounds (addresses, masks and the activation need registers too), but the ratio is
# the point: with tile accumulators the longer rows the tuner wants would cost programs per SM, so
# the bytes an SM keeps in flight would not grow with them. What the compiler made of the shipped
# tile at the tuned T = 1 configuration (printed, this Triton version's facts):

# %%
g1 = tuned[1]["gate_up"]  # the tuned T=1 gate/up tile
c1 = next(c for ln, c in zip(jobs["tuned, T=1"], built["tuned, T=1"], strict=True)
          if ln.kernel == "warp_gate_up_kernel")
r1 = compiled.ptxas_report(c1)
occ1 = compiled.programs_per_sm(c1)
step_kb = g1["BLOCK_I"] * 2 * min(g1["BLOCK_H"], s30.H) * 2 / 1024  # gate and up rows, bf16, one step
print(f"tuned T=1 gate/up {g1}: {r1['registers']} registers/thread, {r1['spill_stores']} B spilled → "
      f"{occ1} programs/SM → {occ1 * step_kb:.0f} KB of weights requested per SM per step")

# %% [markdown]
# What the per-step sums bought, measured on the H200: the gate/up kernel's ingredients added to a
# plain read of the same tile, one by one, all with tile accumulators, then the shipped kernel with
# per-step sums, at the same tile (`experiments/README.md` names the script):

# %%
rungs = [r for r in ladder.experiment_results("gate_up_ladder.csv") if r["preset"] == s30.name and r["T"] == "1"]
print(f"{GPU}, {s30.name}, gate/up kernel alone at T=1 ({rungs[0]['gate_up_MB']} MB)")
print(ladder.table([{"rung": r["variant"], "tile": r["config"], "µs": r["us"],
                     "of the read ceiling": f"{float(r['frac_ceiling']):.0%}"} for r in rungs]))
lean_rung = next(float(r["us"]) for r in rungs if "lean" in r["variant"])
tile_rung = next(float(r["us"]) for r in rungs if r["variant"].startswith("+ SiLU·up, store"))
print(f"per-step sums: {tile_rung / lean_rung:.2f}× faster than tile accumulators at the same tile")
assert lean_rung < tile_rung

# %% [markdown]
# The first four rungs all keep the two tile accumulators (the read rungs sum the loaded rows into
# them), and they take about the same time: the kernel's ingredients (the expert lookup, the
# activation, the dot products, SiLU·up) cost next to nothing on top of the loads. Only dropping the
# accumulators moves it.
#
# ## Programmatic dependent launch (PDL) between the kernels
#
# At T = 1 each kernel moves tens of MB, so its ramp-up and its last, half-empty wave are a large
# share of its time. On Hopper, kernel 1 calls `gdc_launch_dependents()` (PTX
# `griddepcontrol.launch_dependents`) as it starts, so kernel 2 may launch as soon as every program of
# kernel 1 has started; kernel 2 loads its first `w2` columns, then calls `gdc_wait()`
# (`griddepcontrol.wait`) before it touches the intermediate. Both are in the compiled PTX:

# %%
for ln, c in zip(jobs["tuned, T=1"], built["tuned, T=1"], strict=True):
    gdc = [line.strip().split(";")[0] for line in c.asm["ptx"].splitlines() if "griddepcontrol" in line]
    print(f"{ln.kernel}: {gdc}")
    want = "griddepcontrol.launch_dependents" if ln.kernel == "warp_gate_up_kernel" else "griddepcontrol.wait"
    assert want in gdc

# %% [markdown]
# What it buys is bounded by what the down kernel can load before it waits: it holds only its first
# `BLOCK_I` columns in registers, so the rest of its stream still follows kernel 1. On a GPU with
# PDL (sm_90+), the harness measures the switch here: the same kernels, the same CUDA-graph timing,
# once with `USE_PDL` off. Loading more of the down kernel's weights before the wait is one of the
# designs rung 7 measures.

# %%
if S.on_gpu and wd.warp.USE_PDL:
    from unittest import mock

    from warpdecode.bench import sweep
    from warpdecode.bench.timing import read_ceiling

    ceiling_now = read_ceiling(2.0)
    with_pdl = sweep.speed([shape], [1], ["warp"], ceiling_tbps=ceiling_now, reps=S.reps)[0]
    with mock.patch.object(wd.warp, "USE_PDL", False):  # restored when the block ends
        without = sweep.speed([shape], [1], ["warp"], ceiling_tbps=ceiling_now, reps=S.reps)[0]
    print(f"{S.gpu}, {shape.name}, T=1: {with_pdl['median_us']:.1f} µs with PDL, {without['median_us']:.1f} µs without")
    assert with_pdl["checked"] and without["checked"]
else:
    print("no GPU with programmatic dependent launch here: this cell measures on one")

# %% [markdown]
# ## When tokens share experts: the grouped schedule
#
# The pair kernels read an expert's rows once per (token, slot) routed to it. While T·K is well
# under E that is once per expert, but as T grows tokens share experts (Mixtral's 8 experts at any
# T > 1), and every sharing token streams the rows again (from L2 at best). What the pair streams
# against each distinct routed expert's rows once, for one routing draw:

# %%
g8 = torch.Generator(device="cpu").manual_seed(8)
ledger = []
for p in wd.MODEL_PRESETS:
    s = wd.get_preset(p)
    row = {"preset": p}
    for t in (1, 4, 8, 16):
        _, ids = wd.route(torch.randn(t, s.E, generator=g8), s.K)
        pairs, hit = t * s.K, torch.unique(ids).numel()
        row[f"T={t}: pairs / experts"] = f"{pairs} / {hit} = {pairs / hit:.1f}×"
    ledger.append(row)
print("weights the pair streams over the weights that must move (each routed expert's rows once)")
print(ladder.table(ledger))

# %% [markdown]
# `schedule="grouped"` (`warpdecode/kernels/warp_grouped.py`) turns the parallel axis once more: each
# program of both kernels owns a block of **one expert's rows and every token**. The token axis
# becomes the N of a small matrix product on the tensor cores, so the rows are read once however
# many tokens share them. There is still no sort, no padding of the weights' side, no gather or
# scatter pass: a program finds the tokens routed to its expert by comparing `topk_ids` with it.
#
# The tuner times both schedules in every bucket of every preset and keeps `grouped` only where it
# wins over two routing draws. Which schedule `wd.moe(..., method="warp")` runs on the H200, read
# from the tuned table through `ladder.tuned_config` (the same bucket `configs.warp_config` returns
# there) and `warp.schedule_of`:

# %%
# NBVAL_CHECK_OUTPUT
buckets = (1, 2, 4, 8, 16)
runs = {p: {t: wd.warp.schedule_of(ladder.tuned_config("warp", p, t)) for t in buckets} for p in wd.MODEL_PRESETS}
print(f"{GPU}: the schedule each token bucket runs (warpdecode/tuned/)")
print(ladder.table([{"preset": p, **{f"T≤{t}": runs[p][t] for t in buckets}} for p in wd.MODEL_PRESETS]))
assert all(runs[p][1] == "split" for p in runs)  # at T = 1 every pair has its own expert
assert any(runs[p][16] == "grouped" for p in runs)

# %% [markdown]
# The tuner's times behind that choice, each schedule's best configuration on the tuner's routing
# draw (µs per layer call):

# %%
rows_s = []
for p in wd.MODEL_PRESETS:
    for t in buckets:
        m = ladder.tuned_config("warp", p, t)["measured_us"]
        if "grouped" in m:
            rows_s.append({"preset": p, "T≤": t, "pair µs": m["split"], "grouped µs": m["grouped"],
                           "grouped / pair": f"{m['grouped'] / m['split']:.2f}", "runs": runs[p][t]})
print(f"{GPU} (warpdecode/tuned/, measured_us of each bucket)")
print(ladder.table(rows_s))

# %% [markdown]
# ### The grouped gate/up kernel, line by line
#
# **Which program.** The expert varies fastest; a program whose expert no token chose exits at once.
# `_routed` is the `[T_PAD, K_PAD]` mask of the (token, slot) pairs routed to this expert.

# %%
print(ladder.source(kg.warp_gate_up_grouped_kernel, "e = pid % E", "if tl.sum(hit"))
print(ladder.source(kg._routed, "offs_t = tl.arange", "return ids == e"))

# %% [markdown]
# **The stream: tensor cores over the token axis.** Each step loads a `BLOCK_I × BLOCK_H` tile of
# gate and of up rows once and multiplies it by `x` transposed, `[BLOCK_H, T_PAD]`, every token's
# activation at once. A bf16 × bf16 product is exact in FP32, and the tensor cores sum in FP32, so
# nothing is rounded yet. `_mma` widens the operands to FP32 in the CPU interpreter, whose 16-bit
# `tl.dot` is not exact.

# %%
print(ladder.source(kg.warp_gate_up_grouped_kernel, "for h0 in range", "acc_u = _mma"))
print(ladder.source(kg._mma, "if WIDEN", "return out"))

# %% [markdown]
# **SiLU·up and the routing weight, in registers.** Each token's routing weight for this expert is
# folded in here (summed, should its top-K name the expert twice), and the result goes to the row of
# the token's first slot routed to the expert (`_first_rows`).

# %%
print(ladder.source(kg.warp_gate_up_grouped_kernel, "# each token's routing weights", "mask = mask_i[:, None]"))

# %% [markdown]
# **The three-term split.** The down kernel wants tensor cores too, and their operands are 16-bit.
# Rounding the FP32 intermediate to bf16 would add a rounding; instead it is stored as **three bf16
# terms whose sum is it exactly**: bf16 keeps 8 of FP32's 24 significand bits (with FP32's exponent
# range), so hi, mid and lo hold 8 + 8 + 8.

# %%
print(ladder.source(kg.warp_gate_up_grouped_kernel, "if TERMS == 3", "tl.store(ptrs + 2 * stride_term"))

# %% [markdown]
# The same split in PyTorch, on FP32 values of every scale (values deep in FP32's subnormal range
# aside, which need no split at all):

# %%
# NBVAL_CHECK_OUTPUT
gs = torch.Generator(device="cpu").manual_seed(3)
a = torch.randn(1 << 16, generator=gs) * torch.logspace(-20, 20, 1 << 16)
hi = a.bfloat16()
mid = (a - hi.float()).bfloat16()
lo = (a - hi.float() - mid.float()).bfloat16()
exact = {"hi": hi.float() == a, "hi + mid": hi.float() + mid.float() == a,
         "hi + mid + lo": hi.float() + mid.float() + lo.float() == a}
print(", ".join(f"{k} == a: {bool(v.all())}" for k, v in exact.items()))
assert torch.equal(hi.float() + mid.float() + lo.float(), a)

# %% [markdown]
# ### The grouped down kernel: one expert's share, an FP32 atomics combine
#
# A program owns one expert's `w2` rows for a block of hidden outputs and multiplies them by the
# three terms (every product exact, every sum FP32), for every token routed to the expert at once.
# The sum over experts crosses programs, so it goes through an FP32 scratch in global memory
# (atomic adds):

# %%
print(ladder.source(kg.warp_down_grouped_kernel, "hit = _routed", "tl.atomic_add(s_ptrs, acc"))

# %% [markdown]
# Each program then counts itself done for its block of outputs; the last of the block's E programs
# to arrive reads the sums where the atomics made them (L2) and rounds them to `y`, once. With K > 2
# the order of the FP32 additions varies from run to run, so an output's last bit can too.

# %%
print(ladder.source(kg.warp_down_grouped_kernel, "tl.debug_barrier()", "tl.store(y_ptrs"))

# %% [markdown]
# ### The grouped schedule against the reference
#
# The same check as for the pair, poisoned, with tokens forced to share experts (every token routed
# to the same K experts, the case the schedule is for) and with the router's own draw:

# %%
rows_g = []
for t in S.Ts:
    x, w13, w2, tw, ti = layer_inputs(t, 50 + t)
    shared = torch.arange(shape.K, device=S.device, dtype=ti.dtype).expand(t, shape.K).contiguous()
    for routing, ids in (("router", ti), ("all on the same K experts", shared)):
        ref = wd.reference_moe(x, w13, w2, tw, ids)
        floor = wd.rounding_floor(ref, torch.bfloat16)
        with _alloc.poisoned():
            y = wd.moe(x, w13, w2, tw, ids, method="warp", schedule="grouped")
        err = wd.rel_error(y, ref)
        rows_g.append({"T": t, "routing": routing, "grouped ×floor": f"{err / floor:.4f}"})
        assert y.shape == (t, shape.H) and torch.isfinite(y).all()
        assert err <= ladder.bound("warp") * floor
print(f"{shape.name} on {S.gpu}")
print(ladder.table(rows_g))

# %% [markdown]
# One rounding, as for the pair: the split into three terms is exact, the products on the tensor
# cores are exact, and every sum is FP32.
#
# ## Speed as a fraction of the ceiling
#
# From `results/NVIDIA_H200/speed.csv` (median of CUDA-graph replays over layer copies, tuned
# configurations: the pair or the grouped schedule, as the table above picks), warp decode's
# fraction of the measured read ceiling, and its speed-up over the tuned expert-centric path:

# %%
speed = ladder.results("speed.csv")
warp_rows = [r for r in speed if r["method"] == "warp"]
print(f"{GPU}: warp decode, fraction of the read ceiling")
print(ladder.table(ladder.pivot(warp_rows, "preset", "T", "frac_ceiling", lambda v: f"{100 * float(v):.0f}%")))
us = {(r["preset"], r["T"], r["method"]): float(r["median_us"]) for r in speed}
Ts_speed = sorted({r["T"] for r in warp_rows}, key=int)
ratio = [{"preset": p, **{f"T={t}": f"{us[(p, t, 'expert')] / us[(p, t, 'warp')]:.2f}×"
                          for t in Ts_speed if (p, t, "expert") in us and (p, t, "warp") in us}}
         for p in wd.MODEL_PRESETS]
print("\nexpert-centric time / warp decode time (> 1: warp decode is faster)")
print(ladder.table(ratio))
faster_t1 = [p for p in wd.MODEL_PRESETS if us[(p, "1", "expert")] > us[(p, "1", "warp")]]
print(f"\nat T = 1 warp decode is faster on {len(faster_t1)} of {len(wd.MODEL_PRESETS)} presets")
assert faster_t1 == wd.MODEL_PRESETS  # faster at T=1 everywhere

# %%
if S.on_gpu:
    from warpdecode.bench import sweep
    from warpdecode.bench.timing import read_ceiling

    ceiling_now = read_ceiling(2.0)
    fresh = sweep.speed([shape], list(S.Ts), ["warp", "expert"], ceiling_tbps=ceiling_now, reps=S.reps)
    print(f"measured now on {S.gpu} (read ceiling {ceiling_now:.2f} TB/s):")
    print(ladder.table(fresh, ["preset", "T", "method", "median_us", "floor_us", "frac_ceiling", "error_over_floor"]))
    assert all(r["checked"] for r in fresh)
else:
    print("no GPU: the H200's rows above are the measurement")

# %% [markdown]
# At T = 1 warp decode beats the tuned expert-centric path on every preset (the ratios above). It
# stops paying off as T grows: the pair streams each expert's rows once per token routed to it, and
# the grouped schedule, which reads them once, pays for the token axis with tensor-core tiles padded
# to 16 tokens and a combine through atomics. Past the crossover, the expert-centric path's sorted
# layout wins. Mixtral's T = 1 time depends on what the process ran before (`docs/results.md`),
# so its rows in `speed.csv` come from a process of their own.
#
# Next: rung 5 ([05_profiling_and_accuracy](05_profiling_and_accuracy.ipynb)) puts every path side
# by side and finds that crossover. Rung 7 ([07_one_launch](07_one_launch.ipynb)) asks what one
# launch instead of two could reach: the persistent one-kernel schedule and why it lost, what one
# launch of a decode-sized read can reach, the floor under any design that waits for gate/up, and
# every one-launch or further-overlapped design measured against the pair.
