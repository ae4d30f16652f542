"""Compile a kernel for a GPU without one, and read what the compiler made of it.

Triton compiles ahead of time for any target: :func:`compile_many` runs the real pipeline
(Triton IR → TritonGPU IR with layouts → LLVM → PTX → cubin through the ptxas bundled with
Triton) for an architecture (``arch``: 80, 90, 100 or 120, compiled as sm_80, sm_90a, sm_100a,
sm_120a; :func:`compile_sm90` for Hopper), specializing arguments the way a launch would
(pointers 16-byte aligned, integers divisible by 16 marked so). It needs no GPU, so CI checks
that every kernel compiles for the GPU — the interpreter accepts code the GPU compiler rejects —
and notebooks can show the layouts and the register report anywhere.

When this process runs kernels in the CPU interpreter, its kernels are interpreter objects the
compiler cannot take, so compilation happens in a child process started with the interpreter off.
"""

from __future__ import annotations

import contextlib
import dataclasses
import inspect
import io
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

from bench import persistent as _kf
from bench import unfused as _un
from warpdecode import _runtime, configs
from warpdecode import expert as _ex
from warpdecode import warp as _wp
from warpdecode.kernels import expert as _kx
from warpdecode.kernels import warp_fp8 as _k8
from warpdecode.kernels import warp_grouped as _kg
from warpdecode.kernels import warp_pair as _kp

_TORCH_TO_TT = {
    torch.bfloat16: "bf16", torch.float16: "fp16", torch.float32: "fp32", torch.float8_e4m3fn: "fp8e4nv",
    torch.int32: "i32", torch.int64: "i64", torch.uint8: "u8",
}


@dataclass
class Compiled:
    name: str
    asm: dict  # "ttir", "ttgir", "llir", "ptx" (text) and "cubin" (bytes)
    shared: int  # bytes of shared memory per program
    num_warps: int
    num_stages: int
    ptxas: str = ""  # what ptxas -v said when Triton built the cubin ("" where the binary came from Triton's cache)


@dataclass
class Job:
    """What to compile: a kernel by module and name, example arguments, meta-parameters."""

    module: str
    name: str
    args: dict  # argument -> torch dtype (a pointer to that dtype), int (an example value) or "tensordesc<…>"
    constexprs: dict
    num_warps: int = 4
    num_stages: int = 3
    arch: int = 90  # compute capability, major·10 + minor: 80, 90, 100, 120


#: The architectures the compile checks target (see arch_name).
ARCHS = (80, 90, 100, 120)


#: Launch limits by architecture (80, 90, 100, 120), for compiling as for a GPU that is not here: shared memory
#: per program (opt-in) and per SM, registers and threads per SM, SMs of the A100, H100/H200, B200, RTX 5090
#: (CUDA C++ Programming Guide, "Technical Specifications per Compute Capability").
ARCH_LIMITS = {
    80: {"arch": 80, "shared_per_block": 166912, "shared_per_sm": 167936, "regs_per_sm": 65536,
         "threads_per_sm": 2048, "sms": 108},
    90: {"arch": 90, "shared_per_block": 232448, "shared_per_sm": 233472, "regs_per_sm": 65536,
         "threads_per_sm": 2048, "sms": 132},
    100: {"arch": 100, "shared_per_block": 232448, "shared_per_sm": 233472, "regs_per_sm": 65536,
          "threads_per_sm": 2048, "sms": 148},
    120: {"arch": 120, "shared_per_block": 101376, "shared_per_sm": 102400, "regs_per_sm": 65536,
          "threads_per_sm": 1536, "sms": 170},
}

def arch_name(arch: int) -> str:
    """The target Triton compiles ``arch`` for: ``sm_90a``, ``sm_100a``, ``sm_120a`` (the
    architecture-specific features: wgmma, tcgen05, setmaxnreg), ``sm_80`` (Ampere has no 'a')."""
    return f"sm_{arch}{'a' if arch >= 90 else ''}"


def _arg_kind(v):
    """An argument as a job keeps it: a tensor's dtype, a host TensorDescriptor's type as a launch specializes it
    (``tensordesc<dtype[block shape]>``), else the value."""
    from triton.runtime.jit import mangle_type
    from triton.tools.tensor_descriptor import TensorDescriptor

    return v.dtype if isinstance(v, torch.Tensor) else mangle_type(v) if isinstance(v, TensorDescriptor) else v


def job(kernel, args: dict, constexprs: dict, *, num_warps: int = 4, num_stages: int = 3, arch: int = 90) -> Job:
    """A :class:`Job` for ``kernel``; ``args`` values may be tensors (any device, ``meta`` is fine),
    dtypes, ints or host TensorDescriptors (kept as their type). An argument left out takes its default; None is a
    constexpr, as a launch specializes it."""
    fn = getattr(kernel, "fn", kernel)
    params = inspect.signature(fn).parameters
    given = {**{n: p.default for n, p in params.items() if p.default is not p.empty}, **args, **constexprs}
    const = {n for n, v in given.items() if n in constexprs or v is None or params[n].annotation in (tl.constexpr,
                                                                                                    "tl.constexpr")}
    spec = {k: _arg_kind(v) for k, v in given.items() if k not in const}
    return Job(fn.__module__, fn.__name__, spec, {n: given[n] for n in const}, num_warps, num_stages, arch)


def _source(kernel, j: Job) -> tuple[dict, dict]:
    """The signature and the specialization attributes a launch of ``kernel`` with ``j``'s arguments
    gets: pointers 16-byte aligned, integers divisible by 16 marked so."""
    signature, attrs = {}, {}
    for i, name in enumerate(kernel.arg_names):
        if name in j.constexprs:
            signature[name] = "constexpr"
            continue
        v = j.args[name]
        if isinstance(v, torch.dtype):
            signature[name] = "*" + _TORCH_TO_TT[v]
            attrs[(i,)] = [["tt.divisibility", 16]]
        elif isinstance(v, str):  # a TensorDescriptor's type
            signature[name] = v
        else:
            v = int(v)
            signature[name] = "i32" if -(2**31) <= v < 2**31 else "i64"
            if v % 16 == 0 and name not in kernel.do_not_specialize:
                attrs[(i,)] = [["tt.divisibility", 16]]
    return signature, attrs


def _compile_here(j: Job) -> Compiled:
    import importlib

    import triton
    from triton import knobs
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    kernel = getattr(importlib.import_module(j.module), j.name)
    signature, attrs = _source(kernel, j)
    src = ASTSource(fn=kernel, signature=signature, constexprs=j.constexprs, attrs=attrs)
    # Triton runs ptxas with -v to build the cubin; its log, printed, is the register report (ptxas runs once)
    log, before = io.StringIO(), knobs.nvidia.dump_ptxas_log
    knobs.nvidia.dump_ptxas_log = True
    try:
        with contextlib.redirect_stdout(log):
            c = triton.compile(src, target=GPUTarget("cuda", j.arch, 32),
                               options={"num_warps": j.num_warps, "num_stages": j.num_stages})
    finally:
        knobs.nvidia.dump_ptxas_log = before
    return Compiled(j.name, dict(c.asm), c.metadata.shared, j.num_warps, j.num_stages, log.getvalue())


def compile_key(j: Job) -> tuple:
    """What decides a job's binary: two jobs with equal keys compile to the same code (integer
    arguments count only by their width and their divisibility by 16, as a launch specializes them)."""
    kind = {k: (str(v) if isinstance(v, (torch.dtype, str)) else
                ("i32" if -(2**31) <= int(v) < 2**31 else "i64", int(v) % 16 == 0)) for k, v in j.args.items()}
    return (j.module, j.name, repr(sorted(kind.items())), repr(sorted(j.constexprs.items())), j.num_warps,
            j.num_stages, j.arch)


@dataclass
class CompileError:
    """A job the compiler rejected: :func:`compile_many` with ``errors="keep"`` returns it in the
    job's place."""

    name: str
    arch: int
    message: str  # the exception, and what the compiler printed before it


def _try_compile(j: Job) -> Compiled | CompileError:
    """:func:`_compile_here`, or what failed: the exception and the compiler's own last lines of
    stderr (MLIR's pass failures print the reason there, not in the exception)."""
    with tempfile.TemporaryFile(mode="w+") as err:
        sys.stderr.flush()
        saved = os.dup(2)
        os.dup2(err.fileno(), 2)
        try:
            return _compile_here(j)
        except Exception as e:  # any rejection: a pass failure, an unsupported type, an assertion
            sys.stderr.flush()
            err.seek(0)
            return CompileError(j.name, j.arch, f"{type(e).__name__}: {e}\n{err.read()[-3000:]}".strip())
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)


def compile_many(jobs: list[Job], *, arch: int | None = None, errors: str = "raise") -> list:
    """Compile every job for its architecture (``Job.arch``, or ``arch`` for all of them where given),
    each distinct one once (:func:`compile_key`), in one child process when this one interprets.
    Returns :class:`Compiled` per job; a job the compiler rejects raises (``errors="raise"``), or
    (``errors="keep"``) is returned as a :class:`CompileError`, the others compiled all the same."""
    if errors not in ("raise", "keep"):
        raise ValueError(f"errors must be 'raise' or 'keep', got {errors!r}")
    if arch is not None:
        jobs = [dataclasses.replace(j, arch=arch) for j in jobs]
    keys = [compile_key(j) for j in jobs]
    distinct = list({k: j for k, j in zip(keys, jobs, strict=True)}.items())
    if not _runtime.INTERPRET:
        built = [_try_compile(j) for _, j in distinct]
    else:
        with tempfile.TemporaryDirectory() as d:
            src, dst = Path(d) / "jobs.pkl", Path(d) / "out.pkl"
            src.write_bytes(pickle.dumps([j for _, j in distinct]))
            root = str(Path(__file__).resolve().parents[1])  # the checkout, so the child finds bench/
            path = os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p)
            env = {**os.environ, "TRITON_INTERPRET": "0", "PYTHONPATH": path}
            res = subprocess.run([sys.executable, "-m", "bench.compiled", str(src), str(dst)], env=env,
                                 capture_output=True, text=True)
            if res.returncode != 0:
                targets = ", ".join(sorted({arch_name(j.arch) for _, j in distinct}))
                raise RuntimeError(f"compiling for {targets} failed:\n{res.stderr[-4000:]}")
            built = pickle.loads(dst.read_bytes())
    failed = next((c for c in built if isinstance(c, CompileError)), None)
    if failed and errors == "raise":
        raise RuntimeError(f"compiling {failed.name} for {arch_name(failed.arch)} failed:\n{failed.message}")
    by_key = {k: c for (k, _), c in zip(distinct, built, strict=True)}
    return [by_key[k] for k in keys]


def compile_sm90(kernel, args: dict, constexprs: dict, *, num_warps: int = 4, num_stages: int = 3) -> Compiled:
    """Compile one kernel for sm_90a; see :func:`job` for the arguments."""
    return compile_many([job(kernel, args, constexprs, num_warps=num_warps, num_stages=num_stages)])[0]


def target(compiled: Compiled) -> str:
    """The architecture the kernel was compiled for, as its PTX names it (``sm_90a``, ``sm_80``)."""
    return re.search(r"\.target (sm_\w+)", compiled.asm["ptx"]).group(1)


def ptxas_log(compiled: Compiled) -> str:
    """What ptxas -v says about the kernel's PTX: the log of the build itself (``Compiled.ptxas``), else
    (a binary from Triton's cache) ptxas run again as Triton runs it to build the cubin: Triton's
    own ``make_cubin`` for the PTX's target, so its ptxas (``get_ptxas``: the Blackwell one for
    sm_100a and sm_120a, on Triton 3.9 for sm_90a too) and its flags (from Triton 3.8,
    ``--regAllocOptLevel=2``, without which ptxas 13 reports spills at 128 registers that the
    cubin Triton launches does not have)."""
    if "Used" in compiled.ptxas:  # the log of the build itself
        return compiled.ptxas
    from triton import knobs
    from triton.backends.compiler import GPUTarget
    from triton.backends.nvidia.compiler import CUDABackend

    arch = int(re.sub(r"\D", "", target(compiled)))
    backend = CUDABackend(GPUTarget("cuda", arch, 32))
    opt = backend.parse_options({"num_warps": compiled.num_warps, "num_stages": compiled.num_stages})
    log, before = io.StringIO(), knobs.nvidia.dump_ptxas_log
    knobs.nvidia.dump_ptxas_log = True  # make_cubin prints ptxas's log to stdout
    try:
        with contextlib.redirect_stdout(log):
            backend.make_cubin(compiled.asm["ptx"], {}, opt, arch)
    finally:
        knobs.nvidia.dump_ptxas_log = before
    return log.getvalue()


def ptxas_report(compiled: Compiled) -> dict:
    """Registers per thread, spill bytes and stack frame, from :func:`ptxas_log`."""
    text = ptxas_log(compiled)

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
    """How many programs of ``compiled`` one SM of its architecture holds at once
    (:func:`bench.persistent.programs_per_sm` with the register count ptxas reports and the SM's
    limits, ``ARCH_LIMITS``)."""
    limits = ARCH_LIMITS[int(re.sub(r"\D", "", target(compiled)))]
    return _kf.programs_per_sm(ptxas_report(compiled)["registers"], compiled.num_warps, compiled.shared,
                               regs=limits["regs_per_sm"], threads=limits["threads_per_sm"],
                               smem=limits["shared_per_sm"])


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
def _as_on_a_gpu(gpu_name: str, launches: list, arch: int = 90):
    """warpdecode's Python side as it runs on ``gpu_name`` (its tuned table, whole, whichever
    Triton release it was tuned on: so the tuned configurations compile on every release), a GPU
    of architecture ``arch`` (its limits, ``ARCH_LIMITS``, for the defaults; programmatic
    dependent launch from sm_90 on; tensor-core GEMMs), every kernel replaced by a recorder; all
    undone on exit."""
    limits = ARCH_LIMITS[arch]
    pdl = arch >= 90
    gpu_runtime = types.SimpleNamespace(INTERPRET=False, HAS_GPU=True, HAS_PDL=pdl, USE_PDL=pdl,
                                        gpu_name=lambda: gpu_name, DEFAULT_DEVICE=torch.device("cuda"),
                                        device_limits=lambda: dict(limits))
    with contextlib.ExitStack() as stack:
        stack.enter_context(mock.patch.object(configs, "_runtime", gpu_runtime))
        stack.enter_context(mock.patch.object(configs, "for_this_release", lambda table: table))
        stack.enter_context(mock.patch.object(_ex, "_runtime", gpu_runtime))
        stack.enter_context(mock.patch.object(_wp, "_runtime", gpu_runtime))
        stack.enter_context(mock.patch.object(_wp, "USE_PDL", pdl))
        # the persistent kernel's grid and barrier buffer, as on that GPU's SMs, without a GPU
        stack.enter_context(mock.patch.object(_kf, "_runtime", gpu_runtime))
        stack.enter_context(mock.patch.object(_kf, "barrier_state", lambda *a, **k: torch.empty(
            3, dtype=torch.int32, device="meta")))
        stack.enter_context(mock.patch.object(_kf, "fused_grid", lambda kernel, args, meta, cfg, device: (
            cfg["programs_per_sm"] * limits["sms"],)))
        for mod in (_kx, _kp, _kg, _kf, _k8, _un):
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


def _job(kernel, args, kwargs, arch: int = 90) -> Job:
    params = inspect.signature(kernel.fn).parameters
    bound_args = inspect.signature(kernel.fn).bind(*args, **{k: v for k, v in kwargs.items() if k in params})
    bound_args.apply_defaults()  # a constexpr the launcher leaves at its default compiles with that value
    is_constexpr = {n: p.annotation in (tl.constexpr, "tl.constexpr") for n, p in params.items()}
    constexprs = {n: v for n, v in bound_args.arguments.items() if is_constexpr[n]}
    runtime = {n: v for n, v in bound_args.arguments.items() if not is_constexpr[n]}
    return job(kernel, runtime, constexprs, num_warps=kwargs.get("num_warps", 4),
               num_stages=kwargs.get("num_stages", 3), arch=arch)


def meta_fp8_weights(shape, weights: str, dtype=torch.bfloat16):
    """(w13, w2) FP8 weights of ``weights`` format for ``shape`` on the ``meta`` device (no data)."""
    from warpdecode.quant import CLASSES

    cls = CLASSES[weights]
    pair = []
    for dims, gate_up in (((shape.E, 2 * shape.I, shape.H), True), ((shape.E, shape.H, shape.I), False)):
        q = torch.empty(dims, dtype=torch.float8_e4m3fn, device="meta")
        s = torch.empty(cls.scale_shape_for(dims, gate_up), device="meta",
                        dtype=torch.float32 if weights == "block128" else torch.uint8)
        pair.append(cls(q, s, dtype=dtype, gate_up=gate_up, name="w13" if gate_up else "w2"))
    return tuple(pair)


def record_launches(path: str, shape, T: int, *, gpu_name: str, dtype=torch.bfloat16, arch: int = 90,
                    config: dict | None = None, weights: str | None = None, **options) -> list[Launch]:
    """The kernel launches ``path`` ("warp", "expert", or "expert-unfused": ``bench.unfused``; "warp" with
    ``schedule="fused"``: ``bench.persistent.moe_fused``, ``config`` its persistent config) makes for
    ``shape`` and T on ``gpu_name``, a GPU of architecture ``arch`` (80, 90, 100, 120; its jobs compile
    for it), with the configs its
    launchers pick there (``configs.warp_config`` / ``expert_config`` from
    ``warpdecode/tuned/<gpu_name>.json``, else the defaults from that architecture's limits, unless
    ``config`` is given, and checked as a table's entry is: ``configs.check_warp`` /
    ``check_expert``). Runs on ``meta`` tensors, launches nothing, and works on any machine.
    ``weights``: None (weights in ``dtype``), or an FP8 format ("block128", "mxfp8"): FP8 weights
    for ``dtype`` activations. ``act_format="fp8"`` and FP8 weights below sm_89 are refused, as
    ``warpdecode.moe`` refuses them there."""
    from warpdecode.api import FP8_CAPABILITY

    fp8_arch = arch >= 10 * FP8_CAPABILITY[0] + FP8_CAPABILITY[1]
    if options.get("act_format") == "fp8" and not fp8_arch:
        raise ValueError(f"act_format='fp8' needs FP8 tensor cores, which {arch_name(arch)} does not have")
    if weights is not None and not fp8_arch:
        raise ValueError(f"FP8 weights need FP8 tensor cores, which {arch_name(arch)} does not have")
    s = shape  # a MoEShape (or anything with H, I, E, K)
    meta = dict(device="meta")
    x = torch.empty(T, s.H, dtype=dtype, **meta)
    if weights is None:
        w13, w2 = torch.empty(s.E, 2 * s.I, s.H, dtype=dtype, **meta), torch.empty(s.E, s.H, s.I, dtype=dtype, **meta)
    else:
        w13, w2 = meta_fp8_weights(s, weights, dtype)
    topk_weights = torch.empty(T, s.K, dtype=torch.float32, **meta)
    topk_ids = torch.empty(T, s.K, dtype=torch.int32, **meta)
    launches = []
    run = {"warp": _wp.moe_warp, "expert": _ex.moe_expert, "expert-unfused": _un.moe_expert_unfused}[path]
    if path == "warp" and options.get("schedule") == "fused":  # beside the package; moe_fused checks its config
        run = _kf.moe_fused
        del options["schedule"]
    with _as_on_a_gpu(gpu_name, launches, arch):
        if config is not None and run is _wp.moe_warp:  # checked as a table's entry is, on that GPU's limits
            configs.check_warp(config, weights, where="config")
        elif config is not None and run is not _kf.moe_fused:
            configs.check_expert(config, options.get("act_format") == "fp8", weights, where="config")
        run(x, w13, w2, topk_weights, topk_ids, config=config, **options)
    return [Launch(k.fn.__name__, tuple(grid), _job(k, a, kw, arch)) for k, grid, a, kw in launches]


if __name__ == "__main__":  # the child process of compile_many
    from bench import compiled  # by its package name, so the results unpickle in the parent

    jobs = pickle.loads(Path(sys.argv[1]).read_bytes())
    # one compiler process per core: the jobs are independent, and a core the caller leaves idle is used
    from concurrent.futures import ProcessPoolExecutor
    from multiprocessing import get_context

    with ProcessPoolExecutor(max_workers=min(len(jobs), os.cpu_count() or 1), mp_context=get_context("fork")) as pool:
        built = list(pool.map(compiled._try_compile, jobs, chunksize=4))
    Path(sys.argv[2]).write_bytes(pickle.dumps(built))
