"""Three fixes to Triton's CPU interpreter (applied only when it is in use).

1. Float rounding: Triton 3.6's interpreter truncates float32 → bfloat16 and rounds narrower types
half up; the conversions between float32, bfloat16, float16 and both FP8 formats become PyTorch's
(nearest even, as the GPU; ``tests/test_interpreter.py``).
2. NumPy >= 2.4 refuses ``int()`` of the one-element arrays holding scalar kernel arguments in
``tl.tensor.__index__``; ``.item()`` works under any NumPy (upstream triton-lang/triton#9172).
3. Import order (:func:`reinterpret_language`): Triton's helpers are rebuilt for the interpreter
if ``triton.language`` was imported before it was switched on (``transformers`` does).
"""

import sys

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


_original_patch_lang_tensor = _interp._patch_lang_tensor


def _patch_lang_tensor(tensor, scope):
    # The interpreter installs its tensor methods for the length of each launch (``scope`` undoes
    # them afterwards, last in first out); ours goes in after its own, so it wins and is undone first.
    _original_patch_lang_tensor(tensor, scope)
    scope.set_attr(tensor, "__index__", lambda self: int(self.handle.data.item()))


def apply():
    _interp._convert_float = _convert_float
    # _patch_lang looks this name up in the module at each launch, so replacing it here takes effect.
    _interp._patch_lang_tensor = _patch_lang_tensor


def reinterpret_language():
    """Replace ``triton.language``'s compiler-built ``@triton.jit`` helpers by interpreted twins."""
    import triton.language as tl
    from triton.runtime.interpreter import InterpretedFunction
    from triton.runtime.jit import JITFunction

    twins = {}

    def twin(obj):
        if id(obj) not in twins:
            twins[id(obj)] = InterpretedFunction(obj.fn)
        return twins[id(obj)]

    modules = [m for name, m in list(sys.modules.items()) if name.startswith("triton.language") and m is not None]
    for mod in modules:
        for name, obj in list(vars(mod).items()):
            if isinstance(obj, JITFunction):
                setattr(mod, name, twin(obj))
    for name, obj in list(vars(tl.core.tensor).items()):
        if isinstance(obj, JITFunction):
            setattr(tl.core.tensor, name, twin(obj))
