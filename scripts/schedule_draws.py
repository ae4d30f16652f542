"""Experiment: does warp decode's tuned schedule choice hold on other routing draws?

The tuner (``tune --paths grouped``) keeps the grouped schedule in a bucket where it beat the
two-kernel pair on two routing draws (seeds 3000 + T and 6000 + T). The benchmark's draw is
1000 + T, and there the choice has looked wrong: OLMoE T=8, grouped 127.9 µs in the tuner,
159.4 µs in session 10's sweep, where the pair alone measured 151.2 µs in session 11's. This times
the pair (``split``), the grouped schedule and the expert-centric path on several draws in one
process, each output checked against float64 first, and records how many distinct experts each
draw routes to.

    python scripts/schedule_draws.py [--presets olmoe-1b-7b gpt-oss-20b] [--T 4 8 16] [--seeds 1000 3000 6000]

Rows: results/<GPU>/schedule_draws.csv (µs per layer call, the floor, distinct experts).
"""

import argparse
from functools import partial
from pathlib import Path

import torch

from warpdecode import configs
from warpdecode.bench import data
from warpdecode.bench.experiment import cases, checked_us, row
from warpdecode.expert import moe_expert
from warpdecode.warp import moe_warp


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--presets", nargs="+", default=["olmoe-1b-7b", "gpt-oss-20b", "mixtral-8x7b", "qwen3-235b-a22b"])
    p.add_argument("--T", type=int, nargs="+", default=[4, 8, 16])
    p.add_argument("--seeds", type=int, nargs="+", default=[1000, 2000, 3000, 4000, 5000, 6000],
                   help="routing draws: inputs at seed + T (benchmark 1000, tuner 3000 and 6000)")
    args = p.parse_args()
    rows = []
    for case in cases(args.presets, args.T, seeds=args.seeds):
        s = case.shape
        cfg = configs.warp_config(s.H, s.I, s.E, s.K, case.T)
        tuned = "grouped" if "grouped" in cfg else "split"
        forms = {"split": partial(moe_warp, config=cfg, schedule="split"),
                 "grouped": partial(moe_warp, config=cfg, schedule="grouped"), "expert": moe_expert}
        times = {}
        for form, fn in forms.items():
            us, err, _ = checked_us(case, fn, form)
            times[form] = us
            rows.append(row(case, form=form, tuned=tuned, distinct=case.distinct, us=us, err=err))
        print(f"{s.name:16s} T={case.T:3d} seed {case.seed:5d} distinct {case.distinct:6.1f} (tuned: {tuned:7s}) "
              + "  ".join(f"{f} {t:8.2f} us {100 * case.floor_us / t:5.1f}%" for f, t in times.items()), flush=True)
    data.merge_write(Path(f"results/{torch.cuda.get_device_name().replace(' ', '_')}/schedule_draws.csv"), rows)


if __name__ == "__main__":
    main()
