"""The crossover up to which ``method="auto"`` runs warp decode: a tuned table's where it has the
shape, else a cost model of bytes, launches and read rates (H200 constants, scaled elsewhere).
"""

from __future__ import annotations

import functools

from .configs import expected_distinct, load_tuned, shape_key, shares_experts

#: The T grid of measured crossovers (speed.csv's token counts): the model answers on it too.
T_GRID = (1, 2, 4, 8, 16, 32, 64, 128, 256)

# The cost model's constants (NVIDIA H200; scaled elsewhere). Data: docs/design.md, "Cost model constants".
READ_TBPS = 4.53  # HBM read ceiling (small_reads.csv ceiling_TBps)
LAUNCH_US = 2.0  # one launch's fixed cost: the intercept of time against bytes (small_reads.csv)
L2_REREAD_TBPS = 8.0  # an expert's rows read again by another token: between HBM's and L2's rates
WARP_LAUNCHES = 2  # gate/up, down (warpdecode/warp.py)
EXPERT_LAUNCHES = 4  # align, gate/up, down, reduce, overlapped by PDL (warpdecode/expert.py)
EXPERT_READ_FRACTION = 0.91  # the expert path's GEMMs stream weights at this fraction of the ceiling
# FP8: the pair is issue-bound, the weight-only expert path widens e4m3 in registers: both below the ceiling.
FP8_PAIR_READ_FRACTION = 0.65  # the FP8 pair's weight bytes at the ceiling over its time less two launches
FP8_EXPERT_READ_FRACTION = 0.51  # the weight-only expert path's (fp16 rows) at T = 4, its range's low end


def model_terms(H: int, I: int, E: int, K: int, T: int, elem: int = 2,  # noqa: E741
                w_elem: int | None = None) -> dict[str, tuple[float, float]]:
    """Per path ("warp", "expert"): (µs that do not depend on its weight stream's rate, µs of that stream at the
    read ceiling). Each distinct expert read once from HBM, 3·I·H·w_elem B (``w_elem`` default ``elem``); the
    pair's repeats at ``L2_REREAD_TBPS``; the expert path's activations at the ceiling; the launches."""
    expert_bytes = 3 * I * H * (w_elem or elem)
    distinct = expected_distinct(E, K, T)
    hbm_us = distinct * expert_bytes / (READ_TBPS * 1e6)
    act_us = T * K * (H + 2 * I + 2 * I + 2 * H) * elem / (READ_TBPS * 1e6)
    return {"warp": (WARP_LAUNCHES * LAUNCH_US, hbm_us + (T * K - distinct) * expert_bytes / (L2_REREAD_TBPS * 1e6)),
            "expert": (EXPERT_LAUNCHES * LAUNCH_US + act_us, hbm_us)}


def model_us(H: int, I: int, E: int, K: int, T: int, elem: int = 2,  # noqa: E741
             w_elem: int | None = None) -> tuple[float, float]:
    """(warp decode, expert path) modelled µs for T tokens: :func:`model_terms`, each weight stream at its
    read fraction (the pair's 1.0 and ``EXPERT_READ_FRACTION``; FP8 at the ``FP8_*_READ_FRACTION``s)."""
    fp8 = (w_elem or elem) == 1
    fractions = (FP8_PAIR_READ_FRACTION, FP8_EXPERT_READ_FRACTION) if fp8 else (1.0, EXPERT_READ_FRACTION)
    terms = model_terms(H, I, E, K, T, elem, w_elem)
    warp, expert = ((fixed + stream / f) for (fixed, stream), f in zip(terms.values(), fractions, strict=True))
    return warp, expert


def read_fraction(H: int, I: int, E: int, K: int, T: int, path: str, us: float, elem: int = 2,  # noqa: E741
                  w_elem: int | None = None) -> float:
    """The read fraction :func:`model_us` would need for ``path`` ("warp" or "expert") to take ``us``: its
    weight stream at the ceiling over the measured time less the rest (how the constants above are measured)."""
    fixed, stream = model_terms(H, I, E, K, T, elem, w_elem)[path]
    return stream / (us - fixed)


@functools.cache
def model_crossover(H: int, I: int, E: int, K: int, elem: int = 2, w_elem: int | None = None) -> int:  # noqa: E741
    """The largest T of :data:`T_GRID` to which :func:`model_us` has warp no slower at every T, or 0; with
    16-bit weights, before the first T whose default is grouped. Data: docs/design.md."""
    best = 0
    for T in T_GRID:
        warp, expert = model_us(H, I, E, K, T, elem, w_elem)
        if warp > expert or (w_elem is None and shares_experts(E, K, T)):
            break
        best = T
    return best


def crossover(H: int, I: int, E: int, K: int, elem: int = 2, weights: str | None = None) -> int:  # noqa: E741
    """The largest T ``auto`` runs ``warp`` at: this GPU's tuned crossover, else :func:`model_crossover`.
    ``weights``: None or an FP8 format (the ``crossover_<format>`` entry, else the model with 1-byte weights)."""
    measured = measured_crossover(H, I, E, K, weights)
    if measured is not None:
        return measured
    return model_crossover(H, I, E, K, elem, None if weights is None else 1)


def measured_crossover(H: int, I: int, E: int, K: int, weights: str | None = None) -> int | None:  # noqa: E741
    """The crossover a tuned table on this GPU holds for the shape, or None."""
    family = "crossover" if weights is None else f"crossover_{weights}"
    measured = load_tuned().get(family, {}).get(shape_key(H, I, E, K))
    return None if measured is None else int(measured)


def pick_method(T: int, H: int, I: int, E: int, K: int, elem: int = 2, weights: str | None = None) -> str:  # noqa: E741
    return "warp" if T <= crossover(H, I, E, K, elem, weights) else "expert"
