"""The interpreter fix (warpdecode/_interpreter_fix.py): Triton's CPU interpreter must round
float32 → bfloat16 / float16 / float8_e4m3fn to nearest even, as the GPU and torch's ``.to`` do.

Each case holds values chosen to expose the stock interpreter's faults (truncation, half-up
ties, the carry into the exponent dropped), plus random values. The stock conversion is run
on the same values to prove they do expose it, so the check cannot pass by accident.
Skipped where kernels compile for a GPU (the interpreter is not in use).
"""

from __future__ import annotations

import struct

import pytest
import torch
import triton
import triton.language as tl
from triton.runtime import interpreter as _interp

import warpdecode  # conftest.py imported it before triton: the kernel below is an interpreter one
from warpdecode import _interpreter_fix

pytestmark = pytest.mark.skipif(not warpdecode.INTERPRET, reason="Triton's CPU interpreter is not in use")


@triton.jit
def _cast_kernel(x_ptr, y_ptr, N, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    mask = offs < N
    x = tl.load(x_ptr + offs, mask=mask)
    tl.store(y_ptr + offs, x.to(y_ptr.dtype.element_ty), mask=mask)


def _f32(bits: int) -> float:
    return struct.unpack("<f", struct.pack("<I", bits))[0]


# fp32 bit patterns and values, each naming what it exposes
CASES = {
    torch.bfloat16: [
        _f32(0x3F808001),  # low half just above the tie: rounds up (truncation keeps 0x3F80)
        _f32(0x3F818000),  # tie, odd 0x3F81 → even 0x3F82
        _f32(0x3F808000),  # tie, even 0x3F80 stays
        _f32(0x3FFFFFFF),  # all-ones mantissa: carries into the exponent → 2.0
        _f32(0xBF80C000),  # negative, above the tie
        _f32(0x7F7FFFFF),  # FLT_MAX → inf
        _f32(0x0000C000),  # subnormal, above the tie
    ],
    torch.float16: [
        1 + 2**-11,  # tie, even → 1
        1 + 3 * 2**-11,  # tie, odd → up
        2047.9,  # carries into the exponent → 2048
        -1.00048828125 - 2**-20,  # negative, above the tie
        65519.0,  # largest that rounds to 65504
        65520.0,  # first that rounds to inf
        3 * 2**-25,  # subnormal tie region
        1e-8,  # underflows to 0
    ],
    torch.float8_e4m3fn: [
        1 + 2**-4,  # tie, even → 1
        1 + 3 * 2**-4,  # tie, odd → 1.25
        1 + 2**-4 + 2**-12,  # just above the tie → up
        15.9,  # carries into the exponent → 16
        -1.1,  # negative
        440.0,  # → 448, the largest finite
        0.75 * 2**-6,  # subnormal
        2**-10,  # half the smallest subnormal → 0 (tie, even)
    ],
}


def _values(dtype, seed):
    g = torch.Generator().manual_seed(seed)
    special = torch.tensor(CASES[dtype], dtype=torch.float32)
    scale = 100.0 if dtype == torch.float8_e4m3fn else 1000.0
    rand = torch.randn(1000, generator=g) * torch.exp2(torch.randint(-12, 4, (1000,), generator=g).float()) * scale / 8
    if dtype == torch.float8_e4m3fn:
        # e4m3fn has no inf: out of range, torch gives NaN and the GPU saturates; stay in range
        rand = rand.clamp(-448, 448)
    return torch.cat([special, rand])


def _bits(t: torch.Tensor) -> torch.Tensor:
    return t.view({1: torch.uint8, 2: torch.int16}[t.element_size()]).to(torch.int32)


def _run(x, dtype):
    y = torch.empty(x.numel(), dtype=dtype)
    _cast_kernel[(1,)](x, y, x.numel(), BLOCK=triton.next_power_of_2(x.numel()))
    return y


@pytest.mark.filterwarnings("ignore:overflow encountered in cast")  # 65520 → inf, on purpose
@pytest.mark.parametrize("dtype", list(CASES), ids=["fp32->bf16", "fp32->fp16", "fp32->fp8e4m3fn"])
def test_interpreter_rounds_to_nearest_even(dtype, seed):
    x = _values(dtype, seed)
    y = _run(x, dtype)
    want = x.to(dtype)
    mismatch = (_bits(y) != _bits(want)).nonzero().flatten()
    assert mismatch.numel() == 0, (
        f"{len(mismatch)} of {x.numel()} values round differently from torch, first: "
        f"{x[mismatch[:4]].tolist()} → {y[mismatch[:4]].float().tolist()}, want {want[mismatch[:4]].float().tolist()}"
    )


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float8_e4m3fn], ids=["fp32->bf16", "fp32->fp8e4m3fn"])
def test_chosen_values_expose_the_stock_interpreter(dtype, monkeypatch):
    """Control: without the fix, the special values above do round wrongly (fp16 goes through
    numpy's astype in the stock interpreter, which already rounds to nearest even)."""
    x = torch.tensor(CASES[dtype], dtype=torch.float32)
    monkeypatch.setattr(_interp, "_convert_float", _interpreter_fix._original)
    stock = _run(x, dtype)
    assert (_bits(stock) != _bits(x.to(dtype))).any()


def test_fix_is_installed():
    assert _interp._convert_float is _interpreter_fix._convert_float
