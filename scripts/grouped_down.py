"""Experiment (v11, not shipped): a down kernel that reads each routed expert's w2 rows once for
all the tokens routed to it, to go with the grouped gate/up kernel (v10, the shipped ``grouped``
schedule).

Why: at Mixtral T=8 the grouped gate/up kernel reads its bytes at the ceiling (397 µs for a
396 µs floor, ``logs/grouped_parts.log``), but the pair's down kernel still reads w2 once per
(token, slot): 16 pair reads of ~7 experts, ~300 µs for a ~190 µs floor. v10's first down kernel
(commit d176f7e) gave a program a block of hidden outputs and walked every expert: H / BLOCK_H =
64–256 programs, 147–255 registers, 2–3× slower than the pair's. Here the grid is (expert, block
of hidden outputs), E times as many programs, each with one expert's rows and a [BLOCK_H, 16]
accumulator:

- the program gathers the FP32 intermediate of the tokens routed to its expert (the routing
  weight folded in), multiplies it by its w2 tile on the tensor cores (the intermediate as three
  exact bf16 terms: every product exact, every sum FP32; ``_dot_fp32`` below), and adds its
  [BLOCK_H, tokens] result into an FP32 scratch with atomics (relaxed);
- then it counts itself in for its block of hidden outputs (acq_rel). The E-th program of a block
  (every expert's program arrives, routed or not) reads the block's sums from L2, leaves zeros in
  the scratch for the next call, rounds the sums to y once, and resets the count. So the combine
  over experts is the sum in the scratch, y is rounded once, and the buffers are back at zero
  after every call. With K = 2 a sum has two terms in any order, so
  the result is deterministic; with K > 2 the order of the FP32 additions varies.

    python scripts/grouped_down.py [--presets mixtral-8x7b gpt-oss-20b olmoe-1b-7b] [--T 4 8 16]
    TRITON_INTERPRET=1 python scripts/grouped_down.py --check   # correctness only, on the CPU

On a GPU: checks every config against the float64 reference (poisoned output, the scratch and
counts back at zero), then times the tuned pair, the shipped schedule the table picks, and the
grouped gate/up kernel followed by each config of this down kernel, over the layer copies; rows go
to results/<GPU>/grouped_down.csv. Written in session 6 without device time: compiled for sm_90a
here, checked in the interpreter, never run on a GPU. The session that runs it records the outcome
in results/NOTES.md.
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
from warpdecode import _alloc, _runtime
from warpdecode.configs import default_grouped, warp_config
from warpdecode.kernels.warp import _mma, _routed
from warpdecode.warp import GROUPED_TOKENS, warp_gate_up_grouped


@triton.jit
def _dot_fp32(w, a, acc, WIDEN: tl.constexpr):
    """acc + w @ a for bf16 w and FP32 a on the tensor cores: a as three bf16 terms whose sum is a
    exactly (8 + 8 + 8 significand bits), so every product is exact and every sum FP32."""
    hi = a.to(tl.bfloat16)
    rest = a - hi.to(tl.float32)
    mid = rest.to(tl.bfloat16)
    lo = (rest - mid.to(tl.float32)).to(tl.bfloat16)
    acc = _mma(w, hi, acc, WIDEN)
    acc = _mma(w, mid, acc, WIDEN)
    return _mma(w, lo, acc, WIDEN)


@triton.jit(do_not_specialize=["T", "E"])
def grouped_down_kernel(
    act_ptr,  # (T*K, I) fp32 from the grouped gate/up kernel; PRESPLIT: (3, T*K, I) bf16 from presplit()
    w2_ptr,  # (E, H, I) bf16
    topk_ids_ptr,  # (T, K) int32, in [0, E)
    topk_weights_ptr,  # (T, K) fp32
    y_ptr,  # (T, H) bf16
    scratch_ptr,  # (T_PAD, H) fp32, zero between calls
    count_ptr,  # (cdiv(H, BLOCK_H),) int32, zero between calls
    H, I, T, E,
    stride_at, stride_plane, stride_we, stride_wr, stride_yt,
    K: tl.constexpr, K_PAD: tl.constexpr, T_PAD: tl.constexpr,
    BLOCK_H: tl.constexpr, BLOCK_I: tl.constexpr, PRESPLIT: tl.constexpr, WIDEN: tl.constexpr,
):
    pid = tl.program_id(0)
    e = pid % E  # the experts of one block of outputs side by side: its last arrival comes soon
    pid_h = pid // E
    offs_t = tl.arange(0, T_PAD)
    offs_k = tl.arange(0, K_PAD)
    offs_h = pid_h * BLOCK_H + tl.arange(0, BLOCK_H)
    mask_h = offs_h < H
    offs_i = tl.arange(0, BLOCK_I)
    s_ptrs = scratch_ptr + offs_t[None, :] * H + offs_h[:, None]  # [BLOCK_H, T_PAD]

    hit = _routed(topk_ids_ptr, T, e, K, K_PAD, T_PAD)
    if tl.sum(hit.to(tl.int32)) > 0:
        mask_tk = (offs_t < T)[:, None] & (offs_k < K)[None, :]
        rw = tl.load(topk_weights_ptr + offs_t[:, None] * K + offs_k[None, :], mask=mask_tk, other=0.0)
        coef = tl.sum(tl.where(hit, rw, 0.0), axis=1)  # summed, should a top-K name e twice
        slot = tl.min(tl.where(hit, offs_k[None, :], K_PAD), axis=1)
        routed = slot < K
        pairs = offs_t * K + tl.where(routed, slot, 0)
        w_ptrs = w2_ptr + e.to(tl.int64) * stride_we + offs_h[:, None].to(tl.int64) * stride_wr + offs_i[None, :]
        a_ptrs = act_ptr + pairs[None, :].to(tl.int64) * stride_at + offs_i[:, None]  # [BLOCK_I, T_PAD]
        acc = tl.zeros([BLOCK_H, T_PAD], dtype=tl.float32)
        for i0 in range(0, I, BLOCK_I):
            mask_i = (i0 + offs_i) < I
            mask_a = mask_i[:, None] & routed[None, :]
            w = tl.load(w_ptrs + i0, mask=mask_h[:, None] & mask_i[None, :], other=0.0, eviction_policy="evict_first")
            if PRESPLIT:  # v12: the three bf16 terms, the routing weight in them, straight to the tensor cores
                acc = _mma(w, tl.load(a_ptrs + i0, mask=mask_a, other=0.0), acc, WIDEN)
                acc = _mma(w, tl.load(a_ptrs + stride_plane + i0, mask=mask_a, other=0.0), acc, WIDEN)
                acc = _mma(w, tl.load(a_ptrs + 2 * stride_plane + i0, mask=mask_a, other=0.0), acc, WIDEN)
            else:  # v11: the FP32 intermediate, weighted and split here, every step
                a = tl.load(a_ptrs + i0, mask=mask_a, other=0.0) * coef[None, :]
                acc = _dot_fp32(w, a, acc, WIDEN)
        tl.atomic_add(s_ptrs, acc, mask=mask_h[:, None] & routed[None, :], sem="relaxed", scope="gpu")

    tl.debug_barrier()  # every warp of this program has issued its adds
    arrived = tl.atomic_add(count_ptr + pid_h, 1, sem="acq_rel", scope="gpu")
    if arrived == E - 1:  # the last expert of this block: every add is visible
        mask = mask_h[:, None] & (offs_t < T)[None, :]
        # read at L2 (an atomic add of zero: L1 is not coherent), then leave zeros for the next call
        sums = tl.atomic_add(s_ptrs, tl.zeros([BLOCK_H, T_PAD], dtype=tl.float32), mask=mask, sem="relaxed",
                             scope="gpu")
        tl.store(s_ptrs, tl.zeros([BLOCK_H, T_PAD], dtype=tl.float32), mask=mask)
        y_ptrs = y_ptr + offs_t[None, :].to(tl.int64) * stride_yt + offs_h[:, None]
        tl.store(y_ptrs, sums.to(y_ptr.dtype.element_ty), mask=mask)
        tl.atomic_xchg(count_ptr + pid_h, 0, sem="relaxed", scope="gpu")


_buffers: dict = {}


def buffers(device, H: int, blocks: int):
    """The FP32 scratch (16 × H) and the arrival counts of this device and shape, zero between calls."""
    key = (torch.device(device), H, blocks)
    if key not in _buffers:
        _buffers[key] = (torch.zeros(GROUPED_TOKENS, H, dtype=torch.float32, device=device),
                         torch.zeros(blocks, dtype=torch.int32, device=device))
    return _buffers[key]


@triton.jit
def presplit_kernel(
    act_ptr,  # (T*K, I) fp32
    topk_ids_ptr,  # (T, K) int32
    topk_weights_ptr,  # (T, K) fp32
    out_ptr,  # (3, T*K, I) bf16: hi, mid, lo of act × the pair's routing weight
    I, stride_plane,
    K: tl.constexpr, K_PAD: tl.constexpr, BLOCK: tl.constexpr,
):
    """v12's step between the kernels: one (token, slot) row, weighted and split into three exact
    bf16 terms. A slot whose expert an earlier slot of the token names again gets weight 0 and the
    earlier slot both weights (the v11 kernel's rule: it reads the first slot's row)."""
    pair = tl.program_id(0)
    t = pair // K
    k = pair % K
    offs_k = tl.arange(0, K_PAD)
    ids = tl.load(topk_ids_ptr + t * K + offs_k, mask=offs_k < K, other=-1)
    rw = tl.load(topk_weights_ptr + t * K + offs_k, mask=offs_k < K, other=0.0)
    mine = tl.load(topk_ids_ptr + pair)
    same = ids == mine
    first = tl.min(tl.where(same, offs_k, K_PAD), axis=0)
    coef = tl.where(first == k, tl.sum(tl.where(same, rw, 0.0), axis=0), 0.0)
    for i0 in range(0, I, BLOCK):
        offs = i0 + tl.arange(0, BLOCK)
        a = tl.load(act_ptr + pair.to(tl.int64) * I + offs, mask=offs < I, other=0.0) * coef
        hi = a.to(tl.bfloat16)
        rest = a - hi.to(tl.float32)
        mid = rest.to(tl.bfloat16)
        lo = (rest - mid.to(tl.float32)).to(tl.bfloat16)
        o = out_ptr + pair.to(tl.int64) * I + offs
        tl.store(o, hi, mask=offs < I)
        tl.store(o + stride_plane, mid, mask=offs < I)
        tl.store(o + 2 * stride_plane, lo, mask=offs < I)


def presplit(act, topk_ids, topk_weights):
    pairs, I = act.shape  # noqa: E741
    K = topk_ids.shape[1]
    out = _alloc.empty(3, pairs, I, dtype=torch.bfloat16, device=act.device)
    presplit_kernel[(pairs,)](act, topk_ids, topk_weights, out, I, out.stride(0), K=K,
                              K_PAD=triton.next_power_of_2(K), BLOCK=min(2048, triton.next_power_of_2(I)), num_warps=4)
    return out


def grouped_down(act, w2, topk_ids, topk_weights, cfg: dict):
    """act: the FP32 (T*K, I) intermediate (v11), or presplit()'s (3, T*K, I) bf16 terms (v12)."""
    E, H, I = w2.shape  # noqa: E741
    T, K = topk_ids.shape
    assert T <= GROUPED_TOKENS and w2.dtype == torch.bfloat16
    split = act.dim() == 3
    blocks = triton.cdiv(H, cfg["BLOCK_H"])
    scratch, count = buffers(act.device, H, blocks)
    y = _alloc.empty(T, H, dtype=w2.dtype, device=act.device)
    grouped_down_kernel[(E * blocks,)](
        act, w2, topk_ids, topk_weights, y, scratch, count, H, I, T, E,
        act.stride(-2), act.stride(0) if split else 0, w2.stride(0), w2.stride(1), y.stride(0),
        K=K, K_PAD=triton.next_power_of_2(K), T_PAD=GROUPED_TOKENS, BLOCK_H=cfg["BLOCK_H"], BLOCK_I=cfg["BLOCK_I"],
        PRESPLIT=split, WIDEN=_runtime.INTERPRET, num_warps=cfg["num_warps"], num_stages=cfg["num_stages"])
    return y


def moe_grouped_v11(x, w13, w2, topk_weights, topk_ids, gu: dict, dn: dict):
    return grouped_down(warp_gate_up_grouped(x, w13, topk_ids, gu), w2, topk_ids, topk_weights, dn)


def moe_grouped_v12(x, w13, w2, topk_weights, topk_ids, gu: dict, dn: dict):
    act = presplit(warp_gate_up_grouped(x, w13, topk_ids, gu), topk_ids, topk_weights)
    return grouped_down(act, w2, topk_ids, topk_weights, dn)


VERSIONS = {"v11": moe_grouped_v11, "v12": moe_grouped_v12}


def candidates(interpret: bool, version: str = "v11"):
    if interpret:
        return [{"BLOCK_H": 16, "BLOCK_I": 16, "num_warps": 4, "num_stages": 1}]
    if version == "v11":  # session 6: 32 × 64 on two warps won everywhere (logs/gdown.log); wider, to see the trend
        shapes = [(32, 64, 2), (64, 64, 4), (64, 128, 4)]
    else:  # v12: operands straight from memory, so taller tiles (64 rows: one warpgroup's wgmma)
        shapes = [(32, 128, 2), (32, 256, 4), (64, 64, 4), (64, 128, 4), (64, 256, 4), (128, 64, 4), (128, 64, 8),
                  (128, 128, 8)]
    return [{"BLOCK_H": r, "BLOCK_I": c, "num_warps": w, "num_stages": s}
            for (r, c, w), s in itertools.product(shapes, [3, 4])]


def gate_up_config(shape, T: int) -> dict:
    return warp_config(shape.H, shape.I, shape.E, shape.K, T).get("grouped", {}).get("gate_up") or default_grouped()


def check(shape, T: int, cfg: dict, device, inputs, version: str = "v11") -> float:
    """Error over the bf16 floor, the output poisoned; the scratch and counts back at zero after."""
    x, w13, w2, tw, ids = inputs
    ref = wd.reference_moe(x, w13, w2, tw, ids)
    with _alloc.poisoned():
        y = VERSIONS[version](x, w13, w2, tw, ids, gate_up_config(shape, T), cfg)
    scratch, count = buffers(device, shape.H, triton.cdiv(shape.H, cfg["BLOCK_H"]))
    assert not scratch.any() and not count.any(), "the scratch or the counts were left non-zero"
    return wd.rel_error(y, ref) / wd.rounding_floor(ref, torch.bfloat16)


def _random_inputs(shape, T, device, seed=77, same_expert_twice=False):
    """Fresh random (x, w13, w2, topk_weights, topk_ids): drawn on the GPU there (preset-sized
    layers), on the CPU in the interpreter; optionally every token's slot 1 repeats slot 0's expert."""
    if device.type == "cuda":
        from warpdecode.bench.workload import make_inputs, make_layers

        (w13, w2), = make_layers(shape, 1)
        inp = make_inputs(shape, T, 1, seed=seed)[0]
        x, tw, ids = inp.x, inp.topk_weights, inp.topk_ids
    else:
        g = torch.Generator().manual_seed(seed)
        x = torch.randn(T, shape.H, generator=g).bfloat16()
        w13 = torch.randn(shape.E, 2 * shape.I, shape.H, generator=g).mul_(shape.H**-0.5).bfloat16()
        w2 = torch.randn(shape.E, shape.H, shape.I, generator=g).mul_(shape.I**-0.5).bfloat16()
        tw, ids = wd.route(torch.randn(T, shape.E, generator=g), shape.K)
    if same_expert_twice:
        ids = ids.clone()
        ids[:, 1] = ids[:, 0]
    return x, w13, w2, tw.float().contiguous(), ids.to(torch.int32).contiguous()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--presets", nargs="+", default=["mixtral-8x7b", "gpt-oss-20b", "olmoe-1b-7b"])
    p.add_argument("--T", type=int, nargs="+", default=[4, 8, 16])
    p.add_argument("--check", action="store_true", help="correctness only (the CPU interpreter: small shapes)")
    args = p.parse_args()
    interpret = os.environ.get("TRITON_INTERPRET") == "1"
    device = torch.device("cpu" if interpret else "cuda")
    if args.check or interpret:
        cases = [(wd.MoEShape("odd", H=40, I=24, E=5, K=2), 3, False),  # H, I not multiples of the tiles
                 (wd.MoEShape("K=E", H=32, I=40, E=4, K=4), 5, False),
                 (wd.MoEShape("twice", H=48, I=32, E=6, K=3), 4, True)]  # one expert in two slots
        for (shape, T, twice), version in itertools.product(cases, VERSIONS):
            for cfg in candidates(interpret, version):
                inputs = _random_inputs(shape, T, device, same_expert_twice=twice)
                ratio = check(shape, T, cfg, device, inputs, version)
                print(f"{version} {shape.name} T={T} {cfg}: error {ratio:.3f} × the bf16 floor")
                assert ratio <= 1.05, ratio
        return
    _time_all(args, device)


def _time_all(args, device):
    from warpdecode.bench import data
    from warpdecode.bench.sweep import meta
    from warpdecode.bench.timing import read_ceiling
    from warpdecode.bench.tune import _over_layers, _time, _warp_pair
    from warpdecode.bench.workload import bytes_needed, make_inputs, make_layers, num_copies
    from warpdecode.warp import moe_warp

    ceiling = read_ceiling()
    out = Path(f"results/{torch.cuda.get_device_name().replace(' ', '_')}/grouped_down.csv")
    for name in args.presets:
        shape = wd.get_preset(name)
        for version in VERSIONS:  # correctness first, at an awkward T
            for cfg in candidates(False, version):
                assert check(shape, 3, cfg, device, _random_inputs(shape, 3, device), version) <= 1.05, (name, cfg)
        L = num_copies(shape)
        layers = make_layers(shape, L)
        w13s, w2s = [w for w, _ in layers], [w for _, w in layers]
        for T in args.T:
            inputs = make_inputs(shape, T, L, seed=1000 + T)  # the bench's draw
            xs, tws, ids = [i.x for i in inputs], [i.topk_weights for i in inputs], [i.topk_ids for i in inputs]
            floor_us = sum(bytes_needed(shape, i) for i in inputs) / L / (ceiling * 1e12) * 1e6
            pair_cfg = warp_config(shape.H, shape.I, shape.E, shape.K, T)
            pair = partial(_warp_pair, c_gu=pair_cfg["gate_up"], c_dn=pair_cfg["down"])
            timed = [("pair (tuned)", _time(_over_layers(pair, xs, w13s, w2s, ids, tws), 50) / L, ""),
                     ("shipped (table's schedule)",
                      _time(_over_layers(moe_warp, xs, w13s, w2s, tws, ids), 50) / L, str(pair_cfg.get("grouped")))]
            gu = gate_up_config(shape, T)
            alone = partial(warp_gate_up_grouped, cfg=gu)
            timed.append(("grouped gate/up alone", _time(_over_layers(alone, xs, w13s, ids), 50) / L, str(gu)))
            best = {}
            for version, fn in VERSIONS.items():
                kind = f"grouped gate/up + {version} down" + (" (pre-split)" if version == "v12" else "")
                for cfg in candidates(False, version):
                    us = _time(_over_layers(partial(fn, gu=gu, dn=cfg), xs, w13s, w2s, tws, ids), 50)
                    if us is not None and (kind not in best or us / L < best[kind][1]):
                        best[kind] = (kind, us / L, str(cfg))
            rows = []
            for kind, us, cfg in (*timed, *best.values()):
                whole = kind != "grouped gate/up alone"  # the floor is the whole layer's
                rows.append({"preset": name, "T": T, "kind": kind, "config": cfg, "us": round(us, 2),
                             "vs_pair": round(us / timed[0][1], 4),
                             "frac_ceiling": round(floor_us / us, 4) if whole else "",
                             "ceiling_TBps": round(ceiling, 4), **meta()})
                frac = f"{100 * floor_us / us:5.1f}%" if whole else "      "
                print(f"{name:14s} T={T:2d} {kind:38s} {us:8.2f} us {frac} {cfg}", flush=True)
            data.merge_write(out, rows)  # after every T: a time limit loses only the unfinished ones
        layers = w13s = w2s = None
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
