"""Correct float rounding for Triton's CPU interpreter (applied only when it is in use).

Triton 3.6's interpreter converts float32 → bfloat16 by truncating the mantissa, and its
"round to nearest even" for narrower types rounds half up and drops the carry into the exponent.
The GPU rounds to nearest even. Left alone, every bf16 output computed on the CPU carries about
twice the rounding error it has on the GPU, and FP8 values can be wrong outright, so a test of
accuracy on the CPU would measure the interpreter, not the kernel. This replaces the
interpreter's conversion between float32, bfloat16, float16 and the two FP8 formats with
PyTorch's, which rounds to nearest even as the GPU does. ``tests/test_interpreter.py`` checks it.
"""

import numpy as np
import torch
import triton.language as tl
from triton.runtime import interpreter as _interp

_TORCH = {
    tl.float32: torch.float32,
    tl.bfloat16: torch.bfloat16,
    tl.float16: torch.float16,
    tl.float8e4nv: torch.float8_e4m3fn,
    tl.float8e5: torch.float8_e5m2,
}
_BITS = {8: (np.int8, torch.int8), 16: (np.int16, torch.int16), 32: (np.int32, torch.int32)}
_original = _interp._convert_float


def _convert_float(input, input_dtype, output_dtype, rounding_mode):
    rtz = rounding_mode is not None and rounding_mode == _interp._ir.ROUNDING_MODE.RTZ
    if rtz or input_dtype not in _TORCH or output_dtype not in _TORCH:
        return _original(input, input_dtype, output_dtype, rounding_mode)
    np_in, t_in = _BITS[input_dtype.primitive_bitwidth]
    np_out, t_out = _BITS[output_dtype.primitive_bitwidth]
    bits = np.ascontiguousarray(input).view(np_in)
    src = torch.from_numpy(bits.copy()).view(_TORCH[input_dtype])
    out = src.to(_TORCH[output_dtype]).view(t_out).numpy()
    unsigned = getattr(np, f"uint{output_dtype.primitive_bitwidth}")
    return out.view(unsigned).reshape(np.shape(input))


def apply():
    _interp._convert_float = _convert_float
