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
from warpdecode.bench.experiment import cases, checked_us, row
from warpdecode.configs import warp_config
from warpdecode.warp import moe_warp


def variants(base: dict, T: int):
    out = {"tuned": base}
    for evict in ("", "evict_last"):
        c = copy.deepcopy(base)
        c["gate_up"]["evict"] = c["down"]["evict"] = evict
        out[f"evict={evict or 'normal'}"] = c
    return out


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--presets", nargs="+", default=wd.MODEL_PRESETS)
    p.add_argument("--T", type=int, nargs="+", default=[1, 2, 4, 8, 16])
    p.add_argument("--out", default=f"results/{torch.cuda.get_device_name().replace(' ', '_')}/warp_variants.csv")
    args = p.parse_args()
    rows = []
    for case in cases(args.presets, args.T):
        s = case.shape
        base = warp_config(s.H, s.I, s.E, s.K, case.T)
        base = {"gate_up": base["gate_up"], "down": base["down"]}
        for vname, cfg in variants(base, case.T).items():
            us, err, _ = checked_us(case, partial(moe_warp, config=cfg), vname, tol=1.5)
            rows.append(row(case, variant=vname, us=us, err=err))
            print(f"{s.name:16s} T={case.T:3d} {vname:34s} {us:9.2f} us  {100 * case.floor_us / us:5.1f}%  "
                  f"err/floor {err:.2f}", flush=True)
    data.merge_write(Path(args.out), rows)


if __name__ == "__main__":
    main()
