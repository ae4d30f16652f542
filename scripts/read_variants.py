"""Is 83 % the most one launch can read of 75.5 MB on this GPU? The streaming-read kernel of
warpdecode.bench.timing (a persistent grid striding over the buffer) against two other ways to
read the same bytes once, at the byte counts of a Qwen3-30B-A3B T=1 call (25.2 MB down, 50.3 MB
gate/up, 75.5 MB both):

- ``tiles``: no loop, one program per tile of BLOCK elements, the hardware scheduling them;
- ``tma``: a persistent grid whose programs stream [BR, 128] boxes through the tensor memory
  accelerator into shared memory, ``num_stages`` boxes in flight per program.

    python scripts/read_variants.py [--out results/<GPU>/read_variants.csv]

Each launch reads its own buffer (several per graph, so nothing comes from L2); the sums are
checked against torch's. Rows: µs per launch, TB/s, fraction of the multi-GB ceiling.
"""

import argparse
import itertools
from pathlib import Path

import torch
import triton
import triton.language as tl

from warpdecode.bench import data
from warpdecode.bench.sweep import meta
from warpdecode.bench.timing import capture, read_ceiling, small_read, time_replays

SIZES_MB = [25.2, 50.3, 75.5]
COLS = 128  # a TMA box row: 128 bf16 = 256 bytes


@triton.jit
def _tile_read(src_ptr, out_ptr, N, BLOCK: tl.constexpr, SUB: tl.constexpr):
    """One program, one tile of BLOCK elements, read as BLOCK // SUB independent loads."""
    pid = tl.program_id(0)
    acc = tl.zeros([SUB], dtype=tl.float32)
    for j in tl.static_range(BLOCK // SUB):
        offs = pid.to(tl.int64) * BLOCK + j * SUB + tl.arange(0, SUB)
        acc += tl.load(src_ptr + offs, mask=offs < N, other=0.0, eviction_policy="evict_first").to(tl.float32)
    tl.store(out_ptr + pid, tl.sum(acc, axis=0))


@triton.jit
def _tma_read(src_ptr, out_ptr, R, NPROG, BR: tl.constexpr, C: tl.constexpr):
    """A persistent program streams [BR, C] boxes of the (R, C) buffer through TMA."""
    desc = tl.make_tensor_descriptor(src_ptr, shape=[R, C], strides=[C, 1], block_shape=[BR, C])
    pid = tl.program_id(0)
    acc = tl.zeros([BR, C], dtype=tl.float32)
    for r0 in range(pid * BR, R, NPROG * BR):
        acc += desc.load([r0, 0]).to(tl.float32)
    tl.store(out_ptr + pid, tl.sum(tl.sum(acc, axis=1), axis=0))


def _time(srcs, launch, grid, reps=50):
    out = torch.zeros(grid, device="cuda", dtype=torch.float32)
    launch(srcs[0], out)  # compile, and check the sum once
    torch.cuda.synchronize()
    want = srcs[0].float().sum().item()
    got = out.double().sum().item()
    assert abs(got - want) <= 1e-3 * srcs[0].float().abs().sum().item(), (got, want)
    g, _ = capture(lambda: [launch(s, out) for s in srcs])
    us = time_replays(g, reps=reps).median_us / len(srcs)
    del g
    return us


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--out", default=f"results/{torch.cuda.get_device_name().replace(' ', '_')}/read_variants.csv")
    args = p.parse_args()
    triton.set_allocator(lambda size, align, stream: torch.empty(size, dtype=torch.int8, device="cuda"))
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    ceiling = read_ceiling()
    rows = []
    for mb in SIZES_MB:
        n = int(mb * 1e6) // 2 // COLS * COLS
        copies = max(2, int(3 * 60e6 / (mb * 1e6)) + 1)
        srcs = [torch.randn(n, device="cuda", dtype=torch.bfloat16) for _ in range(copies)]
        timed = []
        base = small_read(2 * n, copies=copies)
        timed.append(("grid-stride", f"programs/SM {base['programs_per_sm']} BLOCK {base['BLOCK']} "
                      f"warps {base['num_warps']}", base["us"]))
        for block, sub, warps in itertools.product([8192, 16384, 32768], [2048, 4096], [4, 8]):
            grid = triton.cdiv(n, block)
            us = _time(srcs, lambda s, o, b=block, u=sub, w=warps, gr=grid, n=n: _tile_read[(gr,)](
                s, o, n, BLOCK=b, SUB=u, num_warps=w), grid)
            timed.append(("tiles", f"BLOCK {block} SUB {sub} warps {warps}", us))
        for per_sm, br, stages in itertools.product([1, 2, 4], [32, 64, 128], [2, 4, 6]):
            grid = sms * per_sm
            try:
                us = _time(srcs, lambda s, o, gr=grid, b=br, st=stages, n=n: _tma_read[(gr,)](
                    s, o, n // COLS, gr, BR=b, C=COLS, num_warps=4, num_stages=st), grid)
            except Exception as e:  # noqa: BLE001  out of shared memory at this depth
                print(f"{mb} MB tma programs/SM {per_sm} BR {br} stages {stages}: {e!r}"[:160], flush=True)
                continue
            timed.append(("tma", f"programs/SM {per_sm} BR {br} stages {stages}", us))
        for kind in ("grid-stride", "tiles", "tma"):
            us, cfg = min((t, c) for k, c, t in timed if k == kind)
            tbps = 2 * n / (us * 1e-6) / 1e12
            rows.append({"MB": mb, "kind": kind, "config": cfg, "us": round(us, 3), "TBps": round(tbps, 4),
                         "fraction": round(tbps / ceiling, 4), "ceiling_TBps": round(ceiling, 4), **meta()})
            print(f"{mb:6.1f} MB {kind:12s} {us:8.2f} us {tbps:.2f} TB/s = {100 * tbps / ceiling:.0f}% ({cfg})",
                  flush=True)
        srcs = None
        torch.cuda.empty_cache()
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    data.merge_write(Path(args.out), rows)


if __name__ == "__main__":
    main()
