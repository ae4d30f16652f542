"""Experiment: where does warp decode's down kernel lose to a plain read of its bytes?

Nsight Compute (session 10, ``logs/profile_details.log``, ``logs/profile_v15_details.log``): at
Qwen3-30B-A3B T = 1 the down kernel alone takes 12.5 µs for its 25.2 MB, a one-program-per-16 KB-
tile read of the same bytes 8.2 µs; and v15, which has all of its bytes in flight at once, takes as
long as the shipped kernel, so bytes in flight per SM are not it. As ``gate_up_ladder.py`` did for
the gate/up kernel (session 5), this adds the kernel's ingredients to a read one at a time, each
rung with the tuned kernel's grid and [rows, K, columns] tile, each kernel alone:

0. ``tile read``: ``scripts/read_variants.py``'s best tile read over one buffer of the same bytes;
   then the same read over the routed experts' w2 blocks (``region_read_kernel``), expert by expert
   and interleaved as the down kernel reads them (programs side by side at one offset of every block);
1. ``read, experts from pid``: the kernel's loads, the K experts of a token spread over w2 (e =
   37·(t·K + k) mod E, as many distinct experts as the routing reads), the weights summed;
   1b. ``read, experts side by side``: the same with e = (t·K + k) mod E (one buffer at T = 1);
2. ``read, experts from topk_ids``: the same, each program's expert ids loaded first;
3. ``+ intermediate, routing weights`` (the shipped kernel, ``warp_down_kernel``, launched alone).

    python scripts/down_ladder.py [--presets qwen3-30b-a3b olmoe-1b-7b] [--T 1 2] [--all-tiles]
    TRITON_INTERPRET=1 python scripts/down_ladder.py --check    # correctness only, on the CPU

Rows go to results/<GPU>/down_ladder.csv: µs per call and the fraction of the read ceiling for the
down kernel's bytes.
"""

import argparse
import os
import sys
from pathlib import Path
from unittest import mock

import torch
import triton
import triton.language as tl

import warpdecode as wd
from warpdecode import configs
from warpdecode import warp as wp

RUNGS = ["read, experts from pid", "read, experts from topk_ids", "read, experts side by side"]


@triton.jit(do_not_specialize=["T"])
def down_probe_kernel(
    w2_ptr,  # (E, H, I) compute dtype
    topk_ids_ptr,  # (T, K) int32
    out_ptr,  # (programs, BLOCK_H) fp32: what each program computed, so no rung is optimised away
    H, I, T, E, stride_we, stride_wr,
    K: tl.constexpr, K_PAD: tl.constexpr, BLOCK_H: tl.constexpr, BLOCK_I: tl.constexpr,
    RUNG: tl.constexpr,  # 0, 1, 2: the rungs 1, 2 and 1b of the module docstring
):
    pid = tl.program_id(0)
    t = pid % T  # the shipped kernel's grid order
    pid_h = pid // T
    offs_h = pid_h * BLOCK_H + tl.arange(0, BLOCK_H)
    offs_k = tl.arange(0, K_PAD)
    mask_k = offs_k < K
    if RUNG == 0:
        e = ((t * K + offs_k) * 37 % E).to(tl.int64)  # no load in front of the weight addresses
    elif RUNG == 2:
        e = ((t * K + offs_k) % E).to(tl.int64)  # adjacent experts: at T = 1 one buffer of K experts
    else:
        e = tl.load(topk_ids_ptr + t.to(tl.int64) * K + offs_k, mask=mask_k, other=0).to(tl.int64)
    offs_i = tl.arange(0, BLOCK_I)
    rows = w2_ptr + offs_h[:, None, None].to(tl.int64) * stride_wr + e[None, :, None] * stride_we
    acc = tl.zeros([BLOCK_H, BLOCK_I], dtype=tl.float32)
    for i0 in range(0, I, BLOCK_I):
        mask = (offs_h < H)[:, None, None] & mask_k[None, :, None] & ((i0 + offs_i) < I)[None, None, :]
        w = tl.load(rows + i0 + offs_i[None, None, :], mask=mask, other=0.0, eviction_policy="evict_first")
        acc += tl.sum(w.to(tl.float32), axis=1)
    tl.store(out_ptr + pid.to(tl.int64) * BLOCK_H + tl.arange(0, BLOCK_H), tl.sum(acc, axis=1), mask=offs_h < H)


@triton.jit
def region_read_kernel(w2_ptr, experts_ptr, out_ptr, PER_E, TILES_PER_E, N_E,
                       BLOCK: tl.constexpr, SUB: tl.constexpr, INTERLEAVE: tl.constexpr):
    """The tile read over the routed experts' w2 blocks, 16 KB per program as four independent
    loads, the expert loaded first: expert by expert (program p reads tile p % TILES_PER_E of
    expert p // TILES_PER_E), or INTERLEAVE'd as the down kernel reads them (tile p // N_E of
    expert p % N_E: programs side by side read the same offset in every expert's block)."""
    pid = tl.program_id(0)
    if INTERLEAVE:
        which, tile = pid % N_E, pid // N_E
    else:
        which, tile = pid // TILES_PER_E, pid % TILES_PER_E
    e = tl.load(experts_ptr + which).to(tl.int64)
    base = w2_ptr + e * PER_E + tile.to(tl.int64) * BLOCK
    acc = tl.zeros([SUB], dtype=tl.float32)
    for j in tl.static_range(BLOCK // SUB):
        offs = j * SUB + tl.arange(0, SUB)
        lim = PER_E - tile.to(tl.int64) * BLOCK
        acc += tl.load(base + offs, mask=offs < lim, other=0.0, eviction_policy="evict_first").to(tl.float32)
    tl.store(out_ptr + which * TILES_PER_E + tile, tl.sum(acc, axis=0))


def region_read(w2, experts, out, interleave: bool = False):
    E, H, I = w2.shape  # noqa: E741
    tiles = triton.cdiv(H * I, 8192)
    region_read_kernel[(experts.numel() * tiles,)](w2, experts, out, H * I, tiles, experts.numel(), BLOCK=8192,
                                                   SUB=2048, INTERLEAVE=interleave, num_warps=8)
    return out


def probe(w2, topk_ids, cfg: dict, rung: int) -> torch.Tensor:
    E, H, I = w2.shape  # noqa: E741
    T, K = topk_ids.shape
    grid = (T * triton.cdiv(H, cfg["BLOCK_H"]),)
    out = torch.empty(grid[0], cfg["BLOCK_H"], dtype=torch.float32, device=w2.device)
    down_probe_kernel[grid](w2, topk_ids, out, H, I, T, E, w2.stride(0), w2.stride(1), K=K,
                            K_PAD=triton.next_power_of_2(K), BLOCK_H=cfg["BLOCK_H"], BLOCK_I=cfg["BLOCK_I"],
                            RUNG=rung, num_warps=cfg["num_warps"], num_stages=1)
    return out


def expected(w2, topk_ids, cfg: dict, rung: int) -> torch.Tensor:
    """What each program should have stored, in float64: its rows of its token's K experts, summed."""
    E, H, I = w2.shape  # noqa: E741
    T, K = topk_ids.shape
    bh = cfg["BLOCK_H"]
    out = torch.zeros(T * triton.cdiv(H, bh), bh, dtype=torch.float64)
    for pid in range(out.shape[0]):
        t, pid_h = pid % T, pid // T
        experts = [(t * K + k) * 37 % E if rung == 0 else (t * K + k) % E if rung == 2 else int(topk_ids[t, k])
                   for k in range(K)]
        for j, h in enumerate(range(pid_h * bh, min(H, (pid_h + 1) * bh))):
            out[pid, j] = sum(w2[e, h].double().sum() for e in experts)
    return out


def check_cpu():
    g = torch.Generator().manual_seed(0)
    for T, H, I, E, K, cfg in [(2, 20, 48, 7, 3, {"BLOCK_H": 8, "BLOCK_I": 16, "num_warps": 4}),
                               (1, 16, 40, 5, 5, {"BLOCK_H": 4, "BLOCK_I": 32, "num_warps": 2})]:
        w2 = torch.randn(E, H, I, generator=g).bfloat16()
        ids = torch.stack([torch.randperm(E, generator=g)[:K] for _ in range(T)]).int()
        valid = torch.zeros(T * triton.cdiv(H, cfg["BLOCK_H"]), cfg["BLOCK_H"], dtype=torch.bool)
        for pid in range(valid.shape[0]):  # rows past H are not stored
            valid[pid, : max(0, min(cfg["BLOCK_H"], H - (pid // T) * cfg["BLOCK_H"]))] = True
        for rung in range(3):
            got, want = probe(w2, ids, cfg, rung).double(), expected(w2, ids, cfg, rung)
            err = ((got - want)[valid].norm() / want[valid].norm()).item()
            print(f"T={T} H={H} I={I} E={E} K={K} rung {rung + 1} ({RUNGS[rung]}): relative error {err:.2e} "
                  "against float64")
            assert err < 1e-5, err
        experts = torch.unique(ids).int()
        for interleave in (False, True):
            got = region_read(w2, experts, torch.empty(experts.numel() * triton.cdiv(H * I, 8192)), interleave)
            want = torch.stack([w2[int(e)].double().sum() for e in experts])
            err = ((got.double() - want).norm() / want.norm()).item()
            print(f"T={T} H={H} I={I} E={E} K={K} tile read of the routed experts (interleaved: {interleave}): "
                  f"relative error {err:.2e} against float64")
            assert err < 1e-5, err


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--presets", nargs="+", default=["qwen3-30b-a3b", "olmoe-1b-7b"])
    p.add_argument("--T", type=int, nargs="+", default=[1, 2])
    p.add_argument("--all-tiles", action="store_true",
                   help="also the shipped kernel alone with every down tile the tuner tries")
    p.add_argument("--check", action="store_true")
    args = p.parse_args()
    if args.check or os.environ.get("TRITON_INTERPRET") == "1":
        check_cpu()
        return

    from warpdecode.bench import data
    from warpdecode.bench.sweep import meta
    from warpdecode.bench.timing import capture, read_ceiling, time_replays
    from warpdecode.bench.workload import make_inputs, make_layers, num_copies

    sys.path.insert(0, str(Path(__file__).parent))
    from read_variants import _tile_read

    ceiling = read_ceiling()
    rows = []
    for name in args.presets:
        shape = wd.get_preset(name)
        L = num_copies(shape)
        w2s = [w2 for _, w2 in make_layers(shape, L)]
        for T in args.T:
            inputs = make_inputs(shape, T, L, seed=1000 + T)
            down_bytes = sum(torch.unique(i.topk_ids).numel() for i in inputs) / L * shape.H * shape.I * 2
            floor_us = down_bytes / (ceiling * 1e12) * 1e6
            cfg = configs.warp_config(shape.H, shape.I, shape.E, shape.K, T)["down"]
            results = rungs(shape, w2s, inputs, cfg, int(down_bytes) // 2, capture, time_replays, _tile_read)
            if args.all_tiles:
                results += every_tile(shape, w2s, inputs, time_replays)
            for rung, us in results:
                rows.append({"preset": name, "T": T, "rung": rung, "config": str(cfg), "us": round(us, 3),
                             "down_MB": round(down_bytes / 1e6, 2), "frac_ceiling": round(floor_us / us, 4),
                             "ceiling_TBps": round(ceiling, 4), **meta()})
                print(f"{name:14s} T={T} {rung:42s} {us:8.2f} us {100 * floor_us / us:5.1f}%", flush=True)
        w2s = None
        torch.cuda.empty_cache()
    data.merge_write(Path(f"results/{torch.cuda.get_device_name().replace(' ', '_')}/down_ladder.csv"), rows)


def every_tile(shape, w2s, inputs, time_replays):
    """(label, µs per call) of the shipped down kernel alone with each tile the tuner tries, each
    checked first against the float64 down projection (outputs poisoned, one replay)."""
    from warpdecode.bench.timing import capture_poisoned
    from warpdecode.bench.tune import warp_candidates

    L, T = len(w2s), inputs[0].x.shape[0]
    acts = [torch.randn(T * shape.K, shape.I, device="cuda") for _ in range(L)]
    i0 = inputs[0]
    ref = down_reference(acts[0], w2s[0], i0.topk_ids, i0.topk_weights)
    out = []
    with mock.patch.object(wp, "USE_PDL", False):
        for c in warp_candidates(shape.H, shape.I, shape.K)[1]:
            g, ys = capture_poisoned(lambda c=c: [wp.warp_down(a, w, i.topk_ids, i.topk_weights, c, torch.bfloat16)
                                                  for a, w, i in zip(acts, w2s, inputs, strict=True)])
            err = wd.rel_error(ys[0], ref) / wd.rounding_floor(ref, torch.bfloat16)
            if not err <= 1.5:  # NaN fails too
                raise AssertionError(f"{shape.name} T={T} {c}: error {err:.2f} × the bf16 floor")
            out.append((f"shipped kernel alone, {c}", time_replays(g, reps=40).median_us / L))
    return out


def down_reference(act, w2, topk_ids, topk_weights):
    """y[t] = Σ_k topk_weights[t, k] · w2[topk_ids[t, k]] @ act[t·K + k], in float64."""
    T, K = topk_ids.shape
    w = w2[topk_ids.flatten().long()].double()  # (T·K, H, I)
    y = torch.einsum("phi,pi->ph", w, act.double()) * topk_weights.flatten().double()[:, None]
    return y.view(T, K, -1).sum(dim=1)


def rungs(shape, w2s, inputs, cfg, n, capture, time_replays, tile_read):
    """(rung, µs per call) for every rung, each over the layer copies in one CUDA graph."""
    L, T = len(w2s), inputs[0].x.shape[0]
    ids = [i.topk_ids for i in inputs]
    acts = [torch.randn(T * shape.K, shape.I, device="cuda") for _ in range(L)]
    bufs = [torch.randn(n, device="cuda", dtype=torch.bfloat16) for _ in range(L)]
    outs = [torch.empty(triton.cdiv(n, 8192), device="cuda") for _ in range(L)]

    def timed(step):
        g, _ = capture(step)
        return time_replays(g, reps=60).median_us / L

    out = [("tile read of the bytes", timed(lambda: [
        tile_read[(o.numel(),)](b, o, n, BLOCK=8192, SUB=2048, num_warps=8) for b, o in zip(bufs, outs, strict=True)]))]
    experts = [torch.unique(i).int() for i in ids]
    sums = [torch.empty(e.numel() * triton.cdiv(shape.H * shape.I, 8192), device="cuda") for e in experts]
    for interleave in (False, True):
        out.append((f"tile read of the routed experts' w2{', interleaved' if interleave else ''}", timed(
            lambda il=interleave: [region_read(w, e, o, il) for w, e, o in zip(w2s, experts, sums, strict=True)])))
    for r in (0, 2, 1):
        out.append((RUNGS[r], timed(lambda r=r: [probe(w, i, cfg, r) for w, i in zip(w2s, ids, strict=True)])))
    with mock.patch.object(wp, "USE_PDL", False):  # alone: no overlap with the previous launch
        out.append(("+ intermediate, routing weights (shipped)", timed(lambda: [
            wp.warp_down(a, w, i.topk_ids, i.topk_weights, cfg, torch.bfloat16)
            for a, w, i in zip(acts, w2s, inputs, strict=True)])))
    return out


if __name__ == "__main__":
    main()
