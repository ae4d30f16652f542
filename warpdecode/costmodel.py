"""The crossover: up to which T ``method="auto"`` runs warp decode, measured or modelled.

A tuned table's measured crossover where it has the layer shape (``warpdecode/tuned/<GPU>.json``,
the user's cache); elsewhere a cost model of both paths' bytes, launches and read rates, whose
constants are the NVIDIA H200's (another GPU scales them).
"""

from __future__ import annotations

import functools

from .configs import expected_distinct, load_tuned, shape_key, shares_experts

#: The T grid of measured crossovers (speed.csv's token counts): the model answers on it too.
T_GRID = (1, 2, 4, 8, 16, 32, 64, 128, 256)

# The cost model's constants, each with where it comes from (NVIDIA H200; another GPU scales them):
READ_TBPS = 4.53  # HBM read ceiling: ceiling_TBps in experiments/results/NVIDIA_H200/small_reads.csv
LAUNCH_US = 2.0  # one launch's fixed cost: the intercept of time against bytes in small_reads.csv (6.3, 12.6 MB)
L2_REREAD_TBPS = 8.0  # an expert's rows read again by another token: the median rate the pair's warp_us at
#                       T = 2, 4 in tuned/NVIDIA_H200.json crossover_evidence implies past the distinct reads
WARP_LAUNCHES = 2  # gate/up, down (warpdecode/warp.py)
EXPERT_LAUNCHES = 4  # align, gate/up, down, reduce, overlapped by PDL (warpdecode/expert.py)
EXPERT_READ_FRACTION = 0.91  # the expert path's GEMMs stream weights at this fraction of the ceiling: the median
#                              over the ten shapes of experiments/results/NVIDIA_H200/defaults.csv at T = 1, 2, 4
#                              (defaults) of the weight bytes at the ceiling over the measured time less the
#                              launches and activations (0.85-1.03)
# With FP8 weights (w_elem = 1) both paths stream their bytes below the ceiling (results/NVIDIA_H200/fp8_speed.csv,
# block128, as moe runs them): the FP8 pair is issue-bound (kernels/warp_fp8.py), the weight-only expert path
# widens each e4m3 tile to bf16 on the way to the tensor cores.
FP8_PAIR_READ_FRACTION = 0.65  # the FP8 pair's weight bytes at the ceiling over its time less two launches: the
#                                median over the six presets at T = 1 (0.56-0.89)
FP8_EXPERT_READ_FRACTION = 0.50  # the weight-only expert path's, as EXPERT_READ_FRACTION: about the median over
#                                  the six presets at T = 2, 4, 8 (0.495; 0.27-0.63, 0.22-0.40 at T = 1), rounded
#                                  down, so that the modelled crossover errs late: against the measured times,
#                                  warp decode one step past the crossover costs at most 1.09x, the expert path one
#                                  step before it up to 1.76x (Mixtral T = 4); at 0.53 the model picks that


def model_us(H: int, I: int, E: int, K: int, T: int, elem: int = 2,  # noqa: E741
             w_elem: int | None = None) -> tuple[float, float]:
    """(warp decode, expert path) modelled µs for T tokens, where nothing is measured.

    Both read each distinct expert the T tokens touch from HBM once, E·(1 − (1 − K/E)^T) of them
    (:func:`warpdecode.configs.expected_distinct`), 3·I·H·w_elem bytes each (``w_elem``: bytes per
    weight, 1 for FP8 weights; default ``elem``, the activations' bytes per element). Warp decode's pair reads
    an expert's rows once per (token, slot): the T·K − distinct reads past the first run at
    ``L2_REREAD_TBPS``, a rate between HBM's and L2's (some of them hit L2, the pair's times show:
    at T = 4 it moves T·K experts' bytes faster than the read ceiling). The expert path reads each
    distinct expert once, plus its activations (x gathered, the (T·K, 2I) and (T·K, I)
    intermediates, the (T·K, H) partial outputs), pays more launches, and its GEMM tiles stream the
    weights at ``EXPERT_READ_FRACTION`` of the ceiling where the pair's rows stream at it. The grouped schedule
    (one read per expert for up to 16 tokens, which the defaults take once tokens share experts:
    :func:`warpdecode.configs.shares_experts`) is not modelled here; :func:`model_crossover` leaves
    it to the expert path. With FP8 weights (``w_elem`` 1) the pair's weight reads run at
    ``FP8_PAIR_READ_FRACTION`` of those rates and the expert path's at ``FP8_EXPERT_READ_FRACTION``
    of the ceiling."""
    expert_bytes = 3 * I * H * (w_elem or elem)
    distinct = expected_distinct(E, K, T)
    hbm_us = distinct * expert_bytes / (READ_TBPS * 1e6)
    fp8 = (w_elem or elem) == 1
    pair_fraction, expert_fraction = (FP8_PAIR_READ_FRACTION, FP8_EXPERT_READ_FRACTION) if fp8 else \
        (1.0, EXPERT_READ_FRACTION)
    weights = hbm_us + (T * K - distinct) * expert_bytes / (L2_REREAD_TBPS * 1e6)
    warp = WARP_LAUNCHES * LAUNCH_US + weights / pair_fraction
    act_bytes = T * K * (H + 2 * I + 2 * I + 2 * H) * elem
    expert = EXPERT_LAUNCHES * LAUNCH_US + hbm_us / expert_fraction + act_bytes / (READ_TBPS * 1e6)
    return warp, expert


@functools.cache
def model_crossover(H: int, I: int, E: int, K: int, elem: int = 2, w_elem: int | None = None) -> int:  # noqa: E741
    """The largest T on :data:`T_GRID` up to which :func:`model_us` has warp decode no slower than
    the expert path at every T of the grid (the rule the measured crossover follows); 0 if none.

    With weights in the activations' dtype (``w_elem`` None) it also ends before the first T at
    which warp decode's defaults run the grouped schedule (:func:`warpdecode.configs.shares_experts`),
    which the model does not price: there the grouped schedule and the expert path read the same
    bytes, and the expert path is the faster of the two in 71 of 72 routing draws with tuned
    configs (1.01-1.13× its time, ``experiments/results/NVIDIA_H200/schedule_draws.csv``, T = 4, 8, 16
    on four presets), and with defaults in 56 of the 61 rows of ``defaults.csv`` where they run it
    (the other five, dbrx and Mixtral at T = 4-16, within 1.9 %). FP8 weights run the pair at every T."""
    best = 0
    for T in T_GRID:
        warp, expert = model_us(H, I, E, K, T, elem, w_elem)
        if warp > expert or (w_elem is None and shares_experts(E, K, T)):
            break
        best = T
    return best


def crossover(H: int, I: int, E: int, K: int, elem: int = 2, weights: str | None = None) -> int:  # noqa: E741
    """The largest T for which ``auto`` picks ``warp``: measured on this GPU where a table has the
    shape (``warpdecode/tuned/<GPU>.json``, written by ``python -m bench report``, or the
    user's cache, written by ``python -m warpdecode tune --shape``), else :func:`model_crossover`.
    ``weights``: None for weights in the activations' dtype, or an FP8 format ("block128",
    "mxfp8"), whose crossover is the table's ``crossover_<format>`` entry, else the model's with
    1-byte weights."""
    measured = measured_crossover(H, I, E, K, weights)
    if measured is not None:
        return measured
    return model_crossover(H, I, E, K, elem, None if weights is None else 1)


def measured_crossover(H: int, I: int, E: int, K: int, weights: str | None = None) -> int | None:  # noqa: E741
    """The crossover a tuned table on this GPU holds for the shape (``weights``: as :func:`crossover`),
    or None where none does."""
    family = "crossover" if weights is None else f"crossover_{weights}"
    measured = load_tuned().get(family, {}).get(shape_key(H, I, E, K))
    return None if measured is None else int(measured)


def pick_method(T: int, H: int, I: int, E: int, K: int, elem: int = 2, weights: str | None = None) -> str:  # noqa: E741
    return "warp" if T <= crossover(H, I, E, K, elem, weights) else "expert"
