"""The loop an experiment in ``scripts/`` runs, in one place: a preset's layer copies, the routing
draw for each T, the byte floor at the read ceiling measured in the same process, the float64
reference, and a step timed only after its output was checked against that reference.

    from warpdecode.bench.experiment import cases, checked_us, row
    for case in cases(["olmoe-1b-7b"], [1, 8]):
        us, err, _ = checked_us(case, lambda x, w13, w2, tw, ids: wd.moe(x, w13, w2, tw, ids), "auto")
        rows.append(row(case, variant="auto", us=us, err=err))

GPU only (CUDA graphs); the scripts' ``--check`` modes cover their kernels on the CPU.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial

import torch

from .. import warp as wp
from ..configs import warp_config
from ..presets import MoEShape, get_preset
from ..reference import reference_moe, rel_error, rounding_floor
from .sweep import meta
from .timing import capture_poisoned, read_ceiling, time_replays
from .workload import LayerInputs, bytes_needed, make_inputs, make_layers, num_copies


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


def cases(presets: list[str], Ts: list[int], *, seeds=(1000,), ceiling: float | None = None):
    """Yield a :class:`Case` per preset, T and routing seed (inputs drawn at seed + T; the
    benchmark's is 1000). Each preset's layer copies are made once and freed after its cases."""
    ceiling = ceiling or read_ceiling()
    for name in presets:
        shape = get_preset(name)
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
        return down(wp.warp_gate_up(x, w13, ids, tuned["gate_up"]), w2, ids, tw, cfg, torch.bfloat16)

    shipped = partial(pair, wp.warp_down, tuned["down"])
    return ([("shipped " + str(tuned["down"]), shipped, None)]
            + [(f"{prefix}{c}", partial(pair, down, c), c) for c in configs] + [("shipped again", shipped, None)])


def row(case: Case, *, us: float, err: float, **fields) -> dict:
    """A tidy CSV row: the case, ``fields``, the time against the floor, the machine."""
    return {"preset": case.shape.name, "T": case.T, "seed": case.seed, **fields, "us": round(us, 3),
            "floor_us": round(case.floor_us, 3), "frac_ceiling": round(case.floor_us / us, 4),
            "error_over_floor": round(err, 3), "ceiling_TBps": round(case.ceiling, 4), **meta()}
