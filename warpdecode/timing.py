"""Timing that holds at microsecond scale, what the tuner measures with: :func:`capture` puts a
step (usually one call per layer copy) in a CUDA graph, and :func:`time_replays` times each replay
between CUDA events, after a warm-up, and returns the median and spread. Graph replay removes
Python and launch gaps that would otherwise swamp a 20 µs kernel. The benchmarks' timing (the read
ceiling, interleaved and eager timing) is the checkout's ``bench/timing.py``.
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
    """Run ``step`` once eagerly on a side stream (compiles kernels, allocates), then capture it.
    Returns ``(graph, outputs)``: replaying the graph rewrites ``outputs`` in place."""
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
    """At least ``warmup`` runs and ``min_ms`` of GPU time: an idle GPU lowers its clocks, and a
    20 µs kernel replayed ten times runs for far too short a time to bring them back up (seen
    here: the first graph timed in a process, right after CPU-side setup, came out 8 % slow)."""
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
    """Median and 20th/80th percentiles of ``reps`` replays, each between its own pair of events,
    after a warm-up of at least ``warmup`` replays and ``min_warmup_ms`` of GPU time."""
    _warm_up(graph.replay, warmup, min_warmup_ms)
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    for s, e in zip(starts, ends, strict=True):
        s.record()
        graph.replay()
        e.record()
    torch.cuda.synchronize()
    return _stats([s.elapsed_time(e) for s, e in zip(starts, ends, strict=True)])
