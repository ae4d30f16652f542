"""Everything derived from a checkout's CSV under ``results/<GPU>/``: the ``auto`` crossover table
(into ``warpdecode/tuned/<GPU>.json``), the generated blocks of README.md and docs/results.md, and
the figures. Nothing here measures; rerun it after any benchmark:

    python -m bench report [--root CHECKOUT] [--gpu NAME]     # all three

Every function takes the checkout as ``root`` (default: the one around the current working
directory, :func:`bench.data.checkout`).
"""

from __future__ import annotations

import ast
import json
import re
import tempfile
from collections import defaultdict
from pathlib import Path

from bench import data
from warpdecode.configs import crossover_of, shape_key, tuned_file
from warpdecode.presets import MODEL_PRESETS, get_preset
from warpdecode.warp import SCHEDULES, schedule_of

Root = str | Path | None

#: The schedules the tuner times against the pair: the package's, and the persistent one (bench/persistent.py).
TIMED = (*SCHEDULES, "fused")


class NoData(RuntimeError):
    """The checkout holds no benchmark data for the GPU asked for."""


def tuned_path(gpu: str, root: Root = None) -> Path:
    """The checkout's tuned table for ``gpu``: ``<root>/warpdecode/tuned/<GPU>.json``."""
    return data.checkout(root) / "warpdecode" / "tuned" / tuned_file(gpu).name


def crossover_table(gpu: str, root: Root = None) -> dict:
    """For each preset: the largest measured T up to which warp decode is faster than the
    expert-centric path at every measured T, with the times that decide it."""
    table, evidence = {}, {}
    for preset, by_method in data.speed_table(gpu, root).items():
        warp, expert = by_method.get("warp", {}), by_method.get("expert", {})
        Ts = sorted(set(warp) & set(expert))
        if not Ts:
            continue
        s = get_preset(preset)
        key = shape_key(s.H, s.I, s.E, s.K)
        evidence[key] = {str(T): {"warp_us": warp[T]["median_us"], "expert_us": expert[T]["median_us"]} for T in Ts}
        table[key] = crossover_of(evidence[key])
    return {"crossover": table, "crossover_evidence": evidence}


def _with_crossover(gpu: str, root: Root = None) -> tuple[Path, dict, str]:
    """The tuned table with a fresh crossover: (its path, the table, its text as written)."""
    path = tuned_path(gpu, root)
    tuned = json.loads(path.read_text()) if path.exists() else {}
    tuned.update(crossover_table(gpu, root))
    return path, tuned, json.dumps(tuned, indent=1, sort_keys=True)


def write_crossover(gpu: str, root: Root = None) -> dict:
    """Write the crossover into the checkout's tuned table; returns it."""
    path, tuned, text = _with_crossover(gpu, root)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return tuned["crossover"]


def results_table(gpu: str, Ts=(1, 8, 64), root: Root = None) -> str:
    """Markdown: per preset and T, time and fraction of the read ceiling for each method."""
    speed = data.speed_table(gpu, root)
    ceil = data.read(data.gpu_dir(gpu, root) / "ceiling.csv")
    meta = ceil[0] if ceil else {}
    methods = ["warp", "expert", "grouped_mm", "loop"]
    head = "| preset | T | " + " | ".join(methods) + " | warp speed-up over expert |"
    lines = [head, "|" + "---|" * (len(methods) + 3)]
    for preset in MODEL_PRESETS:
        if preset not in speed:
            continue
        for T in Ts:
            cells = []
            for m in methods:
                r = speed[preset].get(m, {}).get(T)
                cells.append(f"{r['median_us']:.1f} µs ({100 * r['frac_ceiling']:.0f}%)" if r else "–")
            w, e = speed[preset]["warp"].get(T), speed[preset]["expert"].get(T)
            ratio = f"{e['median_us'] / w['median_us']:.2f}×" if w and e else "–"
            lines.append(f"| {preset} | {T} | " + " | ".join(cells) + f" | {ratio} |")
    # each row's fraction is against the read ceiling of its own run (one per preset's process);
    # name them, per day, as the range they span
    runs: dict = {}
    for preset in speed:
        for m in methods:
            for T in Ts:
                r = speed[preset].get(m, {}).get(T)
                if r:
                    runs.setdefault(r["date"], {}).setdefault(m, set()).add(round(r["ceiling_TBps"], 2))
    every = sorted({c for by_m in runs.values() for cs in by_m.values() for c in cs})
    if len(every) <= 1:
        ceiling = f"the measured read ceiling ({every[0] if every else float('nan'):.2f} TB/s)"
    else:
        def span(cs):
            return f"{min(cs):.2f}" + (f"–{max(cs):.2f}" if max(cs) > min(cs) else "") + " TB/s"
        each = []
        for d, by_m in sorted(runs.items()):
            groups: dict = {}
            for m, cs in by_m.items():
                groups.setdefault(span(cs), []).append(m)
            each += [f"{', '.join(ms)}: {sp}, {d}" for sp, ms in groups.items()]
        ceiling = f"the read ceiling measured in the same run ({'; '.join(each)})"
    note = (f"\nMedian time per layer call, bf16, with the fraction of {ceiling} in brackets. "
            f"{meta.get('gpu', gpu)}, torch {meta.get('torch', '?')}, triton {meta.get('triton', '?')}. "
            f"Generated by `python -m bench report` from `results/{data.gpu_folder(gpu)}/speed.csv`.")
    return "\n".join(lines) + "\n" + note


def accuracy_table(gpu: str, root: Root = None) -> str:
    """Markdown: per method, the range of error / bf16 floor over every preset, T and seed."""
    rows = data.read(data.gpu_dir(gpu, root) / "accuracy.csv")
    by = defaultdict(list)
    for r in rows:
        by[r["method"]].append(float(r["error_over_floor"]))
    names = {"warp": "warp decode (FP32 intermediate)", "warp_bf16_act": "warp decode, intermediate rounded to bf16",
             "expert": "expert-centric (bf16)", "grouped_mm": "HF transformers grouped_mm",
             "loop": "eager expert loop", "expert_fp8": "expert-centric, FP8 activations"}
    lines = ["| method | error / floor: min | median | max |", "|---|---|---|---|"]
    for m in names:
        v = sorted(by.get(m, []))
        if v:
            lines.append(f"| {names[m]} | {v[0]:.2f} | {v[len(v) // 2]:.2f} | {v[-1]:.2f} |")
    presets = sorted({r["preset"] for r in rows})
    Ts = sorted({int(r["T"]) for r in rows})
    return "\n".join(lines) + (f"\n\nOver {len(presets)} presets, T in {Ts}, {len(rows) // max(1, len(by))} cases per "
                               f"method; `results/{data.gpu_folder(gpu)}/accuracy.csv`, generated by "
                               "`python -m bench report`.")


def headline(gpu: str, root: Root = None, preset: str = "qwen3-30b-a3b", T: int = 1) -> str:
    """The README's result in plain words: warp decode against the tuned expert-centric path on one
    layer at T tokens (speed.csv), both paths' error over the bf16 floor (accuracy.csv, the median
    over every preset and T), and the crossover where warp decode hands over (speed.csv's)."""
    speed = data.speed_table(gpu, root)
    w, e = speed[preset]["warp"][T], speed[preset]["expert"][T]
    acc = defaultdict(list)
    for r in data.read(data.gpu_dir(gpu, root) / "accuracy.csv"):
        acc[r["method"]].append(float(r["error_over_floor"]))
    med = {m: sorted(v)[len(v) // 2] for m, v in acc.items()}
    ratio = e["median_us"] / w["median_us"]
    crossovers = crossover_table(gpu, root)["crossover"]
    s = get_preset(preset)
    here = crossovers.get(shape_key(s.H, s.I, s.E, s.K))
    lo, hi = min(crossovers.values()), max(crossovers.values())
    span = f"T = {lo}" if lo == hi else f"T = {lo}–{hi}"
    tokens = "one token" if T == 1 else f"{T} tokens"
    return (f"On an {w.get('gpu', gpu)}, one {preset} layer at {tokens} per step takes {w['median_us']:.1f} µs "
            f"with warp decode and {e['median_us']:.1f} µs on the tuned expert-centric path: {ratio:.2f}× faster, "
            f"its weights moved at {w['frac_ceiling']:.0%} of the read bandwidth the GPU reaches. Its output is "
            f"about as close to the float64 result as a bf16 output can be: its error is {med['warp']:.2f}× that "
            f"of rounding the exact result once to bf16, the expert path's {med['expert']:.2f}× (medians over the "
            f"presets). Warp decode reads an expert's rows once per token routed to it, so it leads while few "
            f"tokens share an expert: up to T = {here} on this layer"
            f"{f', {span} on the {len(crossovers)} presets' if len(crossovers) > 1 else ''}. "
            f"Past that `method=\"auto\"` hands the layer to the expert-centric path, which reads them once for "
            f"all of its tokens. {vllm_sentence(gpu, root, preset)}`results/{data.gpu_folder(gpu)}/speed.csv`, "
            "`accuracy.csv`; generated by `python -m bench report`.")


#: The production engine's path the vLLM block compares with (``experiments/vllm_baseline.py``), and
#: the bar at T = 1: warp decode at least this many times faster than it.
VLLM_CSV = "vllm_baseline.csv"
VLLM_T1_BAR = 1.30
VLLM_T1_BAR_LAYERS = ("qwen3-30b-a3b", "olmoe-1b-7b")


def vllm_rows(gpu: str, root: Root = None) -> dict:
    """``vllm_baseline.csv`` as {(weights, triton, layer): {T: {variant: row}}}, a later row replacing
    an earlier one of the same key; {} without the CSV."""
    out: dict = {}
    for r in data.read(data.experiment_csv(gpu, VLLM_CSV, root)):
        out.setdefault((r["version"], r["triton"], r["preset"]), {}).setdefault(int(r["T"]), {})[r["variant"]] = r
    return out


def _vllm_over(cell: dict, method: str) -> float | None:
    """vLLM's time over ``method``'s in one (layer, T) cell: bf16's ``vllm`` or FP8's ``vllm w8a8``."""
    base = cell.get("vllm") or cell.get("vllm w8a8")
    return float(base["us"]) / float(cell[method]["us"]) if base and method in cell else None


def _layers(names) -> str:
    """How many of ``names`` are presets and how many other layers, in words."""
    presets = sum(name in MODEL_PRESETS for name in names)
    others = len(names) - presets
    return (f"{presets} preset{'s' * (presets != 1)}"
            + (f" and {others} other layer{'s' * (others != 1)}" if others else ""))


def vllm_sentence(gpu: str, root: Root = None, preset: str = "qwen3-30b-a3b") -> str:
    """The headline's comparison with vLLM's ``fused_moe`` (bf16, the lowest Triton release measured):
    at T = 1 on ``preset``, and ``auto``'s least ratio over every layer and T; "" without the data."""
    rows = {k: v for k, v in vllm_rows(gpu, root).items() if k[0] == "bf16"}
    if not rows:
        return ""
    triton = min({k[1] for k in rows}, key=lambda v: tuple(map(int, v.split("."))))
    mine = {k[2]: v for k, v in rows.items() if k[1] == triton}
    if 1 not in mine.get(preset, {}):
        return ""
    cell = mine[preset][1]
    auto = [(r, layer, T) for layer, byT in mine.items() for T, c in byT.items() if (r := _vllm_over(c, "auto"))]
    least, layer, T = min(auto)
    worst = mine[layer][T]
    fracs = f"{float(worst['auto']['frac_ceiling']):.0%} and {float(worst['vllm']['frac_ceiling']):.0%}"
    Ts = sorted({T for byT in mine.values() for T in byT})
    version = ast.literal_eval(cell["vllm"]["detail"])["vllm"]
    return (f"Against vLLM {version}'s Triton `fused_moe` on the same weights and timer, each captured in a CUDA "
            f"graph, warp decode takes {float(cell['warp']['us']):.1f} µs to vLLM's {float(cell['vllm']['us']):.1f} "
            f"({_vllm_over(cell, 'warp'):.2f}×), and `auto` is at least {least:.3f}× as fast as vLLM at every "
            f"T in {Ts[0]}…{Ts[-1]} on {_layers(mine)} (the least at {layer}, T = {T}, where the two read at "
            f"{fracs} of the read ceiling; triton {triton}; `experiments/results/{data.gpu_folder(gpu)}/"
            f"{VLLM_CSV}`). ")


def vllm_table(gpu: str, root: Root = None) -> str | None:
    """docs/results.md's comparison with vLLM's ``fused_moe`` (``experiments/vllm_baseline.py``): vLLM's
    time over ``auto``'s per weights, Triton release, layer and T; at T = 1 warp decode's time against
    vLLM's and against the two-launch bound (:func:`two_launch_bounds`); each method's error over the
    bf16 floor. None without the CSV."""
    rows = vllm_rows(gpu, root)
    if not rows:
        return None
    Ts = sorted({T for byT in rows.values() for T in byT})
    lines = ["| weights | Triton | layer | " + " | ".join(f"T = {T}" for T in Ts) + " |",
             "|---|---|---|" + "---|" * len(Ts)]
    for (weights, triton, layer), byT in sorted(rows.items()):
        cells = [f"{r:.2f}" if (r := _vllm_over(byT.get(T, {}), "auto")) else "" for T in Ts]
        lines.append(f"| {'bf16' if weights == 'bf16' else 'FP8 (vLLM: w8a8)'} | {triton} | {layer} | "
                     + " | ".join(cells) + " |")
    bounds = two_launch_bounds(gpu, root)
    lines += ["", f"| Triton | layer | vLLM µs | warp decode µs | vLLM / warp decode (bar {VLLM_T1_BAR:.2f}×: "
              f"{', '.join(VLLM_T1_BAR_LAYERS)}) | "
              "two-launch bound µs | warp decode / bound | vLLM / bound |", "|---|---|---|---|---|---|---|---|"]
    for (weights, triton, layer), byT in sorted(rows.items()):
        if weights != "bf16" or 1 not in byT:
            continue
        c = byT[1]
        v, w, b = float(c["vllm"]["us"]), float(c["warp"]["us"]), bounds.get(layer)
        r = v / w
        met = ("met" if r >= VLLM_T1_BAR else "missed") if layer in VLLM_T1_BAR_LAYERS else "no bar"
        lines.append(f"| {triton} | {layer} | {v:.2f} | {w:.2f} | {r:.2f}× ({met}) | "
                     + (f"{b['us']:.2f} | {w / b['us']:.3f}× | {v / b['us']:.2f}× |" if b else "— | — | — |"))
    errors = defaultdict(list)
    for (weights, _, _), byT in rows.items():
        for cell in byT.values():
            for variant, r in cell.items():
                if r["error_over_floor"]:  # blank: a bound, no output to check
                    errors[f"{variant} ({weights})"].append(float(r["error_over_floor"]))
    meta = [r for byT in rows.values() for c in byT.values() for r in c.values()]
    version = next(ast.literal_eval(r["detail"])["vllm"] for r in meta if r["variant"] in ("vllm", "vllm w8a8"))
    lines.append(
        "\nFirst table: vLLM's time over `warpdecode.moe(method=\"auto\")`'s, each called as a user calls it and "
        "captured in one CUDA graph over layer copies that hold the weights past L2, timed interleaved (median per "
        "layer call); above 1, warpdecode is faster. FP8: vLLM's w8a8 path (block-128 weights, activations "
        "quantized per group of 128) against `auto` on the same e4m3 bytes and scales with bf16 activations. "
        "Second table: T = 1, against the fastest read of the same bytes in two launches chained as warp decode's "
        "are (`one_launch_bound.csv`). Median error over the bf16 rounding floor: "
        + ", ".join(f"{k} {sorted(v)[len(v) // 2]:.2f}" for k, v in sorted(errors.items()))
        + f". {meta[0]['gpu']}, torch {meta[0]['torch']}, vLLM {version}, commit "
        f"{', '.join(sorted({r['commit'][:7] for r in meta}))}. Generated by `python -m bench report` from "
        f"`experiments/results/{data.gpu_folder(gpu)}/{VLLM_CSV}`.")
    return "\n".join(lines)


FP8_BOUND_CSV = "fp8_bound.csv"
#: fp8_bound.csv's variants: the shipped FP8 pair, its launches with no math, one read of the same FP8 bytes.
FP8_PAIR, FP8_NO_MATH, FP8_READ = "fp8 pair (default)", "no math, same launches", "read of the FP8 bytes"


def fp8_bound_table(gpu: str, root: Root = None) -> str | None:
    """docs/results.md's FP8 pair against its launch bound (``experiments/fp8_warp.py --version bound``): per
    layer and T the pair, the same launches with no math, one read of the same bytes, and vLLM's w8a8 time on
    the same layer and T where ``vllm_baseline.csv`` holds it (its latest FP8 row). None without the CSV."""
    rows = data.read(data.experiment_csv(gpu, FP8_BOUND_CSV, root))
    if not rows:
        return None
    by: dict = {}
    for r in rows:  # a later row of the same (layer, T, variant) replaces an earlier one
        by.setdefault((r["preset"], int(r["T"])), {})[r["variant"]] = r
    vllm = {(k[2], T): float(c["vllm w8a8"]["us"]) for k, byT in vllm_rows(gpu, root).items() if k[0] == "fp8"
            for T, c in byT.items() if "vllm w8a8" in c}
    lines = ["| layer | T | FP8 pair µs | no math, same launches µs | pair / no math | one read µs | "
             "vLLM w8a8 µs | vLLM / pair | vLLM / no math |", "|---|---|---|---|---|---|---|---|---|"]
    for (layer, T), c in sorted(by.items(), key=lambda kv: (kv[0][0] not in MODEL_PRESETS, kv[0])):
        if FP8_PAIR not in c or FP8_NO_MATH not in c:
            continue
        pair, bound = float(c[FP8_PAIR]["us"]), float(c[FP8_NO_MATH]["us"])
        read = f"{float(c[FP8_READ]['us']):.1f}" if FP8_READ in c else "—"
        v = vllm.get((layer, T))
        tail = f"{v:.1f} | {v / pair:.2f} | {v / bound:.2f} |" if v else "— | — | — |"
        lines.append(f"| {layer} | {T} | {pair:.1f} | {bound:.1f} | {pair / bound:.2f}× | {read} | " + tail)
    meta = next(iter(rows))
    lines.append(
        "\nThe FP8 pair (block128, default tiles) against the same two launches (grids, tiles, warps, PDL, the same "
        "loads of weights, scales, x and intermediate) with each loaded word summed as an integer in place of the "
        "math, and one read of the call's FP8 bytes, in one run (`experiments/fp8_warp.py --version bound`); vLLM's "
        "w8a8 time from its latest FP8 run on the same layer and T (`vllm_baseline.csv`, another run). "
        f"{meta['gpu']}, torch {meta['torch']}, triton {meta['triton']}. Generated by `python -m bench report` from "
        f"`experiments/results/{data.gpu_folder(gpu)}/{FP8_BOUND_CSV}` and `{VLLM_CSV}`.")
    return "\n".join(lines)


#: vllm_baseline.csv's FP8 variant timing the expert path's launches with no math in their GEMMs (their bound).
EXPERT_NO_MATH = "expert no math"
#: ... and the expert path with each weight tile one TMA copy (W_TMA), the change of loads beside that bound.
EXPERT_TMA = "expert tma"


def fp8_expert_bound_table(root: Root = None) -> str | None:
    """docs/results.md's FP8 expert path against its launch bound (``vllm_baseline.py --version fp8``), on every
    GPU whose ``vllm_baseline.csv`` has the rows: per layer and T where a run timed ``expert no math``, ``auto``
    and the expert path beside those launches and vLLM's w8a8, all in the same graphs. None without such rows."""
    rows = {}
    for folder in sorted((data.checkout(root) / "experiments" / "results").glob(f"*/{VLLM_CSV}")):
        gpu = folder.parent.name.replace("_", " ")
        rows.update({(gpu, k[1], k[2], T): c for k, byT in vllm_rows(gpu, root).items() if k[0] == "fp8"
                     for T, c in byT.items() if EXPERT_NO_MATH in c and "vllm w8a8" in c and "auto" in c})
    if not rows:
        return None
    lines = ["| GPU | Triton | layer | T | auto µs (path) | expert µs | no math, same launches µs | expert / no math | "
             "weight tiles by TMA µs | vLLM w8a8 µs | vLLM / auto | vLLM / no math |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for (gpu, triton, layer, T), c in sorted(rows.items(), key=lambda kv: (kv[0][0], kv[0][1],
                                                                          kv[0][2] not in MODEL_PRESETS, kv[0][2:])):
        auto, bound, v = (float(c[k]["us"]) for k in ("auto", EXPERT_NO_MATH, "vllm w8a8"))
        path = ast.literal_eval(c["auto"]["detail"] or "{}").get("method", "?")
        expert = float(c["expert"]["us"]) if "expert" in c else None
        tma = f'{float(c[EXPERT_TMA]["us"]):.1f}' if EXPERT_TMA in c else "—"
        lines.append(f"| {gpu} | {triton} | {layer} | {T} | {auto:.1f} ({path}) | "
                     + (f"{expert:.1f} | {bound:.1f} | {expert / bound:.2f}× | " if expert
                        else f"— | {bound:.1f} | — | ")
                     + f"{tma} | {v:.1f} | {v / auto:.2f} | {v / bound:.2f} |")
    torch = sorted({c[EXPERT_NO_MATH]["torch"] for c in rows.values()})
    lines.append(
        "\nThe FP8 expert path (block128 weights, bf16 activations given to the GEMMs as fp16 rows, the config "
        "`auto` runs) against the same six launches with each GEMM's math dropped: the same grids, tiles and "
        "loads of e4m3 weights and fp16 rows, every loaded word summed as an integer (checked bit for bit), the "
        "scales not read (`experiments/expert_knobs.py`); weight tiles by TMA: the expert path with `W_TMA` (each "
        "weight tile one TMA copy, vLLM's `USE_TMA_B`), the other loads the bound leaves. "
        "All timed in the same CUDA graphs as vLLM's w8a8 path, "
        "the latest run per GPU, layer and T. Where vLLM / no math is 1 or less, these launches with no math at "
        f"all take as long as vLLM's whole path or longer. torch {', '.join(torch)}. Generated by "
        f"`python -m bench report` from `experiments/results/<GPU>/{VLLM_CSV}`.")
    return "\n".join(lines)


#: The bar of every speed target: a fraction of the bound the row is measured against.
BAR = 0.85
AUTO_SLACK = 0.03
CEILING_SPREAD = 0.01  # read ceilings further apart than this: the rows were not measured on one GPU state

#: The kinds of ``one_launch_bound.csv`` a layer with warp decode's dependency can use at T = 1:
#: two launches chained with PDL, the second (down) holding its rows through the wait or reading
#: them after it. (The kind that uses its rows before the wait is faster, but a down kernel's rows
#: are of use only once the intermediate exists; the one-launch kinds are slower.)
LAYER_KINDS = ("two launches, PDL, the second holding its rows through the wait",
               "two launches, PDL, the second reading its rows after the wait")


def two_launch_bounds(gpu: str, root: Root = None) -> dict[str, dict]:
    """Per preset: the fastest of :data:`LAYER_KINDS` in ``one_launch_bound.csv``'s latest run that
    timed them (:func:`one_launch_bound`), the least time a T = 1 call with warp decode's dependency takes on
    this GPU. {} without the CSV."""
    out: dict = {}
    for r in one_launch_bound(gpu, root, kinds=LAYER_KINDS):
        if r["kind"] in LAYER_KINDS and (r["preset"] not in out or r["frac"] > out[r["preset"]]["frac"]):
            out[r["preset"]] = r
    return out


def targets(gpu: str, root: Root = None) -> list[dict]:
    """Each speed target, checked against speed.csv: the target, the bound it is measured against,
    what was measured as a fraction of that bound, met or not.

    - every preset, T = 1…8: warp ≥ 85 % of the read ceiling, except
    - T = 1 on the presets ``one_launch_bound.csv`` measured (the small layers, where two launches'
      fixed cost is a large share of the call): warp ≥ 85 % of the bound of two dependent
      launches (:func:`two_launch_bounds`), both as fractions of their own run's read ceiling
    - every preset, T ≥ 32: expert ≥ 85 % of the read ceiling
    - every preset and T: auto within 3 % of the faster of warp and expert
    """
    speed = data.speed_table(gpu, root)
    bounds = two_launch_bounds(gpu, root)
    out = []

    def frac(preset, method, T):
        r = speed.get(preset, {}).get(method, {}).get(T)
        return r["frac_ceiling"] if r else None

    def pct(f):
        return f"{100 * f:.0f}%"

    ceiling = "read ceiling"
    for preset in MODEL_PRESETS:
        if preset not in speed:
            continue
        b, w1 = bounds.get(preset), speed[preset].get("warp", {}).get(1)
        if b and w1:
            of = w1["frac_ceiling"] / b["frac"]
            out.append({"target": f"{preset}, T=1: warp ≥ 85 % of the two-launch bound",
                        "bound": f"two dependent launches: {b['us']:.1f} µs, {pct(b['frac'])} of its run's ceiling "
                                 f"(`{b['source']}`)",
                        "measured": f"{pct(of)} ({w1['median_us']:.1f} µs, {pct(w1['frac_ceiling'])} of the ceiling)",
                        "met": of >= BAR, "of_bound": of})
        first = 2 if b and w1 else 1
        warp = [(T, frac(preset, "warp", T)) for T in (1, 2, 4, 8)
                if T >= first and frac(preset, "warp", T) is not None]
        if warp:
            Ts = ",".join(str(T) for T, _ in warp)
            out.append({"target": f"{preset}, T={first}…8: warp ≥ 85 %", "bound": ceiling,
                        "measured": " / ".join(pct(f) for _, f in warp) + f" (T={Ts})",
                        "met": all(f >= BAR for _, f in warp)})
        big = sorted(T for T in speed[preset].get("expert", {}) if T >= 32)
        if big:
            fr = [frac(preset, "expert", T) for T in big]
            out.append({"target": f"{preset}, T≥32: expert ≥ 85 %", "bound": ceiling,
                        "measured": " / ".join(pct(f) for f in fr) + f" (T={','.join(map(str, big))})",
                        "met": all(f >= BAR for f in fr)})
        over, ceilings = [], []
        for T, a in speed[preset].get("auto", {}).items():
            rows = [a] + [speed[preset][m][T] for m in ("warp", "expert") if T in speed[preset].get(m, {})]
            over.append(a["median_us"] / min(r["median_us"] for r in rows[1:]) - 1)
            ceilings += [r["ceiling_TBps"] for r in rows]
        if over:
            # auto is timed in a later run than the paths it chooses between (the crossover comes
            # from their rows); a run on another GPU of the same model shows in its read ceiling
            spread = max(ceilings) / min(ceilings) - 1
            note = f"; rows from runs whose read ceilings differ by {spread:.1%}" if spread > CEILING_SPREAD else ""
            out.append({"target": f"{preset}, every T: auto within 3 % of the faster path",
                        "bound": "the faster of warp and expert",
                        "measured": f"worst {max(over):+.1%} over {len(over)} T{note}", "met": max(over) <= AUTO_SLACK})
    return out


def _label(*starts: str, having: str = "", without: str | None = None):
    """A test of a row's label: it starts with one of ``starts``, holds ``having``, not ``without``."""
    return lambda lb: lb.startswith(starts) and having in lb and not (without and without in lb)


# The designs that put warp decode's two phases into one launch, or moved the down phase into the
# gate/up phase's time (experiments/README.md): (version, what it does, CSV, which labels are the
# design's rows, which the shipped pair's). Each CSV holds the shipped pair measured in the same runs.
ONE_LAUNCH_ATTEMPTS = [
    ("v6", "one pass, down through FP32 atomics", "warp_atomic.csv", _label("atomic"), _label("split")),
    ("v8", "one launch, down after every gate/up program", "ordered_launch.csv", _label("one launch"), _label("pair")),
    ("v13", "down's whole w2 tile in registers before the wait", "down_preload.csv", _label("preload"),
     _label("shipped")),
    ("v14", "down split over I, each chunk started when written", "chunk_flags.csv", _label("chunked"),
     _label("shipped")),
    ("v15", "down's whole w2 tile into shared memory (TMA, cp.async)", "down_tma.csv",
     _label("tma", "{'kind': 'cp.async'"), _label("shipped")),
    ("v16", "one launch, down takes the experts as gate/up ends them", "expert_order.csv", _label("one launch"),
     _label("shipped")),
    ("v16b", "v16's down as its own kernel, never waiting for gate/up", "expert_order.csv",
     _label("two kernels", without="'seg'"), _label("shipped")),
    ("v16c", "v16b's down by segments of experts, pipelined loads", "expert_order.csv",
     _label("two kernels", having="'seg'"), _label("shipped")),
]


def one_launch_attempts(gpu: str, T: int = 1, root: Root = None) -> list[dict]:
    """Per preset and design: its best measured time against the shipped pair measured in the same
    runs (the mean of the pair's rows in that CSV), and the 85 % bar as a time, from the same rows'
    floor. Also v4 (the persistent kernel), from the tuned table's times of both schedules. ``rows``:
    the design's rows in its CSV (v8's CSV keeps only the best of the 74 configs it timed, the tuned
    table only the tuner's best), not how many configs were tried."""
    out = []
    for version, what, name, cand, pair in ONE_LAUNCH_ATTEMPTS:
        rows = [r for r in data.read(data.experiment_csv(gpu, name, root)) if int(r["T"]) == T]
        for preset in [p for p in MODEL_PRESETS if any(r["preset"] == p for r in rows)]:
            here = [r for r in rows if r["preset"] == preset]
            label = [r.get("variant") or r.get("kind", "") for r in here]
            tried = [r for r, lb in zip(here, label, strict=True) if cand(lb)]
            shipped = [r for r, lb in zip(here, label, strict=True) if pair(lb)]
            if not tried or not shipped:
                continue
            best = min(tried, key=lambda r: float(r["us"]))
            pair_us = sum(float(r["us"]) for r in shipped) / len(shipped)
            floor_us = float(best["frac_ceiling"]) * float(best["us"])
            out.append({"preset": preset, "T": T, "version": version, "design": what, "best_us": float(best["us"]),
                        "pair_us": pair_us, "bar_us": floor_us / BAR, "rows": len(tried), "source": name})
    tuned = tuned_path(gpu, root)
    speed = data.speed_table(gpu, root)
    for preset, buckets in _warp_buckets(tuned):
        cfg = next((c for t_max, c in buckets if T <= t_max), None)
        row = speed.get(preset, {}).get("warp", {}).get(T)
        if cfg and "fused" in cfg.get("measured_us", {}) and row:
            m = cfg["measured_us"]
            out.append({"preset": preset, "T": T, "version": "v4", "design": "persistent kernel, grid barrier",
                        "best_us": m["fused"], "pair_us": m["split"], "bar_us": row["floor_us"] / BAR, "rows": 1,
                        "source": f"tuned/{tuned.name}"})
    order = ["v4"] + [v for v, *_ in ONE_LAUNCH_ATTEMPTS]
    return sorted(out, key=lambda r: (MODEL_PRESETS.index(r["preset"]), order.index(r["version"])))


def one_launch_bound(gpu: str, root: Root = None, kinds=("read",)) -> list[dict]:
    """The one-launch bound experiment's latest run that timed ``kinds`` (``one_launch_bound.csv``, its
    ``run`` column; rows of other runs, or without the column, are left out; by default the latest
    run with the plain read, the experiment's reference): per preset and kind (a read of a T = 1
    call's bytes, alone or with a way to wait for the other programs, in one launch or two), the
    fastest of the program shapes timed, and how many were. [] without the CSV."""
    path = data.experiment_csv(gpu, "one_launch_bound.csv", root)
    source = path.relative_to(data.checkout(root)).as_posix()
    rows = [r for r in data.read(path) if int(r["T"]) == 1]
    latest = max((r.get("run") or "" for r in rows if r["variant"] in kinds), default="")
    rows = [r for r in rows if (r.get("run") or "") == latest]
    out = []
    for preset in [p for p in MODEL_PRESETS if any(r["preset"] == p for r in rows)]:
        here = [r for r in rows if r["preset"] == preset]
        for kind in dict.fromkeys(r["variant"] for r in here):
            mine = [r for r in here if r["variant"] == kind]
            best = min(mine, key=lambda r: float(r["us"]))
            shape = ast.literal_eval(best["config"])  # the experiments' schema: the program shape as a dict
            out.append({"preset": preset, "kind": kind, "us": float(best["us"]), "frac": float(best["frac_ceiling"]),
                        "bar_us": float(best["floor_us"]) / BAR, "rows": int(shape["rows"]),
                        "num_warps": int(shape["num_warps"]), "programs": int(shape["programs"]), "timed": len(mine),
                        "run": latest, "ceiling_TBps": float(best["ceiling_TBps"]), "source": source})
    return out


def _warp_buckets(path: Path):
    """(preset, the warp table's buckets) for each preset the tuned table holds."""
    table = json.loads(path.read_text()).get("warp", {}) if path.exists() else {}
    for preset in MODEL_PRESETS:
        s = get_preset(preset)
        key = shape_key(s.H, s.I, s.E, s.K)
        if table.get(key):
            yield preset, table[key]


def targets_table(gpu: str, root: Root = None) -> str:
    """Markdown: each target of :func:`targets`, the bound it is measured against, the measured
    fraction of that bound, met or not."""
    rows = targets(gpu, root)
    lines = ["| target | measured against | measured (fraction of that bound) | met |", "|---|---|---|---|"]
    lines += [f"| {r['target']} | {r['bound']} | {r['measured']} | {'yes' if r['met'] else '**no**'} |" for r in rows]
    met = sum(r["met"] for r in rows)
    sources = sorted({f"`{b['source']}`" for b in two_launch_bounds(gpu, root).values()})
    return "\n".join(lines) + (f"\n\n{met} of {len(rows)} met. From `results/{data.gpu_folder(gpu)}/speed.csv`"
                               + (f" and {', '.join(sources)}" if sources else "")
                               + ", generated by `python -m bench report`.")


def schedules_table(gpu: str, root: Root = None) -> str | None:
    """Warp decode's schedule per preset and token bucket, from the tuned table: the one
    ``moe_warp`` runs (``warp.schedule_of``) and the tuner's times of every schedule it timed there
    (µs per layer call, its own routing draw)."""

    path = tuned_path(gpu, root)
    rows, t_max = [], []
    for name, buckets in _warp_buckets(path):
        t_max = t_max or [t for t, _ in buckets]
        cells = []
        for _, cfg in buckets:
            runs = schedule_of(cfg)
            us = cfg.get("measured_us", {})
            others = ", ".join(f"{k} {us[k]:.1f}" for k in TIMED if k != runs and k in us)
            cells.append(f"**{runs}** {us[runs]:.1f}" + (f" ({others})" if others else "") if runs in us else runs)
        rows.append(f"| {name} | " + " | ".join(cells) + " |")
    if not rows:
        return None
    head = "| preset | " + " | ".join(f"T ≤ {t}" for t in t_max) + " |"
    where = f"warpdecode/tuned/{path.name}"
    caption = (f"The schedule warp decode runs in each token bucket on the {gpu} (bold), with the tuner's "
               "time for it and for the schedules it was weighed against: µs per layer call on the tuner's "
               "routing draw, each from that schedule's last tune (`grouped` is kept only where it wins over "
               f"two draws by ≥ 1 %, so it can show faster and not run). From `{where}`, generated by "
               "`python -m bench report`.")
    return "\n".join([head, "|---|" + "---|" * len(t_max), *rows, "", caption])


def amdahl(share: float, speedup: float) -> float:
    """Amdahl's law: the whole's speed-up when a part that takes ``share`` of its time runs
    ``speedup`` times faster and the rest does not change."""
    return 1 / ((1 - share) + share / speedup)


def e2e_table(gpu: str, dense: str = "eager", root: Root = None) -> list[dict]:
    """Each decode step of e2e_speed.csv measured with both expert and warp, beside the same step's
    MoE layers replayed alone in the same run (``moe_us``: same process, same weights, same GPU, so
    no comparison crosses runs):

    - ``moe_share``: the expert-centric step's MoE layers / that step's time
    - ``layer_speedup``: expert / warp MoE layers alone
    - ``predicted_speedup``: :func:`amdahl` of the two; ``measured_speedup``: expert step / warp step
    - ``rest_us``: what the expert-centric step spends outside its MoE layers

    ``moe_expert_us`` and ``moe_warp_us`` are per layer; the layer columns are None where a row has no
    ``moe_us``."""
    rows = []
    for (model, layers, ctx), by_method in data.e2e_speed_table(gpu, dense, root).items():
        for T in sorted(set(by_method.get("expert", {})) & set(by_method.get("warp", {}))):
            e, w = by_method["expert"][T], by_method["warp"][T]
            se, sw = e["step_us"], w["step_us"]
            auto = by_method.get("auto", {}).get(T)
            row = {"model": model, "layers": layers, "ctx": ctx, "T": T, "expert_step_us": se, "warp_step_us": sw,
                   "auto_step_us": auto["step_us"] if auto else None, "measured_speedup": se / sw,
                   "moe_expert_us": None, "moe_warp_us": None, "moe_share": None, "layer_speedup": None,
                   "predicted_speedup": None, "rest_us": None}
            if e["moe_us"] and w["moe_us"]:
                share = e["moe_us"] / se
                row.update(moe_expert_us=e["moe_us"] / layers, moe_warp_us=w["moe_us"] / layers, moe_share=share,
                           layer_speedup=e["moe_us"] / w["moe_us"],
                           predicted_speedup=amdahl(share, e["moe_us"] / w["moe_us"]), rest_us=se - e["moe_us"])
            rows.append(row)
    return rows


def generate_table(gpu: str, root: Root = None) -> str | None:
    """hf_generate.csv's compiled static-cache rows as markdown: per model and batch, the deepest
    run holding both experts implementations, each measured in processes of its own (both rows of one
    run: warpdecode's carries the speed-up over grouped_mm and Amdahl's prediction from grouped_mm's
    measured expert share); runs that measured both in one process, where the second is slowed, are
    left out; None where no such run exists."""
    compiled = [r for r in data.read(data.gpu_dir(gpu, root) / "hf_generate.csv") if r["compile"] == "reduce-overhead"]
    deepest: dict = {}
    for r in compiled:
        key = (r["model"], int(r["batch"]))
        if r["impl"] == "warpdecode" and r.get("speedup_over_grouped_mm") and r.get("processes") and \
                (key not in deepest or int(r["layers"]) >= int(deepest[key]["layers"])):
            deepest[key] = r
    if not deepest:
        return None
    grouped = {(r["model"], r["layers"], r["batch"]): r for r in compiled if r["impl"] == "grouped_mm"}
    bound = {(r["model"], r["layers"], r["batch"], r.get("commit")): r for r in compiled if r["impl"] == "no_experts"}
    lines = ["| model | layers | batch | warpdecode tok/s | grouped_mm tok/s | speed-up | Amdahl predicts | "
             "grouped_mm expert share | no experts (bound) tok/s | processes | commit |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for (model, batch), w in sorted(deepest.items()):
        g = grouped[(model, w["layers"], w["batch"])]
        b = bound.get((model, w["layers"], w["batch"], w.get("commit")))
        bound_cell = (f"{float(b['tokens_per_s']):.1f} ({float(b['tokens_per_s']) / float(g['tokens_per_s']):.2f}×)"
                      if b and w.get("commit") else "—")
        runs = f"one per implementation, {w['processes']} each"
        lines.append(f"| {model.removesuffix(' shapes')} | {w['layers']} | {batch} | {float(w['tokens_per_s']):.1f} | "
                     f"{float(g['tokens_per_s']):.1f} | {float(w['speedup_over_grouped_mm']):.2f}× | "
                     f"{float(w['amdahl_predicted']):.2f}× | {100 * float(g['moe_share']):.0f}% | {bound_cell} | "
                     f"{runs} | {(w.get('commit') or '—')[:7]} |")
    first = next(iter(deepest.values()))
    lines.append(f"\nTokens per second of compiled static-cache `generate` (`CompileConfig(fullgraph=True, "
                 f"mode=\"reduce-overhead\")`), random weights of each model's shapes. {first['gpu']}, torch "
                 f"{first['torch']}, triton {first['triton']}, transformers {first['transformers']}. Generated by "
                 f"`python -m bench report` from `results/{data.gpu_folder(gpu)}/hf_generate.csv`.")
    return "\n".join(lines)


#: The defaults reports (``experiments/defaults.py``) the defaults block of docs/results.md summarizes, one per
#: Triton release: each a list of ``experiments/results/<GPU>/`` files, a later file's rows replacing
#: an earlier one's of the same shape, T, method and tables (a rerun of some rows).
DEFAULTS_REPORTS = (("defaults.csv", "defaults_t256.csv"), ("defaults_triton38_tuned.csv",))

#: The bars the defaults block reports against: defaults within 10 % of tuned, the expert path at
#: :data:`BAR` of the read ceiling at T ≥ 32, ``auto`` within 5 % of the faster path without tables
#: and within :data:`AUTO_SLACK` with them.
DEFAULTS_BARS = {"defaults": 1.10, "expert_frac": BAR, "auto_off": 1.05, "auto_tuned": 1 + AUTO_SLACK}


def _worst(values, pick=max):
    """(value, where) of the worst of ``values`` ((where, value) pairs, None values left out), or None."""
    got = [(v, where) for where, v in values if v is not None]
    return pick(got) if got else None


def defaults_summary(gpu: str, root: Root = None) -> list[dict]:
    """Per defaults report (:data:`DEFAULTS_REPORTS`): its release, shapes and T's, and per figure of
    the bar the worst row with where it is (shape, T): warp decode's and the expert path's defaults
    over their tuned time, the expert path's lowest share of the read ceiling at T ≥ 32 (defaults),
    and ``auto``'s time over the faster of its two paths, without tables and with them."""
    out = []
    for files in DEFAULTS_REPORTS:
        rows: dict = {}
        for name in files:
            for r in data.read(data.experiment_csv(gpu, name, root)):
                rows[(r["preset"], int(r["T"]), r["method"], r["tables"])] = r
        if not rows:
            continue
        us = {k: float(r["median_us"]) for k, r in rows.items()}
        cells = sorted({(p, T) for p, T, _, _ in rows})

        def off_over_tuned(p, T, method, us=us):
            a, b = us.get((p, T, method, "off")), us.get((p, T, method, "tuned"))
            return a / b if a and b else None

        def auto_over(p, T, tables, us=us):
            paths = [us[k] for m in ("warp", "expert") if (k := (p, T, m, tables)) in us]
            a = us.get((p, T, "auto", tables))
            return a / min(paths) if a and paths else None

        first = next(iter(rows.values()))
        out.append({
            "triton": first["triton"], "torch": first["torch"], "gpu": first["gpu"], "files": files,
            "shapes": len({p for p, _ in cells}), "T": sorted({T for _, T in cells}),
            "warp": _worst([((p, T), off_over_tuned(p, T, "warp")) for p, T in cells]),
            "expert": _worst([((p, T), off_over_tuned(p, T, "expert")) for p, T in cells]),
            "expert_frac": _worst([((p, T), float(rows[(p, T, "expert", "off")]["frac_ceiling"])) for p, T in cells
                                   if T >= 32 and (p, T, "expert", "off") in rows], pick=min),
            "auto_off": _worst([((p, T), auto_over(p, T, "off")) for p, T in cells]),
            "auto_tuned": _worst([((p, T), auto_over(p, T, "tuned")) for p, T in cells]),
        })
    return out


def defaults_table(gpu: str, root: Root = None) -> str | None:
    """:func:`defaults_summary` as markdown, one row per Triton release; None without a report."""
    summary = defaults_summary(gpu, root)
    if not summary:
        return None

    def cell(got, fmt):
        return f"{fmt(got[0])} ({got[1][0]} T = {got[1][1]})" if got else "–"

    times, pct = (lambda v: f"{v:.3f}×"), (lambda v: f"{100 * v:.1f} %")
    b = DEFAULTS_BARS
    # the expert path's own launches with no math (experiments/expert_path.py --version bound), per shape and T
    bounds = data.read(data.experiment_csv(gpu, "expert_bound.csv", root))
    no_math = {(r["preset"], int(r["T"])): r for r in bounds if r["variant"] == "no math default"}

    def expert_cell(got):
        text = cell(got, pct)
        if got and got[0] < b["expert_frac"] and got[1] in no_math:
            bound = no_math[got[1]]
            text += (f"; its launches with no math: {pct(float(bound['frac_ceiling']))} (Triton {bound['triton']}, "
                     "`expert_bound.csv`)")
        return text

    lines = [f"| Triton | layer shapes | T | warp decode's defaults / tuned (bar {b['defaults']:.2f}×) | "
             f"expert path's defaults / tuned (bar {b['defaults']:.2f}×) | expert path at T ≥ 32, lowest share "
             f"of the read ceiling (bar {100 * b['expert_frac']:.0f} %) | `auto` / faster path, no tables "
             f"(bar {b['auto_off']:.2f}×) | `auto` / faster path, tuned tables (bar {b['auto_tuned']:.2f}×) |",
             "|---|---|---|---|---|---|---|---|"]
    for s in summary:
        lines.append(f"| {s['triton']} | {s['shapes']} | {s['T'][0]}…{s['T'][-1]} | {cell(s['warp'], times)} | "
                     f"{cell(s['expert'], times)} | {expert_cell(s['expert_frac'])} | {cell(s['auto_off'], times)} | "
                     f"{cell(s['auto_tuned'], times)} |")
    first = summary[0]
    sources = "; ".join(", ".join(f"`{n}`" for n in s["files"]) + f" (Triton {s['triton']})" for s in summary)
    lines.append(f"\nThe worst row of each defaults report (`experiments/defaults.py`: each shape and T timed with "
                 f"every table switched off and with the tuned tables; warp decode's entries and the crossovers "
                 f"tuned on that release, the expert path's tiles on 3.6, which hold on 3.8), with the shape and T "
                 f"where it is. {first['gpu']}, torch {first['torch']}. From "
                 f"`experiments/results/{data.gpu_folder(gpu)}/`: {sources}; generated by "
                 "`python -m bench report`.")
    return "\n".join(lines)


def _replace_block(text: str, name: str, body: str) -> str:
    start, end = f"<!-- {name}:start -->", f"<!-- {name}:end -->"
    block = f"{start}\n{body}\n{end}"
    return re.sub(re.escape(start) + ".*?" + re.escape(end), lambda _: block, text, flags=re.S)


#: The data every generated block and figure needs; without any of it, report writes nothing.
REQUIRED = ("speed.csv", "accuracy.csv", "ceiling.csv", "stages.csv")


def require_data(gpu: str, root: Root = None, needed=REQUIRED) -> None:
    """Raise :class:`NoData` unless every file of ``needed`` holds rows for ``gpu``."""
    root = data.checkout(root)
    folder = data.gpu_dir(gpu, root)
    missing = [n for n in needed if not data.read(folder / n)]
    if missing:
        have = sorted(p.parent.name.replace("_", " ") for p in (root / "results").glob("*/speed.csv"))
        raise NoData(f"no benchmark data for {gpu!r}: {folder} lacks {', '.join(missing)}. Nothing was written. "
                     f"This checkout has results for: {', '.join(repr(g) for g in have) or 'no GPU'} (pick one "
                     "with --gpu), or run `python -m bench bench` on that GPU first.")


def figures(gpu: str, *, root: Root = None, out=None) -> list[Path]:
    """Draw every figure whose CSV is there (``bench.plots``, from the tables here; the
    end-to-end ones only once ``python -m bench e2e`` ran) into ``figures/``, or ``out``."""
    from bench import plots  # matplotlib: the `notebooks` extra

    root = data.checkout(root)
    kw = dict(root=root, out=out)
    drawn = [plots.headline(gpu, **kw), plots.fraction_of_ceiling(gpu, **kw), plots.stage_breakdown(gpu, **kw),
             plots.accuracy(gpu, **kw)]
    if (attempts := plots.one_launch_attempts(gpu, one_launch_attempts(gpu, root=root), **kw)) is not None:
        drawn.append(attempts)
    if data.e2e_speed_table(gpu, root=root):
        drawn.append(plots.e2e_speed(gpu, e2e_table(gpu, root=root), **kw))
    if data.e2e_errors_run(gpu, root=root):
        drawn.append(plots.e2e_errors(gpu, **kw))
    return drawn


def readme_blocks(gpu: str, root: Root = None) -> dict[str, tuple[str, str] | None]:
    """The generated blocks of README.md and docs/results.md, as {name: (markdown, what it is
    generated from)}; None for a block there is nothing to fill with (no tuned table for the
    schedules, no compiled generate run for the generate table)."""
    folder = f"results/{data.gpu_folder(gpu)}"
    bounds = sorted({b["source"] for b in two_launch_bounds(gpu, root).values()})
    schedules = schedules_table(gpu, root)
    generate = generate_table(gpu, root)
    defaults = defaults_table(gpu, root)
    vllm = vllm_table(gpu, root)
    fp8_bound = fp8_bound_table(gpu, root)
    expert_bound = fp8_expert_bound_table(root)
    return {
        "headline": (headline(gpu, root), f"{folder}/speed.csv, accuracy.csv"),
        "results": (results_table(gpu, root=root), f"{folder}/speed.csv, ceiling.csv"),
        "accuracy": (accuracy_table(gpu, root), f"{folder}/accuracy.csv"),
        "targets": (targets_table(gpu, root), ", ".join([f"{folder}/speed.csv", *bounds])),
        "schedules": (schedules, f"warpdecode/tuned/{tuned_path(gpu, root).name}") if schedules else None,
        "generate": (generate, f"{folder}/hf_generate.csv") if generate else None,
        "defaults": (defaults, f"experiments/{folder}/defaults*.csv") if defaults else None,
        "vllm": (vllm, f"experiments/{folder}/{VLLM_CSV}") if vllm else None,
        "fp8_bound": (fp8_bound, f"experiments/{folder}/{FP8_BOUND_CSV}, {VLLM_CSV}") if fp8_bound else None,
        "fp8_expert_bound": (expert_bound, f"experiments/results/*/{VLLM_CSV}") if expert_bound else None,
    }


def main(gpu: str = "NVIDIA H200", root: Root = None, *, dry_run: bool = False, log=print) -> list[Path]:
    """Regenerate the checkout's derived files from its CSV: the crossover in the tuned table, the
    generated blocks of README.md and docs/results.md, and the figures. Everything is computed
    before anything is written, so a failure (no data for ``gpu``: :class:`NoData`) leaves the
    checkout as it was. Says what it writes, through ``log``; ``dry_run``: says it and writes
    nothing. Returns the files written."""
    root = data.checkout(root)
    require_data(gpu, root)

    def rel(path: Path) -> str:
        return path.relative_to(root).as_posix() if path.is_relative_to(root) else str(path)

    writes: list[tuple[Path, str | bytes, str]] = []  # (path, content, what it is)
    path, tuned, text = _with_crossover(gpu, root)
    writes.append((path, text, f"the auto crossover {tuned['crossover']}"))

    # each block goes where its marker is: the headline on the front page, the tables in docs/results.md
    pages = [p for p in (data.readme(root), root / "docs" / "results.md") if p.exists()]
    texts = {p: p.read_text() for p in pages}
    said: dict = {p: [] for p in pages}
    for name, block in readme_blocks(gpu, root).items():
        page = next((p for p in pages if f"<!-- {name}:start -->" in texts[p]), None)
        if block is None:
            said[page or pages[0]].append(f"  block {name}: nothing to fill it with (no data for it on {gpu}); "
                                          "left as it is")
        elif page is None:
            said[pages[0]].append(f"  block {name}: no page has a <!-- {name}:start --> marker "
                                  f"({', '.join(rel(p) for p in pages)}); not written")
        else:
            texts[page] = _replace_block(texts[page], name, block[0])
            said[page].append(f"  block {name}: from {block[1]}")
    for page in pages:
        writes.append((page, texts[page], f"{rel(page)}'s generated blocks:\n" + "\n".join(said[page])))

    with tempfile.TemporaryDirectory() as scratch:
        try:
            from bench import plots  # noqa: F401  (figures draws with it)
        except ImportError as e:  # matplotlib is an extra
            log(f"figures skipped: {e}")
        else:
            folder = data.figures_dir(root)
            for drawn in figures(gpu, root=root, out=Path(scratch)):
                writes.append((folder / Path(drawn).name, Path(drawn).read_bytes(), "a figure"))

        log(targets_table(gpu, root))
        written = []
        for path, content, what in writes:
            before = path.read_bytes() if path.exists() else None
            now = content.encode() if isinstance(content, str) else content
            verb = "would write" if dry_run else "wrote"
            if before == now:
                log(f"unchanged {rel(path)} ({what.splitlines()[0]})")
                continue
            log(f"{verb} {rel(path)}: {what}")
            if not dry_run:
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_bytes(now)
                written.append(path)
    return written
