"""Tidy CSV in ``results/<GPU>/``: read, merge (a rerun replaces the rows it re-measured), write."""

from __future__ import annotations

import csv
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
RESULTS = REPO / "results"
FIGURES = REPO / "figures"

#: The columns that identify a row in each file; a new row with the same key replaces the old one.
KEYS = {
    "speed.csv": ("preset", "T", "method"),
    "stages.csv": ("preset", "T", "path", "stage"),
    "accuracy.csv": ("preset", "T", "seed", "method"),
    "ceiling.csv": ("gpu",),
    "e2e_speed.csv": ("model", "layers", "T", "ctx", "method", "dense"),
    "e2e_errors.csv": ("model", "T", "steps", "method", "dense", "layer"),
    "hf_generate.csv": ("model", "layers", "batch", "impl"),
    "small_reads.csv": ("bytes",),
    "warp_variants.csv": ("preset", "T", "variant"),
    "ordered_launch.csv": ("preset", "T", "kind"),
    "grouped_down.csv": ("preset", "T", "kind"),
    "align_variants.csv": ("preset", "T", "kind"),
    "schedule_draws.csv": ("preset", "T", "seed", "form"),
}


def gpu_dir(gpu: str) -> Path:
    return RESULTS / gpu.replace(" ", "_")


def read(path: Path) -> list[dict]:
    if not path.exists():
        return []
    with path.open() as f:
        return list(csv.DictReader(f))


def speed_table(gpu: str) -> dict:
    """speed.csv as {preset: {method: {T: row}}}, the numeric columns as floats."""
    out: dict = {}
    for r in read(gpu_dir(gpu) / "speed.csv"):
        for k in ("median_us", "p20_us", "p80_us", "floor_us", "frac_ceiling", "achieved_TBps", "ceiling_TBps",
                  "error_over_floor"):
            r[k] = float(r[k])
        out.setdefault(r["preset"], {}).setdefault(r["method"], {})[int(r["T"])] = r
    return out


def merge_write(path: Path, rows: list[dict]) -> None:
    if not rows:
        return
    key = KEYS.get(path.name)
    old = read(path)
    if key:
        # a row may lack a key column added later (e2e's "dense"): it counts as empty
        fresh = {tuple(str(r.get(k, "")) for k in key) for r in rows}
        old = [r for r in old if tuple(str(r.get(k, "")) for k in key) not in fresh]
    fields = list(rows[0].keys())
    fields += [k for r in old for k in r if k not in fields]
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=fields)
        w.writeheader()
        for r in old + rows:
            w.writerow({k: r.get(k, "") for k in fields})


def e2e_speed_table(gpu: str, dense: str = "eager") -> dict:
    """e2e_speed.csv as {(model, layers, ctx): {method: {T: row}}}, the numeric columns as floats;
    only the steps whose dense (non-MoE) code ran as ``dense`` says: ``"eager"`` (PyTorch ops, the
    default) or ``"compiled"`` (``python -m warpdecode e2e --compile``)."""
    out: dict = {}
    for r in read(gpu_dir(gpu) / "e2e_speed.csv"):
        if (r.get("dense") or "eager") != dense:
            continue
        for k in ("step_us", "p20_us", "p80_us", "tokens_per_s", "bytes", "floor_us", "frac_floor", "ceiling_TBps"):
            r[k] = float(r[k])
        r["moe_us"] = float(r["moe_us"]) if r.get("moe_us") else None  # the step's MoE layers alone
        key = (r["model"], int(r["layers"]), int(r["ctx"]))
        out.setdefault(key, {}).setdefault(r["method"], {})[int(r["T"])] = r
    return out


def e2e_errors_run(gpu: str, model: str | None = None) -> dict | None:
    """One run of e2e_errors.csv: the (model, T, steps) of the file's last row (of ``model``'s last
    row, if given), as {"model", "T", "steps", "meta": that row, "errors": {method: {layer: error}}},
    ``layer`` an int (1 … layers) or ``"logits"``. None when there is no such row.

    ``merge_write`` appends re-measured rows at the end, so the last row names the latest run."""
    rows = [r for r in read(gpu_dir(gpu) / "e2e_errors.csv") if model is None or r["model"] == model]
    if not rows:
        return None
    last = rows[-1]
    run = (last["model"], last["T"], last["steps"])
    errors: dict = {}
    for r in rows:
        if (r["model"], r["T"], r["steps"]) == run:
            layer = r["layer"] if r["layer"] == "logits" else int(r["layer"])
            errors.setdefault(r["method"], {})[layer] = float(r["error"])
    return {"model": run[0], "T": int(run[1]), "steps": int(run[2]), "meta": last, "errors": errors}
