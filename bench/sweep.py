"""Sweeps that write tidy CSV rows: speed against the measured ceiling, the expert-centric
path's stage breakdown, and error against the float64 reference."""

from __future__ import annotations

import datetime
import functools
import math
import os
import subprocess
from functools import partial
from pathlib import Path

import torch
import triton

from bench.ladder import bytes_needed
from bench.methods import EAGER, KERNELS, registry
from bench.timing import Timing, capture, capture_poisoned, time_eager, time_interleaved, time_replays
from bench.unfused import gather, scatter
from warpdecode import expert as ex
from warpdecode import warp as wp
from warpdecode.configs import expert_config, warp_config
from warpdecode.presets import MoEShape
from warpdecode.reference import reference_moe, rel_error, rounding_floor
from warpdecode.routing import route
from warpdecode.workload import make_inputs, make_layers, num_copies

#: The most error, in multiples of the bf16 rounding floor, a timed method may show before its
#: row is flagged: timing a wrong result would be meaningless.
SANITY = {"warp": 1.5, "warp_bf16_act": 4, "expert": 8, "auto": 8, "grouped_mm": 8, "loop": 12, "expert_fp8": 120}
SANITY |= {KERNELS[m]: v for m, v in SANITY.items() if m in KERNELS}


#: What the benchmarks write into the checkout: a change there is data, not the code measured.
DATA_PATHS = ("results", "experiments/results", "figures")


@functools.cache
def commit() -> str:
    """The git commit of the checkout the imported package lives in: its short hash, with
    ``-dirty`` where tracked files other than :data:`DATA_PATHS` differ from it, or without a git
    checkout (an installed wheel), ``"unknown"``. ``$WARPDECODE_COMMIT``, where set, names it
    instead: whoever copies a tree to another machine names the commit it holds (a copy may carry
    an older ``.git`` than its files)."""
    if os.environ.get("WARPDECODE_COMMIT"):
        return os.environ["WARPDECODE_COMMIT"]
    root = Path(__file__).resolve().parents[2]

    def git(*args):
        return subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, check=True,
                              timeout=30).stdout.strip()

    try:
        if Path(git("rev-parse", "--show-toplevel")).resolve() != root:  # a repository around an install
            raise ValueError(root)
        head = git("rev-parse", "--short", "HEAD")
        dirty = git("status", "--porcelain", "--untracked-files=no", "--", ".",
                    *(f":(exclude){p}" for p in DATA_PATHS))
    except (OSError, ValueError, subprocess.SubprocessError):
        return "unknown"
    return head + ("-dirty" if dirty else "")


def meta() -> dict:
    """What every row names: the device (or the CPU interpreter), versions, the commit measured, date."""
    return {
        "gpu": torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu",
        "torch": torch.__version__,
        "triton": triton.__version__,
        "commit": commit(),
        "date": datetime.date.today().isoformat(),
    }


#: Progress bars on stderr while a sweep runs (tqdm, where installed). ``lessons`` turns them off: a
#: notebook's saved outputs keep its results, not the bars that led to them.
PROGRESS = True


def _progress(items, desc):
    if not PROGRESS:
        return items
    try:
        from tqdm.auto import tqdm

        return tqdm(items, desc=desc)
    except ImportError:
        return items


def _timing_row(t: Timing) -> dict:
    return {"median_us": round(t.median_us, 3), "p20_us": round(t.p20_us, 3), "p80_us": round(t.p80_us, 3),
            "reps": t.reps}


def speed(shapes: list[MoEShape], Ts: list[int], methods: list[str], *, ceiling_tbps: float, reps: int = 100,
          kernels: bool = False, extra: dict | None = None):
    """Per (preset, T, method): median time per layer call, bytes that must move, the floor those
    bytes imply at the read ceiling, achieved TB/s and the fraction of the ceiling.

    A public method (``warp``, ``expert``, ``auto``, …: ``warpdecode.moe`` as users call it) is the
    row to read; with ``kernels`` its bare twin (:data:`~bench.methods.KERNELS`) is timed
    beside it, in the same interleaved run, and the public row's ``overhead`` is the public median
    over the twin's (empty where no twin was timed). ``extra``: more callables by name, each
    ``fn(x, w13, w2, topk_weights, topk_ids) -> y`` (a notebook's own kernels), timed as methods."""
    fns = registry() | (extra or {})
    if kernels:
        methods = [*dict.fromkeys(n for m in methods for n in (m, KERNELS.get(m)) if n)]
    methods = [m for m in methods if m in fns]
    info = meta()
    rows = []
    for shape in shapes:
        L = num_copies(shape)
        layers = make_layers(shape, L)
        for T in _progress(Ts, f"speed {shape.name}"):
            inputs = make_inputs(shape, T, L, seed=1000 + T)
            ref0 = reference_moe(inputs[0].x, *layers[0], inputs[0].topk_weights, inputs[0].topk_ids)
            floor0 = rounding_floor(ref0, torch.bfloat16)
            nbytes = sum(bytes_needed(shape, inp) for inp in inputs) / L
            args = [(inp.x, w13, w2, inp.topk_weights, inp.topk_ids)
                    for (w13, w2), inp in zip(layers, inputs, strict=True)]
            # every graphable method captured first, then all timed together (time_interleaved)
            graphs, outputs, timed = {}, {}, {}
            for m in methods:
                step = partial(_call_each, fns[m], args)
                try:
                    if m not in EAGER:
                        graphs[m], outputs[m] = capture_poisoned(step)  # one replay must overwrite every element
                    else:
                        outputs[m] = step()
                        timed[m] = time_eager(step, reps=max(5, reps // 5)).scaled(1 / L)
                except Exception as e:  # keep the sweep going; the row is missing and the log says why
                    print(f"ERROR {shape.name} T={T} {m}: {e!r}")
                    torch.cuda.synchronize()
            if graphs:
                for m, t in zip(graphs, time_interleaved(list(graphs.values()), reps=reps), strict=True):
                    timed[m] = t.scaled(1 / L)
            graphs.clear()
            for m in methods:
                if m not in timed:
                    continue
                t, outs = timed[m], outputs.pop(m)
                written = all(not torch.isnan(y).any() for y in outs)
                ratio = rel_error(outs[0], ref0) / floor0
                ok = written and ratio <= SANITY.get(m, 8)
                if not ok:
                    print(f"WARNING {shape.name} T={T} {m}: written={written} error/floor={ratio:.2f}")
                floor_us = nbytes / (ceiling_tbps * 1e12) * 1e6
                rows.append({
                    "preset": shape.name, "T": T, "method": m, **_timing_row(t),
                    "bytes": int(nbytes), "floor_us": round(floor_us, 3),
                    "achieved_TBps": round(nbytes / (t.median_us * 1e-6) / 1e12, 4),
                    "frac_ceiling": round(floor_us / t.median_us, 4), "ceiling_TBps": round(ceiling_tbps, 4),
                    "error_over_floor": round(ratio, 4), "checked": ok, "layers": L,
                    "overhead": overhead(timed, m), **info,
                })
                del outs
                torch.cuda.empty_cache()
        layers = None
        torch.cuda.empty_cache()
    return rows


def overhead(timed: dict, method: str):
    """The public method's median over its bare twin's, both in ``timed`` (one interleaved run), to
    four decimals; "" for a method without a timed twin."""
    twin = timed.get(KERNELS.get(method))
    return round(timed[method].median_us / twin.median_us, 4) if twin and method in timed else ""


def _call_each(fn, arg_rows):
    return [fn(*a) for a in arg_rows]


def _stage_fns(shape: MoEShape, T: int):
    """The expert-centric stages (and warp decode's two kernels) as separately timeable steps: gather and
    scatter as kernels of their own (``bench.unfused``).
    Each takes one layer's inputs and the outputs of the stages before it."""
    cfg = expert_config(shape.H, shape.I, shape.E, shape.K, T)
    wcfg = warp_config(shape.H, shape.I, shape.E, shape.K, T)

    def prepare(inp, w13, w2):
        st = {"inp": inp, "w13": w13, "w2": w2}
        st["al"] = ex.align(inp.topk_ids, shape.E, cfg["BLOCK_M"])
        st["a"] = gather(inp.x, st["al"], shape.K)
        st["h"] = ex.gate_up(st["a"], None, w13, st["al"], cfg["gate_up"])
        st["o"] = ex.down(st["h"], None, w2, st["al"], inp.topk_weights, cfg["down"])
        st["s"] = scatter(st["o"], st["al"])
        st["act"] = wp.warp_gate_up(inp.x, w13, inp.topk_ids, inp.topk_weights, wcfg["gate_up"])
        return st

    stages = {
        ("expert", "1 route"): lambda st: route(st["inp"].router_logits, shape.K, renormalize=shape.renormalize),
        ("expert", "2 align"): lambda st: ex.align(st["inp"].topk_ids, shape.E, cfg["BLOCK_M"]),
        ("expert", "3 gather"): lambda st: gather(st["inp"].x, st["al"], shape.K),
        ("expert", "5 gate/up GEMM"): lambda st: ex.gate_up(st["a"], None, st["w13"], st["al"], cfg["gate_up"]),
        ("expert", "6 down GEMM"): lambda st: ex.down(st["h"], None, st["w2"], st["al"], st["inp"].topk_weights,
                                                      cfg["down"]),
        ("expert", "7 scatter"): lambda st: scatter(st["o"], st["al"]),
        ("expert", "8 combine"): lambda st: ex.combine(st["s"], st["inp"].topk_ids, st["inp"].topk_weights, shape.E),
        ("warp", "gate/up kernel"): lambda st: wp.warp_gate_up(st["inp"].x, st["w13"], st["inp"].topk_ids,
                                                               st["inp"].topk_weights, wcfg["gate_up"]),
        ("warp", "down kernel"): lambda st: wp.warp_down(st["act"], st["w2"], st["inp"].topk_ids,
                                                         st["inp"].topk_weights, wcfg["down"], st["inp"].x.dtype),
    }
    return prepare, stages


def stages(shapes: list[MoEShape], Ts: list[int], *, reps: int = 100):
    """Each stage of the expert-centric path (stage 4, the cast, is a no-op in bf16 and launches
    nothing) and each warp-decode kernel, timed on its own over the layer copies."""
    info = meta()
    rows = []
    for shape in shapes:
        L = num_copies(shape)
        layers = make_layers(shape, L)
        for T in _progress(Ts, f"stages {shape.name}"):
            inputs = make_inputs(shape, T, L, seed=2000 + T)
            prepare, fns = _stage_fns(shape, T)
            states = [(prepare(inp, w13, w2),) for (w13, w2), inp in zip(layers, inputs, strict=True)]
            for (path, stage), fn in fns.items():
                g, _ = capture(partial(_call_each, fn, states))
                t = time_replays(g, reps=reps).scaled(1 / L)
                del g
                rows.append({"preset": shape.name, "T": T, "path": path, "stage": stage, **_timing_row(t),
                             "layers": L, **info})
            states = None
            torch.cuda.empty_cache()
        layers = None
        torch.cuda.empty_cache()
    return rows


def accuracy(shapes: list[MoEShape], Ts: list[int], methods: list[str], *, seeds: int = 2, device="cuda"):
    """Error of each method against the float64 reference, and the bf16 rounding floor, on fresh
    random inputs for every (preset, T, seed)."""
    fns = registry()
    methods = [m for m in methods if m in fns]
    info = meta()
    rows = []
    for shape in shapes:
        w13, w2 = make_layers(shape, 1, seed=7)[0] if device == "cuda" else shape.weights(seed=7)
        for T in _progress(Ts, f"accuracy {shape.name}"):
            for seed in range(seeds):
                g = torch.Generator(device="cpu").manual_seed(10_000 * seed + T)
                x = torch.randn(T, shape.H, generator=g).to(device, torch.bfloat16)
                logits = torch.randn(T, shape.E, generator=g).to(device)
                tw, ti = route(logits, shape.K, renormalize=shape.renormalize)
                ref = reference_moe(x, w13, w2, tw, ti)
                floor = rounding_floor(ref, torch.bfloat16)
                for m in methods:
                    try:
                        err = rel_error(fns[m](x, w13, w2, tw, ti), ref)
                    except Exception as e:
                        print(f"ERROR {shape.name} T={T} {m}: {e!r}")
                        continue
                    rows.append({"preset": shape.name, "T": T, "seed": seed, "method": m, "error": err,
                                 "floor": floor, "error_over_floor": err / floor if floor > 0 else math.nan,
                                 **info})
        del w13, w2
        if device == "cuda":
            torch.cuda.empty_cache()
    return rows
