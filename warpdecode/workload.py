"""Benchmark workloads for the tuner: layer copies, a step's weights at least 3× the L2, each copy its own routing;
:func:`capture` puts a step in a CUDA graph, :func:`replay_ms` times replays between CUDA events after a warm-up
(the benchmarks' statistics: the checkout's ``bench/timing.py``)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import partial

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
    randn = partial(torch.randn, device="cuda", dtype=dtype, generator=torch.Generator(device="cuda").manual_seed(seed))
    E, I, H = shape.E, shape.I, shape.H  # noqa: E741
    return [(randn(E, 2 * I, H).mul_(H**-0.5), randn(E, H, I).mul_(I**-0.5)) for _ in range(n)]


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


def capture(step):
    """Run ``step`` once eagerly on a side stream, then capture it: ``(graph, outputs)``, replays rewrite outputs."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        step()
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        out = step()
    torch.cuda.synchronize()
    return g, out


def _warm_up(run, warmup: int, min_ms: float):
    """At least ``warmup`` runs and ``min_ms`` of GPU time, to bring an idle GPU's clocks back up."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    n = 0
    while True:
        run()
        n += 1
        if n >= warmup and n % 8 == 0:
            end.record()
            end.synchronize()
            if start.elapsed_time(end) >= min_ms:
                return


def replay_ms(graph, *, reps: int = 100, warmup: int = 10, min_warmup_ms: float = 50.0) -> list[float]:
    """The milliseconds of each of ``reps`` event-timed replays after :func:`_warm_up`."""
    _warm_up(graph.replay, warmup, min_warmup_ms)
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    for s, e in zip(starts, ends, strict=True):
        s.record()
        graph.replay()
        e.record()
    torch.cuda.synchronize()
    return [s.elapsed_time(e) for s, e in zip(starts, ends, strict=True)]
