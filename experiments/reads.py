"""What one read of a decode call's bytes can reach on this GPU, and the floor under every design
with warp decode's dependency. No MoE logic: the bound any kernel of that size faces.

    python experiments/reads.py --version stream   # the grid-stride read at 6 MB … 604 MB
    python experiments/reads.py --version tiles    # grid-stride, one program per tile, TMA boxes
    python experiments/reads.py --version bound [--kinds 1 2 …] [--rows …] [--warps 4 8]
    TRITON_INTERPRET=1 python experiments/reads.py --version bound --check

- stream: a launch costs 2–3.4 µs beyond its bytes (41 % of the ceiling at 6.3 MB, 83 % at 75.5 MB).
- tiles: one program per 16 KB tile is the best one-launch read (87 % at 75.5 MB; 80 % in the
  pair's two launches). The reference read shape of the other experiments.
- bound: a read of a T = 1 call's bytes plus each way to wait for the other programs, in one
  launch or two (PDL). Verdict: every way a layer can use stays under 85 % at Qwen3-30B T = 1.

Rows: experiments/results/<GPU>/{small_reads,read_variants,one_launch_bound}.csv (harness.COLUMNS).
"""

from __future__ import annotations

import argparse
import datetime
import itertools
from pathlib import Path

import harness
import torch
import triton
import triton.language as tl
from triton.language.extra.cuda import gdc_launch_dependents, gdc_wait

import warpdecode as wd
from bench.sweep import meta
from bench.timing import capture, read_ceiling, small_read, time_replays

# ==================================================================================================
# version stream: How fast can one kernel read a decode-sized amount of memory? The streaming-read kernel of
#
# bench.timing on the byte counts of real decode calls, against the multi-GB ceiling.
#
#     python experiments/reads.py --version stream [--out experiments/results/<GPU>/small_reads.csv]
#
# A T=1 call of Qwen3-30B-A3B moves 50 MB in gate/up and 25 MB in down: at those sizes a kernel's
# launch, ramp-up and last wave are a visible share of its time, so this is the bound any kernel
# of that size faces, before any MoE logic.
# ==================================================================================================

SIZES_MB_stream = [6.3, 12.6, 25.2, 50.3, 75.5, 151, 302, 604]


def main_stream():
    p = argparse.ArgumentParser()
    p.add_argument("--out", default=str(harness.results_dir() / "small_reads.csv"))
    args = p.parse_args()
    ceiling = read_ceiling()
    rows = []
    for mb in SIZES_MB_stream:
        r = small_read(int(mb * 1e6), copies=max(2, int(3 * 60e6 / (mb * 1e6)) + 1))
        r |= {"ceiling_TBps": round(ceiling, 4), "fraction": round(r["TBps"] / ceiling, 4), **meta()}
        rows.append(r)
        print(f"{mb:7.1f} MB: {r['us']:8.2f} us, {r['TBps']:.2f} TB/s = {100 * r['fraction']:.0f}% of {ceiling:.2f}"
              f" (programs/SM {r['programs_per_sm']}, BLOCK {r['BLOCK']}, warps {r['num_warps']})", flush=True)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    harness.save(Path(args.out), rows)


# ==================================================================================================
# version tiles: Is 83 % the most one launch can read of 75.5 MB on this GPU? The streaming-read kernel of
#
# bench.timing (a persistent grid striding over the buffer) against two other ways to
# read the same bytes once, at the byte counts of a Qwen3-30B-A3B T=1 call (25.2 MB down, 50.3 MB
# gate/up, 75.5 MB both):
#
# - ``tiles``: no loop, one program per tile of BLOCK elements, the hardware scheduling them;
# - ``tma``: a persistent grid whose programs stream [BR, 128] boxes through the tensor memory
#   accelerator into shared memory, ``num_stages`` boxes in flight per program.
#
#     python experiments/reads.py --version tiles [--out experiments/results/<GPU>/read_variants.csv]
#
# Each launch reads its own buffer (several per graph, so nothing comes from L2); the sums are
# checked against torch's. Rows: µs per launch, TB/s, fraction of the multi-GB ceiling.
# ==================================================================================================

SIZES_MB_tiles = [25.2, 50.3, 75.5]
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


def main_tiles():
    p = argparse.ArgumentParser()
    p.add_argument("--out", default=str(harness.results_dir() / "read_variants.csv"))
    args = p.parse_args()
    triton.set_allocator(lambda size, align, stream: torch.empty(size, dtype=torch.int8, device="cuda"))
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    ceiling = read_ceiling()
    rows = []
    for mb in SIZES_MB_tiles:
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
    harness.save(Path(args.out), rows)


# ==================================================================================================
# version bound: The floor under every design with warp decode's dependency at T = 1: a read of a call's bytes,
#
# then the least a kernel must do after its last byte arrives when every output depends on every
# gate/up byte.
#
# Warp decode's output y[h] depends on all of its token's gate/up weights (through the intermediate,
# summed over I), so some program must learn that every other program is done before y exists.
# This script times kernels of one program per ROWS rows of H elements (warp decode's own row
# length) on a flat buffer of exactly the bytes of a T = 1 call (no routing, no math: less than
# any layer does), in nine kinds (``KINDS``):
#
# - ``read``: the rows summed into one number per program, stored (a plain read, as in
#   ``read_variants.py``);
# - one launch, then a way to let one program see that all the others are done: a count (each
#   program adds its sum into one FP32 number, then one acq_rel atomic; the last to count stores
#   the number and resets the scratch); a count in two levels (groups of ``GROUP`` programs); a
#   signal without a reply (``red.release``) with the last program waiting for the count; v16's
#   protocol (plain stores of the sums, the last program polls until none is NaN); and [H] partial
#   sums added with atomics before the count (what a one-pass design adds when it splits the down
#   projection over I, as v6 did), the last program rounding them to bf16 y;
# - two launches chained with PDL, the first over two thirds of the rows (gate/up's share), the
#   second over the rest three ways: its loads before ``gdc_wait``, summed as they arrive; held in
#   registers through the wait, then meeting an [H] vector of the first launch's sums (as w2's rows
#   meet the intermediate); or read after the wait.
#
# Where every kind a layer can use is over the 85 % bar, no design of those shapes meets it on this
# GPU; the gap between a kind and ``read`` is what its way of waiting costs.
#
#     python experiments/reads.py --version bound [--presets ...] [--check]
#
# ``--check`` runs each kernel once at a small size (the interpreter on a CPU) against its sums.
# Rows go to experiments/results/<GPU>/one_launch_bound.csv (µs per launch, fraction of the read ceiling, bar),
# each with the time its process started (``run``): compare kinds within one run.
# ==================================================================================================

BAR = 0.85
KINDS = {0: "read", 1: "read + count", 2: "read + H atomics + count", 3: "read + count in two levels",
         4: "read + signal, last program waits", 5: "read + store, last program polls the sums",
         6: "two launches, PDL, the second's loads before its wait",
         7: "two launches, PDL, the second holding its rows through the wait",
         8: "two launches, PDL, the second reading its rows after the wait"}
TWO_LAUNCHES = (6, 7, 8)  # the kinds whose second launch waits for the first (PDL)
GROUP = 32  # programs per first-level counter (kind 3)
PAD = 32  # int32 elements between counters: one 128-byte line each


@triton.jit
def _signal(count_ptr, ASM: tl.constexpr):
    """One thread adds 1 to the count with release semantics and does not wait for an answer
    (``red``, where ``tl.atomic_add`` is an ``atom`` that returns the old value). The interpreter,
    which runs no PTX, takes the atomic."""
    if not ASM:
        tl.atomic_add(count_ptr, 1, sem="release", scope="gpu")
        return
    tl.inline_asm_elementwise(
        "{ .reg .pred p; .reg .b32 t; mov.u32 t, %tid.x; setp.eq.u32 p, t, 0;"
        " @p red.release.gpu.global.add.s32 [$1], 1; mov.u32 $0, 0; }",
        "=r,l", [count_ptr], dtype=tl.int32, is_pure=False, pack=1)


@triton.jit
def _rows_then(
    src_ptr,  # (R, H) bf16, R = nprog * ROWS (masked past N elements)
    part_ptr,  # (nprog,) fp32: each program's sum (TAIL 0)
    acc_ptr,  # (H,) fp32 scratch, zero between launches (TAIL 1: element 0 only)
    count_ptr,  # (1 + cdiv(nprog, GROUP)) * PAD int32 scratch, zero between launches
    y_ptr,  # (H,) bf16 for TAIL 2, (1,) fp32 for TAIL 1
    N,  # elements in src
    H: tl.constexpr,
    ROWS: tl.constexpr,
    TAIL: tl.constexpr,
    GROUP: tl.constexpr,  # programs per first-level counter (TAIL 3)
    PAD: tl.constexpr,  # int32 elements between counters
    ASM: tl.constexpr,  # PTX available (not the interpreter)
):
    if TAIL == 6 and ASM:  # the first of two launches: the second may start once all of ours have
        gdc_launch_dependents()
    pid = tl.program_id(0)
    offs_h = tl.arange(0, H)
    base = pid.to(tl.int64) * ROWS * H
    acc = tl.zeros([H], dtype=tl.float32)
    for j in tl.static_range(ROWS):  # ROWS independent loads of one row each
        offs = base + j * H + offs_h
        acc += tl.load(src_ptr + offs, mask=offs < N, other=0.0, eviction_policy="evict_first").to(tl.float32)
    if TAIL == 0 or TAIL == 6:
        tl.store(part_ptr + pid, tl.sum(acc, axis=0))
    elif TAIL == 4:  # store the sum, signal without waiting for an answer; the last program waits
        tl.store(part_ptr + pid, tl.sum(acc, axis=0))
        tl.debug_barrier()
        nprog = tl.num_programs(0)
        if pid < nprog - 1:
            _signal(count_ptr, ASM)
        else:
            seen = tl.atomic_add(count_ptr, 0, sem="acquire", scope="gpu")
            while seen < nprog - 1:
                seen = tl.atomic_add(count_ptr, 0, sem="acquire", scope="gpu")
            total = tl.zeros([1024], dtype=tl.float32)
            for p0 in range(0, nprog, 1024):
                offs_p = p0 + tl.arange(0, 1024)
                total += tl.load(part_ptr + offs_p, mask=offs_p < nprog, other=0.0, cache_modifier=".cg")
            tl.store(y_ptr, tl.sum(total, axis=0))
            tl.atomic_xchg(count_ptr, 0, sem="relaxed", scope="gpu")
    elif TAIL == 5:  # v16's protocol: no fence, no atomic; a sum is ready when it is no longer NaN
        nprog = tl.num_programs(0)
        if pid < nprog - 1:
            tl.store(part_ptr + pid, tl.sum(acc, axis=0))
        else:
            total = tl.zeros([1024], dtype=tl.float32)
            for p0 in range(0, nprog - 1, 1024):
                offs_p = p0 + tl.arange(0, 1024)
                mask_p = offs_p < nprog - 1
                v = tl.load(part_ptr + offs_p, mask=mask_p, other=0.0, volatile=True)
                while tl.sum((v != v).to(tl.int32), axis=0) > 0:
                    v = tl.load(part_ptr + offs_p, mask=mask_p, other=0.0, volatile=True)
                total += v
                tl.store(part_ptr + offs_p, tl.full([1024], float("nan"), tl.float32), mask=mask_p)
            tl.store(y_ptr, tl.sum(total, axis=0) + tl.sum(acc, axis=0))
    else:
        if TAIL == 2:
            tl.atomic_add(acc_ptr + offs_h, acc, sem="relaxed", scope="gpu")
        else:
            tl.atomic_add(acc_ptr, tl.sum(acc, axis=0), sem="relaxed", scope="gpu")
        tl.debug_barrier()  # every thread's adds issued before the count says this program is done
        nprog = tl.num_programs(0)
        if TAIL == 3:  # the group's last program counts the group done at the top
            group = pid // GROUP
            in_group = tl.minimum(GROUP, nprog - group * GROUP)
            mine = tl.atomic_add(count_ptr + (1 + group) * PAD, 1, sem="acq_rel", scope="gpu")
            done = -1
            if mine == in_group - 1:
                tl.atomic_xchg(count_ptr + (1 + group) * PAD, 0, sem="relaxed", scope="gpu")
                done = tl.atomic_add(count_ptr, 1, sem="acq_rel", scope="gpu")
            last = tl.cdiv(nprog, GROUP) - 1
        else:
            done = tl.atomic_add(count_ptr, 1, sem="acq_rel", scope="gpu")
            last = nprog - 1
        if done == last:
            if TAIL != 2:
                tl.store(y_ptr, tl.load(acc_ptr, cache_modifier=".cg"))
                tl.store(acc_ptr, 0.0)
            else:
                v = tl.load(acc_ptr + offs_h, cache_modifier=".cg")
                tl.store(y_ptr + offs_h, v.to(y_ptr.dtype.element_ty))
                tl.store(acc_ptr + offs_h, tl.zeros([H], dtype=tl.float32))
            tl.atomic_xchg(count_ptr, 0, sem="relaxed", scope="gpu")


@triton.jit
def _rows_after_wait(
    src_ptr,  # (R, H) bf16: the second launch's rows
    part_a_ptr,  # (NPROG_A,) fp32: the first launch's sums
    out_ptr,  # (nprog,) fp32: each program's sum plus one of the first launch's
    N,  # elements in src
    NPROG_A,
    H: tl.constexpr,
    ROWS: tl.constexpr,
    ASM: tl.constexpr,
    MODE: tl.constexpr,  # 0: loads before the wait; 1: held through it (ROWS a power of two); 2: after it
):
    """The second launch of the pair's shape, three ways. MODE 0: read ROWS rows and sum them,
    wait for the first launch (PDL), then add one of its sums and store. MODE 1, as a down kernel
    that loads its weights early must: the rows stay in registers through the wait, then meet an
    [H] vector of the first launch's sums (from L2), as w2's rows meet the intermediate. MODE 2:
    wait first, then as MODE 0 (every load after the wait)."""
    if MODE == 2 and ASM:
        gdc_wait()
    pid = tl.program_id(0)
    offs_h = tl.arange(0, H)
    base = pid.to(tl.int64) * ROWS * H
    if MODE == 1:
        offs_r = tl.arange(0, ROWS)
        offs = base + offs_r[:, None] * H + offs_h[None, :]
        tile = tl.load(src_ptr + offs, mask=offs < N, other=0.0, eviction_policy="evict_first")
        if ASM:
            gdc_wait()
        vec = tl.load(part_a_ptr + (pid * H + offs_h) % NPROG_A)
        tl.store(out_ptr + pid, tl.sum(tl.sum(tile.to(tl.float32) * vec[None, :], axis=1), axis=0))
        return
    acc = tl.zeros([H], dtype=tl.float32)
    for j in tl.static_range(ROWS):
        offs = base + j * H + offs_h
        acc += tl.load(src_ptr + offs, mask=offs < N, other=0.0, eviction_policy="evict_first").to(tl.float32)
    total = tl.sum(acc, axis=0)
    if MODE == 0 and ASM:
        gdc_wait()  # the first launch has finished and its sums are visible
    tl.store(out_ptr + pid, total + tl.load(part_a_ptr + pid % NPROG_A))


def _program_sums(rows2d, per, vec=None):
    """Each program's sum of ``per`` consecutive rows (the last program's rows padded with zeros),
    each program's rows first multiplied by its row of ``vec`` (programs × H) where given."""
    pad = (-rows2d.shape[0]) % per
    padded = torch.cat([rows2d.double(), rows2d.new_zeros(pad, rows2d.shape[1], dtype=torch.float64)])
    tiles = padded.view(-1, per, rows2d.shape[1])
    return (tiles if vec is None else tiles * vec[:, None, :]).sum((1, 2))


class Launch:
    """One kernel over one buffer, with its own scratch and outputs."""

    def __init__(self, src, H, rows, tail, warps):
        self.src, self.H, self.rows, self.tail, self.warps = src, H, rows, tail, warps
        assert src.numel() % H == 0, "the buffer holds whole rows"
        dev = src.device
        self.grid = triton.cdiv(src.numel(), rows * H)
        self.acc = torch.zeros(H, dtype=torch.float32, device=dev)
        self.count = torch.zeros((1 + triton.cdiv(self.grid, GROUP)) * PAD, dtype=torch.int32, device=dev)
        self.asm = not wd.INTERPRET
        if tail in TWO_LAUNCHES:  # the gate/up share of the rows (2/3), then the down share
            self.rows_a = src.numel() // H * 2 // 3
            self.src_a, self.src_b = src[: self.rows_a * H], src[self.rows_a * H:]
            self.grid_a, self.grid_b = triton.cdiv(self.rows_a, rows), triton.cdiv(self.src_b.numel() // H, rows)
            self.part = torch.zeros(self.grid_a, dtype=torch.float32, device=dev)
            self.y = torch.zeros(self.grid_b, dtype=torch.float32, device=dev)
        else:
            self.part = torch.full((self.grid,), float("nan") if tail == 5 else 0.0, dtype=torch.float32, device=dev)
            self.y = torch.zeros(H if tail == 2 else 1, dtype=torch.bfloat16 if tail == 2 else torch.float32,
                                 device=dev)

    def __call__(self):
        if self.tail in TWO_LAUNCHES:
            _rows_then[(self.grid_a,)](self.src_a, self.part, self.acc, self.count, self.y, self.src_a.numel(),
                                       H=self.H, ROWS=self.rows, TAIL=6, GROUP=GROUP, PAD=PAD, ASM=self.asm,
                                       num_warps=self.warps)
            _rows_after_wait[(self.grid_b,)](self.src_b, self.part, self.y, self.src_b.numel(), self.grid_a,
                                             H=self.H, ROWS=self.rows, ASM=self.asm, MODE=self.tail - 6,
                                             num_warps=self.warps,
                                             **({"launch_pdl": True} if self.asm else {}))
            return self.y
        _rows_then[(self.grid,)](self.src, self.part, self.acc, self.count, self.y, self.src.numel(),
                                 H=self.H, ROWS=self.rows, TAIL=self.tail, GROUP=GROUP, PAD=PAD,
                                 ASM=self.asm, num_warps=self.warps)
        return self.y

    def check(self):
        """The kernel's result against torch's sums of the same rows, and the scratch at rest."""
        rows = self.src.float().view(-1, self.H)
        if self.tail == 5:
            assert self.part[:-1].isnan().all(), "the sums not back at NaN"
        if self.tail in TWO_LAUNCHES:
            part_a = _program_sums(rows[: self.rows_a], self.rows)
            pids = torch.arange(self.grid_b, device=part_a.device)
            got = torch.cat([self.part.double(), self.y.double()])
            if self.tail != 7:
                second = _program_sums(rows[self.rows_a:], self.rows) + part_a[pids % self.grid_a]
            else:  # each program's rows against the [H] vector of first-launch sums it read
                vec = part_a[(pids[:, None] * self.H + torch.arange(self.H, device=pids.device)) % self.grid_a]
                second = _program_sums(rows[self.rows_a:], self.rows, vec)
            want = torch.cat([part_a, second])
        elif self.tail == 0:
            got, want = self.part.double().sum(), rows.double().sum()
        elif self.tail != 2:
            got, want = self.y.double()[0], rows.double().sum()  # kind 4 stores the sums too
        else:
            got, want = self.y.double(), rows.double().sum(0)
        err = wd.rel_error(got.reshape(-1), want.reshape(-1))
        assert err < 1e-2, (KINDS[self.tail], err)  # bf16 y: 2**-9 relative; fp32 sums otherwise
        assert (self.acc == 0).all() and (self.count == 0).all(), "scratch not back at rest"
        return err


def check_bound(device):
    """Every kernel once at a small size, on random rows (the interpreter on a CPU)."""
    H = 64
    for tail, rows in itertools.product(KINDS, [1, 2]):
        src = torch.randn(((2 * GROUP + 7) * rows + 1) * H, device=device).to(torch.bfloat16)  # a last program short
        run = Launch(src, H, rows, tail, warps=1)
        for _ in range(2):  # twice: the scratch must be at rest for the second call
            run.y.fill_(float("nan"))
            run()
            err = run.check()
        print(f"check {KINDS[tail]:26s} rows {rows}: rel. error {err:.1e}, scratch at rest", flush=True)


def main_bound():
    p = argparse.ArgumentParser()
    p.add_argument("--presets", nargs="+", default=["qwen3-30b-a3b", "olmoe-1b-7b"])
    p.add_argument("--rows", type=int, nargs="+", default=[1, 2, 4, 8, 16, 24, 32, 48])
    p.add_argument("--warps", type=int, nargs="+", default=[4, 8])
    p.add_argument("--kinds", type=int, nargs="+", default=list(KINDS), choices=list(KINDS))
    p.add_argument("--check", action="store_true")
    args = p.parse_args()
    if args.check or wd.INTERPRET or not torch.cuda.is_available():
        check_bound("cuda" if torch.cuda.is_available() else "cpu")
        return
    from bench.sweep import meta
    from bench.timing import capture, read_ceiling, time_replays

    gpu = torch.cuda.get_device_name()
    run = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")  # the rows of one process
    ceiling = read_ceiling()
    out, rows = harness.results_dir(gpu) / "one_launch_bound.csv", []
    for name in args.presets:
        s = wd.get_preset(name)
        nbytes = s.K * 3 * s.I * s.H * 2  # T = 1: K distinct experts' gate, up and down rows
        n = nbytes // 2
        copies = max(2, int(3 * 60e6 / nbytes) + 1)
        srcs = [torch.randn(n, device="cuda", dtype=torch.bfloat16) for _ in range(copies)]
        floor_us = nbytes / (ceiling * 1e12) * 1e6
        print(f"{name}: {nbytes / 1e6:.1f} MB, floor {floor_us:.2f} us, bar {floor_us / BAR:.2f} us "
              f"(ceiling {ceiling:.2f} TB/s)", flush=True)
        for tail, r, w in itertools.product(args.kinds, args.rows, args.warps):
            if tail == 7 and r & (r - 1):
                continue  # a [ROWS, H] tile: a power of two
            runs = [Launch(src, s.H, r, tail, w) for src in srcs]
            g, _ = capture(lambda runs=runs: [f() for f in runs])
            us = time_replays(g, reps=100).median_us / copies
            del g
            torch.cuda.synchronize()
            err = runs[0].check()  # after every replay: still right, scratch at rest
            rows.append({"run": run, "preset": name, "T": 1, "kind": KINDS[tail], "rows": r, "num_warps": w,
                         "programs": runs[0].grid, "us": round(us, 3), "floor_us": round(floor_us, 3),
                         "frac_ceiling": round(floor_us / us, 4), "bar_us": round(floor_us / BAR, 3),
                         "rel_error": float(f"{err:.2e}"), "ceiling_TBps": round(ceiling, 4), **meta()})
            print(f"{name:14s} {KINDS[tail]:26s} rows {r:2d} warps {w} ({runs[0].grid:5d} programs) "
                  f"{us:7.2f} us {100 * floor_us / us:5.1f}%", flush=True)
        for tail in args.kinds:
            timed = [x for x in rows if x["preset"] == name and x["kind"] == KINDS[tail]]
            if not timed:  # kind 7 with no power-of-two ROWS asked for
                print(f"{name:14s} {KINDS[tail]}: no shape timed (it needs ROWS a power of two)", flush=True)
                continue
            best = min(timed, key=lambda x: x["us"])
            print(f"{name:14s} best {KINDS[tail]:26s} {best['us']:7.2f} us {100 * best['frac_ceiling']:5.1f}% "
                  f"(bar {best['bar_us']:.2f} us; rows {best['rows']}, warps {best['num_warps']})", flush=True)
        srcs = None
        torch.cuda.empty_cache()
    harness.save(out, rows)


VERSIONS = {
    "stream": (main_stream, []),
    "tiles": (main_tiles, []),
    "bound": (main_bound, []),
}


if __name__ == "__main__":
    harness.dispatch(__doc__, VERSIONS)
