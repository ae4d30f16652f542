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
# # 8 · One launch instead of two: what it could reach, and every design that tried
#
# **Optional.** This rung is research, not a step of the ladder: skip it on a first reading. It
# assumes rung 4 (the pair, its launches and its down tile) and rung 6 (the read ceiling, the
# speed targets).
#
# **What this rung adds:** the research that qualifies rung 4. At T = 1 warp decode's pair of
# kernels stays below the speed target on the small layers, and the obvious suspect is the boundary
# between the two launches. This rung measures that suspicion: the persistent one-kernel schedule
# and why it loses to the pair, what one launch of a decode-sized read can reach at all, the floor
# under any design that must wait for the gate/up phase, and every one-launch or further-overlapped
# design tried, each against the pair measured in the same runs.
#
# **Why:** a target is only worth chasing if some design can meet it. This rung says which designs
# cannot, on this GPU, and by how much.
#
# ```bash
# python tools/run_notebooks.py notebooks/08_one_launch.ipynb
# ```
#
# The persistent kernel runs here (on the CPU in the interpreter, as two launches); every timing
# comes from the H200's CSV files: `results/NVIDIA_H200/` for the shipped benchmark, and
# `experiments/results/NVIDIA_H200/` for what the experiments measured (`experiments/README.md`
# indexes them: version, idea, command, result, verdict).

# %%
import json

import torch
from lessons import data, ladder, persistent, poisoned, report

import warpdecode as wd
from warpdecode import configs

S = ladder.SETTINGS
GPU = ladder.RESULTS_GPU
shape = wd.get_preset(S.preset)
s30 = wd.get_preset("qwen3-30b-a3b")
print(f"kernels run on: {S.gpu}; layer: {shape.name}")


# %%
# where this GPU's launch configurations come from: a tuned table, or the defaults and the command
# that tunes the shapes used here
print(ladder.tuning_note([wd.get_preset(S.preset)]))

# %% [markdown]
# ## Where the pair stands
#
# The target for warp decode at small T is a fraction of the measured read ceiling (`report.BAR`,
# the targets table of `docs/results.md`). At T = 1, from `speed.csv`:

# %%
speed = data.speed_table(GPU)
print(f"{GPU}: the bar is {report.BAR:.0%} of the read ceiling")
print(ladder.table([{"preset": p, "warp µs": f"{speed[p]['warp'][1]['median_us']:.1f}",
                     "floor µs": f"{speed[p]['warp'][1]['floor_us']:.1f}",
                     "bar µs": f"{speed[p]['warp'][1]['floor_us'] / report.BAR:.1f}",
                     "of the ceiling": f"{speed[p]['warp'][1]['frac_ceiling']:.0%}",
                     "meets the bar": speed[p]["warp"][1]["frac_ceiling"] >= report.BAR}
                    for p in wd.MODEL_PRESETS]))

# %% [markdown]
# ## One kernel instead of two: a persistent schedule
#
# If the cost is two launch ramps and the wait between the kernels, why not one kernel? The
# persistent schedule (`bench/persistent.py`, research beside the package) launches exactly
# as many programs as the GPU holds at once. Each walks gate/up units (rung 4's `_gate_up_tile`),
# loads the w2 columns of its first down unit, then meets all the others at a **grid barrier**, and
# walks down units (rung 4's `_down_tile`):

# %%
print(ladder.source(persistent.warp_fused_kernel, "if PHASE != 2", "_grid_barrier(barrier_ptr"))

# %% [markdown]
# The barrier is an atomic counter in global memory, reset by the last program to arrive, which
# bumps a generation number that the others poll. It is only safe when every program is resident
# at once, so the launcher sizes the grid from the compiled kernel's occupancy; the poll gives up
# after a bounded number of spins and raises a flag rather than hang the GPU.

# %%
print(ladder.source(persistent._grid_barrier, "tl.debug_barrier()", "tl.atomic_xchg(barrier_ptr + 2"))

# %% [markdown]
# On the CPU the interpreter runs programs one after another, where a barrier would never open, so
# the same kernel runs as two launches there (`PHASE` 1, then 2). It computes the same sums as the
# pair, checked against the float64 reference with poisoned outputs:

# %%
gf = torch.Generator(device="cpu").manual_seed(7)
w13, w2 = shape.weights(device=S.device, seed=7)
x = torch.randn(3, shape.H, generator=gf).to(S.device, torch.bfloat16)
tw, ti = wd.route(torch.randn(3, shape.E, generator=gf).to(S.device), shape.K, renormalize=shape.renormalize)
ref = wd.reference_moe(x, w13, w2, tw, ti)
floor = wd.rounding_floor(ref, torch.bfloat16)
with poisoned():
    y_fused = persistent.moe_fused(x, w13, w2, tw, ti)
    y_split = wd.moe(x, w13, w2, tw, ti, method="warp", schedule="split")
print(f"{shape.name} on {S.gpu}: persistent {wd.rel_error(y_fused, ref) / floor:.4f} × floor, "
      f"pair {wd.rel_error(y_split, ref) / floor:.4f} × floor")
assert wd.rel_error(y_fused, ref) <= ladder.bound("warp") * floor
assert wd.rel_error(y_split, ref) <= ladder.bound("warp") * floor

# %% [markdown]
# The tuner (`python -m bench tune --paths fused`) times every persistent configuration of
# `persistent.fused_candidates` (warps, tile sizes, programs per SM) against the tuned
# pair for every preset and token bucket, and would keep `fused` where it won. The H200's table
# records both times:

# %%
table = json.loads(configs.tuned_file(GPU).read_text())["warp"]
rows_f = []
for key, buckets in table.items():
    for t_max, cfg in buckets:
        m = cfg["measured_us"]
        rows_f.append({"layer": key, "T≤": t_max, "pair µs": m["split"], "persistent µs": m["fused"],
                       "persistent / pair": f"{m['fused'] / m['split']:.2f}"})
print(f"{GPU} (warpdecode/tuned/, measured_us of each bucket)")
print(ladder.table(rows_f))
slower = sum(r["persistent µs"] > r["pair µs"] for r in rows_f)
print(f"persistent slower in {slower} of {len(rows_f)} buckets")
assert not any("fused" in cfg for b in table.values() for _, cfg in b)  # it won nowhere

# %% [markdown]
# The persistent kernel holds both phases' registers, so one SM keeps fewer of its programs (and
# fewer loads in flight) than it keeps of the small gate/up programs, and each program's loop waits
# on its own loads between units, where the hardware scheduler would have started a fresh program.
# The barrier itself costs time too. So the two-kernel pair with PDL stays.
#
# ## What one launch of a decode-sized read can reach
#
# The question behind any one-launch design: how fast can a single launch read exactly the bytes of
# one T = 1 call, with no math at all? A persistent grid striding over a buffer of each size
# (`small_reads.csv`):

# %%
sr = ladder.experiment_results("small_reads.csv")
print(f"{GPU}: one streaming-read launch")
print(ladder.table([{"MB read by one launch": f"{int(r['bytes']) / 1e6:.1f}", "µs": r["us"],
                     "of the multi-GB ceiling": f"{float(r['frac_ceiling']):.0%}"} for r in sr]))
fractions = [float(r["frac_ceiling"]) for r in sorted(sr, key=lambda r: int(r["bytes"]))]
assert fractions == sorted(fractions)  # the smaller the read, the further below the ceiling

# %% [markdown]
# Tens of MB, the size of a T = 1 call, is where the fixed costs of a launch (its ramp-up, its last
# wave) are still a visible share. Shaped like warp decode's own kernels instead (one program per
# tile, no loop, the hardware scheduler filling the SMs), a read of the same bytes does better;
# through TMA boxes it does worse (`read_variants.csv`). Qwen3-30B-A3B at T = 1 reads its gate/up
# bytes, then its down bytes; the same read as one launch or as two:

# %%
rv = ladder.experiment_results("read_variants.csv")
print(ladder.table([{"MB": r["MB"], "read": r["variant"], "µs": r["us"],
                     "of the ceiling": f"{float(r['frac_ceiling']):.0%}", "best config": r["config"]} for r in rv]))
tiles = {float(r["MB"]): float(r["us"]) for r in rv if r["variant"] == "tiles"}
ceiling_rv = float(rv[0]["ceiling_TBps"])
total_mb, parts = max(tiles), sorted(tiles)[-2::-1][:2]  # the whole call's bytes; gate/up's, then down's
one_launch_us = tiles[total_mb]
two_launch_us = sum(tiles[mb] for mb in parts)
assert abs(sum(parts) - total_mb) < 0.2  # the two parts are the whole call's bytes
bar_us = total_mb * 1e6 / (ceiling_rv * 1e12) * 1e6 / report.BAR
for what, us_ in [(f"one launch of {total_mb} MB", one_launch_us),
                  (f"two launches, {' + '.join(str(mb) for mb in parts)} MB", two_launch_us)]:
    print(f"{what}: {us_:.1f} µs, {total_mb * 1e6 / (us_ * 1e-6) / 1e12 / ceiling_rv:.0%} of the ceiling, "
          f"{'within' if us_ <= bar_us else 'outside'} the bar ({bar_us:.1f} µs)")
warp_t1 = speed[s30.name]["warp"][1]["median_us"]
print(f"warp decode, {s30.name} T=1: {warp_t1:.1f} µs, {two_launch_us / warp_t1:.0%} of the two-launch read's speed")
assert one_launch_us < two_launch_us  # the kernel boundary costs time a single launch does not pay

# %% [markdown]
# Where the bar falls between those two lines is the room a one-launch design has: one that streams
# both phases' weights as well as the tile read does, with the dependency between the phases handled
# inside it.
#
# ## Every one-launch or further-overlapped design, against the pair
#
# Each design below is correct (checked against the reference in its own script), and none is faster
# than the pair measured in the same runs by more than the runs' noise. The persistent kernel above
# (v4); one pass adding the down projection through FP32 atomics (v6); the down programs ordered
# after every gate/up program in one grid (v8); down programs that take their token's experts in the
# order gate/up finishes them, so each waits for one expert at most (v16, and its down phase as a
# kernel of its own, v16b and v16c). Three more only moved more of the down kernel's weight stream
# ahead of the wait: the whole w2 tile in registers (v13), split over I with each chunk started when
# written (v14), into shared memory (v15). A prefetch of all of the down kernel's w2 lines into L2
# before the wait (v3) was slower too (`experiments/README.md`). In one kernel both phases share one
# register allocation and one warp count, and the gate/up phase, two thirds of the bytes, runs with
# the tile the down phase needs.
#
# Each design's best time at T = 1, over the pair's in the same runs (`report.one_launch_attempts`,
# from the experiments' CSV files and, for v4, the tuned table):
#
# ![One-launch and overlapped designs against the pair, NVIDIA H200](../figures/one_launch_attempts.png)
#
# *NVIDIA H200: `figures/one_launch_attempts.png`, drawn by `bench/plots.py` from the
# same rows as the table below.*

# %%
attempts = report.one_launch_attempts(GPU)
print(ladder.table([{"preset": r["preset"], "design": f"{r['version']}: {r['design']}",
                     "best µs": f"{r['best_us']:.1f}", "pair µs, same runs": f"{r['pair_us']:.1f}",
                     "bar µs": f"{r['bar_us']:.1f}", "best / pair": f"{r['best_us'] / r['pair_us']:.2f}"}
                    for r in attempts if r["preset"] in (s30.name, "olmoe-1b-7b")]))
assert attempts and all(r["best_us"] > 0.99 * r["pair_us"] for r in attempts)  # none beat the pair beyond noise

# %% [markdown]
# ## The floor under any design that waits for gate/up
#
# Every output of the layer depends on every gate/up weight of its token (through the
# intermediate, summed over I), so in one launch some program must learn that all the others are
# done before it can write `y`. The experiment `one_launch_bound` measures what that alone costs: a
# read of exactly a T = 1 call's bytes in one launch (a flat buffer: no routing, no math, the best
# case for any design), and the same read followed by the cheapest ways known to let one program
# see that all the others are done: a count (each program adds its share, then one acq_rel atomic;
# the last to count writes the result), a count in two levels, a signal without a reply with the
# last program waiting, and v16's protocol (each program stores its sum, the last polls the sums
# for a NaN); also [H] partial sums added with atomics (what v6 did), and the pair's own shape:
# two launches chained with PDL, the second loading all its rows before it waits, summing them
# as they arrive, holding them in registers through the wait and then meeting an [H] vector of
# the first launch's results (as w2's rows meet the intermediate), or reading them only after the
# wait. Each kind is the fastest of the program shapes timed, all in one run
# (`report.one_launch_bound`):

# %%
bound = report.one_launch_bound(GPU)
print(f"run {bound[0]['run']}, read ceiling {bound[0]['ceiling_TBps']:.2f} TB/s")
print(ladder.table([{"preset": r["preset"], "kind": r["kind"], "µs": f"{r['us']:.2f}",
                     "of the ceiling": f"{r['frac']:.1%}",
                     "room under the bar, µs": f"{r['bar_us'] - r['us']:+.2f}",
                     "rows × warps": f"{r['rows']} × {r['num_warps']}", "programs": r["programs"]}
                    for r in bound]))
for preset in dict.fromkeys(r["preset"] for r in bound):
    read = next(r for r in bound if r["preset"] == preset and r["kind"] == "read")
    assert all(r["us"] > read["us"] for r in bound if r["preset"] == preset and r is not read)  # waiting costs time
    room = [r["kind"] for r in bound if r["preset"] == preset and r is not read and r["us"] <= r["bar_us"]]
    print(f"{preset}: ways to wait that leave room under the bar: {'; '.join(room) or 'none'}")

# %% [markdown]
# The skeletons do far less than a layer: no routing, one buffer, no sum over I, and all but the
# holding kind use each weight the moment it arrives. A layer cannot: a down weight is of use only
# once the intermediate exists, so it is either held on chip through the wait (v13 in registers,
# v15 in shared memory) or read after it (the shipped pair reads most of w2 after kernel 1).
# The room is all the time a design of that shape has for the rest of its work; where it is
# negative, no design of that shape meets the bar on this GPU.
#
# ## What it adds up to
#
# Printed from the data above rather than typed:

# %%
best_wait = {p: min((r for r in bound if r["preset"] == p and r["kind"] != "read"), key=lambda r: r["us"])
             for p in dict.fromkeys(r["preset"] for r in bound)}
for p, r in best_wait.items():
    pair = speed[p]["warp"][1]
    print(f"- {p}, T = 1: the pair takes {pair['median_us']:.1f} µs ({pair['frac_ceiling']:.0%} of the ceiling); "
          f"the cheapest way to wait, on a bare read of the same bytes, {r['us']:.2f} µs ({r['frac']:.1%}: "
          f"{r['kind']}), room under the bar {r['bar_us'] - r['us']:+.2f} µs")
beaten = [r for r in attempts if r["best_us"] < 0.99 * r["pair_us"]]
tied = [f"{r['version']} at {r['preset']}" for r in attempts
        if 0.99 * r["pair_us"] <= r["best_us"] <= 1.01 * r["pair_us"]]
print(f"- designs faster than the pair in their own runs by more than 1 %: {len(beaten)} of {len(attempts)}; "
      f"within 1 % of it: {', '.join(tied) or 'none'}")

# %% [markdown]
# The pair stays: no design that put both phases in one launch, or moved more of the down phase
# into the gate/up phase's time, measured faster than it beyond noise, and the bounds say how little
# room any such design has on this GPU. `docs/results.md` states the target this leaves unmet.
#
# Back to the ladder: [04_warp_decode](04_warp_decode.ipynb) teaches the pair and the grouped schedule
# this rung measures against.
# Next: [09_fp8_weights](09_fp8_weights.ipynb) runs the same pair on FP8 weights, half the bytes.
