"""The public entry point: one MoE layer, computed by the method you name."""

from __future__ import annotations

import dataclasses
import threading
from typing import Optional

import torch

from . import _runtime, configs
from .checks import Dims, check_kernel_device, check_moe_inputs, check_views, weight_tensors
from .costmodel import crossover, measured_crossover, pick_method
from .expert import moe_expert
from .loop import moe_loop
from .quant import CLASSES, is_fp8
from .warp import SCHEDULES, moe_warp, schedule_of

METHODS = ("loop", "expert", "warp", "auto")


@dataclasses.dataclass(frozen=True)
class Plan:
    """What :func:`moe` runs for a call, and why (:func:`explain`)."""

    method: str  # "warp", "expert" or "loop"
    schedule: str | None  # warp decode's: "split" or "grouped"; None for the other methods
    T: int
    crossover: int | None  # auto: the largest T that runs warp decode; None where nothing was weighed
    reason: str

    def __str__(self) -> str:
        what = self.method + (f" ({self.schedule} schedule)" if self.schedule else "")
        return f"T = {self.T}: {what}. {self.reason}"


def explain(x, w13, w2, topk_weights, topk_ids, *, method: str = "auto", schedule: str | None = None,
            deterministic: bool = False, batch_invariant: bool = False) -> Plan:
    """Which path and schedule ``moe`` takes, and why, launching nothing (options as in ``moe``); inputs
    checked as ``moe`` checks them, meta tensors too: ``print(warpdecode.explain(x, w13, w2, w, ids))``."""
    d = check_moe_inputs(x, w13, w2, topk_weights, topk_ids)
    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}, got {method!r}")
    check_schedule(schedule)
    fmt, crossover_T, reason = weight_format(w13), None, ""
    if method == "auto" and not batch_invariant:
        crossover_T = crossover(d.H, d.I, d.E, d.K, x.element_size(), fmt)
        measured = measured_crossover(d.H, d.I, d.E, d.K, fmt) is not None
        where = (f"measured on this GPU ({_runtime.gpu_name()}'s tuned table)" if measured else
                 "the cost model's (warpdecode.costmodel), whose constants are the NVIDIA H200's"
                 + (" (no GPU here: the kernels run in Triton's interpreter)" if _runtime.INTERPRET else ""))
        method = "warp" if d.T <= crossover_T else "expert"
        reason = (f"auto runs warp decode up to T = {crossover_T} on this layer (H={d.H}, I={d.I}, E={d.E}, "
                  f"K={d.K}{'' if fmt is None else f', {fmt} FP8 weights'}) and the expert-centric path past it; "
                  f"that crossover is {where}.")
    elif method == "auto":
        method, reason = "warp", "batch_invariant=True runs warp decode's pair with T = 1's tiles at every T."
    else:
        reason = f"method={method!r} was asked for."
    if method != "warp":
        return Plan(method, None, d.T, crossover_T, reason)
    if batch_invariant:
        return Plan("warp", "split", d.T, crossover_T, reason)
    picked = schedule or schedule_of(_warp_config(d, d.T, fmt))
    if deterministic and schedule is None and picked == "grouped":
        return Plan("warp", "split", d.T, crossover_T,
                    reason + " deterministic=True runs the pair where the grouped schedule would run.")
    source = "asked for" if schedule else "the launch configuration's (tuned table, or the defaults)"
    return Plan("warp", picked, d.T, crossover_T, reason + f" The schedule is {source}.")


def check_schedule(schedule: str | None) -> None:
    """``schedule`` is None or one of :data:`SCHEDULES`; else a ValueError naming it (``"fused"``: where it lives)."""
    if schedule is not None and schedule not in SCHEDULES:
        moved = (" (the persistent one-launch schedule is research outside the package: bench/persistent.py's "
                 "moe_fused, in a checkout of warpdecode)" if schedule == "fused" else "")
        raise ValueError(f"schedule must be None or one of {SCHEDULES}, got {schedule!r}{moved}")


def weight_format(w) -> str | None:
    """None for a plain weight tensor, else the FP8 format of ``warpdecode.quant`` weights."""
    return w.FORMAT if is_fp8(w) else None


def run_auto(x, w13, w2, topk_weights, topk_ids):
    """``method="auto"`` on validated inputs: warp decode up to the crossover, else the expert path."""
    E, two_i, H = w13.shape
    m = pick_method(x.shape[0], H, two_i // 2, E, topk_ids.shape[1], x.element_size(), weight_format(w13))
    return (moe_warp if m == "warp" else moe_expert)(x, w13, w2, topk_weights, topk_ids)


#: The first compute capability whose tensor cores take e4m3 operands (Ada, sm_89; Hopper, sm_90).
FP8_CAPABILITY = (8, 9)


def check_fp8_device(device: torch.device, what: str = "act_format='fp8'",
                     instead: str = "use act_format='native'") -> None:
    """Raise before any launch where FP8 meets a GPU older than sm_89 (the interpreter emulates it)."""
    if device.type == "cuda":
        cap, name = _gpu(device)
        if cap < FP8_CAPABILITY:
            raise ValueError(f"{what} needs a GPU with FP8 tensor cores (compute capability "
                             f"{FP8_CAPABILITY[0]}.{FP8_CAPABILITY[1]} or newer); {name} "
                             f"is {cap[0]}.{cap[1]}: {instead}")


def _gpu(device: torch.device) -> tuple[tuple[int, int], str]:
    """(compute capability, name) of a CUDA device; under ``torch.compile`` a trace-time constant."""
    return tuple(torch.cuda.get_device_capability(device)), torch.cuda.get_device_name(device)


# assume_constant_result(_gpu) without importing Dynamo (tests/test_operator_policy.py checks it)
_gpu._dynamo_marked_constant = True


def moe(x, w13, w2, topk_weights, topk_ids, *, method: str = "auto", act_dtype=None, act_format: str = "native",
        schedule: str | None = None, deterministic: bool = False, batch_invariant: bool = False,
        strict: bool = False):
    """y (T, H) = Σ_j topk_weights[:, j] · W2[e] (silu(Wg[e] x) ⊙ Wu[e] x), e = topk_ids[:, j].

    x (T, H) bf16/fp16/fp32; w13 (E, 2I, H) gate rows then up rows; w2 (E, H, I), both in x's dtype
    and contiguous, or both FP8 weights (``warpdecode.quantize_experts``, ``experts_from_checkpoint``);
    topk_weights (T, K) float32; topk_ids (T, K) int32 or int64 in [0, E). Returns y in x's dtype.
    Inputs are checked on the host, ids in the kernels, with no wait: a bad id's slot adds nothing, and
    with a nonzero weight its token is NaN. ``strict=True`` (default False, for debugging) raises
    instead: one sync per call in eager mode, a device-side assert under graph capture or compile.

    method: ``"loop"`` (eager expert loop), ``"expert"`` (expert-centric, eight stages), ``"warp"``
    (warp decode), or ``"auto"`` (default: warp up to :func:`crossover`, measured where a table has
    the shape (:func:`warpdecode.tune`), else modelled).
    act_dtype: warp only, the intermediate's dtype (default float32; pass x.dtype to round it).
    act_format: expert only, ``"native"`` (default) or ``"fp8"`` (e4m3 activations, 1×128 block scales).
    schedule: warp only, ``"split"`` (two kernels) or ``"grouped"`` (each routed expert's rows read once
    for all its tokens); default: the tuned pick. (The persistent one-launch schedule is research, in a
    checkout: ``bench/persistent.py``.)
    deterministic: the same bits on every call; every path but the grouped schedule (FP32 atomics),
    which then gives way to the pair. Default False.
    batch_invariant: token t's bits do not depend on what shares the call (the pair at T = 1's tiles;
    slower past T ≈ 8). Implies ``deterministic``. Default False.

    FP8 weights (compute capability ≥ 8.9): ``warp`` dequantizes in registers (either schedule); ``expert``
    runs weight-only GEMMs, or w8a8 with ``act_format="fp8"``; ``loop`` dequantizes first.
    Under ``torch.compile`` it traces as one operator, ``torch.ops.warpdecode.moe`` (FP8: ``moe_fp8``).
    Raises ValueError or TypeError for a bad option or input, RuntimeError where grad mode is on and an
    input requires grad (only ``"loop"`` computes gradients). Meta tensors give the shape without a
    kernel; views with a pending negation are refused; the interpreter runs concurrent calls one at a time."""
    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}, got {method!r}")
    if act_format not in ("native", "fp8"):
        raise ValueError(f"act_format must be 'native' or 'fp8', got {act_format!r}")
    if act_dtype is not None and act_dtype not in (torch.float32, torch.bfloat16, torch.float16):
        raise TypeError(f"act_dtype must be torch.float32, bfloat16 or float16, got {act_dtype}")
    if act_format == "fp8" and method != "expert":
        raise ValueError(f"act_format='fp8' applies to method='expert' only, got method={method!r}")
    check_schedule(schedule)
    if schedule is not None and method != "warp":
        raise ValueError(f"schedule applies to method='warp' only, got method={method!r}")
    if act_dtype is not None and method != "warp":
        raise ValueError(f"act_dtype applies to method='warp' only, got method={method!r}")
    if (deterministic or batch_invariant) and schedule == "grouped":
        raise ValueError("schedule='grouped' sums through FP32 atomics: it is neither deterministic nor batch "
                         "invariant; leave schedule=None")
    if batch_invariant and (method not in ("auto", "warp") or act_format != "native"):
        raise ValueError(f"batch_invariant=True runs warp decode's pair (method 'auto' or 'warp', schedule None or "
                         f"'split'), got method={method!r}, schedule={schedule!r}, act_format={act_format!r}")
    d = check_moe_inputs(x, w13, w2, topk_weights, topk_ids, strict=strict)
    if method != "loop":
        check_kernel_device(x)
    fp8_weights = is_fp8(w13)
    if act_format == "fp8":
        check_fp8_device(x.device)
    if fp8_weights and method != "loop":
        check_fp8_device(x.device, "FP8 weights", "dequantize them (.dequantize()) or use method='loop'")
    if method != "loop" and torch.is_grad_enabled() and any(
            getattr(t, "requires_grad", False) for t in (x, w13, w2, topk_weights)):
        raise RuntimeError(
            f"warpdecode.moe(method={method!r}) computes no gradients and an input requires one: run it under "
            "torch.no_grad() / torch.inference_mode() (decode), or use method='loop' (autograd through eager "
            "torch ops) where gradients are needed")
    if torch.compiler.is_compiling() and fp8_weights:  # traced: the pair as its four tensors and its format
        return torch.ops.warpdecode.moe_fp8(x, w13.weight, w13.scale, w2.weight, w2.scale, w13.FORMAT, topk_weights,
                                            topk_ids, method, act_dtype, act_format, schedule, deterministic,
                                            batch_invariant)
    if torch.compiler.is_compiling():  # traced: one opaque operator, its fake kernel gives the shape
        return torch.ops.warpdecode.moe(x, w13, w2, topk_weights, topk_ids, method, act_dtype, act_format, schedule,
                                        deterministic, batch_invariant)
    if d.T == 0 or x.device.type == "meta":  # meta: the shape and dtype, no kernel
        return x.new_empty(d.T, d.H)
    return _run(x, w13, w2, topk_weights, topk_ids, d, method, act_dtype, act_format, schedule, deterministic,
                batch_invariant)


_INTERPRETER_LOCK = threading.RLock()


def _run(*args):
    if _runtime.INTERPRET:  # Triton's CPU interpreter keeps global state: one call at a time
        with _INTERPRETER_LOCK:
            return _moe(*args)
    return _moe(*args)


@torch.library.custom_op("warpdecode::moe", mutates_args=())
def _moe_op(x: torch.Tensor, w13: torch.Tensor, w2: torch.Tensor, topk_weights: torch.Tensor,
            topk_ids: torch.Tensor, method: str, act_dtype: Optional[torch.dtype], act_format: str,  # noqa: UP045
            schedule: Optional[str], deterministic: bool, batch_invariant: bool) -> torch.Tensor:  # noqa: UP045
    """``warpdecode.moe`` as the PyTorch operator ``torch.compile`` traces (``moe`` validates first)."""
    check_views(x=x, w13=w13, w2=w2, topk_weights=topk_weights)
    return _op_body(x, w13, w2, topk_weights, topk_ids, method, act_dtype, act_format, schedule, deterministic,
                    batch_invariant)


def _op_body(x, w13, w2, topk_weights, topk_ids, *options):
    """What both operators run once their views are checked: the dims, an empty batch, the call."""
    T, H = x.shape
    E, two_i, _ = w13.shape
    d = Dims(T=T, H=H, I=two_i // 2, E=E, K=topk_ids.shape[1])
    if T == 0:
        return x.new_empty(0, H)
    return _run(x, w13, w2, topk_weights, topk_ids, d, *options)


@_moe_op.register_fake
def _(x, w13, w2, topk_weights, topk_ids, method, act_dtype, act_format, schedule, deterministic, batch_invariant):
    return x.new_empty(x.shape[0], w2.shape[1])


@torch.library.custom_op("warpdecode::moe_fp8", mutates_args=())
def _moe_fp8_op(x: torch.Tensor, w13_weight: torch.Tensor, w13_scale: torch.Tensor, w2_weight: torch.Tensor,
                w2_scale: torch.Tensor, format: str, topk_weights: torch.Tensor, topk_ids: torch.Tensor, method: str,
                act_dtype: Optional[torch.dtype], act_format: str, schedule: Optional[str],  # noqa: UP045
                deterministic: bool, batch_invariant: bool) -> torch.Tensor:
    """``moe`` with FP8 weights as one operator: each weight as its e4m3 tensor and scales, rewrapped."""
    if format not in CLASSES:
        raise ValueError(f"format must be one of {tuple(CLASSES)}, got {format!r}")
    cls = CLASSES[format]
    w13 = cls.wrap(w13_weight, w13_scale, dtype=x.dtype, gate_up=True, name="w13")
    w2 = cls.wrap(w2_weight, w2_scale, dtype=x.dtype, gate_up=False, name="w2")
    check_views(x=x, topk_weights=topk_weights, **weight_tensors(w13=w13, w2=w2))
    return _op_body(x, w13, w2, topk_weights, topk_ids, method, act_dtype, act_format, schedule, deterministic,
                    batch_invariant)


@_moe_fp8_op.register_fake
def _(x, w13_weight, w13_scale, w2_weight, w2_scale, format, topk_weights, topk_ids, method, act_dtype, act_format,
      schedule, deterministic, batch_invariant):
    return x.new_empty(x.shape[0], w2_weight.shape[1])


def _warp_config(d: Dims, T: int, fmt: str | None) -> dict:
    """Warp decode's launch configuration at T tokens, for weights in x's dtype or FP8 ones of ``fmt``."""
    return configs.warp_config(d.H, d.I, d.E, d.K, T, **({} if fmt is None else {"weights": fmt}))


def _moe(x, w13, w2, topk_weights, topk_ids, d, method, act_dtype, act_format, schedule, deterministic,
         batch_invariant):
    # each a no-op (no launch) where contiguous already; ids int32 or int64: the kernels read either, and guard them
    x, topk_weights, topk_ids = x.contiguous(), topk_weights.contiguous(), topk_ids.contiguous()
    fmt, act_dtype = weight_format(w13), act_dtype or torch.float32
    if batch_invariant:  # the pair at T = 1's tiles: nothing in a token's sums depends on the batch
        one = _warp_config(d, 1, fmt)
        return moe_warp(x, w13, w2, topk_weights, topk_ids, act_dtype=act_dtype,
                        config={"gate_up": one["gate_up"], "down": one["down"]}, schedule="split")
    if deterministic and method in ("auto", "warp") and schedule is None:
        if method == "auto" and pick_method(d.T, d.H, d.I, d.E, d.K, x.element_size(), fmt) == "expert":
            return moe_expert(x, w13, w2, topk_weights, topk_ids)
        cfg = _warp_config(d, d.T, fmt)
        if "grouped" in cfg:
            return moe_warp(x, w13, w2, topk_weights, topk_ids, act_dtype=act_dtype, config=cfg, schedule="split")
    if method == "auto":
        return run_auto(x, w13, w2, topk_weights, topk_ids)
    if method == "loop":
        return moe_loop(x, w13, w2, topk_weights, topk_ids)
    if method == "expert":
        return moe_expert(x, w13, w2, topk_weights, topk_ids, act_format=act_format)
    return moe_warp(x, w13, w2, topk_weights, topk_ids, act_dtype=act_dtype, schedule=schedule)
