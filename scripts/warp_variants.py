"""A/B of warp decode's cache knobs at T = 1…16 on every preset, against the tuned configs.

    python scripts/warp_variants.py [--presets ...] [--T 1 2 4 8 16]

Variants: the weight loads' L2 policy (``evict_first`` streams past L2, ``""`` the default,
``evict_last``). The CSV also holds rows of two variants measured at commit 5a0a4eb and then
removed, being slower nearly everywhere: ``group=1`` (the gate/up program of the first pair
routed to an expert walks every pair of that expert, so its rows come from HBM once) and
``down_tokens=N`` (a down program walking N tokens); and rows ``down num_stages=2/3`` (the down
kernel's loop over I pipelined, measured at commit 4db7704, within 1 %). Rows go to
results/<GPU>/warp_variants.csv: time per layer call, and the fraction of the read ceiling.
"""

import argparse
import copy
from functools import partial
from pathlib import Path

import torch

import warpdecode as wd
from warpdecode.bench import data
from warpdecode.bench.sweep import meta
from warpdecode.bench.timing import capture, read_ceiling, time_replays
from warpdecode.bench.workload import bytes_needed, make_inputs, make_layers, num_copies
from warpdecode.configs import warp_config
from warpdecode.warp import moe_warp


def variants(base: dict, T: int):
    out = {"tuned": base}
    for evict in ("", "evict_last"):
        c = copy.deepcopy(base)
        c["gate_up"]["evict"] = c["down"]["evict"] = evict
        out[f"evict={evict or 'normal'}"] = c
    return out


def run_all(pairs, cfg):
    return [moe_warp(i.x, w13, w2, i.topk_weights, i.topk_ids, config=cfg) for (w13, w2), i in pairs]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--presets", nargs="+", default=wd.MODEL_PRESETS)
    p.add_argument("--T", type=int, nargs="+", default=[1, 2, 4, 8, 16])
    p.add_argument("--out", default=f"results/{torch.cuda.get_device_name().replace(' ', '_')}/warp_variants.csv")
    args = p.parse_args()
    ceiling = read_ceiling()
    rows = []
    for name in args.presets:
        shape = wd.get_preset(name)
        L = num_copies(shape)
        layers = make_layers(shape, L)
        for T in args.T:
            inputs = make_inputs(shape, T, L, seed=1000 + T)
            nbytes = sum(bytes_needed(shape, i) for i in inputs) / L
            floor_us = nbytes / (ceiling * 1e12) * 1e6
            base = warp_config(shape.H, shape.I, shape.E, shape.K, T)
            base = {"gate_up": base["gate_up"], "down": base["down"]}
            ref = wd.reference_moe(inputs[0].x, *layers[0], inputs[0].topk_weights, inputs[0].topk_ids)
            pairs = list(zip(layers, inputs, strict=True))
            for vname, cfg in variants(base, T).items():
                g, outs = capture(partial(run_all, pairs, cfg))
                us = time_replays(g, reps=60).median_us / L
                err = wd.rel_error(outs[0], ref) / wd.rounding_floor(ref, torch.bfloat16)
                del g, outs
                rows.append({"preset": name, "T": T, "variant": vname, "us": round(us, 3),
                             "floor_us": round(floor_us, 3), "frac_ceiling": round(floor_us / us, 4),
                             "error_over_floor": round(err, 3), "ceiling_TBps": round(ceiling, 4), **meta()})
                print(f"{name:16s} T={T:3d} {vname:34s} {us:9.2f} us  {100 * floor_us / us:5.1f}%  err/floor {err:.2f}",
                      flush=True)
        layers = None
        torch.cuda.empty_cache()
    data.merge_write(Path(args.out), rows)


if __name__ == "__main__":
    main()
