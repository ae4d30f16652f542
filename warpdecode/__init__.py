"""warpdecode: Mixture-of-Experts decode three ways — the eager expert loop, the expert-centric
path production engines run, and two-kernel warp decode — checked against one float64 reference."""

from . import _runtime  # noqa: F401  first: decides CPU interpreter vs GPU before kernels exist
from ._runtime import DEFAULT_DEVICE, HAS_GPU, INTERPRET, gpu_name
from .api import METHODS, Plan, crossover, explain, moe, pick_method
from .presets import MODEL_PRESETS, PRESETS, MoEShape, get_preset
from .quant import experts_from_checkpoint, quantize_experts
from .reference import reference_moe, rel_error, rounding_floor
from .routing import route


def tune(H: int, I: int, E: int, K: int, *, dtype="bf16", Ts=None,  # noqa: E741
         paths=("warp", "grouped", "expert", "expert_swap"), weights: str | None = None) -> dict:
    """Tune one MoE layer shape on this GPU into the user's cache (read after the shipped tables): the
    fastest configs per token bucket and the ``auto`` crossover. ``Ts``: token buckets (default 1–16 for
    warp decode, 1–256 for the expert path). Raises without a CUDA GPU, before writing; takes minutes.
    ``dtype``, ``paths``, ``weights`` (an FP8 format, for FP8 experts): as :func:`warpdecode.tuner.tune_shape`.
    Returns the cached table (CLI: ``tune --shape``)."""
    from .tuner import tune_shape

    return tune_shape(H, I, E, K, dtype=dtype, Ts=Ts, paths=paths, weights=weights)

__version__ = "0.1.0"

__all__ = [
    "DEFAULT_DEVICE", "HAS_GPU", "INTERPRET", "METHODS", "MODEL_PRESETS", "PRESETS", "MoEShape", "Plan",
    "crossover", "experts_from_checkpoint", "explain", "get_preset", "gpu_name", "moe", "pick_method",
    "quantize_experts", "reference_moe", "rel_error", "rounding_floor", "route", "tune",
]
