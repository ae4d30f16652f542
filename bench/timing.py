"""The benchmarks' timing beside the tuner's (``warpdecode.workload``: :func:`capture`, re-exported here, and
the replays :func:`time_replays` summarizes): timing several graphs interleaved, eager calls, the outputs
poisoned before a timed graph, and the memory ceilings measured in the same run.
:func:`read_ceiling` and :func:`copy_ceiling` stream several GB through the GPU: the best a
memory-bound kernel can hope for on this card today, measured, not read off a datasheet.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from functools import partial

import torch
import triton
import triton.language as tl

from warpdecode.workload import _warm_up, capture, replay_ms

__all__ = ["Timing", "capture", "capture_poisoned", "copy_ceiling", "read_ceiling", "small_read", "time_eager",
           "time_interleaved", "time_replays"]


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


def time_replays(graph, *, reps: int = 100, warmup: int = 10, min_warmup_ms: float = 50.0) -> Timing:
    """Median, 20th and 80th percentiles of ``reps`` event-timed replays after a warm-up (``warpdecode.workload``)."""
    return _stats(replay_ms(graph, reps=reps, warmup=warmup, min_warmup_ms=min_warmup_ms))


def capture_poisoned(step):
    """:func:`capture`, then every output filled with NaN and the graph replayed once: what the
    outputs hold afterwards was written by the graph (capturing runs nothing into them), and an
    element it never writes stays NaN."""
    g, outs = capture(step)
    for y in outs:
        y.fill_(float("nan"))
    g.replay()
    torch.cuda.synchronize()
    return g, outs


def time_interleaved(graphs: list, *, reps: int = 100, rounds: int = 5, warmup: int = 10,
                     min_warmup_ms: float = 50.0) -> list[Timing]:
    """:func:`time_replays` for several graphs at once, in rounds of ``reps // rounds`` replays
    each, so that a drift of the GPU's clocks or temperature over the run reaches every graph alike:
    graphs that launch the same kernels come out alike (timed one after another, such pairs differed
    by up to 3 % at 0.9 ms per replay). The rounds go through every rotation of the graphs' order,
    forwards and backwards (``rounds`` rounded up to a multiple of that count), so each graph runs
    in every place and after every other graph equally often: a graph that heats the GPU (warp
    decode at T = 256, 14 times the expert path's time) precedes each of the others as often."""
    for g in graphs:
        _warm_up(g.replay, warmup, min_warmup_ms)
    n = len(graphs)
    orders = [[(r + i) % n for i in range(n)] for r in range(n)]
    if n > 2:
        orders += [order[::-1] for order in orders]
    rounds = -(-rounds // len(orders)) * len(orders)
    per = max(1, reps // rounds)
    events = [[] for _ in graphs]
    for r in range(rounds):
        for k in orders[r % len(orders)]:
            for _ in range(per):
                s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                s.record()
                graphs[k].replay()
                e.record()
                events[k].append((s, e))
    torch.cuda.synchronize()
    return [_stats([s.elapsed_time(e) for s, e in ev]) for ev in events]


def time_eager(fn, *, reps: int = 30, warmup: int = 3) -> Timing:
    """For code a graph cannot capture (host syncs): events around each eager call."""
    _warm_up(fn, warmup, 50.0)
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        fn()
        e.record()
        torch.cuda.synchronize()
        times.append(s.elapsed_time(e))
    return _stats(times)


@triton.jit
def _read_kernel(src_ptr, out_ptr, N, BLOCK: tl.constexpr):
    """Each program strides over the buffer with 16-byte loads and writes one partial sum."""
    pid = tl.program_id(0)
    step = tl.num_programs(0) * BLOCK
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for start in range(pid * BLOCK, N, step):
        offs = start + tl.arange(0, BLOCK)
        acc += tl.load(src_ptr + offs, mask=offs < N, other=0.0, eviction_policy="evict_first").to(tl.float32)
    tl.store(out_ptr + pid, tl.sum(acc, axis=0))


def _fastest_read(srcs: list[torch.Tensor], shapes, reps: int) -> tuple[float, tuple]:
    """(µs per launch, (programs per SM, BLOCK, warps)) of the fastest grid shape in ``shapes`` for
    the streaming-read kernel, timed as one graph that reads each buffer of ``srcs`` once."""
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    best = None
    for programs_per_sm, block, warps in shapes:
        grid = sms * programs_per_sm
        out = torch.empty(grid, device="cuda", dtype=torch.float32)

        def step(grid=grid, out=out, block=block, warps=warps):
            for s in srcs:
                _read_kernel[(grid,)](s, out, s.numel(), BLOCK=block, num_warps=warps)

        g, _ = capture(step)
        us = time_replays(g, reps=reps).median_us / len(srcs)
        if best is None or us < best[0]:
            best = (us, (programs_per_sm, block, warps))
    return best


def read_ceiling(gb: float = 4.0, *, reps: int = 30) -> float:
    """TB/s of a streaming read of ``gb`` GB of random bf16 (a Triton kernel, persistent grid)."""
    src = torch.randn(int(gb * 1e9) // 2, device="cuda", dtype=torch.bfloat16)
    us, _ = _fastest_read([src], [(4, 4096, 8), (8, 2048, 4), (16, 1024, 4)], reps)
    return src.numel() * 2 / (us * 1e-6) / 1e12


def copy_ceiling(gb: float = 4.0, *, reps: int = 30) -> float:
    """TB/s of a device-to-device copy of ``gb`` GB, counting bytes read plus bytes written."""
    n = int(gb * 1e9) // 2
    src = torch.randn(n, device="cuda", dtype=torch.bfloat16)
    dst = torch.empty_like(src)
    g, _ = capture(partial(dst.copy_, src))
    t = time_replays(g, reps=reps, warmup=3)
    return 2 * n * 2 / (t.median_us * 1e-6) / 1e12


def small_read(nbytes: int, *, copies: int = 8, reps: int = 50) -> dict:
    """The best one launch of the streaming-read kernel does on ``nbytes`` (a decode-sized call),
    each launch in the graph reading its own buffer so nothing comes from L2: what one kernel of
    that size can hope for, ramp-up and tail included. Returns µs per launch and TB/s."""
    n = nbytes // 2
    srcs = [torch.randn(n, device="cuda", dtype=torch.bfloat16) for _ in range(copies)]
    us, (programs_per_sm, block, warps) = _fastest_read(
        srcs, [(1, 8192, 16), (2, 4096, 8), (4, 4096, 8), (8, 2048, 4), (16, 1024, 4)], reps)
    return {"bytes": 2 * n, "us": round(us, 3), "TBps": round(2 * n / (us * 1e-6) / 1e12, 4),
            "programs_per_sm": programs_per_sm, "BLOCK": block, "num_warps": warps}
