"""Compile a kernel for Hopper without a GPU, and read what the compiler made of it.

Triton compiles ahead of time for any target: ``compile_sm90`` runs the real pipeline
(Triton IR → TritonGPU IR with layouts → LLVM → PTX → cubin through the ptxas bundled with
Triton) for sm_90a, specializing arguments the way a launch would (pointers 16-byte aligned,
integers divisible by 16 marked so). This works on a CPU-only machine, so CI checks that every
kernel compiles for the GPU — the interpreter alone accepts code the GPU compiler rejects — and
notebooks can show the layouts and the register report anywhere.
"""

from __future__ import annotations

import os
import re
import subprocess
import tempfile
from pathlib import Path

import torch
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from triton.runtime.jit import JITFunction

HOPPER = GPUTarget("cuda", 90, 32)

_TORCH_TO_TT = {
    torch.bfloat16: "bf16", torch.float16: "fp16", torch.float32: "fp32", torch.float8_e4m3fn: "fp8e4nv",
    torch.int32: "i32", torch.int64: "i64",
}


def _as_jit(kernel):
    """The JITFunction behind a kernel, also when the interpreter wrapped it."""
    return kernel if isinstance(kernel, JITFunction) else JITFunction(kernel.fn)


def compile_sm90(kernel, args: dict, constexprs: dict, *, num_warps: int = 4, num_stages: int = 3, target=HOPPER):
    """Compile ``kernel`` for sm_90a. ``args`` maps each runtime argument to an example value
    (a tensor, possibly on the ``meta`` device, or an int); ``constexprs`` the meta-parameters."""
    fn = _as_jit(kernel)
    signature, attrs = {}, {}
    for i, name in enumerate(fn.arg_names):
        if name in constexprs:
            signature[name] = "constexpr"
        elif isinstance(args[name], torch.Tensor):
            signature[name] = "*" + _TORCH_TO_TT[args[name].dtype]
            attrs[(i,)] = [["tt.divisibility", 16]]
        else:
            v = int(args[name])
            signature[name] = "i32" if -(2**31) <= v < 2**31 else "i64"
            if v % 16 == 0:
                attrs[(i,)] = [["tt.divisibility", 16]]
    src = ASTSource(fn=fn, signature=signature, constexprs=constexprs, attrs=attrs)
    saved = os.environ.get("TRITON_INTERPRET")
    os.environ["TRITON_INTERPRET"] = "0"  # the front end reads this while it builds the IR
    try:
        return triton.compile(src, target=target, options={"num_warps": num_warps, "num_stages": num_stages})
    finally:
        if saved is None:
            del os.environ["TRITON_INTERPRET"]
        else:
            os.environ["TRITON_INTERPRET"] = saved


def ptxas_report(compiled) -> dict:
    """Registers per thread, spill bytes and stack frame, from ptxas -v on the kernel's PTX."""
    from triton.backends.nvidia.compiler import get_ptxas

    arch = re.search(r"\.target (sm_\w+)", compiled.asm["ptx"]).group(1)
    ptxas = get_ptxas(int(re.sub(r"\D", "", arch))).path
    with tempfile.TemporaryDirectory() as d:
        ptx = Path(d) / "k.ptx"
        ptx.write_text(compiled.asm["ptx"])
        out = subprocess.run([ptxas, "-v", f"--gpu-name={arch}", str(ptx), "-o", str(Path(d) / "k.cubin")],
                             capture_output=True, text=True, check=True)
    text = out.stderr + out.stdout

    def num(pattern):
        m = re.search(pattern, text)
        return int(m.group(1)) if m else 0

    return {
        "registers": num(r"Used (\d+) registers"),
        "spill_stores": num(r"(\d+) bytes spill stores"),
        "spill_loads": num(r"(\d+) bytes spill loads"),
        "stack_frame": num(r"(\d+) bytes stack frame"),
    }


def layouts(compiled) -> list[str]:
    """The distributed layouts in the TritonGPU IR (``#blocked`` lines): who holds which element."""
    return [line for line in compiled.asm["ttgir"].splitlines() if line.startswith("#blocked") or line.startswith("#mma")]


def load_widths(compiled) -> list[int]:
    """Bit widths of the global loads in the PTX (128 = one 16-byte load per lane)."""
    widths = []
    for m in re.finditer(r"ld\.global[\w.]*?\.(v[248])?\.?b(\d+)", compiled.asm["ptx"]):
        vec = int(m.group(1)[1:]) if m.group(1) else 1
        widths.append(vec * int(m.group(2)))
    return widths
