"""FP8 weights on a GPU: speed against the FP8 byte floor, error against float64, and the figures
of issue 23's bar, as tidy CSV.

    python -m bench.fp8 --what speed accuracy layers [--phase warp auto lesson] [--presets ...] [--out DIR]
    python -m bench.fp8 --what table --gpu "NVIDIA H200" --out results/NVIDIA_H200   # no GPU needed

speed (``fp8_speed.csv``): per preset and T, warp decode with bf16 weights (the tuned pair's
kernels), warp decode with FP8 weights in both formats (the pair's kernels at the default tiles and
at the fastest of a few candidates at T = 1, tried here: ``config`` = ``default`` / ``searched``),
the expert path with FP8 weights (weight-only and w8a8), ``auto`` with FP8 weights, and warp decode's
grouped schedule asked for (``grouped``). ``warp``, ``expert``, ``auto``, ``grouped`` and ``expert_w8a8``
with ``config`` ``moe`` are ``warpdecode.moe`` as users call it (the auto and lesson phases); the auto
phase times each beside its bare kernels (``<method>_kernels`` rows, the public row's ``overhead``:
public / kernels, one interleaved run).
Each time is the median of CUDA-graph replays over enough copies of the layer that one step's
weights are ≥ 3× the L2; the floor is the bytes that must move (each routed expert's weights and
scales once, x, y, routing) at the read ceiling measured in the same run. accuracy
(``fp8_accuracy.csv``): each method's error against float64 on the dequantized weights, over that
layer's bf16 floor, the bf16 warp pair's on the bf16 weights beside it, and the weights' own
quantization cost (the FP8 layer's float64 result against the bf16 layer's). layers
(``fp8_layers.csv``): the same comparison across a model's layers (:func:`layer_errors`). Every row
names the GPU, versions, the commit measured and date. The figures of the bar are
printed at the end (:func:`figures`), from the rows alone. table: the tuned table's FP8 warp
entries from the warp phase's rows (:func:`tuned_entries`).
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import statistics
import sys
import time
from functools import partial
from pathlib import Path

import torch

from bench import data
from bench.sweep import meta
from bench.timing import capture_poisoned, read_ceiling, time_interleaved, time_replays
from warpdecode import api, configs, quant
from warpdecode.api import run_auto
from warpdecode.configs import shape_key
from warpdecode.expert import moe_expert
from warpdecode.presets import MODEL_PRESETS, get_preset
from warpdecode.reference import reference_moe, rel_error, rounding_floor
from warpdecode.routing import route
from warpdecode.warp import moe_warp
from warpdecode.workload import LayerInputs, l2_bytes

#: Where the layers live (tests drive the sweep's code on the CPU interpreter with "cpu").
DEVICE = "cuda"

SPEED_T = (1, 2, 4, 8, 16, 32, 64, 128, 256)
WARP_T = (1, 2, 4, 8)  # where the bar compares FP8 warp decode with bf16 warp decode
LESSON_T = (1, 8, 64)
BAR = {"speedup": 1.6, "warp_error_over_floor": 1.1, "auto_over_faster": 1.05}

#: The FP8 pair's candidate tiles, tried at T = 1 on each preset (the default is always among them).
#: Gate/up: one row on one warp (the defaults), and two or four rows per program, which share the
#: step's x and its address and mask arithmetic (``experiments/fp8_warp.py --version count``: fewer
#: instructions per weight byte); down: the defaults' tiles, a warp over each row.
CANDIDATES = [
    {"gate_up": {"BLOCK_I": bi, "BLOCK_H": bh, "num_warps": w, "num_stages": 1},
     "down": {"BLOCK_H": dh, "BLOCK_I": di, "num_warps": dw, "num_stages": 1}}
    for bi, bh, w in ((1, 1024, 1), (1, 2048, 1), (2, 1024, 1), (4, 512, 1), (4, 1024, 1), (4, 1024, 2))
    for dh, di, dw in ((4, 512, 4), (8, 512, 4), (4, 1024, 2))
]


#: The searched tiles (``warp_<format>``: one bucket, T ≤ 8) and the measured crossover
#: (``crossover_block128``, from the auto phase), as a tuned table's families, written beside the
#: CSVs as ``fp8_tuned.json`` for merging into ``warpdecode/tuned/<GPU>.json``.
SEARCHED: dict = {}


def tiles_name(cfg: dict) -> str:
    gu, dn = cfg["gate_up"], cfg["down"]
    return f"gu{gu['BLOCK_I']}x{gu['BLOCK_H']}w{gu['num_warps']}-dn{dn['BLOCK_H']}x{dn['BLOCK_I']}w{dn['num_warps']}"


def make_inputs(shape, T: int, n: int, *, seed: int) -> list[LayerInputs]:
    """Fresh bf16 activations and routing for each of ``n`` layer copies, on :data:`DEVICE`."""
    g = torch.Generator(device="cpu").manual_seed(seed)
    out = []
    for _ in range(n):
        x = torch.randn(T, shape.H, generator=g).to(DEVICE, torch.bfloat16)
        logits = torch.randn(T, shape.E, generator=g).to(DEVICE)
        tw, ti = route(logits, shape.K, renormalize=shape.renormalize)
        out.append(LayerInputs(x, logits, tw, ti))
    return out


def fp8_bytes(shape, w13, w2, inp) -> int:
    """The fewest bytes one call with FP8 weights moves: each routed expert's weights and scales once,
    x in, y out, the routing."""
    distinct = torch.unique(inp.topk_ids).numel()
    per_expert = (w13.nbytes + w2.nbytes) / shape.E
    T = inp.x.shape[0]
    return int(distinct * per_expert + 2 * T * shape.H * 2 + inp.topk_ids.numel() * 8)


def bf16_bytes(shape, inp) -> int:
    distinct = torch.unique(inp.topk_ids).numel()
    T = inp.x.shape[0]
    return int(distinct * shape.expert_bytes + 2 * T * shape.H * 2 + inp.topk_ids.numel() * 8)


def copies(shape, weight_bytes_per_expert: float, budget: float = 30e9) -> int:
    """Layer copies so that a T = 1 step touches ≥ 3× the L2 of expert weights, within ``budget`` bytes."""
    want = max(2, math.ceil(3 * l2_bytes() / (shape.K * weight_bytes_per_expert)))
    fit = max(1, int(budget // (shape.E * weight_bytes_per_expert)))
    return min(want, fit)


def _time(fn, args, reps):
    """(Timing per call, first output) of ``fn`` over every copy's arguments, one CUDA graph."""
    g, outs = capture_poisoned(lambda: [fn(*a) for a in args])
    t = time_replays(g, reps=reps).scaled(1 / len(args))
    del g
    return t, outs[0]


def _time_together(runs, reps):
    """:func:`_time` for each ``(fn, args)`` of ``runs``, their graphs timed in one interleaved run
    (:func:`~bench.timing.time_interleaved`), so that their ratios are fair."""
    captured = [capture_poisoned(lambda fn=fn, args=args: [fn(*a) for a in args]) for fn, args in runs]
    times = time_interleaved([g for g, _ in captured], reps=reps)
    return [(t.scaled(1 / len(args)), outs[0]) for t, (_, args), (_, outs) in zip(times, runs, captured, strict=True)]


def _moe(method, **options):
    """``warpdecode.moe`` with ``method`` as a timed callable (``api.moe`` looked up at each call)."""
    return lambda x, w13, w2, tw, ids: api.moe(x, w13, w2, tw, ids, method=method, **options)


def _moe_on_defaults(method, **options):
    """:func:`_moe` with every table switched off: the launch configurations the rules give."""
    def call(x, w13, w2, tw, ids):
        with configs.tables(shipped=False, cache=False):
            return api.moe(x, w13, w2, tw, ids, method=method, **options)
    return call


#: The auto phase's public methods and their bare kernels; ``grouped``: warp decode's grouped schedule, asked for
#: (``auto`` does not pick it with FP8 weights), ``moe``'s options in :data:`OPTIONS`.
PUBLIC = {"warp": moe_warp, "expert": moe_expert, "auto": run_auto, "grouped": partial(moe_warp, schedule="grouped")}
OPTIONS = {"grouped": {"method": "warp", "schedule": "grouped"}}


def _ids32(inp):
    return inp.topk_ids.to(torch.int32).contiguous()


#: What each phase of the speed sweep times, in the order the bar needs them (each phase its own run:
#: a cold start compiles every kernel it meets, and a phase cut short keeps the rows it wrote).
PHASES = {
    "warp": "T = 1…8: warp decode with bf16 weights (tuned) and with FP8 weights (both formats, default and "
            "searched tiles)",
    "auto": "T = 1…256, block128: warp decode, the weight-only expert path, auto, each through warpdecode.moe "
            "(config 'moe': the tuned table's tiles where it has the shape) beside its bare kernels",
    "lesson": "T = 1, 8, 64, through warpdecode.moe: the w8a8 expert path (both formats), MXFP8's weight-only "
              "expert path",
}


def speed(presets, phase: str, *, reps: int = 50, csv_path: Path, deadline: float = math.inf):
    """Time one phase (:data:`PHASES`) on each preset; rows are appended to ``csv_path`` preset by
    preset, so a run cut short keeps what it measured. Returns the rows."""
    info = meta()
    ceiling = read_ceiling(4.0)
    print(f"read ceiling {ceiling:.3f} TB/s; phase {phase}: {PHASES[phase]}")
    rows = []
    for name in presets:
        if time.monotonic() > deadline:
            print(f"SKIP {name}: out of time")
            break
        part = []
        try:
            part = _speed_preset(get_preset(name), phase, reps, ceiling, info)
        except Exception as e:  # keep the sweep going; the log says why
            print(f"ERROR {name}: {e!r}")
        _free()
        _write(csv_path, part)
        rows += part
    return rows


def _free():
    if DEVICE == "cuda":
        torch.cuda.empty_cache()


def _speed_preset(shape, phase, reps, ceiling, info):
    rows = []
    formats = ("block128",) if phase == "auto" else quant.FORMATS
    n8 = copies(shape, 3 * shape.I * shape.H * (1 + 4 / 16384))
    n16 = min(n8, copies(shape, shape.expert_bytes)) if phase == "warp" else 0
    bf16, fp8 = [], {f: [] for f in formats}
    for i in range(n8):  # independent copies, each quantized from its own bf16 draw
        w13, w2 = shape.weights(device=DEVICE, seed=100 + i)
        for f in formats:
            fp8[f].append(quant.quantize_experts(w13, w2, f))
        if i < n16:
            bf16.append((w13, w2))
        del w13, w2

    def args_of(layers, inputs):
        return [(i.x, w13, w2, i.topk_weights, _ids32(i)) for (w13, w2), i in zip(layers, inputs, strict=True)]

    def row(T, method, weights, config, fn, layers, inputs, nbytes, ref):
        args = args_of(layers, inputs)
        try:
            t, y = _time(fn, args, reps)
        except Exception as e:  # the row is missing and the log says why
            print(f"ERROR {shape.name} T={T} {method} {weights} {config}: {e!r}")
            return None
        return record(T, method, weights, config, t, y, len(args), nbytes, ref)

    def record(T, method, weights, config, t, y, n, nbytes, ref, overhead=""):
        floor_us = nbytes / (ceiling * 1e12) * 1e6
        err = rel_error(y, ref) / rounding_floor(ref, torch.bfloat16)
        written = not bool(torch.isnan(y).any())
        rows.append({"preset": shape.name, "T": T, "method": method, "weights": weights, "config": config,
                     "median_us": round(t.median_us, 3), "p20_us": round(t.p20_us, 3), "p80_us": round(t.p80_us, 3),
                     "reps": t.reps, "bytes": nbytes, "floor_us": round(floor_us, 3),
                     "frac_ceiling": round(floor_us / t.median_us, 4), "ceiling_TBps": round(ceiling, 4),
                     "error_over_floor": round(err, 4), "checked": written and err < 60, "layers": n,
                     "overhead": overhead, **info})
        print(f"{shape.name:16s} T={T:<3d} {method:12s} {weights:8s} {config:8s} {t.median_us:9.2f} µs "
              f"({floor_us / t.median_us:.0%} of the ceiling) error/floor {err:.2f}")
        return t.median_us

    def timed(T, f, runs, inputs):
        w13, w2 = fp8[f][0]
        i0 = inputs[0]
        ref = reference_moe(i0.x, w13, w2, i0.topk_weights, i0.topk_ids)
        nbytes = fp8_bytes(shape, w13, w2, i0)
        return [row(T, method, f, config, fn, fp8[f], inputs, nbytes, ref) for method, config, fn in runs]

    def public_and_kernels(T, f, inputs):
        """Each of :data:`PUBLIC` through ``warpdecode.moe`` (the ids as ``route`` gives them) and as
        its bare kernels, all in one interleaved run; the public rows carry the overhead."""
        w13, w2 = fp8[f][0]
        i0 = inputs[0]
        ref = reference_moe(i0.x, w13, w2, i0.topk_weights, i0.topk_ids)
        nbytes = fp8_bytes(shape, w13, w2, i0)
        public = [(i.x, w13, w2, i.topk_weights, i.topk_ids) for (w13, w2), i in zip(fp8[f], inputs, strict=True)]
        runs = {m: (_moe(**OPTIONS.get(m, {"method": m})), public) for m in PUBLIC}
        runs |= {f"{m}_kernels": (fn, args_of(fp8[f], inputs)) for m, fn in PUBLIC.items()}
        try:
            got = dict(zip(runs, _time_together(list(runs.values()), reps), strict=True))
        except Exception as e:  # the rows are missing and the log says why
            print(f"ERROR {shape.name} T={T} {', '.join(runs)} {f}: {e!r}")
            return
        for m, (t, y) in got.items():
            twin = got.get(f"{m}_kernels")
            record(T, m, f, "moe", t, y, len(inputs), nbytes, ref,
                   overhead=round(t.median_us / twin[0].median_us, 4) if twin else "")

    if phase == "warp":
        # the FP8 pair's tiles: the defaults, and the fastest of CANDIDATES at T = 1 on block128
        # weights ("searched"; the tiles read either format)
        inp1 = make_inputs(shape, 1, n8, seed=1)
        us = timed(1, "block128", [("warp_tiles", tiles_name(c), partial(moe_warp, config=c)) for c in CANDIDATES],
                   inp1)
        best = min(((u, c) for u, c in zip(us, CANDIDATES, strict=True) if u is not None), default=None,
                   key=lambda uc: uc[0])
        searched = best[1] if best else None
        print(f"{shape.name}: searched tiles {searched}")
        if searched is not None:
            for f in formats:
                SEARCHED.setdefault(f"warp_{f}", {})[shape_key(shape.H, shape.I, shape.E, shape.K)] = [[8, searched]]
        for T in WARP_T:
            inputs = make_inputs(shape, T, n8, seed=1000 + T)
            i0 = inputs[0]
            ref = reference_moe(i0.x, *bf16[0], i0.topk_weights, i0.topk_ids)
            row(T, "warp", "bf16", "tuned", _moe("warp"), bf16, inputs[:n16], bf16_bytes(shape, i0), ref)
            for f in formats:
                # the public call on the rules' tiles, whatever a table holds; the searched tiles are a tile
                # search's row, so the bare launcher with that configuration
                runs = [("warp", "default", _moe_on_defaults("warp"))]
                if searched is not None:
                    runs.append(("warp", "searched", partial(moe_warp, config=searched)))
                timed(T, f, runs, inputs)
    elif phase == "auto":
        for T in SPEED_T:
            public_and_kernels(T, "block128", make_inputs(shape, T, n8, seed=1000 + T))
    else:
        w8a8 = ("expert_w8a8", "moe", _moe("expert", act_format="fp8"))
        for T in LESSON_T:
            inputs = make_inputs(shape, T, n8, seed=1000 + T)
            timed(T, "block128", [w8a8], inputs)
            timed(T, "mxfp8", [("expert", "moe", _moe("expert")), w8a8], inputs)
    return rows


def accuracy(presets, *, Ts=(1, 8, 64), csv_path: Path, formats=quant.FORMATS, deadline: float = math.inf):
    """Error over floor of each path on FP8 weights (module doc), one row per (preset, T, format, method)."""
    info = meta()
    rows = []
    methods = {"warp": _moe("warp"), "expert": _moe("expert"), "expert_w8a8": _moe("expert", act_format="fp8")}
    for name in presets:
        if time.monotonic() > deadline:
            print(f"SKIP {name}: out of time")
            break
        shape = get_preset(name)
        part = []
        try:
            w13, w2 = shape.weights(device=DEVICE, seed=7)
            for T in Ts:
                g = torch.Generator().manual_seed(T)
                x = torch.randn(T, shape.H, generator=g).to(DEVICE, torch.bfloat16)
                tw, ti = route(torch.randn(T, shape.E, generator=g).to(DEVICE), shape.K, renormalize=shape.renormalize)
                ti32 = ti.to(torch.int32)
                ref16 = reference_moe(x, w13, w2, tw, ti)
                floor16 = rounding_floor(ref16, torch.bfloat16)
                err = rel_error(api.moe(x, w13, w2, tw, ti32, method="warp"), ref16)
                part.append(_acc_row(shape, T, "bf16", "warp", err, floor16, math.nan, info, vs_bf16=err))
                for f in formats:
                    q13, q2 = quant.quantize_experts(w13, w2, f)
                    ref = reference_moe(x, q13, q2, tw, ti)
                    floor = rounding_floor(ref, torch.bfloat16)
                    qcost = rel_error(ref, ref16)
                    for m, fn in methods.items():
                        y = fn(x, q13, q2, tw, ti32)
                        part.append(_acc_row(shape, T, f, m, rel_error(y, ref), floor, qcost, info,
                                             vs_bf16=rel_error(y, ref16)))
                    del q13, q2
        except Exception as e:
            print(f"ERROR accuracy {name}: {e!r}")
        for r in part:
            print(f"{r['preset']:16s} T={r['T']:<3d} {r['method']:12s} {r['weights']:8s} error/floor "
                  f"{r['error_over_floor']:.3f} (quantization: {r['quant_error']:.4f})")
        _write(csv_path, part)
        rows += part
        _free()
    return rows


def layer_errors(name: str = "qwen3-30b-a3b", *, layers: int = 8, T: int = 4, steps: int = 4, fmt="block128",
                 csv_path: Path, seed: int = 0) -> list[dict]:
    """Across a model's layers: the decoder of ``bench.model`` in float64 but its MoE layers
    (``moe-only:``), which run warp decode or the w8a8 expert path on FP8 weights (``fmt``); each
    layer's hidden state at the last of ``steps`` decode steps against the float64 model with the
    bf16 weights (``vs="bf16"``: the weights' quantization included) and with the FP8 weights
    dequantized (``vs="fp8"``: the paths' rounding alone)."""
    from bench.e2e import decode_trace
    from bench.model import MODELS, Decoder

    model = Decoder(MODELS[name], device=DEVICE, layers=layers, seed=seed)
    g = torch.Generator(device="cpu").manual_seed(seed)
    prompt = torch.randint(0, model.cfg.vocab, (steps, T), generator=g).to(DEVICE)

    def run(method):
        logits, trace = decode_trace(model, prompt, method)
        return trace + [logits]

    refs = {"bf16": run("reference")}
    for p in model.layers:
        p["w13"], p["w2"] = quant.quantize_experts(p["w13"], p["w2"], fmt)
    refs["fp8"] = run("reference")
    info = meta()
    rows = []
    for method in ("warp", "expert_fp8"):
        trace = run(f"moe-only:{method}")
        for vs, ref in refs.items():
            for li, (h, r) in enumerate(zip(trace, ref, strict=True)):
                rows.append({"model": name, "T": T, "steps": steps, "weights": fmt,
                             "method": "expert_w8a8" if method == "expert_fp8" else method, "vs": vs,
                             "layer": li + 1 if li < len(trace) - 1 else "logits", "error": rel_error(h, r), **info})
    _write(csv_path, rows)
    return rows


def _acc_row(shape, T, weights, method, err, floor, qcost, info, *, vs_bf16):
    """error: against float64 of the layer's own (dequantized) weights; error_vs_bf16: against
    float64 of the bf16 weights it was quantized from (the weights' quantization included)."""
    return {"preset": shape.name, "T": T, "weights": weights, "method": method, "error": err, "floor": floor,
            "error_over_floor": err / floor, "quant_error": qcost,
            "quant_error_over_floor": qcost / floor if qcost == qcost else math.nan, "error_vs_bf16": vs_bf16, **info}


def _write(path: Path, rows: list[dict]) -> None:
    """Append ``rows`` to ``path``, its columns the union of the file's and the rows' (an older
    file's rows keep theirs, the new columns empty)."""
    data.merge_write(path, rows)


def _read(path: Path) -> list[dict]:
    if not path.exists():
        return []
    with path.open() as f:
        return list(csv.DictReader(f))


def figures(speed_rows: list[dict], accuracy_rows: list[dict]) -> list[str]:
    """The bar's figures from the CSV rows (strings or numbers), one line each, with met / not met."""
    out = []

    def us(rows, **k):
        hit = [float(r["median_us"]) for r in rows if all(str(r[a]) == str(b) for a, b in k.items())]
        return min(hit) if hit else math.nan

    def verdict(ok):
        return "met" if ok else "NOT met"

    s = speed_rows
    t1 = us(s, preset="qwen3-30b-a3b", T=1, method="warp", weights="block128")
    t1_16 = us(s, preset="qwen3-30b-a3b", T=1, method="warp", weights="bf16")
    # the T = 1 bar is against vLLM's w8a8 time, timed beside it by experiments/vllm_baseline.py --version fp8
    out.append(f"qwen3-30b-a3b T=1: FP8 (block128) warp decode {t1:.2f} µs, the faster of the default and "
               f"searched tiles (bf16 warp {t1_16:.2f} µs; against vLLM's w8a8: experiments/vllm_baseline.py)")
    for f in quant.FORMATS:
        for p in sorted({r["preset"] for r in s}):
            ratios = {T: us(s, preset=p, T=T, method="warp", weights="bf16") / us(s, preset=p, T=T, method="warp",
                                                                                  weights=f) for T in WARP_T}
            ok = all(v >= BAR["speedup"] for v in ratios.values())
            out.append(f"{p} {f}: bf16 / FP8 warp decode (FP8: the faster of the default and searched tiles) "
                       + " ".join(f"T={T} {v:.2f}x" for T, v in ratios.items())
                       + f" (bar ≥ {BAR['speedup']}x): {verdict(ok)}")
    for p in sorted({r["preset"] for r in s}):
        worst = []
        for T in SPEED_T:
            paths = [us(s, preset=p, T=T, method=m, weights="block128", config="moe") for m in ("warp", "expert")]
            auto = us(s, preset=p, T=T, method="auto", weights="block128")
            if not math.isnan(auto) and not all(math.isnan(v) for v in paths):
                worst.append((auto / min(v for v in paths if not math.isnan(v)), T))
        if worst:
            w, T = max(worst)
            out.append(f"{p}: auto (block128) / faster path, worst {w:.3f} at T={T} (bar ≤ {BAR['auto_over_faster']}):"
                       f" {verdict(w <= BAR['auto_over_faster'])}")
    a = accuracy_rows
    for f in quant.FORMATS:
        for m in ("warp", "expert", "expert_w8a8"):
            v = [float(r["error_over_floor"]) for r in a if r["weights"] == f and r["method"] == m]
            if v:
                line = f"error/floor {m} ({f}): median {statistics.median(v):.2f}, max {max(v):.2f}"
                if m == "warp":
                    bar = BAR["warp_error_over_floor"]
                    line += f" (bar ≤ {bar}): {verdict(max(v) <= bar)}"
                out.append(line)
        q = [float(r["quant_error_over_floor"]) for r in a if r["weights"] == f and r["method"] == "warp"]
        if q:
            out.append(f"quantization's own cost ({f}, the FP8 layer against the bf16 one): median "
                       f"{statistics.median(q):.1f}x the bf16 floor")
        vs = {(r["preset"], r["T"], r["method"]): float(r["error_vs_bf16"]) for r in a if r["weights"] == f}
        ratio = [vs[(p, t, "expert_w8a8")] / vs[(p, t, "warp")] for p, t, m in vs if m == "warp"
                 and (p, t, "expert_w8a8") in vs]
        if ratio:
            out.append(f"against the bf16 layer ({f}, quantization included): w8a8 / warp decode error, median "
                       f"{statistics.median(ratio):.2f}x, range {min(ratio):.2f}-{max(ratio):.2f}x")
    return out


def measured_crossover(rows: list[dict], preset: str, weights: str = "block128") -> int:
    """The largest T of :data:`SPEED_T` up to which warp decode (as ``moe`` runs it) is no slower than
    the expert path at every T measured, as ``auto``'s crossover rule reads it; 0 if none."""
    best = 0
    for T in SPEED_T:
        t = {r["method"]: float(r["median_us"]) for r in rows if r["preset"] == preset and int(r["T"]) == T
             and r["weights"] == weights and r["config"] == "moe" and r["method"] in ("warp", "expert")}
        if len(t) < 2:
            continue
        if t["warp"] > t["expert"]:
            break
        best = T
    return best


#: How much faster than the default tiles the searched ones must be at a T to be written for it:
#: less is within the run-to-run spread of one T's median (about 1 % on the H200).
SEARCHED_MARGIN = 0.99


def tuned_entries(rows: list[dict], searched: dict, spills=lambda shape, fmt, cfg: False) -> dict:
    """The FP8 pair's tuned-table families (``warp_<format>``) from the warp phase's rows and the
    searched tiles (``fp8_tuned.json``'s ``warp_<format>``): per preset and format, at each T the
    phase timed, the searched tiles where they took less than :data:`SEARCHED_MARGIN` of the
    default tiles' time, else the defaults (:func:`warpdecode.configs.default_warp_fp8`), as
    buckets; past the last T the defaults. Searched tiles for which ``spills(shape, fmt, cfg)``
    holds are never taken (a tuned configuration compiles without spills, as the defaults do). A
    shape on which the defaults win at every T gets no entry. Each bucket carries the two times it
    was chosen from (``measured_us``)."""
    from warpdecode.configs import default_warp_fp8

    presets = {_key(p): p for p in MODEL_PRESETS}
    out: dict = {}
    for family, shapes in searched.items():
        if not family.startswith("warp_"):
            continue
        fmt = family.removeprefix("warp_")
        for key, buckets in shapes.items():
            if key not in presets:
                continue
            preset, cfg = presets[key], buckets[-1][1]
            shape = get_preset(preset)
            default = default_warp_fp8(shape.H, shape.I, shape.K)
            times = {(int(r["T"]), r["config"]): float(r["median_us"]) for r in rows
                     if r["preset"] == preset and r["method"] == "warp" and r["weights"] == fmt}
            Ts = sorted({t for t, c in times if c == "default" and (t, "searched") in times})
            faster = {T: times[(T, "searched")] < SEARCHED_MARGIN * times[(T, "default")] for T in Ts}
            if not any(faster.values()) or spills(shape, fmt, cfg):  # compiled only where the tiles won
                continue
            entry = [[T, {**(cfg if faster[T] else default),
                          "measured_us": {"default": times[(T, "default")], "searched": times[(T, "searched")]}}]
                     for T in Ts]
            if faster[Ts[-1]]:  # the searched tiles hold up to the last T timed; the defaults past it
                entry.append([SPEED_T[-1], default])
            out.setdefault(family, {})[key] = entry
    return out


def _key(preset: str) -> str:
    s = get_preset(preset)
    return shape_key(s.H, s.I, s.E, s.K)


def _spills_sm90(shape, fmt: str, cfg: dict) -> bool:
    """Whether the FP8 pair with tiles ``cfg`` spills registers compiled for sm_90a (offline)."""
    from bench import compiled

    jobs = [ln.job for ln in compiled.record_launches("warp", shape, 1, gpu_name="no tuned table", weights=fmt,
                                                         config=cfg)]
    reports = [compiled.ptxas_report(c) for c in compiled.compile_many(jobs, arch=90)]
    for r in reports:
        if r["spill_stores"]:
            print(f"{shape.name} {fmt}: searched tiles spill ({r['spill_stores']} B, {r['registers']} registers), "
                  "not taken")
    return any(r["spill_stores"] for r in reports)


def write_tuned(out: Path, gpu: str) -> Path:
    """``--what table``: :func:`tuned_entries` from ``out``'s ``fp8_speed.csv`` and ``fp8_tuned.json``,
    and the auto phase's measured crossover (``crossover_block128``, :func:`measured_crossover`),
    merged into the shipped table of ``gpu`` (its FP8 families replaced), which keeps the Triton
    release it names: the rows' own, checked here."""
    from warpdecode import configs

    with (out / "fp8_speed.csv").open() as f:
        rows = [r for r in csv.DictReader(f) if r["gpu"] == gpu]
    searched = json.loads((out / "fp8_tuned.json").read_text())
    path = configs.tuned_file(gpu)
    table = json.loads(path.read_text())
    releases = {r["triton"] for r in rows if r["method"] == "warp"}
    if releases != {table.get("triton")}:
        sys.exit(f"{out / 'fp8_speed.csv'}: warp rows of Triton {sorted(releases)}, "
                 f"{path.name} is {table.get('triton')}'s")
    entries = tuned_entries(rows, searched, spills=_spills_sm90)
    auto = {r["preset"] for r in rows if r["method"] == "auto" and r["config"] == "moe"}
    if auto:  # the auto phase's crossover: moe runs each path as timed there, this table's tiles included
        entries["crossover_block128"] = {
            _key(p): measured_crossover(rows, p) for p in sorted(auto)}
    for family in [f for f in table if f.startswith("warp_") or f in {f"crossover_{q}" for q in quant.FORMATS}]:
        del table[family]
    with configs._locked(path):  # written whole, as checked: the FP8 families replaced, the release kept
        configs._write(path, {**table, **entries})
    print(f"{path}: " + ", ".join(f"{f} {len(v)} shapes" for f, v in entries.items()))
    return path


def layer_figures(rows: list[dict]) -> list[str]:
    """w8a8's error over warp decode's at the last layer and at the logits, against either model."""
    out = []
    last = {}
    for r in rows:
        last[(r["vs"], r["method"], r["layer"] == "logits")] = float(r["error"])
    for vs in ("bf16", "fp8"):
        for at_logits in (False, True):
            w, e = last.get((vs, "warp", at_logits)), last.get((vs, "expert_w8a8", at_logits))
            if w and e:
                what = "logits" if at_logits else "last layer's hidden state"
                against = "bf16 weights, quantization included" if vs == "bf16" else "the FP8 weights"
                out.append(f"across the layers ({what}, against float64 with {against}): w8a8 / warp decode "
                           f"error {e / w:.2f}x ({e:.2e} / {w:.2e})")
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--what", nargs="+", default=["speed", "accuracy", "layers"],
                    choices=["speed", "accuracy", "layers", "figures", "table"],
                    help="table: the FP8 pair's tuned entries from the warp phase's rows into the shipped "
                         "table (no GPU needed with --out and --gpu)")
    ap.add_argument("--gpu", default=None, help="--what table: the GPU whose rows and table (default this one)")
    ap.add_argument("--layers", type=int, default=8, help="decoder layers of the across-layers run")
    ap.add_argument("--phase", nargs="+", default=list(PHASES), choices=list(PHASES),
                    help="the speed sweep's phases: " + "; ".join(f"{k}: {v}" for k, v in PHASES.items()))
    ap.add_argument("--fresh", action="store_true", help="start the CSVs over (default: append)")
    ap.add_argument("--presets", nargs="+", default=MODEL_PRESETS)
    ap.add_argument("--reps", type=int, default=50)
    ap.add_argument("--out", default=None, help="folder of the CSVs (default results/<GPU>/)")
    ap.add_argument("--budget-s", type=float, default=math.inf, help="start no preset past this many seconds")
    args = ap.parse_args(argv)
    gpu = args.gpu or torch.cuda.get_device_name()
    out = Path(args.out or f"results/{gpu.replace(' ', '_')}")
    if args.what == ["table"]:
        write_tuned(out, gpu)
        return None
    speed_csv, acc_csv, layers_csv = out / "fp8_speed.csv", out / "fp8_accuracy.csv", out / "fp8_layers.csv"
    deadline = time.monotonic() + args.budget_s
    if args.fresh:
        for path in (speed_csv, acc_csv, layers_csv):
            path.unlink(missing_ok=True)
    if "speed" in args.what:
        for phase in args.phase:
            rows = speed(args.presets, phase, reps=args.reps, csv_path=speed_csv, deadline=deadline)
            if phase == "auto":
                for p in {r["preset"] for r in rows}:
                    shape = get_preset(p)
                    SEARCHED.setdefault("crossover_block128", {})[shape_key(shape.H, shape.I, shape.E, shape.K)] = \
                        measured_crossover(rows, p)
        if SEARCHED:  # merged into what an earlier run of the stage wrote
            path = out / "fp8_tuned.json"
            table = json.loads(path.read_text()) if path.exists() and not args.fresh else {}
            for family, entries in SEARCHED.items():
                table.setdefault(family, {}).update(entries)
            path.write_text(json.dumps(table, indent=1, sort_keys=True))
    if "accuracy" in args.what:
        accuracy(args.presets, csv_path=acc_csv, deadline=deadline)
    if "layers" in args.what:
        layers_csv.unlink(missing_ok=True)
        layer_errors(layers=args.layers, csv_path=layers_csv)
    print(f"\n== the bar ({gpu}) ==")
    for line in figures(_read(speed_csv), _read(acc_csv)) + layer_figures(_read(layers_csv)):
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
