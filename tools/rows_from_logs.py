"""Rows of a GPU run rebuilt from the tables it printed, for a run whose logs are kept and CSV files are not.

    python tools/rows_from_logs.py speed LOG_DIR COMMIT DATE     # bench_<preset>.log → results/<GPU>/speed.csv
    python tools/rows_from_logs.py minimal LOG_DIR COMMIT DATE   # minimal.log → experiments/.../minimal_pair.csv
    python tools/rows_from_logs.py generate LOG_DIR COMMIT DATE  # gen_*.log → results/<GPU>/hf_generate.csv

``python -m bench bench --what speed`` prints every row it writes (preset, T, method, median,
floor, fraction of the ceiling, error over the floor, overhead) after the read ceiling it measured;
``experiments/minimal_pair.py`` prints each variant's time, fraction and error. The printed tables
lack the p20/p80 spread (written as NaN) and the bytes; the bytes are the row's floor times the
ceiling, and are taken from the existing speed.csv row of the same preset and T (the same seeded
routing draws), after checking that they give the printed floor. ``env.log`` (``tools/gpu.sh env``)
names the GPU and versions. The logs stay in ``results/<GPU>/logs/<COMMIT>/`` beside the rows.

``python -m bench e2e --what generate`` prints each process's row (tokens/s, µs per step, the first
call, graphs compiled, the expert layers' µs). A (batch, implementation) that hf_generate.csv already
holds at COMMIT keeps its written row; the others are rebuilt from the print (``seconds`` from the
rate, ``cudagraph_skips`` and the tokens' agreement unknown: empty). Every row of COMMIT is then compared
with the baseline's row of its batch, as ``bench.hf_generate`` compares them.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "experiments")]

import harness  # noqa: E402

from bench import data  # noqa: E402
from bench.sweep import SANITY  # noqa: E402

NUM = re.compile(r"^-?[\d.]+$")


def env(log_dir: Path) -> dict:
    text = (log_dir / "env.log").read_text()
    gpu = re.search(r"^(NVIDIA [^,]+),", text, re.M).group(1)
    torch_v, triton_v = re.search(r"torch (\S+) triton (\S+)", text).groups()
    return {"gpu": gpu, "torch": torch_v, "triton": triton_v}


def speed(log_dir: Path, commit: str, date: str) -> None:
    meta = env(log_dir)
    out = data.gpu_dir(meta["gpu"]) / "speed.csv"
    old = {(r["preset"], r["T"]): r for r in data.read(out) if r["method"] == "warp"}
    rows = []
    for log in sorted(log_dir.glob("bench_*.log")):
        text = log.read_text()
        ceiling = re.search(r"ceiling: read ([\d.]+) TB/s", text)
        for line in text.splitlines():
            p = line.split()
            if not (ceiling and len(p) >= 7 and p[1].isdigit() and all(NUM.match(v) for v in p[3:7])):
                continue
            preset, T, method, med, floor, frac, err = p[:7]
            ref = old[(preset, T)]
            c = float(ceiling.group(1))
            if abs(int(ref["bytes"]) / (c * 1e6) - float(floor)) > 2e-3 + 1e-4 * float(floor):
                raise SystemExit(f"{log.name} {preset} T={T}: the floor {floor} is not speed.csv's bytes at {c} TB/s")
            rows.append({"preset": preset, "T": T, "method": method, "median_us": med, "p20_us": "nan",
                         "p80_us": "nan", "reps": 100, "bytes": ref["bytes"], "floor_us": floor,
                         "achieved_TBps": round(int(ref["bytes"]) / (float(med) * 1e6), 4), "frac_ceiling": frac,
                         "ceiling_TBps": c, "error_over_floor": err, "checked": float(err) <= SANITY.get(method, 8),
                         "layers": ref["layers"], "overhead": p[7] if len(p) > 7 else "", **meta, "commit": commit,
                         "date": date})
    data.merge_write(out, rows)
    print(f"{len(rows)} rows into {out}")


def minimal(log_dir: Path, commit: str, date: str) -> None:
    meta = env(log_dir)
    rows = []
    for line in (log_dir / "minimal.log").read_text().splitlines():
        m = re.match(r"(\S+)\s+T=(\d+)\s+(\S+)\s+([\d.]+) us\s+([\d.]+)% err/floor ([\d.]+)", line)
        if m:
            preset, T, variant, us, pct, err = m.groups()
            rows.append({"experiment": "minimal_pair", "version": "shipped" if variant == "warp" else "v1",
                         "variant": variant, "preset": preset, "T": T, "seed": 1000 + int(T), "us": us,
                         "floor_us": round(float(us) * float(pct) / 100, 3), "frac_ceiling": round(float(pct) / 100, 4),
                         "error_over_floor": err, **meta, "date": date, "commit": commit})
    path = harness.write("minimal_pair", rows, ROOT / "experiments/results" / meta["gpu"].replace(" ", "_")
                         / "minimal_pair.csv")
    print(f"{len(rows)} rows into {path}")


GENERATE = re.compile(r"generate (\S+) L=(\d+) batch=(\d+) (\S+) \((\S+), (\S+) cache\): "
                      r"([\d.]+) tok/s, (\d+) us/step, first call ([\d.]+) s \((\d+) graphs compiled\); "
                      r"expert layers (\d+) us")


def generate(log_dir: Path, commit: str, date: str) -> None:
    from bench import hf_generate as hf

    meta = env(log_dir)
    version = re.search(r"^transformers (\S+)", (log_dir / "env.log").read_text(), re.M).group(1)
    out = data.gpu_dir(meta["gpu"]) / "hf_generate.csv"
    old = data.read(out)
    kept = {(r["layers"], r["batch"], r["impl"]): r for r in old if r.get("commit") == commit}
    rows = {}
    for log in sorted(log_dir.glob("gen_*.log")):
        for m in GENERATE.finditer(log.read_text()):
            name, layers, batch, impl, compile_, cache, rate, step, first, graphs, moe = m.groups()
            key = (layers, batch, impl)
            row = kept.get(key) or {
                "model": f"{name} shapes", "layers": layers, "batch": batch, "prompt": 32, "new_tokens": 64,
                "impl": impl, "compile": compile_, "cache": cache,
                "seconds": round(int(batch) * 64 / float(rate), 4), "tokens_per_s": rate, "step_us": step,
                "first_call_s": first, "moe_us": moe, "moe_share": round(int(moe) / int(step), 4),
                "graphs_compiled": graphs, "cudagraph_skips": "", **meta, "commit": commit, "date": date,
                "transformers": version, "processes": 1}
            rows[key] = {**row, **{k: float(row[k]) for k in ("tokens_per_s", "moe_us", "moe_share")}}
    for (layers, batch, impl), row in rows.items():
        base = rows.get((layers, batch, hf.BASELINE))
        if impl != hf.BASELINE and base is not None:
            hf._against_baseline(row, base, None)  # the tokens are not in the log
    data.merge_write(out, list(rows.values()))
    print(f"{len(rows)} rows into {out}")


if __name__ == "__main__":
    what, log_dir, commit, date = sys.argv[1:5]
    {"speed": speed, "minimal": minimal, "generate": generate}[what](Path(log_dir), commit, date)
