"""Timing at microsecond scale, for the tuner: :func:`capture` puts a step in a CUDA graph, :func:`replay_ms`
times replays between CUDA events after a warm-up (the benchmarks' statistics: the checkout's ``bench/timing.py``).
"""

from __future__ import annotations

import torch


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
