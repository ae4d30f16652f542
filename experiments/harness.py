"""The loop every experiment in ``experiments/`` shares, and the one CSV schema they write.

The loop: a preset's layer copies, the routing draw for each T, the byte floor at the read ceiling
measured in the same process, the float64 reference, and a step timed only after its output was
checked against that reference:

    from harness import cases, checked_us, row
    for case in cases(["olmoe-1b-7b"], [1, 8]):
        us, err, _ = checked_us(case, lambda x, w13, w2, tw, ids: wd.moe(x, w13, w2, tw, ids), "auto")
        rows.append(row(case, variant="auto", us=us, err=err))

The schema (``COLUMNS``), one row per timed variant, in ``experiments/results/<GPU>/<name>.csv``:

    experiment        the file that measured it (``warp_down``, ``reads``, ...)
    version           the design the row measures (``13``, ``16b``, ...); ``shipped`` for the
                      shipped kernels timed beside it in the same process
    variant           the row's label, as the experiment prints it
    preset, T, seed   the layer and its routing draw (make_inputs seed); empty where none
    config            the launch config or shape, a Python dict literal (``ast.literal_eval``)
    us                median µs per layer call (or per launch) over CUDA-graph replays
    floor_us          the bytes that must move, at the read ceiling of the same run
    frac_ceiling      floor_us / us
    ceiling_TBps      the read ceiling measured in the same run
    error_over_floor  relative L2 error against float64 over the bf16 rounding floor
    detail            everything else the experiment records, a Python dict literal
    gpu, torch, triton, date
    run               an id shared by the rows of one invocation, where the experiment keeps one
    commit            the commit measured (``bench.sweep.commit``); empty in rows older than it

GPU only (CUDA graphs); each experiment's ``--check`` covers its kernels on the CPU.
"""

from __future__ import annotations

import argparse
import ast
import csv
import sys
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import checkout  # noqa: F401  (first: puts the checkout root on sys.path, for bench)
import torch
import triton

from bench.ladder import bytes_needed
from bench.sweep import meta
from bench.timing import capture_poisoned, read_ceiling, time_replays
from warpdecode import warp as wp
from warpdecode.configs import warp_config
from warpdecode.presets import MoEShape, get_preset
from warpdecode.reference import reference_moe, rel_error, rounding_floor
from warpdecode.workload import LayerInputs, make_inputs, make_layers, num_copies

HERE = Path(__file__).resolve().parent

COLUMNS = ["experiment", "version", "variant", "preset", "T", "seed", "config", "us", "floor_us", "frac_ceiling",
           "ceiling_TBps", "error_over_floor", "detail", "gpu", "torch", "triton", "date", "run", "commit"]
#: The columns that identify a row: a rerun replaces the rows it measured again.
KEY = ("experiment", "version", "variant", "preset", "T", "seed", "config", "run")


@dataclass
class Case:
    """One preset at one T: ``layers`` weight copies (w13, w2), one routing draw per copy."""

    shape: MoEShape
    T: int
    seed: int
    layers: list
    inputs: list[LayerInputs]
    floor_us: float  # the distinct experts' bytes at the read ceiling, per layer call
    ceiling: float  # TB/s, measured in this process
    ref: torch.Tensor  # the float64 output of copy 0

    @property
    def distinct(self) -> float:
        """Distinct experts per layer call, averaged over the copies' draws."""
        return sum(torch.unique(i.topk_ids).numel() for i in self.inputs) / len(self.inputs)


def cases(presets: list, Ts: list[int], *, seeds=(1000,), ceiling: float | None = None):
    """Yield a :class:`Case` per preset (a name or a :class:`MoEShape`), T and routing seed (inputs
    drawn at seed + T; the benchmark's is 1000). Each preset's layer copies are made once and freed after its cases."""
    ceiling = ceiling or read_ceiling()
    for name in presets:
        shape = name if isinstance(name, MoEShape) else get_preset(name)
        L = num_copies(shape)
        layers = make_layers(shape, L)
        for T in Ts:
            for seed in seeds:
                inputs = make_inputs(shape, T, L, seed=seed + T)
                floor_us = sum(bytes_needed(shape, i) for i in inputs) / L / (ceiling * 1e12) * 1e6
                i0 = inputs[0]
                ref = reference_moe(i0.x, *layers[0], i0.topk_weights, i0.topk_ids)
                yield Case(shape, T, seed + T, layers, inputs, floor_us, ceiling, ref)
        layers = None
        torch.cuda.empty_cache()


def checked_us(case: Case, fn, label: str, *, tol: float = 4.0, reps: int = 60):
    """(µs per layer call, error over the bf16 floor, copy 0's output) of ``fn(x, w13, w2,
    topk_weights, topk_ids)`` over the case's layer copies in one CUDA graph, outputs poisoned.
    Raises, naming ``label``, before timing anything whose copy-0 output is further than ``tol`` ×
    the floor from float64, or any of whose outputs holds a NaN. (A launch that runs out of
    resources raises from the capture: a caller that tries such configs catches it.)"""
    steps = list(zip(case.layers, case.inputs, strict=True))
    g, outs = capture_poisoned(lambda: [fn(i.x, w13, w2, i.topk_weights, i.topk_ids) for (w13, w2), i in steps])
    err = rel_error(outs[0], case.ref) / rounding_floor(case.ref, torch.bfloat16)
    if not (err <= tol and not any(y.isnan().any() for y in outs)):  # NaN fails too
        raise AssertionError(f"{case.shape.name} T={case.T} seed {case.seed} {label}: error {err:.2f} × the floor")
    us = time_replays(g, reps=reps).median_us / len(steps)
    y0 = outs[0].clone()
    del g, outs
    return us, err, y0


def checked_us_or_none(case: Case, fn, label: str, **kw):
    """:func:`checked_us`, or None where the launch fails (out of resources at a config being
    tried; printed). A wrong output still raises."""
    try:
        return checked_us(case, fn, label, **kw)
    except AssertionError:
        raise
    except Exception as e:
        print(f"{case.shape.name} T={case.T} {label}: {type(e).__name__} {e}"[:300], flush=True)
        torch.cuda.synchronize()
        return None


def down_runs(case: Case, down, configs, prefix: str = ""):
    """[(label, step, config)] for an experiment on warp decode's down kernel: the tuned pair, then
    kernel 1 with its tuned config followed by ``down(act, w2, topk_ids, topk_weights, cfg,
    out_dtype)`` for each of ``configs``, then the tuned pair again (a drift check)."""
    s = case.shape
    tuned = warp_config(s.H, s.I, s.E, s.K, case.T)

    def pair(down, cfg, x, w13, w2, tw, ids):
        return down(wp.warp_gate_up(x, w13, ids, tw, tuned["gate_up"]), w2, ids, tw, cfg, torch.bfloat16)

    shipped = partial(pair, wp.warp_down, tuned["down"])
    return ([("shipped " + str(tuned["down"]), shipped, None)]
            + [(f"{prefix}{c}", partial(pair, down, c), c) for c in configs] + [("shipped again", shipped, None)])


def row(case: Case, *, us: float, err: float, **fields) -> dict:
    """A tidy CSV row: the case, ``fields``, the time against the floor, the machine."""
    return {"preset": case.shape.name, "T": case.T, "seed": case.seed, **fields, "us": round(us, 3),
            "floor_us": round(case.floor_us, 3), "frac_ceiling": round(case.floor_us / us, 4),
            "error_over_floor": round(err, 3), "ceiling_TBps": round(case.ceiling, 4), **meta()}


def literal(d) -> str:
    """A dict as the schema's ``config`` and ``detail`` cells hold it (empty for nothing)."""
    return str(d) if d else ""


def tidy(r: dict, *, experiment: str, version, label: str = "variant", config: str = "config",
         rename: dict | None = None) -> dict:
    """One row of an experiment (its own field names) in the schema. ``label`` names the field
    that is the row's variant, ``config`` the one that is its config (a dict, or its literal);
    ``rename`` maps other fields onto schema columns (``{"fraction": "frac_ceiling"}``);
    ``version`` is a string or a function of the label. Every other field goes into ``detail``."""
    r = {(rename or {}).get(k, k): v for k, v in r.items()}
    out = {c: "" for c in COLUMNS}
    lab = str(r.pop(label, "") if label else "")
    cfg = r.pop(config, "") if config else ""
    out.update(experiment=experiment, variant=lab, config=literal(cfg) if isinstance(cfg, dict) else cfg,
               version=version(lab) if callable(version) else str(version))
    for c in COLUMNS:
        if c in r and c not in ("experiment", "version", "variant", "config", "detail"):
            v = r.pop(c)
            out[c] = "" if v is None else v
    out["detail"] = literal({k: _value(v) for k, v in r.items() if v not in (None, "")})
    return out


def _value(v):
    """A cell as a Python value where it reads as one (numbers, booleans, dicts), else the text."""
    if not isinstance(v, str):
        return v
    try:
        return ast.literal_eval(v)
    except (ValueError, SyntaxError):
        return v


def results_dir(gpu: str | None = None) -> Path:
    """``experiments/results/<GPU>/``: this device's unless ``gpu`` is named."""
    gpu = gpu or (torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu")
    return HERE / "results" / gpu.replace(" ", "_")


def read(path: Path) -> list[dict]:
    if not path.exists():
        return []
    with path.open() as f:
        return list(csv.DictReader(f))


def write(name: str, rows: list[dict], path: Path | None = None) -> Path:
    """Merge tidy ``rows`` into ``<name>.csv`` (rows with the same KEY are replaced), in COLUMNS order."""
    path = path or results_dir() / f"{name}.csv"
    if rows:
        fresh = {tuple(str(r.get(k, "")) for k in KEY) for r in rows}
        old = [r for r in read(path) if tuple(str(r.get(k, "")) for k in KEY) not in fresh]
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=COLUMNS)
            w.writeheader()
            for r in old + rows:
                w.writerow({k: r.get(k, "") for k in COLUMNS})
    return path


def _shipped_or(version: str, *shipped: str):
    """The version of a row by its label: ``shipped`` for the shipped kernels timed beside it."""
    return lambda lb: "shipped" if lb.startswith(shipped or ("shipped", "down alone: shipped")) else version


def _expert_order(lb: str) -> str:
    if lb.startswith(("shipped", "down alone: shipped")):
        return "shipped"
    if lb.startswith("one launch"):
        return "16"
    return "16c" if "'seg'" in lb else "16b"


def _grouped_down(lb: str) -> str:
    return ("shipped" if lb.startswith(("pair", "shipped")) else "11" if "v11" in lb else "12" if "v12" in lb
            else "10")


def _warp_variants(lb: str) -> str:
    return "shipped" if lb == "tuned" else "7" if lb.startswith("down num_stages") else "5"


def _small_reads(r: dict) -> dict:
    r["variant"] = "grid-stride"
    r["config"] = {k: int(r.pop(k)) for k in ("programs_per_sm", "BLOCK", "num_warps")}
    return r


def _one_launch_bound(r: dict) -> dict:
    r["config"] = {k: int(r.pop(k)) for k in ("rows", "num_warps", "programs")}
    return r


def _expert_pdl(r: dict) -> dict:
    r["variant"] = f"pdl={r.pop('pdl')}" + (f" align={a}" if (a := r.pop("align")) else "")
    return r


def _half_m(r: dict) -> dict:
    r["variant"] = "HALF_M" if str(r.pop("half_m")) == "True" else "plain"
    r["config"] = {"BLOCK_M": int(r.pop("BLOCK_M"))}
    return r


def _expert_tiles(r: dict) -> dict:
    r["variant"] = r.pop("gemm") + (" (tuned)" if str(r.pop("tuned")) == "True" else "")
    r["config"] = {k: int(v) for k in ("BLOCK_M", "BLOCK_N", "BLOCK_K", "GROUP_M", "num_warps", "num_stages")
                   if (v := r.pop(k)) != ""}
    return r


# How each experiment's own rows map onto the schema, per CSV: (experiment file, version (a string, or
# a function of the row's label), the field that is the label, the field that is the config, fields
# renamed onto schema columns, a transform of the row first). ``save`` and tidy_results.py use it.
SPECS = {
    "small_reads.csv": ("reads", "stream", "variant", "config", {"fraction": "frac_ceiling"}, _small_reads),
    "read_variants.csv": ("reads", "tiles", "kind", "config", {"fraction": "frac_ceiling"}, None),
    "one_launch_bound.csv": ("reads", "bound", "kind", "config", {}, _one_launch_bound),
    "gate_up_ladder.csv": ("gate_up", "ladder", "rung", "config", {}, None),
    "gate_up_slices.csv": ("gate_up", "slices", "variant", "config", {}, None),
    "minimal_pair.csv": ("minimal_pair", lambda lb: "shipped" if lb == "warp" else "v1", "variant", "config", {}, None),
    "down_ladder.csv": ("warp_down", "ladder", "rung", "config", {}, None),
    "down_preload.csv": ("warp_down", _shipped_or("13"), "variant", None, {}, None),
    "chunk_flags.csv": ("warp_down", _shipped_or("14"), "variant", None, {}, None),
    "down_tma.csv": ("warp_down", _shipped_or("15"), "variant", None, {}, None),
    "down_2d.csv": ("warp_down", _shipped_or("17"), "variant", None, {}, None),
    "down_kfirst.csv": ("warp_down", _shipped_or("18"), "variant", None, {}, None),
    "warp_atomic.csv": ("one_launch", _shipped_or("6", "split"), "variant", None, {}, None),
    "ordered_launch.csv": ("one_launch", _shipped_or("8", "pair"), "kind", "config", {}, None),
    "expert_order.csv": ("one_launch", _expert_order, "variant", None, {}, None),
    "warp_variants.csv": ("warp_schedule", _warp_variants, "variant", None, {}, None),
    "grid_order.csv": ("warp_schedule", "order", "order", None, {}, None),
    "grouped_down.csv": ("warp_schedule", _grouped_down, "kind", "config", {}, None),
    "schedule_draws.csv": ("warp_schedule", "draws", "form", None, {}, None),
    "batch_invariance.csv": ("warp_schedule", "invariant", "form", None, {}, None),
    "align_variants.csv": ("expert_path", "align", "kind", None, {}, None),
    "expert_tiles.csv": ("expert_path", "tiles", "variant", "config", {}, _expert_tiles),
    "expert_pdl.csv": ("expert_path", "pdl", "variant", None, {}, _expert_pdl),
    "half_m.csv": ("expert_path", "half_m", "variant", "config", {}, _half_m),
    "swap_ab.csv": ("expert_path", "swap_ab", "form", None, {}, None),
    "expert_bound.csv": ("expert_path", "bound", "variant", "config", {}, None),
}


def write_compiled(name: str, rows: list[dict], archs: set[str]) -> Path:
    """Rows of a count over compiled kernels into ``results/compiled/<name>.csv``, replacing the rows
    this Triton release wrote earlier for the architectures in ``archs`` (``compiled.arch_name``)."""
    path = HERE / "results" / "compiled" / f"{name}.csv"
    keep = [r for r in read(path) if r["triton"] != triton.__version__ or r["arch"] not in archs]
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(keep + rows)
    print(f"rows: {path}")
    return path


def save(path: Path, rows: list[dict]) -> Path:
    """An experiment's own rows, in the schema, merged into ``path`` (its SPECS entry by file name)."""
    experiment, version, label, config, rename, transform = SPECS[Path(path).name]
    return write(Path(path).stem, [tidy(transform(dict(r)) if transform else dict(r), experiment=experiment,
                                        version=version, label=label, config=config, rename=rename) for r in rows],
                 Path(path))


def parser(doc: str, versions, default: str | None = None, *, presets=None, Ts=None) -> argparse.ArgumentParser:
    """The options every experiment file takes: ``--version`` (one of ``versions``), ``--check``
    (its correctness check, on the CPU interpreter), and ``--presets`` / ``--T`` where it sweeps."""
    p = argparse.ArgumentParser(description=doc.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--version", choices=list(versions), default=default or list(versions)[0],
                   help="which version to run (the file's header lists them)")
    p.add_argument("--check", action="store_true", help="the version's correctness check only (CPU interpreter)")
    if presets is not None:
        p.add_argument("--presets", nargs="+", default=None, help=f"default per version, e.g. {' '.join(presets)}")
    if Ts is not None:
        p.add_argument("--T", type=int, nargs="+", default=None,
                       help=f"default per version, e.g. {' '.join(map(str, Ts))}")
    return p


def dispatch(doc: str, versions: dict) -> None:
    """``python experiments/<file>.py --version V [options]``: run version V's main with the other
    options (and the version's own fixed ones, for versions that are a form of another)."""
    argv = sys.argv[1:]
    if "--version" not in argv:
        print(doc)
        sys.exit(0 if {"-h", "--help"} & set(argv) else 2)
    i = argv.index("--version")
    if i + 1 >= len(argv) or argv[i + 1] not in versions:
        sys.exit(f"--version takes one of: {', '.join(versions)}")
    main, fixed = versions[argv[i + 1]]
    sys.argv = [sys.argv[0], *fixed, *argv[:i], *argv[i + 2:]]
    sys.exit(main())
