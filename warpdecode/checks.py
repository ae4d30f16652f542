"""Input validation for every public entry point: host-side metadata only, errors naming the argument.
Ids are checked in the kernels (``kernels/ids.py``), and with ``strict=True`` read back as well.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from . import _runtime
from .quant import COMPUTE_DTYPES, FP8Weights, is_fp8


@dataclass(frozen=True)
class Dims:
    T: int
    H: int
    I: int  # noqa: E741
    E: int
    K: int


def _tensor(name, t, fp8_ok: bool = False):
    if fp8_ok and isinstance(t, FP8Weights):
        return
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")


def _ndim(name, t, n, shape_doc):
    if t.dim() != n:
        raise ValueError(f"{name} must be {n}-D {shape_doc}, got shape {tuple(t.shape)}")


def check_moe_inputs(x, w13, w2, topk_weights, topk_ids, *, strict: bool = False, local: bool = False) -> Dims:
    """The layer's dimensions, or TypeError/ValueError; ``strict``: ids too; ``local``: one rank's experts."""
    shapes = {"x": (x, "(T, H)"), "w13": (w13, "(E, 2I, H)"), "w2": (w2, "(E, H, I)"),
              "topk_weights": (topk_weights, "(T, K)"), "topk_ids": (topk_ids, "(T, K)")}
    for name, (t, _) in shapes.items():
        _tensor(name, t, fp8_ok=name in ("w13", "w2"))
    check_fp8_pair(w13, w2)
    for name, (t, shape) in shapes.items():
        _ndim(name, t, shape.count(",") + 1, shape)

    if x.dtype not in COMPUTE_DTYPES:
        raise TypeError(f"x must be bfloat16, float16 or float32, got {x.dtype}")
    for name, w in [("w13", w13), ("w2", w2)]:
        if w.dtype != x.dtype:
            if is_fp8(w):
                raise TypeError(f"{name} holds FP8 weights for {w.dtype} activations (its dtype), but x is {x.dtype}")
            raise TypeError(f"{name} must have x's dtype {x.dtype}, got {w.dtype}")
    if topk_weights.dtype != torch.float32:
        raise TypeError(f"topk_weights must be float32 (as warpdecode.route returns), got {topk_weights.dtype}")
    if topk_ids.dtype not in (torch.int32, torch.int64):
        raise TypeError(f"topk_ids must be int32 or int64, got {topk_ids.dtype}")

    devices = {name: t.device for name, (t, _) in shapes.items()}
    if len(set(devices.values())) != 1:
        raise ValueError(f"all inputs must be on one device, got {', '.join(f'{k}: {v}' for k, v in devices.items())}")

    T, H = x.shape
    E, two_i, H13 = w13.shape
    if two_i % 2:
        raise ValueError(f"w13 must be (E, 2I, H) with an even middle dimension, got shape {tuple(w13.shape)}")
    I = two_i // 2  # noqa: E741
    if H13 != H:
        raise ValueError(f"w13 must be (E, 2I, H) with H = x.shape[1] = {H}, got shape {tuple(w13.shape)}")
    if tuple(w2.shape) != (E, H, I):
        raise ValueError(f"w2 must be (E, H, I) = {(E, H, I)} to match w13 {tuple(w13.shape)}, got {tuple(w2.shape)}")
    if topk_ids.shape[0] != T or topk_weights.shape != topk_ids.shape:
        raise ValueError(
            f"topk_weights and topk_ids must both be (T, K) with T = x.shape[0] = {T}, "
            f"got {tuple(topk_weights.shape)} and {tuple(topk_ids.shape)}"
        )
    K = topk_ids.shape[1]
    if not 1 <= K <= (K if local else E):
        raise ValueError(f"top_k (topk_ids.shape[1]) must be in [1, E={E}], got {K}")
    if E < 1 or H < 1 or I < 1:
        raise ValueError(f"w13 and w2 must be non-empty, got w13 {tuple(w13.shape)}")
    for name, w in [("w13", w13), ("w2", w2)]:
        if not (w.weight if is_fp8(w) else w).is_contiguous():
            raise ValueError(f"{name} must be contiguous (kernels stream its rows; a copy would double the memory)")
    if H * I >= 2**31:
        raise ValueError(f"w2 must hold fewer than 2**31 elements per expert (H·I = {H}·{I}): "
                         "the down kernels index within one expert's block in 32 bits")

    if not torch.compiler.is_compiling():  # traced: the operator checks the tensors it is given
        check_views(x=x, topk_weights=topk_weights, **weight_tensors(w13=w13, w2=w2))
    if strict:
        check_id_range(topk_ids, E)
    return Dims(T=T, H=H, I=I, E=E, K=K)


def check_kernel_device(x: torch.Tensor) -> None:
    """Inputs where the kernels run: CUDA, or the CPU in the interpreter; else an error naming them."""
    if x.device.type == "cpu" and not _runtime.INTERPRET:
        raise ValueError("the inputs are on the CPU (x: cpu), but warpdecode's kernels run on the GPU here: move them "
                         "to a CUDA device (or use method='loop'; TRITON_INTERPRET=1 runs the kernels on the CPU)")


def check_id_range(topk_ids: torch.Tensor, E: int, name: str = "E") -> None:
    """Raise unless every id is in [0, E): a read-back in eager mode, a device assert under capture/compile."""
    if topk_ids.numel() == 0 or topk_ids.device.type == "meta":
        return
    if torch.compiler.is_compiling() or (topk_ids.is_cuda and torch.cuda.is_current_stream_capturing()):
        torch._assert_async(((topk_ids >= 0) & (topk_ids < E)).all(), f"topk_ids must lie in [0, {name}={E})")
    else:
        lo, hi = (int(v) for v in torch.aminmax(topk_ids))
        if lo < 0 or hi >= E:
            raise ValueError(f"topk_ids must lie in [0, {name}={E}), got values in [{lo}, {hi}]")


def check_fp8_pair(w13, w2) -> None:
    """FP8 weights are a pair of one format, w13 blocked as gate/up, their scales matching the weights."""
    if is_fp8(w13) != is_fp8(w2):
        fp8, other = ("w13", "w2") if is_fp8(w13) else ("w2", "w13")
        raise TypeError(f"{fp8} is FP8 weights but {other} is not: pass both from warpdecode.quantize_experts "
                        "(or warpdecode.experts_from_checkpoint), or neither")
    if not is_fp8(w13):
        return
    if w13.FORMAT != w2.FORMAT:
        raise ValueError(f"w13 and w2 must share one FP8 format, got w13 {w13.FORMAT}, w2 {w2.FORMAT}")
    if not w13.gate_up:
        raise ValueError("w13 FP8 weights must be built with gate_up=True (gate and up rows blocked separately)")
    if w2.gate_up:
        raise ValueError("w2 FP8 weights must be built with gate_up=False")
    for w in (w13, w2):
        w._check_structure()  # the scales' dtype too; their values are read where the weights are built


def weight_tensors(**weights) -> dict:
    """The tensors behind each weight argument: a plain tensor, or an FP8 weight's data and scales."""
    out = {}
    for name, w in weights.items():
        if is_fp8(w):
            out[f"{name}.weight"], out[f"{name}.scale"] = w.weight, w.scale
        else:
            out[name] = w
    return out


def check_route_inputs(router_logits, top_k):
    _tensor("router_logits", router_logits)
    _ndim("router_logits", router_logits, 2, "(T, E)")
    if not router_logits.is_floating_point():
        raise TypeError(f"router_logits must be a floating-point tensor, got {router_logits.dtype}")
    if isinstance(top_k, bool) or not isinstance(top_k, int):
        raise TypeError(f"top_k must be an int, got {type(top_k).__name__}")
    E = router_logits.shape[1]
    if not 1 <= top_k <= E:
        raise ValueError(f"top_k must be in [1, E={E}], got {top_k}")


def check_views(**tensors) -> None:
    """The kernels read each tensor's storage as it is: a pending negation or conjugation is refused."""
    for name, t in tensors.items():
        if t.is_neg() or t.is_conj():
            raise ValueError(f"{name} is a view with a pending {'negation' if t.is_neg() else 'conjugation'} "
                             f"(torch._neg_view / .conj()): call {name}.resolve_neg() / .resolve_conj() first, "
                             "the kernels read its storage as it is")
