"""Where kernels run, decided once, before any Triton kernel is defined.

Triton reads ``TRITON_INTERPRET`` when ``@triton.jit`` decorates a function, so this module
must be imported before any module under ``warpdecode.kernels``. ``warpdecode/__init__.py``
imports it first. On a machine without a CUDA GPU every kernel then runs through Triton's CPU
interpreter, with no action from the user, also when another library imported Triton first
(see :mod:`warpdecode._interpreter_fix`); set ``TRITON_INTERPRET=1`` yourself to force the
interpreter on a GPU machine (tensors must then live on the CPU).
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
        # Something (transformers does) imported triton.language before the interpreter was on, so
        # its own helpers (tl.cdiv, tl.sum, ...) were built for the GPU compiler; rebuild them.
        _interpreter_fix.reinterpret_language()

#: Programmatic dependent launch (a kernel launched while its predecessor still runs, waiting for it
#: with ``gdc_wait``): Hopper and newer, not the interpreter.
HAS_PDL = not INTERPRET and HAS_GPU and torch.cuda.get_device_capability()[0] >= 9

#: Whether the kernels use it: ``WARPDECODE_PDL=0`` turns it off in both paths, to measure what it
#: buys (warp decode's two kernels, warpdecode.warp.USE_PDL; the expert path's four launches).
USE_PDL = HAS_PDL and os.environ.get("WARPDECODE_PDL", "1") != "0"

#: The device new tensors go to when the caller does not say: the GPU when kernels compile for it.
DEFAULT_DEVICE = torch.device("cuda" if HAS_GPU and not INTERPRET else "cpu")


def gpu_name() -> str:
    """The GPU kernels run on, or a description of the interpreter."""
    if DEFAULT_DEVICE.type == "cuda":
        return torch.cuda.get_device_name()
    return "CPU (Triton interpreter)"


#: Hopper's (sm_90) limits, used where no GPU reports its own (the interpreter, compile checks).
HOPPER_LIMITS = {"shared_per_block": 232448, "regs_per_sm": 65536, "sms": 132}


def device_limits() -> dict:
    """The launch limits of the GPU kernels run on: the most shared memory one program may take
    (bytes, opt-in), registers per SM and the SM count; Hopper's where there is no GPU or an older
    torch does not report one."""
    if DEFAULT_DEVICE.type != "cuda":
        return dict(HOPPER_LIMITS)
    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    return {"shared_per_block": getattr(props, "shared_memory_per_block_optin", HOPPER_LIMITS["shared_per_block"]),
            "regs_per_sm": getattr(props, "regs_per_multiprocessor", HOPPER_LIMITS["regs_per_sm"]),
            "sms": props.multi_processor_count}
