"""A/B: warp decode's two-kernel pair (tuned) against the one-pass schedule
(``warpdecode.warp.moe_warp_atomic``: the down projection split over I, combined with FP32
atomics, no second launch), every candidate config, at T = 1…8 on every preset.

    python scripts/warp_atomic.py [--presets ...] [--T 1 2 4 8]

Rows go to results/<GPU>/warp_atomic.csv: time per layer call (median of CUDA-graph replays over
the layer copies), fraction of the read ceiling, error / bf16 floor of the first copy's output,
and whether the scratch accumulator was back at zero after the run.
"""

import argparse
import json
from functools import partial
from pathlib import Path

import torch

import warpdecode as wd
from warpdecode import warp as wp
from warpdecode.bench import data, tune
from warpdecode.bench.sweep import meta
from warpdecode.bench.timing import capture, read_ceiling, time_replays
from warpdecode.bench.workload import bytes_needed, make_inputs, make_layers, num_copies
from warpdecode.configs import warp_config


def run_split(pairs, cfg):
    return [wp.moe_warp(i.x, w13, w2, i.topk_weights, i.topk_ids, config=cfg, schedule="split")
            for (w13, w2), i in pairs]


def run_atomic(pairs, cfg):
    return [wp.moe_warp_atomic(i.x, w13, w2, i.topk_weights, i.topk_ids, cfg) for (w13, w2), i in pairs]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--presets", nargs="+", default=wd.MODEL_PRESETS)
    p.add_argument("--T", type=int, nargs="+", default=[1, 2, 4, 8])
    p.add_argument("--out", default=f"results/{torch.cuda.get_device_name().replace(' ', '_')}/warp_atomic.csv")
    args = p.parse_args()
    shapes = [wd.get_preset(n) for n in args.presets]
    cands = tune.atomic_candidates(max(s.H for s in shapes), max(s.I for s in shapes))
    res = tune.precompile([("warp_atomic", 2, c) for c in cands])
    dropped = [c for c, r in zip(cands, res, strict=True) if r is not True]
    print(f"{len(cands)} candidates, dropped {len(dropped)}: {[r for r in res if r is not True]}", flush=True)
    cands = [c for c, r in zip(cands, res, strict=True) if r is True]
    ceiling = read_ceiling()
    rows = []
    for shape in shapes:
        L = num_copies(shape)
        layers = make_layers(shape, L)
        for T in args.T:
            inputs = make_inputs(shape, T, L, seed=1000 + T)
            nbytes = sum(bytes_needed(shape, i) for i in inputs) / L
            floor_us = nbytes / (ceiling * 1e12) * 1e6
            ref = wd.reference_moe(inputs[0].x, *layers[0], inputs[0].topk_weights, inputs[0].topk_ids)
            pairs = list(zip(layers, inputs, strict=True))
            split = warp_config(shape.H, shape.I, shape.E, shape.K, T)
            runs = [("split (tuned)", partial(run_split, pairs, split))]
            runs += [("atomic " + json.dumps(c, sort_keys=True), partial(run_atomic, pairs, c)) for c in cands]
            best = None
            for vname, fn in runs:
                try:
                    g, outs = capture(fn)
                except Exception as e:  # noqa: BLE001  a config out of resources at this shape
                    print(f"{shape.name} T={T} {vname}: {e!r}"[:200], flush=True)
                    continue
                us = time_replays(g, reps=60).median_us / L
                err = wd.rel_error(outs[0], ref) / wd.rounding_floor(ref, torch.bfloat16)
                del g, outs
                torch.cuda.synchronize()
                acc, count = wp._atomic_scratch.get(torch.cuda.current_device(), (torch.zeros(1), torch.zeros(1)))
                clean = bool((acc == 0).all() and (count == 0).all())
                rows.append({"preset": shape.name, "T": T, "variant": vname, "us": round(us, 3),
                             "floor_us": round(floor_us, 3), "frac_ceiling": round(floor_us / us, 4),
                             "error_over_floor": round(err, 4), "scratch_zero": clean,
                             "ceiling_TBps": round(ceiling, 4), **meta()})
                if vname.startswith("split"):
                    print(f"{shape.name:16s} T={T:3d} split {us:9.2f} us {100 * floor_us / us:5.1f}%  "
                          f"err/floor {err:.3f}", flush=True)
                elif best is None or us < best[0]:
                    best = (us, vname, err, clean)
            if best:
                print(f"{shape.name:16s} T={T:3d} best {best[0]:9.2f} us {100 * floor_us / best[0]:5.1f}%  "
                      f"err/floor {best[2]:.3f} scratch zero {best[3]}  {best[1]}", flush=True)
        layers = None
        torch.cuda.empty_cache()
    data.merge_write(Path(args.out), rows)


if __name__ == "__main__":
    main()
