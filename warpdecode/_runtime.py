"""Where kernels run, decided once, before any Triton kernel is defined (Triton reads
``TRITON_INTERPRET`` at ``@triton.jit``; ``warpdecode/__init__.py`` imports this first). Without a
CUDA GPU every kernel runs in Triton's CPU interpreter, also when another library imported Triton
first (:mod:`warpdecode._interpreter_fix`); ``TRITON_INTERPRET=1`` forces it on a GPU machine.
"""

import os
import sys

import torch

HAS_GPU = torch.cuda.is_available()
_triton_first = "triton.language" in sys.modules and "TRITON_INTERPRET" not in os.environ
if not HAS_GPU:
    os.environ.setdefault("TRITON_INTERPRET", "1")

#: True when Triton kernels execute in the CPU interpreter.
INTERPRET = os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")
if INTERPRET:
    from . import _interpreter_fix

    _interpreter_fix.apply()
    if _triton_first:
        # triton.language was imported first (transformers does): rebuild its helpers for the interpreter
        _interpreter_fix.reinterpret_language()

#: Programmatic dependent launch (launched while its predecessor runs, ``gdc_wait``): Hopper and newer.
HAS_PDL = not INTERPRET and HAS_GPU and torch.cuda.get_device_capability()[0] >= 9

#: The values a ``WARPDECODE_*`` switch takes, in any case; unset or empty, a switch takes its default.
ON_OFF = {"1": True, "true": True, "yes": True, "on": True, "0": False, "false": False, "no": False, "off": False}


def env_choice(name: str, choices: dict, default):
    """``choices[$name.lower()]``, ``default`` where unset or empty, else ValueError naming the variable."""
    raw = os.environ.get(name, "")
    if raw == "":
        return default
    try:
        return choices[raw.lower()]
    except KeyError:
        raise ValueError(f"{name}={raw!r} is not one of {', '.join(choices)} (any case; unset or empty: the "
                         "default)") from None


def env_switch(name: str, default: bool) -> bool:
    """An on/off variable: 1/true/yes/on or 0/false/no/off (:data:`ON_OFF`), else ValueError."""
    return env_choice(name, ON_OFF, default)


#: Whether both paths use PDL: ``WARPDECODE_PDL=0`` turns it off (read everywhere, so a bad value fails).
USE_PDL = env_switch("WARPDECODE_PDL", True) and HAS_PDL

#: The device new tensors go to when the caller does not say: the GPU when kernels compile for it.
DEFAULT_DEVICE = torch.device("cuda" if HAS_GPU and not INTERPRET else "cpu")


def gpu_name() -> str:
    """The GPU kernels run on, or a description of the interpreter."""
    if DEFAULT_DEVICE.type == "cuda":
        return torch.cuda.get_device_name()
    return "CPU (Triton interpreter)"


#: The H100/H200's (sm_90) launch limits the defaults read, where no GPU reports its own: shared memory per
#: program (opt-in) and SMs (per-SM limits, for compiled-code inspection: ``bench/compiled.py``).
HOPPER_LIMITS = {"arch": 90, "shared_per_block": 232448, "sms": 132}


def device_limits() -> dict:
    """This GPU's launch limits (:data:`HOPPER_LIMITS`' keys); Hopper's without a GPU or where torch reports none."""
    if DEFAULT_DEVICE.type != "cuda":
        return dict(HOPPER_LIMITS)
    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    return {"arch": 10 * props.major + props.minor, "sms": props.multi_processor_count,
            "shared_per_block": getattr(props, "shared_memory_per_block_optin", HOPPER_LIMITS["shared_per_block"])}
