"""Timing at microsecond scale: :func:`capture` puts a step in a CUDA graph, :func:`time_replays` times
replays between CUDA events after a warm-up (the benchmarks': the checkout's ``bench/timing.py``).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

import torch


@dataclass
class Timing:
    median_us: float
    p20_us: float
    p80_us: float
    reps: int

    def scaled(self, factor: float) -> Timing:
        return Timing(self.median_us * factor, self.p20_us * factor, self.p80_us * factor, self.reps)


def _stats(times_ms: list[float]) -> Timing:
    q = statistics.quantiles(times_ms, n=10)
    return Timing(statistics.median(times_ms) * 1e3, q[1] * 1e3, q[7] * 1e3, len(times_ms))


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


def time_replays(graph, *, reps: int = 100, warmup: int = 10, min_warmup_ms: float = 50.0) -> Timing:
    """Median, 20th and 80th percentiles of ``reps`` event-timed replays after :func:`_warm_up`."""
    _warm_up(graph.replay, warmup, min_warmup_ms)
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    for s, e in zip(starts, ends, strict=True):
        s.record()
        graph.replay()
        e.record()
    torch.cuda.synchronize()
    return _stats([s.elapsed_time(e) for s, e in zip(starts, ends, strict=True)])
