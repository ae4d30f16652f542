"""How fast can one kernel read a decode-sized amount of memory? The streaming-read kernel of
warpdecode.bench.timing on the byte counts of real decode calls, against the multi-GB ceiling.

    python scripts/small_reads.py [--out results/<GPU>/small_reads.csv]

A T=1 call of Qwen3-30B-A3B moves 50 MB in gate/up and 25 MB in down: at those sizes a kernel's
launch, ramp-up and last wave are a visible share of its time, so this is the bound any kernel
of that size faces, before any MoE logic.
"""

import argparse
from pathlib import Path

import torch

from warpdecode.bench import data
from warpdecode.bench.sweep import meta
from warpdecode.bench.timing import read_ceiling, small_read

SIZES_MB = [6.3, 12.6, 25.2, 50.3, 75.5, 151, 302, 604]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--out", default=f"results/{torch.cuda.get_device_name().replace(' ', '_')}/small_reads.csv")
    args = p.parse_args()
    ceiling = read_ceiling()
    rows = []
    for mb in SIZES_MB:
        r = small_read(int(mb * 1e6), copies=max(2, int(3 * 60e6 / (mb * 1e6)) + 1))
        r |= {"ceiling_TBps": round(ceiling, 4), "fraction": round(r["TBps"] / ceiling, 4), **meta()}
        rows.append(r)
        print(f"{mb:7.1f} MB: {r['us']:8.2f} us, {r['TBps']:.2f} TB/s = {100 * r['fraction']:.0f}% of {ceiling:.2f}"
              f" (programs/SM {r['programs_per_sm']}, BLOCK {r['BLOCK']}, warps {r['num_warps']})", flush=True)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    data.merge_write(Path(args.out), rows)


if __name__ == "__main__":
    main()
