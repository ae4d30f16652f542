"""The expert-centric path's two GEMMs at large T over a wider set of tiles than the tuner's.

    python scripts/expert_tiles.py [--presets mixtral-8x7b olmoe-1b-7b] [--T 256]

The tuner (``warpdecode/bench/tune.py``, ``gemm_candidates``) searches the neighbourhood of vLLM's
tuned H100/H200 tables: 64–256 columns × 64–256 deep, 4 or 8 warps, 3–5 stages. At T = 256 the
Mixtral and OLMoE rows stop at 84 % and 83 % of the read ceiling (the bar is 85 %), the GEMMs
themselves at about 85 % (``logs/tune_expert.log``). This script times each GEMM over every tile
of 64–256 columns × 32–128 deep, 4 or 8 warps, 3–6 stages that fits in shared memory, at the two
largest row blocks the tuner tries, against the tuned config in the same process, then the
whole path (``moe_expert``) with the best pair against the tuned one.

Rows: µs per layer call of each GEMM to results/<GPU>/expert_tiles.csv.
"""

import argparse
import itertools
from functools import partial
from pathlib import Path

import torch

import warpdecode as wd
from warpdecode import expert as ex
from warpdecode.bench import data
from warpdecode.bench import tune as tn
from warpdecode.bench.sweep import meta
from warpdecode.bench.timing import capture, read_ceiling, time_replays
from warpdecode.bench.workload import bytes_needed, make_inputs
from warpdecode.configs import expert_config

SMEM = 227 * 1024  # Hopper's shared memory per program


def wide_candidates(block_m: int, operands: int):
    """Tiles whose pipelined operands fit: ``operands`` weight tiles (gate and up: 2) per stage."""
    out = []
    for n, k, w, s in itertools.product([64, 128, 256], [32, 64, 128], [4, 8], [3, 4, 5, 6]):
        if s * (block_m * k + operands * k * n) * 2 > SMEM or (w == 8 and block_m * n < 64 * 128):
            continue
        out.append({"BLOCK_N": n, "BLOCK_K": k, "GROUP_M": 1, "num_warps": w, "num_stages": s})
    return out


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--presets", nargs="+", default=["mixtral-8x7b", "olmoe-1b-7b"])
    p.add_argument("--T", type=int, nargs="+", default=[256])
    p.add_argument("--reps", type=int, default=30)
    args = p.parse_args()
    ceiling = read_ceiling()
    rows = []
    for name in args.presets:
        shape = wd.get_preset(name)
        for T in args.T:
            bms = tn.block_m_candidates(T, shape)[-2:]
            jobs = [(kind, 2, (bm, c)) for bm in bms for kind, ops in (("gate_up", 2), ("down", 1))
                    for c in wide_candidates(bm, ops)]
            ok = tn.precompile(jobs)
            good = {tn._key(*j) for j, r in zip(jobs, ok, strict=True) if r is True}
            print(f"{name} T={T}: {len(good)} of {len(jobs)} candidates compile without spills", flush=True)

            L, w13s, w2s = tn._layer_copies(shape)
            inputs = make_inputs(shape, T, L, seed=1000 + T)  # the benchmark's routings
            nbytes = sum(bytes_needed(shape, i) for i in inputs) / L
            tws = [i.topk_weights for i in inputs]
            xs = [i.x for i in inputs]
            nones = [None] * L  # no activation scales: bf16 GEMMs
            tuned = expert_config(shape.H, shape.I, shape.E, shape.K, T)
            best = {}
            for bm in sorted(set(bms) | {tuned["BLOCK_M"]}):
                als = [ex.align(i.topk_ids, shape.E, bm) for i in inputs]
                hs = None
                for kind in ("gate_up", "down"):
                    cands = [c for c in wide_candidates(bm, 2 if kind == "gate_up" else 1)
                             if tn._key(kind, 2, (bm, c)) in good]
                    if bm == tuned["BLOCK_M"]:
                        cands = [tuned[kind]] + [c for c in cands if c != tuned[kind]]
                    if hs is None and kind == "down":
                        c_gu = tuned["gate_up"] if bm == tuned["BLOCK_M"] else best[(bm, "gate_up")][1]
                        hs = [ex.gate_up(x, None, w13, al, c_gu, gather_k=shape.K)
                              for x, w13, al in zip(xs, w13s, als, strict=True)]
                    for c in cands:
                        if kind == "gate_up":
                            step = tn._over_layers(partial(ex.gate_up, cfg=c, gather_k=shape.K),
                                                   xs, nones, w13s, als)
                        else:
                            step = tn._over_layers(partial(ex.down, cfg=c, scatter=True),
                                                   hs, nones, w2s, als, tws)
                        t = tn._time(step, args.reps)
                        if t is None:
                            continue
                        us = t / L
                        is_tuned = bm == tuned["BLOCK_M"] and c == tuned[kind]
                        if (bm, kind) not in best or us < best[(bm, kind)][0]:
                            best[(bm, kind)] = (us, c)
                        rows.append({"preset": name, "T": T, "gemm": kind, "BLOCK_M": bm, **c,
                                     "tuned": is_tuned, "us": round(us, 3), "ceiling_TBps": round(ceiling, 4),
                                     **meta()})
                        if is_tuned:
                            print(f"{name} T={T} {kind} BLOCK_M={bm} tuned {c}: {us:.2f} us", flush=True)
                    print(f"{name} T={T} {kind} BLOCK_M={bm} best {best[(bm, kind)][1]}: {best[(bm, kind)][0]:.2f} us",
                          flush=True)
            # the whole path: the tuned config against the best pair found
            bm = min(bms, key=lambda b: best[(b, "gate_up")][0] + best[(b, "down")][0])
            found = {"BLOCK_M": bm, "gate_up": best[(bm, "gate_up")][1], "down": best[(bm, "down")][1]}
            pairs = list(zip(zip(w13s, w2s, strict=True), inputs, strict=True))
            for label, cfg in (("tuned", tuned), ("found", found), ("tuned again", tuned)):
                g, _ = capture(lambda cfg=cfg, pairs=pairs: [
                    ex.moe_expert(i.x, w13, w2, i.topk_weights, i.topk_ids, config=cfg) for (w13, w2), i in pairs])
                us = time_replays(g, reps=60).median_us / L
                del g
                frac = nbytes / (ceiling * 1e12) * 1e6 / us
                print(f"{name} T={T} whole path, {label} {cfg}: {us:.2f} us, {100 * frac:.1f} % of the ceiling",
                      flush=True)
                rows.append({"preset": name, "T": T, "gemm": f"path {label}", "BLOCK_M": cfg["BLOCK_M"],
                             "us": round(us, 3), "frac_ceiling": round(frac, 4), "ceiling_TBps": round(ceiling, 4),
                             **meta()})
            w13s = w2s = hs = None
            torch.cuda.empty_cache()
    data.merge_write(Path(f"results/{torch.cuda.get_device_name().replace(' ', '_')}/expert_tiles.csv"), rows)


if __name__ == "__main__":
    main()
