"""warpdecode: Mixture-of-Experts decode three ways — the eager expert loop, the expert-centric
path production engines run, and two-kernel warp decode — checked against one float64 reference."""

from . import _runtime  # noqa: F401  first: decides CPU interpreter vs GPU before kernels exist
from ._runtime import DEFAULT_DEVICE, HAS_GPU, INTERPRET, gpu_name
from .api import METHODS, crossover, moe, pick_method
from .presets import MODEL_PRESETS, PRESETS, MoEShape, get_preset
from .reference import reference_moe, rel_error, rounding_floor
from .routing import route

__version__ = "0.1.0"

__all__ = [
    "DEFAULT_DEVICE", "HAS_GPU", "INTERPRET", "METHODS", "MODEL_PRESETS", "PRESETS", "MoEShape",
    "crossover", "get_preset", "gpu_name", "moe", "pick_method", "reference_moe", "rel_error",
    "rounding_floor", "route",
]
