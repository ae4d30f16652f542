"""v14, an experiment: the warp down kernel split over I, each chunk started as soon as its part of
the intermediate exists.

    python scripts/chunk_flags.py [--presets qwen3-30b-a3b olmoe-1b-7b] [--T 1 2]
    TRITON_INTERPRET=1 python scripts/chunk_flags.py --check   # the contract only, on the CPU

Why (results/NOTES.md, v2 and v13): with programmatic dependent launch the down kernel's programs
become resident during the gate/up kernel's last wave, but each waits (``gdc_wait``) for the whole
gate/up kernel before it uses its w2 rows, and holds its registers meanwhile. So what overlaps
kernel 1's tail is capped by how many down programs fit beside it, whatever each has loaded (v13).
Every down output needs every neuron of every routed expert, so no down program can finish before
kernel 1 does — unless the down work is split over I. Here a program owns one chunk of BLOCK_I
columns of one [BLOCK_H, K, BLOCK_I] tile, chunk-major in the grid (chunk 0's programs first). The
gate/up kernel's grid runs neuron blocks slowest, so neurons 0…BLOCK_I−1 of every pair are written
first: by the time the down programs are resident, chunk 0 is done, and its programs can finish and
leave while kernel 1 still runs, making room for the next.

The protocol, with no fence or atomic added to kernel 1:
- The intermediate lives in a buffer whose every element holds a sentinel bit pattern (0xFFFFFFFF,
  a NaN that no arithmetic produces: GPUs return the canonical 0x7FFFFFFF) until kernel 1 stores
  its value. A down program reads its chunk of the token's K rows (volatile loads, past L1) until no
  element is the sentinel; a spin limit sets a flag instead of hanging.
- Each program stores its partial sums (BLOCK_H FP32 numbers) to a scratch and bumps its row block's
  counter (acq_rel); the last of the CHUNKS programs of a row block sums the partials in chunk order
  (the same result whatever the arrival order), stores y once, and zeroes the counter.
- The last program of the grid (a second counter) writes the sentinel back into the intermediate
  and zeroes that counter, so the next call finds the buffer as this one did. The next call's gate/up
  kernel is an ordinary launch, so it starts only after all of this.
No deadlock: a down program is dispatched only after every gate/up program has started (PDL), so
the programs it waits for are running. Without PDL (the CPU interpreter) kernel 1 has finished.

Byte ledger (Qwen3-30B, T=1): the same 75.5 MB as the shipped pair, plus the partials (CHUNKS × H ×
4 B = 24 KB) and the sentinel refill (T·K·I·4 B = 24 KB). Prediction: the pair from 22.4 µs
towards the one-launch tile read of the same bytes (19.1 µs, ``read_variants.csv``), if the down
programs of chunks 0 and 1 keep HBM busy during kernel 1's tail.

Each candidate runs with the tuned gate/up kernel, against the tuned pair in the same process (the
bench's routings, seed 1000 + T), checked against the float64 reference, the protocol's state
checked after. Rows: results/<GPU>/chunk_flags.csv.
"""

import argparse
import itertools
import os
from functools import partial
from pathlib import Path

import torch
import triton
import triton.language as tl

import warpdecode as wd
from warpdecode import _alloc
from warpdecode import warp as wp
from warpdecode.kernels import warp_pair as kp
from warpdecode.kernels.warp_pair import _down_chunk

INTERPRET = os.environ.get("TRITON_INTERPRET") == "1"
SENTINEL = -1  # int32 bits 0xFFFFFFFF
MAX_SPINS = 200_000  # ~0.1-0.2 s of polling, then give up and raise the flag


@triton.jit(do_not_specialize=["T", "NUM_PROGRAMS"])
def down_chunked_kernel(
    act_bits_ptr,  # (T*K, I) int32 view of the fp32 intermediate; the sentinel where not yet written
    w2_ptr,  # (E, H, I) compute dtype
    topk_ids_ptr,  # (T, K) int32
    topk_weights_ptr,  # (T, K) fp32
    y_ptr,  # (T, H) compute dtype
    part_ptr,  # (CHUNKS, T, H) fp32 scratch: each chunk's partial sums
    count_ptr,  # (T * cdiv(H, BLOCK_H),) int32, zero between calls: chunks done per (token, row block)
    state_ptr,  # (2,) int32: [programs done (zero between calls), timed out]
    H, I, T, NUM_PROGRAMS, stride_at, stride_we, stride_wr, stride_yt,
    K: tl.constexpr, K_PAD: tl.constexpr, BLOCK_H: tl.constexpr, BLOCK_I: tl.constexpr,
    CHUNKS: tl.constexpr, MAX_SPINS: tl.constexpr, FILL: tl.constexpr,
):
    pid = tl.program_id(0)
    n_h = tl.cdiv(H, BLOCK_H)
    c = pid // (T * n_h)  # the chunk varies slowest: chunk 0's programs are dispatched first
    rest = pid % (T * n_h)
    t = rest % T
    pid_h = rest // T
    i0 = c * BLOCK_I
    wv = _down_chunk(w2_ptr, topk_ids_ptr, H, I, stride_we, stride_wr, t, pid_h, i0, K, K_PAD, BLOCK_H, BLOCK_I)

    offs_k = tl.arange(0, K_PAD)
    mask_k = offs_k < K
    pairs = t.to(tl.int64) * K + offs_k
    offs_i = i0 + tl.arange(0, BLOCK_I)
    amask = mask_k[:, None] & (offs_i < I)[None, :]
    a_ptrs = act_bits_ptr + pairs[:, None] * stride_at + offs_i[None, :]
    bits = tl.load(a_ptrs, mask=amask, other=0, volatile=True)
    pending = tl.sum((bits == -1).to(tl.int32))
    spins = 0
    while (pending > 0) & (spins < MAX_SPINS):  # kernel 1 has not written all of this chunk yet
        bits = tl.load(a_ptrs, mask=amask, other=0, volatile=True)
        pending = tl.sum((bits == -1).to(tl.int32))
        spins += 1
    if pending > 0:
        tl.atomic_xchg(state_ptr + 1, 1)  # timed out; the host raises

    rw = tl.load(topk_weights_ptr + pairs, mask=mask_k, other=0.0)
    a = bits.to(tl.float32, bitcast=True) * rw[:, None]
    part = tl.sum(tl.sum(wv.to(tl.float32) * a[None, :, :], axis=1), axis=1)  # [BLOCK_H]
    offs_h = pid_h * BLOCK_H + tl.arange(0, BLOCK_H)
    mask_h = offs_h < H
    y_ptrs = y_ptr + t.to(tl.int64) * stride_yt + offs_h
    if CHUNKS == 1:
        tl.store(y_ptrs, part.to(y_ptr.dtype.element_ty), mask=mask_h)
    else:
        tl.store(part_ptr + (c * T + t).to(tl.int64) * H + offs_h, part, mask=mask_h)
        old = tl.atomic_add(count_ptr + t * n_h + pid_h, 1, sem="acq_rel")  # release mine, acquire the others'
        if old == CHUNKS - 1:  # the row block's last chunk: its partials in chunk order, y stored once
            tl.atomic_xchg(count_ptr + t * n_h + pid_h, 0)
            acc = tl.zeros([BLOCK_H], dtype=tl.float32)
            for cc in tl.static_range(CHUNKS):
                acc += tl.load(part_ptr + (cc * T + t).to(tl.int64) * H + offs_h, mask=mask_h, other=0.0,
                               volatile=True)
            tl.store(y_ptrs, acc.to(y_ptr.dtype.element_ty), mask=mask_h)

    done = tl.atomic_add(state_ptr, 1, sem="acq_rel")  # after this program's reads of the intermediate
    if done == NUM_PROGRAMS - 1:  # the grid's last: the sentinel back everywhere, the count to zero
        n = T * K * I
        for r0 in range(0, n, FILL):
            offs = r0 + tl.arange(0, FILL)
            tl.store(act_bits_ptr + offs, tl.full([FILL], -1, tl.int32), mask=offs < n)
        tl.atomic_xchg(state_ptr, 0)


_STATE = {}  # (device, T, K, H, I, BLOCK_H, CHUNKS) -> buffers of the protocol


def _buffers(device, T, K, H, I, block_h, chunks):  # noqa: E741
    key = (str(device), T, K, H, I, block_h, chunks)
    if key not in _STATE:
        _STATE[key] = dict(
            act=torch.full((T * K, I), SENTINEL, dtype=torch.int32, device=device).view(torch.float32),
            part=torch.empty(chunks, T, H, dtype=torch.float32, device=device),
            count=torch.zeros(T * triton.cdiv(H, block_h), dtype=torch.int32, device=device),
            state=torch.zeros(2, dtype=torch.int32, device=device),
        )
    return _STATE[key]


def pair_chunked(x, w13, w2, topk_ids, topk_weights, gu_cfg: dict, cfg: dict, out_dtype=torch.bfloat16):
    """The tuned gate/up kernel writing into the protocol's intermediate, then the chunked down kernel."""
    T, H = x.shape
    E, _, I = w2.shape  # noqa: E741
    K = topk_ids.shape[1]
    chunks = triton.cdiv(I, cfg["BLOCK_I"])
    b = _buffers(x.device, T, K, H, I, cfg["BLOCK_H"], chunks)
    act = b["act"]
    kp.warp_gate_up_kernel[(T * K * triton.cdiv(I, gu_cfg["BLOCK_I"]),)](
        x, w13, topk_ids, act, H, I, T * K, K, x.stride(0), w13.stride(0), w13.stride(1), act.stride(0),
        BLOCK_I=gu_cfg["BLOCK_I"], BLOCK_H=gu_cfg["BLOCK_H"], USE_PDL=wp.USE_PDL,
        num_warps=gu_cfg["num_warps"], num_stages=gu_cfg["num_stages"],
    )
    y = _alloc.empty(T, H, dtype=out_dtype, device=x.device)
    grid = chunks * T * triton.cdiv(H, cfg["BLOCK_H"])
    down_chunked_kernel[(grid,)](
        act.view(torch.int32), w2, topk_ids, topk_weights, y, b["part"], b["count"], b["state"],
        H, I, T, grid, act.stride(0), w2.stride(0), w2.stride(1), y.stride(0),
        K=K, K_PAD=triton.next_power_of_2(K), BLOCK_H=cfg["BLOCK_H"], BLOCK_I=cfg["BLOCK_I"], CHUNKS=chunks,
        MAX_SPINS=MAX_SPINS, FILL=1024,
        num_warps=cfg["num_warps"], num_stages=1, **({"launch_pdl": True} if wp.USE_PDL else {}),
    )
    return y


def check_state():
    """Every protocol buffer as a call must leave it: the intermediate all sentinel, counters zero,
    no time-out."""
    for key, b in _STATE.items():
        assert bool((b["act"].view(torch.int32) == SENTINEL).all()), f"{key}: the sentinel is not back"
        assert int(b["count"].abs().sum()) == 0, f"{key}: a row block's count was left"
        assert int(b["state"][0]) == 0, f"{key}: the grid's count was left"
        assert int(b["state"][1]) == 0, f"{key}: a down program gave up waiting"


def candidates(I: int, K: int):  # noqa: E741
    """Chunks of 128 or 256 columns, 4-16 rows, 2-8 warps: 16-128 bf16 weights per thread (the
    shipped down tile, 8 rows × 256 columns over 4 warps at K = 8, holds 128)."""
    k_pad = triton.next_power_of_2(K)
    return [{"BLOCK_H": r, "BLOCK_I": c, "num_warps": w}
            for r, c, w in itertools.product([4, 8, 16], [128, 256], [2, 4, 8])
            if 16 <= r * k_pad * c // (32 * w) <= 128]


def check():
    """Two calls in a row (the second finds the buffers the first left) at odd shapes, 1-4 chunks,
    K = 1 and K = E, against float64; the protocol's state after each."""
    gen = torch.Generator().manual_seed(0)
    cases = [(1, 40, 48, 5, 2, 16, 4), (3, 24, 40, 7, 7, 16, 4), (2, 16, 64, 3, 1, 32, 8), (1, 8, 33, 4, 4, 16, 2),
             (1, 16, 64, 5, 3, 64, 4), (2, 16, 64, 3, 2, 16, 4)]  # T, H, I, E, K, BLOCK_I, BLOCK_H
    for T, H, I, E, K, c, r in cases:  # noqa: E741
        w13 = torch.randn(E, 2 * I, H, generator=gen) / H**0.5
        w2 = torch.randn(E, H, I, generator=gen) / I**0.5
        gu = wd.configs.warp_config(H, I, E, K, T)["gate_up"]
        for call in range(2):
            x = torch.randn(T, H, generator=gen)
            ids = torch.stack([torch.randperm(E, generator=gen)[:K] for _ in range(T)]).to(torch.int32)
            tw = torch.rand(T, K, generator=gen)
            with _alloc.poisoned():  # an output element left unwritten is NaN
                y = pair_chunked(x, w13, w2, ids, tw, gu, {"BLOCK_H": r, "BLOCK_I": c, "num_warps": 1}, torch.float32)
            check_state()
            err = wd.rel_error(y, wd.reference_moe(x, w13, w2, tw, ids))
            assert err < 1e-5, (T, H, I, E, K, c, err)
            print(f"T={T} H={H} I={I} E={E} K={K} BLOCK_I={c} chunks={triton.cdiv(I, c)} call {call + 1}: "
                  f"error {err:.1e}, state reset")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--presets", nargs="+", default=["qwen3-30b-a3b", "olmoe-1b-7b"])
    p.add_argument("--T", type=int, nargs="+", default=[1, 2])
    p.add_argument("--check", action="store_true")
    args = p.parse_args()
    if args.check:
        return check()

    from warpdecode.bench import data
    from warpdecode.bench.experiment import cases, checked_us_or_none, down_runs, row

    rows = []
    preset = None
    for case in cases(args.presets, args.T):
        s, T = case.shape, case.T
        if s.name != preset:  # the protocol's state belongs to the previous preset's layers
            _STATE.clear()
            preset = s.name
        tuned = wd.configs.warp_config(s.H, s.I, s.E, s.K, T)

        def chunked(cfg, x, w13, w2, tw, ids, tuned=tuned):
            return pair_chunked(x, w13, w2, ids, tw, tuned["gate_up"], cfg)

        if wp.schedule_of(tuned) != "split":
            print(f"{s.name} T={T}: the tuned schedule is {wp.schedule_of(tuned)}; compared with the pair anyway")
        runs = down_runs(case, wp.warp_down, [])  # the tuned pair, before and after
        runs[1:1] = [(f"chunked {c}", partial(chunked, c), c) for c in candidates(s.I, s.K)]
        for label, step, _ in runs:
            res = checked_us_or_none(case, step, label, tol=1.5)
            if res is None:
                continue
            us, err, _ = res
            torch.cuda.synchronize()
            check_state()  # back at rest after the checked run and every timed replay
            rows.append(row(case, variant=label, us=us, err=err))
            print(f"{s.name:14s} T={T} {label:62s} {us:8.2f} us {100 * case.floor_us / us:5.1f}% err/floor {err:.2f}",
                  flush=True)
    _STATE.clear()
    data.merge_write(Path(f"results/{torch.cuda.get_device_name().replace(' ', '_')}/chunk_flags.csv"), rows)


if __name__ == "__main__":
    main()
