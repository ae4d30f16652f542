"""The executable spec: the MoE layer in float64, plain PyTorch; errors are :func:`rel_error` against it."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .quant import is_fp8


def _expert64(w, e: int) -> torch.Tensor:
    """Expert e's weight in float64: widened, or, for FP8 weights, dequantized exactly (q · s)."""
    return w.expert(e, torch.float64) if is_fp8(w) else w[e].double()


def reference_moe(
    x: torch.Tensor,  # (T, H)
    w13,  # (E, 2I, H): gate rows [0, I), up rows [I, 2I); a tensor or warpdecode.quant.FP8Weights
    w2,  # (E, H, I), the same
    topk_weights: torch.Tensor,  # (T, K) routing weights
    topk_ids: torch.Tensor,  # (T, K) expert of each (token, slot)
) -> torch.Tensor:  # (T, H) float64
    """y[t] = Σ_j topk_weights[t, j] · W2[e] (silu(Wg[e] x[t]) ⊙ Wu[e] x[t]),  e = topk_ids[t, j].
    In float64 on x's device, expert by expert, from the inputs exactly as given (bf16 widened; FP8
    dequantized exactly, so a kernel's error measures its rounding, not quantization)."""
    T, H = x.shape
    I = w13.shape[1] // 2  # noqa: E741
    x64 = x.double()
    y = torch.zeros(T, H, dtype=torch.float64, device=x.device)
    ids = topk_ids.long()
    for e in torch.unique(ids).tolist():
        tok, slot = torch.nonzero(ids == e, as_tuple=True)  # the (token, slot) pairs routed to e
        w_gu = _expert64(w13, e)  # (2I, H)
        gu = x64[tok] @ w_gu.T  # (n, 2I)
        a = F.silu(gu[:, :I]) * gu[:, I:]  # (n, I)
        out = a @ _expert64(w2, e).T  # (n, H)
        y.index_add_(0, tok, out * topk_weights[tok, slot].double()[:, None])
    return y


def rel_error(y: torch.Tensor, ref: torch.Tensor) -> float:
    """‖y − ref‖ / ‖ref‖ in float64; NaN anywhere in y gives NaN, which fails every comparison. y and
    ref must have one shape (a broadcast would compare other elements): ValueError naming both."""
    if y.shape != ref.shape:
        raise ValueError(f"rel_error compares tensors of one shape: y {tuple(y.shape)}, ref {tuple(ref.shape)}")
    y64 = y.double()
    ref64 = ref.double().to(y64.device)
    return float(torch.linalg.vector_norm(y64 - ref64) / torch.linalg.vector_norm(ref64))


def rounding_floor(ref: torch.Tensor, dtype: torch.dtype) -> float:
    """The error of the float64 result rounded once to ``dtype``: the best any output in that dtype can do."""
    return rel_error(ref.to(dtype), ref)
