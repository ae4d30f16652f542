"""What the H200's measured times project to on a B200, where nothing here can be measured.

    python experiments/projection.py [--bandwidth-TBps 8.0] [--T 1 2 4 8 16 32 64 128 256]

A projection, stated as one. Each measured row of ``results/NVIDIA_H200/speed.csv`` (warp decode,
the expert path, ``auto``) is split into a fixed part, the launches' cost at ``costmodel.LAUNCH_US`` each
(the intercept of time against bytes in ``small_reads.csv``), and a part that moves bytes. The
fixed part stays; the byte part scales by the ratio of the two GPUs' read ceilings: the H200's as
that run measured it (``ceiling_TBps``), the B200's as its HBM3e peak (8 TB/s) times the fraction of
peak the H200 reaches (measured ceiling / 4.8 TB/s). The assumptions, and why they may hold:

- the same kernels and launch configurations (no B200 table: the defaults, whose rules read the
  device's SM count and shared memory; they compile for sm_100a without spills,
  ``tests/test_compile_arch.py``), at the same fraction of the ceiling;
- the bytes in flight suffice: at 8 TB/s and ~0.8 µs of memory latency a B200 SM needs about
  43 KB in flight against an H200 SM's 29 KB (148 against 132 SMs); warp decode's one-warp gate/up
  programs hold 8 KB each, up to 21 of them per SM at their registers, so about 170 KB;
- launch and grid-tail costs as on the H200 (they do not scale with bandwidth, which is why the
  small layers gain least).

Rows: ``experiments/results/projections/NVIDIA_B200.csv``; the printout compares warp decode with
the expert path per preset and T.
"""

from __future__ import annotations

import argparse
import csv
from pathlib import Path

from warpdecode import costmodel

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
H200_PEAK_TBPS = 4.8  # the H200's HBM3e peak (NVIDIA's data sheet)
B200_PEAK_TBPS = 8.0  # the B200's HBM3e peak (NVIDIA's data sheet)
LAUNCHES = {"warp": costmodel.WARP_LAUNCHES, "expert": costmodel.EXPERT_LAUNCHES}


def project(rows: list[dict], b200_peak: float) -> list[dict]:
    out = []
    for r in rows:
        method = r["method"]
        if method not in ("warp", "expert", "auto"):
            continue
        us, ceiling = float(r["median_us"]), float(r["ceiling_TBps"])
        launches = LAUNCHES.get(method, min(LAUNCHES.values()))
        fixed = min(us, launches * costmodel.LAUNCH_US)
        b200_ceiling = b200_peak * ceiling / H200_PEAK_TBPS
        projected = fixed + (us - fixed) * ceiling / b200_ceiling
        floor = int(r["bytes"]) / (b200_ceiling * 1e6)
        out.append({"preset": r["preset"], "T": int(r["T"]), "method": method, "h200_us": us,
                    "h200_frac_ceiling": float(r["frac_ceiling"]), "b200_ceiling_TBps": round(b200_ceiling, 3),
                    "b200_us": round(projected, 2), "b200_floor_us": round(floor, 2),
                    "b200_frac_ceiling": round(floor / projected, 4), "fixed_us": fixed,
                    "source": "results/NVIDIA_H200/speed.csv", "kind": "projection"})
    return out


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--bandwidth-TBps", type=float, default=B200_PEAK_TBPS, dest="bw",
                   help="the B200's HBM peak (default 8.0)")
    p.add_argument("--T", type=int, nargs="+", default=[1, 2, 4, 8, 16, 32, 64, 128, 256])
    args = p.parse_args(argv)
    with (ROOT / "results" / "NVIDIA_H200" / "speed.csv").open() as f:
        rows = [r for r in csv.DictReader(f) if int(r["T"]) in args.T]
    out = project(rows, args.bw)
    dest = HERE / "results" / "projections" / "NVIDIA_B200.csv"
    dest.parent.mkdir(parents=True, exist_ok=True)
    with dest.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(out[0]))
        w.writeheader()
        w.writerows(out)
    by = {(r["preset"], r["T"], r["method"]): r for r in out}
    print(f"B200 projected from the H200's times (read ceiling {out[0]['b200_ceiling_TBps']:.2f} TB/s): "
          "expert-path time / warp decode's")
    print(f"{'preset':18s} " + " ".join(f"T={T:<5d}" for T in args.T))
    for preset in dict.fromkeys(r["preset"] for r in out):
        cells = []
        for T in args.T:
            w, e = by.get((preset, T, "warp")), by.get((preset, T, "expert"))
            cells.append(f"{e['b200_us'] / w['b200_us']:7.2f}" if w and e else "      -")
        print(f"{preset:18s} " + " ".join(cells))
    print(f"wrote {dest.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
