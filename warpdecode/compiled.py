"""Compile a kernel for Hopper without a GPU, and read what the compiler made of it.

Triton compiles ahead of time for any target: :func:`compile_sm90` runs the real pipeline
(Triton IR → TritonGPU IR with layouts → LLVM → PTX → cubin through the ptxas bundled with
Triton) for sm_90a, specializing arguments the way a launch would (pointers 16-byte aligned,
integers divisible by 16 marked so). It needs no GPU, so CI checks that every kernel compiles
for the GPU — the interpreter accepts code the GPU compiler rejects — and notebooks can show
the layouts and the register report anywhere.

When this process runs kernels in the CPU interpreter, its kernels are interpreter objects the
compiler cannot take, so compilation happens in a child process started with the interpreter off.
"""

from __future__ import annotations

import contextlib
import inspect
import os
import pickle
import re
import subprocess
import sys
import tempfile
import types
from dataclasses import dataclass
from pathlib import Path
from unittest import mock

import torch
import triton.language as tl

from . import _runtime, configs
from . import expert as _ex
from . import warp as _wp
from .kernels import expert as _kx
from .kernels import warp_grouped as _kg
from .kernels import warp_pair as _kp
from .kernels import warp_persistent as _kf

_TORCH_TO_TT = {
    torch.bfloat16: "bf16", torch.float16: "fp16", torch.float32: "fp32", torch.float8_e4m3fn: "fp8e4nv",
    torch.int32: "i32", torch.int64: "i64",
}


@dataclass
class Compiled:
    name: str
    asm: dict  # "ttir", "ttgir", "llir", "ptx" (text) and "cubin" (bytes)
    shared: int  # bytes of shared memory per program
    num_warps: int
    num_stages: int


@dataclass
class Job:
    """What to compile: a kernel by module and name, example arguments, meta-parameters."""

    module: str
    name: str
    args: dict  # argument -> torch dtype (a pointer to that dtype) or int (an example value)
    constexprs: dict
    num_warps: int = 4
    num_stages: int = 3


def job(kernel, args: dict, constexprs: dict, *, num_warps: int = 4, num_stages: int = 3) -> Job:
    """A :class:`Job` for ``kernel``; ``args`` values may be tensors (any device, ``meta`` is fine),
    dtypes, or ints."""
    fn = getattr(kernel, "fn", kernel)
    spec = {k: (v.dtype if isinstance(v, torch.Tensor) else v) for k, v in args.items()}
    return Job(fn.__module__, fn.__name__, spec, dict(constexprs), num_warps, num_stages)


def _compile_here(j: Job) -> Compiled:
    import importlib

    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    kernel = getattr(importlib.import_module(j.module), j.name)
    signature, attrs = {}, {}
    for i, name in enumerate(kernel.arg_names):
        if name in j.constexprs:
            signature[name] = "constexpr"
            continue
        v = j.args[name]
        if isinstance(v, torch.dtype):
            signature[name] = "*" + _TORCH_TO_TT[v]
            attrs[(i,)] = [["tt.divisibility", 16]]
        else:
            v = int(v)
            signature[name] = "i32" if -(2**31) <= v < 2**31 else "i64"
            if v % 16 == 0 and name not in kernel.do_not_specialize:
                attrs[(i,)] = [["tt.divisibility", 16]]
    src = ASTSource(fn=kernel, signature=signature, constexprs=j.constexprs, attrs=attrs)
    c = triton.compile(src, target=GPUTarget("cuda", 90, 32),
                       options={"num_warps": j.num_warps, "num_stages": j.num_stages})
    return Compiled(j.name, dict(c.asm), c.metadata.shared, j.num_warps, j.num_stages)


def compile_many(jobs: list[Job]) -> list[Compiled]:
    """Compile every job for sm_90a (in one child process when this one interprets)."""
    if not _runtime.INTERPRET:
        return [_compile_here(j) for j in jobs]
    with tempfile.TemporaryDirectory() as d:
        src, dst = Path(d) / "jobs.pkl", Path(d) / "out.pkl"
        src.write_bytes(pickle.dumps(jobs))
        env = {**os.environ, "TRITON_INTERPRET": "0"}
        res = subprocess.run([sys.executable, "-m", "warpdecode.compiled", str(src), str(dst)], env=env,
                             capture_output=True, text=True)
        if res.returncode != 0:
            raise RuntimeError(f"compiling for sm_90a failed:\n{res.stderr[-4000:]}")
        return pickle.loads(dst.read_bytes())


def compile_sm90(kernel, args: dict, constexprs: dict, *, num_warps: int = 4, num_stages: int = 3) -> Compiled:
    """Compile one kernel for sm_90a; see :func:`job` for the arguments."""
    return compile_many([job(kernel, args, constexprs, num_warps=num_warps, num_stages=num_stages)])[0]


def ptxas_report(compiled: Compiled) -> dict:
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


def programs_per_sm(compiled: Compiled) -> int:
    """How many programs of ``compiled`` one Hopper SM holds at once (:func:`warpdecode.warp.programs_per_sm`
    with the register count ptxas reports)."""
    return _wp.programs_per_sm(ptxas_report(compiled)["registers"], compiled.num_warps, compiled.shared)


def layouts(compiled: Compiled) -> list[str]:
    """The distributed layouts in the TritonGPU IR: which thread and warp holds which element."""
    return [line for line in compiled.asm["ttgir"].splitlines() if re.match(r"#(blocked|mma|linear)", line)]


def global_loads(compiled: Compiled) -> list[int]:
    """Bits moved by each global load instruction in the PTX (128 = one 16-byte load per lane)."""
    widths = []
    for line in compiled.asm["ptx"].splitlines():
        m = re.search(r"\bld\.global\S*?(?:\.v(\d))?\.b(\d+)\s", line)
        if m:
            widths.append(int(m.group(1) or 1) * int(m.group(2)))
    return widths


# ---------------------------------------------------------------------------------------------
# what the launchers would launch on a GPU, recorded on any machine


class _Recorder:
    """Stands in for a kernel: ``kernel[grid](*args, **kwargs)`` records the launch."""

    def __init__(self, kernel, launches):
        self.kernel, self.launches = kernel, launches

    def __getitem__(self, grid):
        return lambda *args, **kwargs: self.launches.append((self.kernel, grid, args, kwargs))


@contextlib.contextmanager
def _as_on_a_gpu(gpu_name: str, launches: list):
    """warpdecode's Python side as it runs on ``gpu_name`` (its tuned table, programmatic
    dependent launch, tensor-core GEMMs), every kernel replaced by a recorder; all undone on exit."""
    gpu_runtime = types.SimpleNamespace(INTERPRET=False, HAS_GPU=True, HAS_PDL=True, USE_PDL=True,
                                        gpu_name=lambda: gpu_name, DEFAULT_DEVICE=torch.device("cuda"),
                                        device_limits=lambda: dict(_runtime.HOPPER_LIMITS))
    with contextlib.ExitStack() as stack:
        stack.enter_context(mock.patch.object(configs, "_runtime", gpu_runtime))
        stack.enter_context(mock.patch.object(_ex, "_runtime", gpu_runtime))
        stack.enter_context(mock.patch.object(_wp, "_runtime", gpu_runtime))
        stack.enter_context(mock.patch.object(_wp, "USE_PDL", True))
        # the persistent kernel's grid and barrier buffer, as on a 132-SM H200, without a GPU
        stack.enter_context(mock.patch.object(_wp, "barrier_state", lambda *a, **k: torch.empty(
            3, dtype=torch.int32, device="meta")))
        stack.enter_context(mock.patch.object(_wp, "fused_grid", lambda kernel, args, meta, cfg, device: (
            cfg["programs_per_sm"] * 132,)))
        for mod in (_kx, _kp, _kg, _kf):
            for name in dir(mod):
                if name.endswith("_kernel"):
                    stack.enter_context(mock.patch.object(mod, name, _Recorder(getattr(mod, name), launches)))
        configs.load_tuned.cache_clear()
        stack.callback(configs.load_tuned.cache_clear)
        yield


@dataclass
class Launch:
    kernel: str
    grid: tuple
    job: Job  # what to hand compiled.compile_many


def _job(kernel, args, kwargs) -> Job:
    params = inspect.signature(kernel.fn).parameters
    bound_args = inspect.signature(kernel.fn).bind(*args, **{k: v for k, v in kwargs.items() if k in params})
    is_constexpr = {n: p.annotation in (tl.constexpr, "tl.constexpr") for n, p in params.items()}
    constexprs = {n: v for n, v in bound_args.arguments.items() if is_constexpr[n]}
    runtime = {n: v for n, v in bound_args.arguments.items() if not is_constexpr[n]}
    return job(kernel, runtime, constexprs, num_warps=kwargs.get("num_warps", 4),
               num_stages=kwargs.get("num_stages", 3))


def record_launches(path: str, shape, T: int, *, gpu_name: str, dtype=torch.bfloat16,
                    config: dict | None = None, **options) -> list[Launch]:
    """The kernel launches ``path`` ("warp" or "expert") makes for ``shape`` and T on ``gpu_name``,
    with the configs its launchers pick there (``configs.warp_config`` / ``expert_config`` from
    ``warpdecode/tuned/<gpu_name>.json``, unless ``config`` is given). Runs on ``meta`` tensors,
    launches nothing, and works on any machine."""
    s = shape  # a MoEShape (or anything with H, I, E, K)
    meta = dict(device="meta")
    x = torch.empty(T, s.H, dtype=dtype, **meta)
    w13, w2 = torch.empty(s.E, 2 * s.I, s.H, dtype=dtype, **meta), torch.empty(s.E, s.H, s.I, dtype=dtype, **meta)
    topk_weights = torch.empty(T, s.K, dtype=torch.float32, **meta)
    topk_ids = torch.empty(T, s.K, dtype=torch.int32, **meta)
    launches = []
    with _as_on_a_gpu(gpu_name, launches):
        run = _wp.moe_warp if path == "warp" else _ex.moe_expert
        run(x, w13, w2, topk_weights, topk_ids, config=config, **options)
    return [Launch(k.fn.__name__, tuple(grid), _job(k, a, kw)) for k, grid, a, kw in launches]


if __name__ == "__main__":  # the child process of compile_many
    from warpdecode import compiled  # by its package name, so the results unpickle in the parent

    jobs = pickle.loads(Path(sys.argv[1]).read_bytes())
    Path(sys.argv[2]).write_bytes(pickle.dumps([compiled._compile_here(j) for j in jobs]))
