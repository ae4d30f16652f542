"""Tidy CSV in a warpdecode checkout's ``results/<GPU>/``: read, merge (a rerun replaces the rows
it re-measured), write.

The package never finds the checkout from its own location (an installed wheel has none): every
reader and writer here takes an explicit ``root``, and :func:`checkout` resolves it, by default
from the current working directory upward (the notebooks run in ``notebooks/``, one level down).
"""

from __future__ import annotations

import csv
from pathlib import Path


class NoCheckout(FileNotFoundError):
    """No warpdecode checkout where one was asked for."""


def _is_checkout(path: Path) -> bool:
    return (path / "README.md").is_file() and (path / "results").is_dir()


def checkout(root: str | Path | None = None) -> Path:
    """The checkout the benchmark data lives in: ``root`` if given, else the nearest folder at or
    above the current working directory that holds README.md and results/. Raises
    :class:`NoCheckout`, naming what it looked for, if there is none."""
    if root is not None:
        path = Path(root).expanduser().resolve()
        if not _is_checkout(path):
            raise NoCheckout(f"{path} is not a warpdecode checkout: it needs README.md and a results/ folder")
        return path
    here = Path.cwd().resolve()
    for path in (here, *here.parents):
        if _is_checkout(path):
            return path
    raise NoCheckout(f"no warpdecode checkout (a folder holding README.md and results/) at or above {here}: "
                     "run this from a warpdecode checkout or pass --root")


def gpu_folder(gpu: str) -> str:
    """The folder name of a GPU's results: its name with spaces as underscores."""
    return gpu.replace(" ", "_")


def gpu_dir(gpu: str, root: str | Path | None = None) -> Path:
    """``<root>/results/<GPU>/``: the benchmark data (speed, stages, accuracy, ceiling, e2e)."""
    return checkout(root) / "results" / gpu_folder(gpu)


def experiments_dir(gpu: str, root: str | Path | None = None) -> Path:
    """``<root>/experiments/results/<GPU>/``: what the experiments measured."""
    return checkout(root) / "experiments" / "results" / gpu_folder(gpu)


def experiment_csv(gpu: str, name: str, root: str | Path | None = None) -> Path:
    """An experiment's CSV, under :func:`experiments_dir`."""
    return experiments_dir(gpu, root) / name


def figures_dir(root: str | Path | None = None) -> Path:
    """``<root>/figures/``: the figures drawn from the CSV."""
    return checkout(root) / "figures"


def readme(root: str | Path | None = None) -> Path:
    """``<root>/README.md``, whose generated blocks ``python -m bench report`` rewrites."""
    return checkout(root) / "README.md"


#: The columns that identify a row in each file; a new row with the same key replaces the old one.
KEYS = {
    "speed.csv": ("preset", "T", "method"),
    "stages.csv": ("preset", "T", "path", "stage"),
    "accuracy.csv": ("preset", "T", "seed", "method"),
    "ceiling.csv": ("gpu",),
    "e2e_speed.csv": ("model", "layers", "T", "ctx", "method", "dense"),
    "e2e_errors.csv": ("model", "T", "steps", "method", "dense", "layer"),
    "hf_generate.csv": ("model", "layers", "batch", "impl", "compile", "cache"),
    "small_reads.csv": ("bytes",),
    "warp_variants.csv": ("preset", "T", "variant"),
    "ordered_launch.csv": ("preset", "T", "kind"),
    "grouped_down.csv": ("preset", "T", "kind"),
    "align_variants.csv": ("preset", "T", "kind"),
    "schedule_draws.csv": ("preset", "T", "seed", "form"),
}


def read(path: Path) -> list[dict]:
    if not path.exists():
        return []
    with path.open() as f:
        return list(csv.DictReader(f))


def speed_table(gpu: str, root: str | Path | None = None) -> dict:
    """speed.csv as {preset: {method: {T: row}}}, the numeric columns as floats."""
    out: dict = {}
    for r in read(gpu_dir(gpu, root) / "speed.csv"):
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
    fields = list(dict.fromkeys(k for r in rows[:1] + old for k in r))  # every column once, the new rows' first
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=fields)
        w.writeheader()
        for r in old + rows:
            w.writerow({k: r.get(k, "") for k in fields})


def e2e_speed_table(gpu: str, dense: str = "eager", root: str | Path | None = None) -> dict:
    """e2e_speed.csv as {(model, layers, ctx): {method: {T: row}}}, the numeric columns as floats;
    only the steps whose dense (non-MoE) code ran as ``dense`` says: ``"eager"`` (PyTorch ops, the
    default) or ``"compiled"`` (``python -m bench e2e --compile``)."""
    out: dict = {}
    for r in read(gpu_dir(gpu, root) / "e2e_speed.csv"):
        if (r.get("dense") or "eager") != dense:
            continue
        for k in ("step_us", "p20_us", "p80_us", "tokens_per_s", "bytes", "floor_us", "frac_floor", "ceiling_TBps"):
            r[k] = float(r[k])
        r["moe_us"] = float(r["moe_us"]) if r.get("moe_us") else None  # the step's MoE layers alone
        key = (r["model"], int(r["layers"]), int(r["ctx"]))
        out.setdefault(key, {}).setdefault(r["method"], {})[int(r["T"])] = r
    return out


def e2e_errors_run(gpu: str, model: str | None = None, root: str | Path | None = None) -> dict | None:
    """One run of e2e_errors.csv: the (model, T, steps) of the file's last row (of ``model``'s last
    row, if given), as {"model", "T", "steps", "meta": that row, "errors": {method: {layer: error}}},
    ``layer`` an int (1 … layers) or ``"logits"``. None when there is no such row.

    ``merge_write`` appends re-measured rows at the end, so the last row names the latest run."""
    rows = [r for r in read(gpu_dir(gpu, root) / "e2e_errors.csv") if model is None or r["model"] == model]
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
