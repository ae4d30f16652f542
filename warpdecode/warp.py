"""Rung 4: warp decode, the whole layer in two kernels (see :mod:`warpdecode.kernels.warp`)."""

from __future__ import annotations

import os

import torch
import triton

from . import _alloc, _runtime
from .configs import warp_config
from .kernels import warp as kw

#: Programmatic dependent launch between the two kernels: Hopper and newer, not the interpreter.
#: ``WARPDECODE_PDL=0`` turns it off, to measure what it buys.
USE_PDL = (not _runtime.INTERPRET and _runtime.HAS_GPU and torch.cuda.get_device_capability()[0] >= 9
           and os.environ.get("WARPDECODE_PDL", "1") != "0")


def warp_gate_up(x, w13, topk_ids, cfg: dict, act_dtype=torch.float32) -> torch.Tensor:
    """Kernel 1: (T*K, I) intermediate silu(gate)·up, FP32 by default (never rounded)."""
    T, H = x.shape
    I = w13.shape[1] // 2  # noqa: E741
    K = topk_ids.shape[1]
    act = _alloc.empty(T * K, I, dtype=act_dtype, device=x.device)
    grid = (T * K * triton.cdiv(I, cfg["BLOCK_I"]),)
    kw.warp_gate_up_kernel[grid](
        x, w13, topk_ids, act, H, I, T * K, K, x.stride(0), w13.stride(0), w13.stride(1), act.stride(0),
        BLOCK_I=cfg["BLOCK_I"], BLOCK_H=cfg["BLOCK_H"], USE_PDL=USE_PDL,
        num_warps=cfg["num_warps"], num_stages=cfg["num_stages"],
    )
    return act


def warp_down(act, w2, topk_ids, topk_weights, cfg: dict, out_dtype) -> torch.Tensor:
    """Kernel 2: y (T, H) = Σ_j topk_weights[:, j] · w2[e_j] act_j, one FP32 accumulator per output."""
    E, H, I = w2.shape
    T, K = topk_ids.shape
    y = _alloc.empty(T, H, dtype=out_dtype, device=act.device)
    grid = (T * triton.cdiv(H, cfg["BLOCK_H"]),)
    kw.warp_down_kernel[grid](
        act, w2, topk_ids, topk_weights, y, H, I, T, act.stride(0), w2.stride(0), w2.stride(1), y.stride(0),
        K=K, K_PAD=triton.next_power_of_2(K), BLOCK_H=cfg["BLOCK_H"], BLOCK_I=cfg["BLOCK_I"], USE_PDL=USE_PDL,
        num_warps=cfg["num_warps"], num_stages=cfg["num_stages"], **({"launch_pdl": True} if USE_PDL else {}),
    )
    return y


def moe_warp(x, w13, w2, topk_weights, topk_ids, *, act_dtype=torch.float32, config: dict | None = None):
    """Both kernels on validated, contiguous inputs (``warpdecode.moe`` checks them first).

    act_dtype: the intermediate's dtype between the kernels. FP32 (default) keeps the whole layer
    unrounded until the single store of y; pass x.dtype to see what rounding it costs.
    """
    T, H = x.shape
    E, two_i, _ = w13.shape
    K = topk_ids.shape[1]
    cfg = config or warp_config(H, two_i // 2, E, K, T)
    act = warp_gate_up(x, w13, topk_ids, cfg["gate_up"], act_dtype)
    return warp_down(act, w2, topk_ids, topk_weights, cfg["down"], x.dtype)
