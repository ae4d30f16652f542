"""Benchmark workloads: layer copies, a step's weights at least 3× the L2, each copy its own routing."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from .presets import MoEShape
from .routing import route


@dataclass
class LayerInputs:
    x: torch.Tensor  # (T, H)
    router_logits: torch.Tensor  # (T, E) fp32
    topk_weights: torch.Tensor  # (T, K) fp32
    topk_ids: torch.Tensor  # (T, K) int32


def l2_bytes() -> int:
    return torch.cuda.get_device_properties(0).L2_cache_size


def num_copies(shape: MoEShape, *, min_working_set: float = 3.0, budget_bytes: float = 60e9) -> int:
    """Layer copies so that even a T=1 step touches ``min_working_set`` × L2 of expert weights."""
    touched_t1 = shape.K * shape.expert_bytes
    want = max(2, math.ceil(min_working_set * l2_bytes() / touched_t1))
    fit = max(1, int(budget_bytes // shape.layer_bytes))
    return min(want, fit)


def make_layers(shape: MoEShape, n: int, *, dtype=torch.bfloat16, seed: int = 0):
    """``n`` independent random copies of the layer's weights on the GPU, std 1/sqrt(fan_in)."""
    g = torch.Generator(device="cuda").manual_seed(seed)
    layers = []
    for _ in range(n):
        w13 = torch.randn(shape.E, 2 * shape.I, shape.H, device="cuda", dtype=dtype, generator=g)
        w13.mul_(shape.H**-0.5)
        w2 = torch.randn(shape.E, shape.H, shape.I, device="cuda", dtype=dtype, generator=g)
        w2.mul_(shape.I**-0.5)
        layers.append((w13, w2))
    return layers


def make_inputs(shape: MoEShape, T: int, n: int, *, dtype=torch.bfloat16, seed: int = 1) -> list[LayerInputs]:
    """Fresh random activations and router logits for each of ``n`` layer copies."""
    g = torch.Generator(device="cuda").manual_seed(seed)
    out = []
    for _ in range(n):
        x = torch.randn(T, shape.H, device="cuda", dtype=dtype, generator=g)
        logits = torch.randn(T, shape.E, device="cuda", dtype=torch.float32, generator=g)
        tw, ti = route(logits, shape.K, renormalize=shape.renormalize)
        out.append(LayerInputs(x, logits, tw, ti))
    return out

